// shardload._core: the private binding of the engine-independent core.
// The public API lives in the shardload package; this module only converts
// types; a Status becomes the package's exception through throw_status.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>

#include "base/detail/bytes.hpp"
#include "errors.hpp"
#include "gil.hpp"
#include "interrupt.hpp"
#include "options.hpp"
#include "py_reader.hpp"
#include "shardload/codec.hpp"
#include "shardload/fill.hpp"
#include "shardload/format.hpp"
#include "shardload/host_load.hpp"
#include "shardload/host_save.hpp"
#include "shardload/layout.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest.hpp"
#include "shardload/plan.hpp"
#include "shardload/reader_registry.hpp"
#include "shardload/staged_save.hpp"
#include "shardload/store_options.hpp"

namespace py = pybind11;
using namespace shardload;
using shardload::python::message_str;
using shardload::python::path_str;

namespace {

// A path argument (str, bytes or os.PathLike) as the file system's bytes,
// through os.fsencode: a str from os.fsdecode of non-UTF-8 bytes gives those
// bytes back. A NUL stays in; the core refuses it, naming the parameter.
std::string path_bytes(const py::handle& obj) {
  const py::object b = py::module_::import("os").attr("fsencode")(obj);
  return b.cast<std::string>();
}

// The TypeError of a function given an argument of another type: "NAME: expected WHAT, found
// TYPE".
[[noreturn]] void raise_type(const char* name, const char* what, const py::handle& got) {
  throw py::type_error(std::string(name) + ": expected " + what + ", found " +
                       std::string(py::str(py::type::of(got).attr("__name__"))));
}

[[noreturn]] void raise(const Status& st) { throw_status(st, ErrorSite::kDiscover); }

// A failure while reading data is a read error whatever its cause (I/O,
// a changed file, a damaged chunk, a null); only bad arguments are not.
[[noreturn]] void raise_read(const Status& st) { throw_status(st, ErrorSite::kRead); }

template <typename T>
T unwrap(Result<T> r) {
  if (!r) raise(r.status());
  return std::move(r).value();
}

Source make_source(const py::object& source, const py::object& pattern_obj) {
  const std::string pattern = pattern_obj.is_none() ? std::string() : path_bytes(pattern_obj);
  if (py::isinstance<py::str>(source) || py::isinstance<py::bytes>(source) ||
      py::hasattr(source, "__fspath__")) {
    const std::string text = path_bytes(source);
    // An object-storage URL is asked of the store (is it an object or a prefix?): no request
    // may hold the GIL (a server in this process, or any other Python thread, would wait on it).
    Result<Source> parsed = python::interruptible([&] { return Source::parse(text, pattern); });
    return unwrap(std::move(parsed));
  }
  if (!pattern.empty()) {
    throw py::value_error("pattern applies only when the source is a directory");
  }
  std::vector<std::string> paths;
  for (const auto& item : source) paths.push_back(path_bytes(item));
  return Source::list(std::move(paths));
}

py::dtype numpy_dtype(DType d) { return py::dtype(d.name()); }

// A StagedSave as the tuple that Python ships to the workers, and back.
py::tuple staged_tuple(const StagedSave& s) {
  return py::make_tuple(py::bytes(s.dest), py::bytes(s.physical), py::bytes(s.staging),
                        s.staging_dev, s.staging_ino, s.spec, s.overwrite, s.manifest,
                        static_cast<std::uint32_t>(s.checksum));
}

StagedSave staged_from_tuple(const py::tuple& t) {
  if (t.size() != 9) {
    throw py::type_error("staged save: expected the handle of staged_save_begin");
  }
  StagedSave s;
  try {
    s.dest = t[0].cast<std::string>();
    s.physical = t[1].cast<std::string>();
    s.staging = t[2].cast<std::string>();
    s.staging_dev = t[3].cast<std::uint64_t>();
    s.staging_ino = t[4].cast<std::uint64_t>();
    s.spec = t[5].cast<std::vector<std::int64_t>>();
    s.overwrite = t[6].cast<bool>();
    s.manifest = t[7].cast<bool>();
    const auto c = t[8].cast<std::uint32_t>();
    if (c > static_cast<std::uint32_t>(Checksum::kXxh3)) throw py::cast_error();
    s.checksum = static_cast<Checksum>(c);
  } catch (const py::cast_error&) {
    throw py::type_error("staged save: expected the handle of staged_save_begin");
  }
  return s;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Private binding of shardload's engine-independent core.";
  python::register_error_translator();

  // The C++ layout and its fields. The package's shardload.Layout subclasses it (the docs, the
  // array-like surface, the argument checks) and wraps each object made here through the copy
  // constructor: nothing is added to this class from Python.
  py::class_<Layout>(m, "Layout")
      .def(py::init([](const Layout& made) { return made; }), py::arg("made"))
      .def_property_readonly("format", [](const Layout& l) { return format_name(l.format); })
      .def_property_readonly("dtype", [](const Layout& l) { return numpy_dtype(l.dtype); })
      .def_property_readonly("shape",
                             [](const Layout& l) {
                               py::tuple t(l.shape().size());
                               auto s = l.shape();
                               for (std::size_t i = 0; i < s.size(); ++i) t[i] = s[i];
                               return t;
                             })
      .def_property_readonly("trailing_shape",
                             [](const Layout& l) {
                               py::tuple t(l.trailing_shape.size());
                               for (std::size_t i = 0; i < l.trailing_shape.size(); ++i) {
                                 t[i] = l.trailing_shape[i];
                               }
                               return t;
                             })
      .def_property_readonly("paths",
                             [](const Layout& l) {
                               py::list p;
                               for (const auto& s : l.shards) p.append(path_str(s.path));
                               return p;
                             })
      // The files the shards' data lives in besides their own (an HDF5 dataset's external
      // storage, and the source files of a virtual dataset, found in the shards as they are
      // now): the check of a front end's out= array compares them too. A shard that cannot
      // be looked at adds nothing here; its load fails on it anyway.
      .def_property_readonly("_linked_paths",
                             [](const Layout& l) {
                               py::list p;
                               for (const auto& s : l.shards) {
                                 for (const auto& f : s.linked) p.append(path_str(f.path));
                               }
                               if (l.format != Format::kHdf5) return p;
                               auto reader = make_reader(l.format, l.options);
                               if (!reader) return p;
                               for (const auto& s : l.shards) {
                                 auto more = (*reader)->other_files_read(s);
                                 if (!more) continue;
                                 for (const auto& f : *more) {
                                   const bool known = std::any_of(
                                       s.linked.begin(), s.linked.end(),
                                       [&](const LinkedFile& x) { return x.path == f; });
                                   if (!known) p.append(path_str(f));
                                 }
                               }
                               return p;
                             })
      .def_property_readonly("shard_rows", &Layout::rows)
      .def_property_readonly("offsets", [](const Layout& l) { return l.offsets; })
      .def_property_readonly("total_rows", &Layout::total_rows)
      .def_property_readonly("nbytes", &Layout::total_bytes)
      .def_property_readonly("num_shards", [](const Layout& l) { return l.shards.size(); })
      .def_property_readonly("manifest_status",
                             [](const Layout& l) {
                               // Redacted again: a pickled layout's status comes from wherever it
                               // was made.
                               return message_str(redact_secrets(
                                   spell_options(l.manifest_status, OptionSpelling::kPython)));
                             })
      // The package wraps the name in its ManifestState enum (Layout.manifest_state).
      .def_property_readonly("_manifest_state",
                             [](const Layout& l) { return manifest_state_name(l.manifest_state); })
      .def(
          "encode",
          [](const Layout& l, bool credentials) {
            const auto b = encode_layout(l, credentials);
            return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
          },
          py::arg("credentials") = true)
      .def(
          "describe",
          [](const Layout& l, std::size_t edge) { return message_str(describe(l, edge)); },
          py::arg("edge_shards") = 3)
      .def(
          "slice_rows",
          [](const Layout& l, std::int64_t lo, std::int64_t hi) {
            auto sub = slice_rows(l, lo, hi);
            if (!sub) throw_status(sub.status());
            return std::move(sub).value();
          },
          py::arg("lo"), py::arg("hi"))
      .def(
          "read",
          [](const Layout& l, std::int64_t lo, std::int64_t hi) {
            if (hi < 0) hi = l.total_rows();
            if (lo < 0 || hi < lo || hi > l.total_rows()) {
              throw py::value_error("rows [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                    ") outside the dataset's " + std::to_string(l.total_rows()) +
                                    " rows");
            }
            std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(hi - lo)};
            for (const auto d : l.trailing_shape) shape.push_back(d);
            py::array out(numpy_dtype(l.dtype), shape);
            auto* dst = static_cast<std::byte*>(out.mutable_data());
            const Status st = python::interruptible([&] { return fill_rows(l, lo, hi, dst); });
            if (!st) raise_read(st);
            return out;
          },
          py::arg("lo") = 0, py::arg("hi") = -1);

  // The NumPy front end's fill (shardload.numpy.load): the GIL released while the threads
  // read; `progress`, when given, is called with (tiles_done, tiles, rows_done) under the GIL from
  // the thread that finished a tile, and an exception it raises stops the load and is raised.
  m.def(
      "host_load",
      [](const Layout& l, const py::array& out, std::int64_t threads, std::int64_t k,
         const py::object& progress) {
        const auto want = static_cast<py::ssize_t>(l.total_bytes());
        // By value, as numpy compares dtypes: an equal dtype may be another object (unpickled,
        // copied, a byte order spelled '='), and a byte order that differs is not equal.
        if (!out.dtype().equal(numpy_dtype(l.dtype)) || (out.flags() & py::array::c_style) == 0 ||
            !out.writeable() || out.nbytes() != want) {
          throw py::value_error("host_load: expected a writable C-contiguous " +
                                std::string(py::str(numpy_dtype(l.dtype))) + " array of " +
                                std::to_string(want) + " bytes");
        }
        auto* dst = static_cast<std::byte*>(const_cast<void*>(out.data()));
        HostLoadOptions o;
        o.threads = threads;
        o.overdecompose = k;
        std::optional<py::error_already_set> raised;
        if (!progress.is_none()) {
          o.on_tile = [&](std::int64_t done, std::int64_t tiles, std::int64_t rows) {
            // At the program's end the load stops here (a daemon thread's); see gil.hpp.
            if (python::interpreter_finalizing()) return false;
            python::GilAcquired hold;
            try {
              python::call_python([&] { progress(done, tiles, rows); });
              return true;
            } catch (py::error_already_set& e) {
              raised.emplace(std::move(e));
              return false;
            }
          };
        }
        Result<HostLoadStats> r = python::interruptible([&] { return host_load(l, dst, o); });
        if (raised) throw std::move(*raised);
        if (!r) raise_read(r.status());
        py::dict d;
        d["tiles"] = r->plan.tiles;
        d["tile_rows"] = r->plan.tile_rows;
        d["threads"] = r->threads;
        d["fill_s"] = r->fill_s;
        return d;
      },
      py::arg("layout"), py::arg("out"), py::arg("threads") = 0, py::arg("overdecompose") = 4,
      py::arg("progress") = py::none());
  m.def("default_host_threads", &default_host_threads);

  // The NumPy front end's save (shardload.numpy.save): `array` is C-contiguous in native byte
  // order (the package makes it so); the GIL is released while the threads write. A Ctrl-C
  // stops further tiles and, looked at again before the rename, publishes nothing.
  m.def(
      "host_save",
      [](const py::array& array, const py::bytes& dest, std::int64_t num_shards,
         const std::vector<std::int64_t>& shard_rows, const std::string& format, bool overwrite,
         bool manifest, const std::string& checksum, std::int64_t threads) {
        if ((array.flags() & py::array::c_style) == 0 || array.ndim() < 1) {
          throw py::value_error("host_save: expected a C-contiguous array of 1 or more dimensions");
        }
        const std::string name = py::str(array.dtype());
        const Result<DType> dtype = parse_dtype(name);
        if (!dtype || (dtype->size > 1 && array.dtype().byteorder() == '>')) {
          throw py::type_error(
              "host_save: expected a numeric or bool array in native byte order, "
              "found dtype " +
              name);
        }
        HostSaveOptions o;
        o.threads = threads;
        o.save.num_shards = num_shards;
        o.save.shard_rows = shard_rows;
        o.save.format = Format::kAuto;
        for (const auto& d : formats()) {
          if (d.writer && d.name == format) o.save.format = d.format;
        }
        if (o.save.format == Format::kAuto) {
          throw_status({ErrorCode::kInvalidArgument, "save: format: expected " +
                                                         writable_format_names_text() +
                                                         ", found '" + format + "'"},
                       ErrorSite::kWrite);
        }
        o.save.overwrite = overwrite;
        o.save.manifest = manifest;
        const Result<Checksum> c = parse_checksum(checksum);
        if (!c) throw_status(c.status().with_context("save: checksum"), ErrorSite::kWrite);
        o.save.checksum = *c;
        // At the program's end a save in flight publishes nothing (its staging is removed as
        // the error passes).
        o.save.before_commit = python::check_signals_before_commit;
        std::vector<std::int64_t> shape;
        for (py::ssize_t d = 0; d < array.ndim(); ++d) shape.push_back(array.shape(d));
        const auto* data = static_cast<const std::byte*>(array.data());
        const std::string path = dest;
        Result<HostSaveStats> r = python::interruptible_save(
            path, [&] { return host_save(data, shape, *dtype, path, o); });
        if (!r) throw_status(r.status(), ErrorSite::kWrite);
        py::dict d;
        d["threads"] = r->threads;
        d["tiles"] = r->tiles;
        d["shards"] = r->shards;
        d["bytes"] = r->bytes;
        d["prepare_s"] = r->prepare_s;
        d["write_s"] = r->write_s;
        d["commit_s"] = r->commit_s;
        return d;
      },
      py::arg("array"), py::arg("dest"), py::arg("num_shards"), py::arg("shard_rows"),
      py::arg("format"), py::arg("overwrite"), py::arg("manifest"), py::arg("checksum"),
      py::arg("threads") = 0);

  // The Dask front end's save (shardload.dask.save, shardload/staged_save.hpp): begun and
  // committed (or aborted) in the calling process, written by the workers that compute the
  // chunks. The handle is a plain tuple, pickled once to each worker.
  m.def(
      "staged_save_begin",
      [](const py::bytes& dest, const std::vector<std::int64_t>& shape, const std::string& dtype,
         const std::vector<std::int64_t>& shard_rows, const std::string& format, bool overwrite,
         bool manifest, const std::string& checksum) {
        const Result<DType> dt = parse_dtype(dtype);
        if (!dt) throw_status(dt.status().with_context("save: dtype"), ErrorSite::kWrite);
        SaveOptions o;
        o.shard_rows = shard_rows;
        o.format = Format::kAuto;
        for (const auto& d : formats()) {
          if (d.writer && d.name == format) o.format = d.format;
        }
        if (o.format == Format::kAuto) {
          throw_status({ErrorCode::kInvalidArgument, "save: format: expected " +
                                                         writable_format_names_text() +
                                                         ", found '" + format + "'"},
                       ErrorSite::kWrite);
        }
        o.overwrite = overwrite;
        o.manifest = manifest;
        const Result<Checksum> c = parse_checksum(checksum);
        if (!c) throw_status(c.status().with_context("save: checksum"), ErrorSite::kWrite);
        o.checksum = *c;
        const std::string path = dest;
        Result<StagedSave> r = [&] {
          shardload::python::GilReleased release;
          return staged_save_begin(shape, *dt, path, o);
        }();
        if (!r) throw_status(r.status(), ErrorSite::kWrite);
        return staged_tuple(*r);
      },
      py::arg("dest"), py::arg("shape"), py::arg("dtype"), py::arg("shard_rows"), py::arg("format"),
      py::arg("overwrite"), py::arg("manifest"), py::arg("checksum"));
  m.def(
      "staged_save_write",
      [](const py::tuple& handle, std::int64_t lo, std::int64_t hi, const py::array& array) {
        const StagedSave s = staged_from_tuple(handle);
        if ((array.flags() & py::array::c_style) == 0 || array.ndim() < 1) {
          throw py::value_error(
              "staged_save_write: expected a C-contiguous array of 1 or more dimensions");
        }
        const std::string name = py::str(array.dtype());
        const Result<DType> dtype = parse_dtype(name);
        if (!dtype || (dtype->size > 1 && array.dtype().byteorder() == '>')) {
          throw py::type_error(
              "staged_save_write: expected a numeric or bool array in native byte order, "
              "found dtype " +
              name);
        }
        if (array.shape(0) != hi - lo) {
          throw_status(
              {ErrorCode::kInvalidArgument,
               "save: rows [" + std::to_string(lo) + ", " + std::to_string(hi) + "): expected " +
                   std::to_string(hi - lo) + " rows, found " + std::to_string(array.shape(0))},
              ErrorSite::kWrite);
        }
        std::vector<std::int64_t> trailing;
        for (py::ssize_t d = 1; d < array.ndim(); ++d) trailing.push_back(array.shape(d));
        const auto* data = static_cast<const std::byte*>(array.data());
        const auto bytes = static_cast<std::size_t>(array.nbytes());
        const Status st = [&] {
          shardload::python::GilReleased release;
          return staged_save_write(s, lo, hi, *dtype, trailing, data, bytes);
        }();
        if (!st) throw_status(st, ErrorSite::kWrite);
      },
      py::arg("handle"), py::arg("lo"), py::arg("hi"), py::arg("array"));
  m.def(
      "staged_save_commit",
      [](const py::tuple& handle) {
        const StagedSave s = staged_from_tuple(handle);
        const Status st = [&] {
          shardload::python::GilReleased release;
          return staged_save_commit(s);
        }();
        if (!st) throw_status(st, ErrorSite::kWrite);
        // A Ctrl-C during the commit (which it does not stop): raised now, saying the save
        // completed.
        python::raise_signals_after_publish(s.dest);
      },
      py::arg("handle"));
  m.def(
      "staged_save_abort",
      [](const py::tuple& handle) {
        const StagedSave s = staged_from_tuple(handle);
        shardload::python::GilReleased release;
        staged_save_abort(s);
      },
      py::arg("handle"));

  m.def(
      "discover",
      [](const py::object& source, const py::object& pattern, const py::dict& options,
         const py::dict& discovery, bool use_manifest) {
        Source src = make_source(source, pattern);
        DiscoverOptions opts;
        python::discover_options_from(discovery, &opts);
        opts.use_manifest = use_manifest;
        opts.format = python::format_options_from(options);
        Result<Layout> l = python::interruptible([&] { return try_discover(src, opts); });
        if (!l) raise(l.status().with_context("loading " + src.describe()));
        return std::move(l).value();
      },
      py::arg("source"), py::arg("pattern") = py::none(), py::arg("options") = py::dict(),
      py::arg("discovery") = py::dict(), py::arg("use_manifest") = true);
  // The option tables' rows, from which the package checks and types its keywords.
  m.def("format_option_rows", &python::format_option_rows);
  m.def("discover_option_rows", &python::discover_option_rows);
  m.def("storage_option_rows", &python::storage_option_rows);
  m.def("format_rows", &python::format_rows);

  // The manifest (shardload/manifest.hpp); shardload._manifest is its Python API.
  m.def(
      "write_manifest",
      [](const Layout& layout, const py::object& directory, const std::string& checksum,
         const py::object& pattern) {
        ManifestOptions opts;
        opts.checksum = unwrap(parse_checksum(checksum));
        if (!pattern.is_none()) opts.pattern = path_bytes(pattern);
        const std::string dir = path_bytes(directory);
        Result<std::string> written =
            python::interruptible([&] { return write_manifest(layout, dir, opts); });
        if (!written) raise(written.status().with_context("indexing " + dir));
        return path_str(*written);
      },
      py::arg("layout"), py::arg("directory"), py::arg("checksum") = "none",
      py::arg("pattern") = py::none());
  m.def(
      "read_manifest",
      [](const py::object& path) {
        const std::string p = path_bytes(path);
        // A URL's GET (see verify_on_host).
        Result<Manifest> r = python::interruptible([&] { return read_manifest(p); });
        if (!r) raise(r.status());
        py::dict d;
        d["layout"] = std::move(r->layout);
        d["pattern"] = path_str(r->pattern);
        d["checksum"] = checksum_name(r->checksum);
        d["checksums"] = r->checksums;
        return d;
      },
      py::arg("path"));
  m.def(
      "decode_layout",
      [](const py::bytes& encoded, const std::string& manifest_status,
         const std::string& manifest_state) {
        const auto state = parse_manifest_state(manifest_state);
        if (!state) {
          raise(Status(ErrorCode::kInvalidArgument,
                       "manifest_state: '" + manifest_state + "' is no manifest state"));
        }
        const std::string b = encoded;
        auto l =
            decode_layout(std::span(reinterpret_cast<const std::uint8_t*>(b.data()), b.size()));
        if (!l) raise(l.status());
        l->manifest_status = manifest_status;
        l->manifest_state = *state;
        return std::move(l).value();
      },
      py::arg("encoded"), py::arg("manifest_status") = "", py::arg("manifest_state") = "none");
  // The byte count for people every front end prints (base/detail/bytes.hpp).
  m.def("size_string", &detail::size_string, py::arg("nbytes"));
  m.def(
      "manifest_path",
      [](const py::object& dir) { return path_str(manifest_path(path_bytes(dir))); },
      py::arg("directory"));
  m.def(
      "verify_on_host",
      [](const py::object& path) {
        const std::string p = path_bytes(path);
        // The manifest may be a URL: its request, like the hashing, must not hold the GIL
        // (a server in this process, or any other Python thread, would wait on it).
        Result<Manifest> r = python::interruptible([&] { return read_manifest(p); });
        if (!r) raise(r.status());
        Result<std::vector<ChecksumMismatch>> v = python::interruptible(
            [&] { return verify_range(*r, 0, r->layout.shards.size(), posix_io()); });
        if (!v) raise(v.status());
        // As verify_manifest: the directory's shards that the manifest does not list.
        Result<std::size_t> added =
            python::interruptible([&] { return add_listing_mismatches(*r, &*v); });
        if (!added) raise(added.status());
        py::list out;
        for (const auto& mm : *v) {
          out.append(py::make_tuple(mm.shard, path_str(mm.path),
                                    message_str(spell_options(mm.what, OptionSpelling::kPython))));
        }
        return out;
      },
      py::arg("path"));

  // The paths of a source, in order, without opening them.
  m.def(
      "resolve",
      [](const py::object& source, const py::object& pattern) {
        const Source src = make_source(source, pattern);
        Result<std::vector<std::string>> paths =
            python::interruptible([&] { return resolve(src); });
        if (!paths) raise(paths.status().with_context("loading " + src.describe()));
        py::list out;
        for (const auto& path : *paths) out.append(path_str(path));
        return out;
      },
      py::arg("source"), py::arg("pattern") = py::none());

  // shardload.register_reader's registration in libshardload.so's registry (py_reader.hpp).
  m.def("register_python_reader", &python::register_python_reader, py::arg("name"),
        py::arg("probe"), py::arg("read_into"), py::arg("extensions"));

  // Requests to object storage retried so far in this process: LoadInfo's count is the
  // difference around a load.
  m.def("remote_retries", [] { return remote_retries(); });
  // The escaping every C++ error's message goes through (printable), for the messages made in
  // Python that show a path: a control character in a name neither rewrites the terminal nor
  // forges a line.
  m.def(
      "printable",
      [](const py::object& text) {
        if (!py::isinstance<py::str>(text)) raise_type("printable", "a str", text);
        return message_str(printable(path_bytes(text)));
      },
      py::arg("text"),
      "``text`` with each control character and each byte that is not UTF-8 escaped "
      "(``\\n``, ``\\x1b``, ``\\u009b``), as every message shows a name.");
  // The check of a source's spelling that discovery makes (a NUL, a mistyped or unsupported
  // scheme, an unsendable URL), for the entry points that take a directory or a manifest
  // without discovering it first (index, verify, discover_once): one rule, one message.
  m.def(
      "check_source",
      [](const py::object& source) {
        const Status st = check_source(Source::directory(path_bytes(source)));
        if (!st) raise(st);
      },
      py::arg("source"),
      "Raises as discover() does for a source spelled as no path or URL should be: a mistyped "
      "URL (``http:/h/x``), a scheme no backend serves, a NUL.");
  // Both, in the order every C++ message takes them (escaped, then redacted: a control
  // character inside a secret is part of the word hidden), for a path Python shows.
  m.def(
      "printable_redacted",
      [](const py::object& text) {
        if (!py::isinstance<py::str>(text)) raise_type("printable_redacted", "a str", text);
        return message_str(printable_redacted(path_bytes(text)));
      },
      py::arg("text"),
      "``printable(text)`` with its secrets hidden, as every message shows a path.");
  // The join of storage options to a source's URL hands this on, so that the string made holds
  // the URL's secrets by handle only (shardload/store_options.hpp).
  m.def(
      "seal_store_url",
      [](const py::object& url, bool pinned) -> py::object {
        if (!py::isinstance<py::str>(url)) raise_type("seal_store_url", "a str", url);
        if (!pinned) return path_str(seal_credentials(path_bytes(url)));
        auto pins = std::make_unique<CredentialPins>();
        const std::string sealed = seal_credentials(path_bytes(url), pins.get());
        // Dropped (the entries let go) when the last reference to the capsule goes.
        py::capsule pin(pins.release(), [](void* p) { delete static_cast<CredentialPins*>(p); });
        return py::make_tuple(path_str(sealed), pin);
      },
      py::arg("url"), py::arg("pinned") = false,
      "``url`` with its secrets (an s3:// URL's secret_key and session_token, an http(s) URL's "
      "user part and secret query items) kept by this process under a handle: the URL holds "
      "``credentials=HANDLE`` instead. Other URLs and paths come back as they are. The table "
      "keeps an entry only among the recently sealed ones unless something pins it: with "
      "``pinned=True``, ``(url, pin)``, the pin keeping the URL's entries while it lives.");
  // What the store behind a path is like (shardload/location.hpp), so that the front ends ask
  // storage what they need to know (whether the operating system's file calls reach a path,
  // whether a directory lists or takes a manifest, which options a URL takes) instead of
  // testing the path's scheme.
  py::class_<PathTraits>(m, "PathTraits",
                         "What the store that serves a path is like (``path_traits(p)``).")
      .def_readonly("kernel_files", &PathTraits::kernel_files,
                    "The operating system's file calls (stat, open) reach the path.")
      .def_readonly("round_trips", &PathTraits::round_trips,
                    "Each open, stat and read is a request over the network.")
      .def_readonly("flat_keys", &PathTraits::flat_keys,
                    "A directory is a prefix of keys, nothing of its own.")
      .def_readonly("listable", &PathTraits::listable, "A directory can be listed.")
      .def_readonly("writable", &PathTraits::writable, "Keys can be written (a manifest, a save).")
      .def_readonly("uploads", &PathTraits::uploads, "Written by uploading whole objects.")
      .def_readonly("options_in_query", &PathTraits::options_in_query,
                    "A '?' begins the store's options (a URL's query).")
      .def_readonly("query_sent", &PathTraits::query_sent,
                    "The query's other items are sent with each request (the server's).")
      .def_property_readonly(
          "scheme_label", [](const PathTraits& t) { return std::string(t.scheme_label); },
          "The scheme as messages name it (``'s3://'``, ``'http(s)://'``); '' for a local "
          "path.")
      .def_property_readonly(
          "storage_options",
          [](const PathTraits& t) {
            py::list names;
            for (const StoreOptionSpec& row : kStoreOptionTable) {
              if ((row.stores & t.option_rows) != 0) names.append(row.name);
            }
            return py::tuple(names);
          },
          "The store option table's rows a URL of this store takes from its query (a tuple "
          "of names; empty for a local path).");
  m.def(
      "path_traits", [](const py::object& path) { return path_traits(path_bytes(path)); },
      py::arg("path"), "What the store that serves ``path`` (str, bytes or os.PathLike) is like.");
  // A name joined under a directory, and a path's name apart from its store options, as the
  // engine makes them (a URL's query is no part of a key and stays at the end).
  m.def(
      "join_key",
      [](const py::object& dir, const py::object& name) {
        return path_str(join_key(path_bytes(dir), path_bytes(name)));
      },
      py::arg("dir"), py::arg("name"),
      "``name`` in the directory ``dir``: one '/' between them, a URL's options (its query) "
      "kept at the end, its secrets sealed as ``seal_store_url`` seals them. A str.");
  m.def(
      "split_options",
      [](const py::object& path) {
        auto [name, options] = split_options(path_bytes(path));
        return py::make_tuple(path_str(name), path_str(options));
      },
      py::arg("path"),
      "``(name, options)``: a URL's key and its query (``'?...'``, secrets sealed); a local "
      "path and ``''`` (a '?' in a file name is part of it).");
  // The redaction every C++ error's message goes through, for the messages made in Python and
  // as shardload.redact_secrets for the user's own.
  m.def(
      "redact_secrets",
      [](const py::object& text) -> py::object {
        // Through os.fsencode and back: a path's undecodable bytes (surrogate escapes) survive.
        if (py::isinstance<py::bytes>(text)) {
          return py::bytes(redact_secrets(text.cast<std::string>()));
        }
        if (!py::isinstance<py::str>(text)) raise_type("redact_secrets", "a str or bytes", text);
        return path_str(redact_secrets(path_bytes(text)));
      },
      py::arg("text"),
      "``text`` with every credential in a URL replaced by ``***``: the values of secret query "
      "keys (``secret_key``, ``session_token``, ``X-Amz-Signature``, ``X-Amz-Security-Token``, "
      "``Signature``, ``X-Goog-Signature``, ``sig``, ``token``, ``access_token``, ``key``, ...: "
      "docs/object_storage.md lists them), compared without case, and the password of a "
      "URL's user part (``https://user:***@host/``). The rest of the text is kept. Every "
      "message, ``print(layout)`` and the command line show URLs through it; "
      "``Layout.paths`` gives them as they are.");

  // What the process holds once, as this module sees it: libshardload.so's I/O backend and the
  // readers registered in C++ (the tests compare it with _legate's).
  m.def("_process_state", [] {
    py::dict d;
    d["posix_io"] = reinterpret_cast<std::uintptr_t>(&posix_io());
    d["readers"] = registered_readers();
    return d;
  });

  m.def(
      "plan",
      [](const std::vector<std::int64_t>& rows, std::int64_t processors, std::int64_t k,
         std::int64_t unit_rows, bool units_aligned) {
        std::vector<std::int64_t> offsets{0};
        for (const auto r : rows) offsets.push_back(offsets.back() + r);
        ReadPlan p = unwrap(make_plan(offsets, processors, k, UnitGrid{unit_rows, units_aligned}));
        py::list tiles;
        for (std::int64_t t = 0; t < p.tiles; ++t) {
          py::list pieces;
          for (const auto& pc : tile_pieces(p, offsets, t)) {
            pieces.append(py::make_tuple(pc.shard, pc.lo, pc.hi, pc.dst_row));
          }
          tiles.append(pieces);
        }
        py::dict d;
        d["tile_rows"] = p.tile_rows;
        d["tiles"] = p.tiles;
        d["uniform"] = p.uniform;
        d["pieces"] = tiles;
        return d;
      },
      py::arg("rows"), py::arg("processors"), py::arg("overdecompose") = 1,
      py::arg("unit_rows") = 0, py::arg("units_aligned") = false);
  // A layout's decode unit grid as the plan sees it (plan.hpp), for the front ends that cut
  // chunks themselves (Dask): (unit_rows, units_aligned), unit_rows 0 when no shard has units.
  m.def(
      "unit_grid",
      [](const Layout& l) {
        const UnitGrid g = unit_grid(l.offsets, l.shards);
        return py::make_tuple(g.rows, g.aligned);
      },
      py::arg("layout"));
  // Each shard's own units, (decode_rows, first_row): unit k of a shard holds its file's rows
  // [k * decode_rows, (k + 1) * decode_rows), and the shard's view starts at file row first_row.
  // What the Dask front end cuts its chunks on where one grid does not fit every shard.
  m.def(
      "shard_units",
      [](const Layout& l) {
        py::list out;
        for (const auto& s : l.shards) out.append(py::make_tuple(s.decode_rows, s.first_row));
        return out;
      },
      py::arg("layout"));
}
