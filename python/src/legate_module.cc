// shardload._legate: the private binding of the Legate adapter. The layout
// arrives encoded (from shardload._core), the array leaves as a capsule whose
// address legate.core.LogicalArray.from_raw_handle adopts; errors become the
// package's exceptions.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "errors.hpp"
#include "shardload/codec.hpp"
#include "shardload/legate.hpp"
#include "shardload/save.hpp"

namespace py = pybind11;

namespace {

constexpr const char* kArrayCapsule = "shardload.LogicalArray";

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

  m.def(
      "handle",
      [](const py::capsule& owner) {
        return reinterpret_cast<std::uintptr_t>(owner.get_pointer<legate::LogicalArray>());
      },
      py::arg("owner"));

  // The array arrives as the address of a legate::LogicalArray that a live Python
  // legate.core.LogicalArray holds (its raw_handle); the caller keeps that object alive.
  m.def(
      "save",
      [](std::uintptr_t handle, const py::bytes& dest, std::int64_t num_shards,
         const std::vector<std::int64_t>& shard_rows, const std::string& format, bool overwrite) {
        const auto* array = reinterpret_cast<const legate::LogicalArray*>(handle);
        shardload::SaveOptions opts;
        opts.num_shards = num_shards;
        opts.shard_rows = shard_rows;
        opts.format = shardload::parse_save_format(format);
        opts.overwrite = overwrite;
        const std::string path = dest;
        shardload::SaveInfo info;
        {
          py::gil_scoped_release release;
          shardload::save(*array, path, opts, &info);
        }
        py::dict d;
        d["target"] = info.target;
        d["processors"] = info.processors;
        d["tiles"] = info.tiles;
        d["shards"] = info.shards;
        d["bytes"] = info.bytes;
        d["prepare_s"] = info.prepare_seconds;
        d["write_s"] = info.write_seconds;
        d["commit_s"] = info.commit_seconds;
        return d;
      },
      py::arg("handle"), py::arg("dest"), py::arg("num_shards"), py::arg("shard_rows"),
      py::arg("format"), py::arg("overwrite"));
}
