// shardload._legate: the private binding of the Legate adapter. The layout
// arrives as the shardload._core.Layout object (both modules link the one
// libshardload.so, so pybind11 shares the type), the array leaves as a capsule
// whose address legate.core.LogicalArray.from_raw_handle adopts; errors become
// the package's exceptions.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "errors.hpp"
#include "gil.hpp"
#include "interrupt.hpp"
#include "options.hpp"
#include "shardload/batches.hpp"
#include "shardload/format.hpp"
#include "shardload/io.hpp"
#include "shardload/layout.hpp"
#include "shardload/legate.hpp"
#include "shardload/manifest_legate.hpp"
#include "shardload/reader_registry.hpp"
#include "shardload/save.hpp"

namespace py = pybind11;

namespace {

constexpr const char* kArrayCapsule = "shardload.LogicalArray";

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
      [](const shardload::Layout& layout, std::int64_t overdecompose) {
        shardload::LoadOptions opts;
        opts.overdecompose = overdecompose;
        shardload::LoadInfo info;
        // Owned here until the capsule takes it: a KeyboardInterrupt raised by `interruptible`
        // after a load that completed frees it.
        std::unique_ptr<legate::LogicalArray> array;
        // load() waits for the tasks while holding nothing Python needs; what it throws
        // leaves through the translator, with the GIL taken back (a Ctrl-C: KeyboardInterrupt).
        shardload::python::interruptible([&] {
          array = std::make_unique<legate::LogicalArray>(shardload::load(layout, opts, &info));
        });
        py::dict d;
        d["target"] = info.target;
        d["processors"] = info.processors;
        d["tile_rows"] = info.tile_rows;
        d["tiles"] = info.tiles;
        d["launch_s"] = info.launch_seconds;
        d["fill_s"] = info.fill_seconds;
        d["remote_retries"] = info.remote_retries;
        // The capsule owns the array until Python drops it: a KeyboardInterrupt
        // raised the moment this call returns (a Ctrl-C during the load) then
        // frees the array instead of leaking it.
        py::capsule owner(array.get(), kArrayCapsule,
                          [](void* p) { delete static_cast<legate::LogicalArray*>(p); });
        array.release();  // the capsule's now
        return py::make_tuple(std::move(owner), d);
      },
      py::arg("layout"), py::arg("overdecompose") = 1);

  // The dimension limit of the launchers, checked from Python before the runtime starts.
  m.attr("MAX_DIMS") = shardload::kMaxLegateDims;
  m.def(
      "check_layout_dims",
      [](const shardload::Layout& layout) { shardload::check_legate_dims(layout); },
      py::arg("layout"));
  m.def(
      "check_dims",
      [](const std::vector<std::int64_t>& shape, const std::string& what, bool write) {
        shardload::check_legate_dims(
            shape, what, write ? shardload::ErrorSite::kWrite : shardload::ErrorSite::kDiscover);
      },
      py::arg("shape"), py::arg("what"), py::arg("write") = false);
  m.def("check_load_memory", &shardload::check_load_memory, py::arg("rows"), py::arg("row_bytes"),
        py::arg("target"), py::arg("processors"), py::arg("overdecompose"));
  py::class_<shardload::Batches>(m, "Batches")
      .def(py::init([](const shardload::Layout& layout, std::int64_t rows_per_batch,
                       std::int64_t prefetch, std::int64_t overdecompose) {
             shardload::BatchOptions opts;
             opts.rows_per_batch = rows_per_batch;
             opts.prefetch = prefetch;
             opts.overdecompose = overdecompose;
             return std::make_unique<shardload::Batches>(layout, opts);
           }),
           py::arg("layout"), py::arg("rows_per_batch"), py::arg("prefetch"),
           py::arg("overdecompose"))
      .def_property_readonly("size", &shardload::Batches::size)
      .def("next", [](shardload::Batches& self) -> py::object {
        std::optional<shardload::Batch> batch;
        // next() waits for the batch's launch; what it throws leaves through the translator.
        shardload::python::interruptible([&] { batch = self.next(); });
        if (!batch) return py::none();
        auto* array = new legate::LogicalArray(std::move(batch->array));
        py::capsule owner = array_owner(array);
        return py::make_tuple(std::move(owner), batch->index, batch->lo, batch->hi);
      });

  m.def(
      "verify",
      [](const py::bytes& manifest_path, std::int64_t groups) {
        const std::string path = manifest_path;
        shardload::VerifyReport report;
        shardload::python::interruptible(
            [&] { report = shardload::verify_manifest(path, groups); });
        py::list out;
        for (const auto& mm : report.mismatches) {
          out.append(py::make_tuple(mm.shard, py::bytes(mm.path),
                                    shardload::python::message_str(shardload::spell_options(
                                        mm.what, shardload::OptionSpelling::kPython))));
        }
        return py::make_tuple(report.shards, report.groups, out);
      },
      py::arg("manifest_path"), py::arg("groups") = 0);

  m.def(
      "discover_once",
      [](const py::bytes& source, const py::bytes& pattern, const py::dict& discovery,
         const py::dict& options, bool use_manifest) {
        const std::string src = source;
        const std::string pat = pattern;
        // The options as _core.discover converts them (the Python side checked them).
        shardload::DiscoverOptions d;
        d.format = shardload::python::format_options_from(options);
        shardload::python::discover_options_from(discovery, &d);
        d.use_manifest = use_manifest;
        shardload::Layout layout;
        shardload::python::interruptible([&] { layout = shardload::discover_once(src, pat, d); });
        return layout;
      },
      py::arg("source"), py::arg("pattern"), py::arg("discovery") = py::dict(),
      py::arg("options") = py::dict(), py::arg("use_manifest") = true);
  m.def(
      "write_manifest_once",
      [](const shardload::Layout& layout, const py::bytes& directory, const std::string& checksum,
         const py::bytes& pattern) {
        shardload::ManifestOptions opts;
        const auto parsed = shardload::parse_checksum(checksum);
        if (!parsed) shardload::throw_status(parsed.status(), shardload::ErrorSite::kDiscover);
        opts.checksum = *parsed;
        opts.pattern = pattern;
        const std::string dir = directory;
        std::string written;
        {
          shardload::python::GilReleased release;
          try {
            written = shardload::write_manifest_once(layout, dir, opts);
          } catch (const shardload::Error& e) {
            // As _core.write_manifest says it.
            shardload::throw_status(e.status().with_context("indexing " + dir),
                                    shardload::ErrorSite::kDiscover);
          }
        }
        return shardload::python::path_str(written);
      },
      py::arg("layout"), py::arg("directory"), py::arg("checksum") = "none",
      py::arg("pattern") = py::bytes());

  // _core._process_state as this module sees it (the tests compare the two).
  m.def("_process_state", [] {
    py::dict d;
    d["posix_io"] = reinterpret_cast<std::uintptr_t>(&shardload::posix_io());
    d["readers"] = shardload::registered_readers();
    return d;
  });

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
         const std::vector<std::int64_t>& shard_rows, const std::string& format, bool overwrite,
         bool manifest, const std::string& checksum) {
        const auto* array = reinterpret_cast<const legate::LogicalArray*>(handle);
        shardload::SaveOptions opts;
        opts.num_shards = num_shards;
        opts.shard_rows = shard_rows;
        opts.format = shardload::parse_save_format(format);
        opts.overwrite = overwrite;
        opts.manifest = manifest;
        if (auto c = shardload::parse_checksum(checksum); c) {
          opts.checksum = *c;
        } else {
          shardload::throw_status(c.status().with_context("save: checksum"),
                                  shardload::ErrorSite::kWrite);
        }
        // Ctrl-C while the save runs (the GIL released) only marks the signal pending; it is
        // looked at before the publish step, so that an interrupted save publishes nothing.
        opts.before_commit = shardload::python::check_signals_before_commit;
        const std::string path = dest;
        shardload::SaveInfo info;
        try {
          shardload::python::GilReleased release;
          shardload::save(*array, path, opts, &info);
        } catch (const shardload::Error& e) {
          // A Ctrl-C during the publish step does not end its requests: where the manifest's
          // PUT then failed and whether the store took it cannot be told, the KeyboardInterrupt
          // says the dataset may be published, as numpy.save's does (the save's error is in
          // the note). Otherwise the save's error, the interrupt raised after it.
          if (e.status().stored_untold()) {
            shardload::python::raise_pending_interrupt_of_failed_save(path, e.status());
          }
          throw;
        }
        // A Ctrl-C during the publish step: raised now, saying the save completed.
        shardload::python::raise_signals_after_publish(path);
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
      py::arg("format"), py::arg("overwrite"), py::arg("manifest") = true,
      py::arg("checksum") = "none");
}
