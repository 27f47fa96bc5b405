// shardload._legate: the private binding of the Legate adapter. The layout
// arrives encoded (from shardload._core), the array leaves as a capsule whose
// address legate.core.LogicalArray.from_raw_handle adopts; errors become the
// package's exceptions.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>

#include "shardload/codec.hpp"
#include "shardload/legate.hpp"

namespace py = pybind11;

namespace {

constexpr const char* kArrayCapsule = "shardload.LogicalArray";

[[noreturn]] void raise_as(const char* name, const std::string& message) {
  const py::object type = py::module_::import("shardload._core").attr(name);
  // Paths in the message are the file system's bytes, not always UTF-8.
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()),
                                        "backslashreplace");
  if (text == nullptr) throw py::error_already_set();
  PyErr_SetObject(type.ptr(), text);
  Py_DECREF(text);
  throw py::error_already_set();
}

}  // namespace

PYBIND11_MODULE(_legate, m) {
  m.doc() = "Private binding of shardload's Legate adapter.";

  m.def(
      "load",
      [](const py::bytes& encoded, std::int64_t overdecompose) {
        const std::string bytes = encoded;
        auto layout = shardload::decode_layout(
            std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
        if (!layout) throw py::value_error(layout.status().message());
        shardload::LoadOptions opts;
        opts.overdecompose = overdecompose;
        shardload::LoadInfo info;
        legate::LogicalArray* array = nullptr;
        try {
          // submit() waits for the tasks while holding nothing Python needs.
          py::gil_scoped_release release;
          array = new legate::LogicalArray(shardload::load(*layout, opts, &info));
        } catch (const shardload::ShardReadError& e) {
          raise_as("ShardReadError", e.what());
        } catch (const shardload::LayoutError& e) {
          raise_as("LayoutError", e.what());
        } catch (const shardload::OutOfMemoryError& e) {
          raise_as("OutOfMemoryError", e.what());
        }
        py::dict d;
        d["target"] = info.target;
        d["processors"] = info.processors;
        d["tile_rows"] = info.tile_rows;
        d["tiles"] = info.tiles;
        d["launch_s"] = info.launch_seconds;
        d["fill_s"] = info.fill_seconds;
        // The capsule owns the array until Python drops it: a KeyboardInterrupt
        // raised the moment this call returns (a Ctrl-C during the load) then
        // frees the array instead of leaking it.
        py::capsule owner(array, kArrayCapsule,
                          [](void* p) { delete static_cast<legate::LogicalArray*>(p); });
        return py::make_tuple(std::move(owner), d);
      },
      py::arg("encoded_layout"), py::arg("overdecompose") = 1);

  m.def(
      "handle",
      [](const py::capsule& owner) {
        return reinterpret_cast<std::uintptr_t>(owner.get_pointer<legate::LogicalArray>());
      },
      py::arg("owner"));
}
