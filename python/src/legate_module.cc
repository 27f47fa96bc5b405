// shardload._legate: the private binding of the Legate adapter. The layout
// arrives encoded (from shardload._core), the array leaves as a capsule whose
// address legate.core.LogicalArray.from_raw_handle adopts; errors become the
// package's exceptions.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "errors.hpp"
#include "shardload/batches.hpp"
#include "shardload/codec.hpp"
#include "shardload/legate.hpp"

namespace py = pybind11;

namespace {

constexpr const char* kArrayCapsule = "shardload.LogicalArray";

shardload::Layout decode_or_raise(const py::bytes& encoded) {
  const std::string bytes = encoded;
  auto layout = shardload::decode_layout(
      std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
  if (!layout) throw py::value_error(layout.status().message());
  return std::move(layout).value();
}

// The capsule owns the array until Python drops it (see load below).
py::capsule array_owner(legate::LogicalArray* array) {
  return py::capsule(array, kArrayCapsule,
                     [](void* p) { delete static_cast<legate::LogicalArray*>(p); });
}

}  // namespace

PYBIND11_MODULE(_legate, m) {
  m.doc() = "Private binding of shardload's Legate adapter.";
  shardload::python::register_error_translator();

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
        {
          // submit() waits for the tasks while holding nothing Python needs; what it throws
          // leaves through the translator, with the GIL taken back.
          py::gil_scoped_release release;
          array = new legate::LogicalArray(shardload::load(*layout, opts, &info));
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

  m.def("check_load_memory", &shardload::check_load_memory, py::arg("rows"), py::arg("row_bytes"),
        py::arg("target"), py::arg("processors"), py::arg("overdecompose"));
  py::class_<shardload::Batches>(m, "Batches")
      .def(py::init([](const py::bytes& encoded, std::int64_t rows_per_batch, std::int64_t prefetch,
                       std::int64_t overdecompose) {
             shardload::BatchOptions opts;
             opts.rows_per_batch = rows_per_batch;
             opts.prefetch = prefetch;
             opts.overdecompose = overdecompose;
             return std::make_unique<shardload::Batches>(decode_or_raise(encoded), opts);
           }),
           py::arg("encoded_layout"), py::arg("rows_per_batch"), py::arg("prefetch"),
           py::arg("overdecompose"))
      .def_property_readonly("size", &shardload::Batches::size)
      .def("next", [](shardload::Batches& self) -> py::object {
        std::optional<shardload::Batch> batch;
        {
          // next() waits for the batch's launch; what it throws leaves through the translator.
          py::gil_scoped_release release;
          batch = self.next();
        }
        if (!batch) return py::none();
        auto* array = new legate::LogicalArray(std::move(batch->array));
        py::capsule owner = array_owner(array);
        return py::make_tuple(std::move(owner), batch->index, batch->lo, batch->hi);
      });

  m.def(
      "handle",
      [](const py::capsule& owner) {
        return reinterpret_cast<std::uintptr_t>(owner.get_pointer<legate::LogicalArray>());
      },
      py::arg("owner"));
}
