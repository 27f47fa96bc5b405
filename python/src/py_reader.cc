#include "py_reader.hpp"

#include <pybind11/numpy.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <utility>

#include "errors.hpp"
#include "gil.hpp"
#include "shardload/dtype.hpp"
#include "shardload/io.hpp"
#include "shardload/reader.hpp"
#include "shardload/reader_registry.hpp"
#include "shardload/shard_source.hpp"
#include "shardload/status.hpp"

namespace py = pybind11;

namespace shardload::python {

namespace {

// The Python side of one registration. Never freed, and the callables' references never
// dropped: a reader object may be destroyed on a thread without the GIL, and a task may make
// one while the process exits.
struct Callbacks {
  std::string name;
  PyObject* probe = nullptr;
  PyObject* read_into = nullptr;
};

// Threads inside a callback, and whether the collector was on when the first came in. Read and
// written only with the GIL held, so no lock.
int gc_depth = 0;
bool gc_was_enabled = false;

// The collector off while any thread runs a callback (see py_reader.hpp). Constructed right
// after the GIL is taken and destroyed right before it is released, with no Python object alive
// in between: restoring allocates nothing, so no collection can start on this thread.
class GcPause {
 public:
  GcPause() {
    if (gc_depth++ == 0) gc_was_enabled = PyGC_Disable() != 0;
  }
  ~GcPause() {
    if (--gc_depth == 0 && gc_was_enabled) PyGC_Enable();
  }
  GcPause(const GcPause&) = delete;
  GcPause& operator=(const GcPause&) = delete;
};

// A str as the file system's bytes (os.fsencode), so paths in messages come back unchanged;
// "" when it cannot be had.
std::string fs_bytes(const py::handle& s) {
  if (!PyUnicode_Check(s.ptr())) return {};
  PyObject* b = PyUnicode_EncodeFSDefault(s.ptr());
  if (b == nullptr) {
    PyErr_Clear();
    return {};
  }
  std::string out(PyBytes_AS_STRING(b), static_cast<std::size_t>(PyBytes_GET_SIZE(b)));
  Py_DECREF(b);
  return out;
}

// The Status of the exception a callback raised: its message, and the file (its `filename`
// when it names one, else `path`) and errno as data. The exception is consumed here.
Status status_of(py::error_already_set& e, ErrorCode code, const std::string& path) {
  std::string message;
  std::string file = path;
  int err = 0;
  // A Ctrl-C delivered inside a callback (only the main thread gets signals) cannot cross the
  // engine: it fails this read or probe, and is made pending again so that Python raises
  // KeyboardInterrupt once the call is back in Python.
  if (e.matches(PyExc_KeyboardInterrupt)) {
    PyErr_SetInterrupt();
    message = path + ": interrupted (KeyboardInterrupt) in the reader's callback";
  }
  try {
    const py::object value = e.value();
    if (message.empty()) message = fs_bytes(py::str(value));
    if (py::hasattr(value, "filename")) {
      const py::object f = value.attr("filename");
      if (py::isinstance<py::str>(f)) file = fs_bytes(f);
    }
    if (py::hasattr(value, "errno")) {
      const py::object n = value.attr("errno");
      if (py::isinstance<py::int_>(n)) err = n.cast<int>();
    }
  } catch (const std::exception&) {
    PyErr_Clear();
  }
  if (message.empty()) message = path + ": the Python reader failed";
  Status st(code, std::move(message));
  st = st.with_path(file);
  return err > 0 ? st.with_errno(err) : st;
}

// For a reader object, which may be made and destroyed on any thread: it holds no Python
// object, only the registration's callbacks.
class PythonReader final : public ShardReader {
 public:
  PythonReader(const Callbacks* callbacks, const ReaderContext& context)
      : callbacks_(callbacks),
        source_(context.source != nullptr ? context.source : ShardSource::files()),
        check_(context.check_snapshot) {}

  Result<ShardProbe> probe(const std::string& path) override {
    // Discovery opened the file (refusing FIFOs and devices without blocking) and took its
    // snapshot before calling this; it sets the shard's path and snapshot.
    ShardProbe p;
    std::string dtype;
    if (!Py_IsInitialized() || interpreter_finalizing()) return stopped(path);
    Status st;
    {
      GilAcquired gil;
      GcPause pause;
      try {
        const py::tuple got = call_python(
            [&] { return py::reinterpret_borrow<py::object>(callbacks_->probe)(path_str(path)); });
        p.shard.rows = got[0].cast<std::int64_t>();
        dtype = got[1].cast<std::string>();
        for (const auto d : got[2].cast<py::tuple>())
          p.trailing_shape.push_back(d.cast<std::int64_t>());
      } catch (py::error_already_set& e) {
        st = status_of(e, ErrorCode::kLayout, path);
      } catch (const std::exception& e) {
        st = file_error(ErrorCode::kLayout, path,
                        "the reader '" + callbacks_->name + "': probe failed: " + e.what());
      }
    }
    if (!st) return st;
    SHARDLOAD_ASSIGN_OR_RETURN(p.dtype, parse_dtype(dtype));
    return p;
  }

  Status read_rows(const ReadSpec& spec, const Shard& shard, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override {
    // Opened without blocking and compared with discovery's snapshot before the user's read()
    // opens it (a FIFO swapped in since would block it for ever), and compared again after.
    auto file = open_checked(*source_, shard, check_);
    if (!file) return file.status();
    Status read = call_read(spec, shard.path, lo, hi, dst);
    return check_ ? check_unchanged(*file, shard.snapshot, read) : read;
  }

 private:
  Status stopped(const std::string& path) const {
    return file_error(ErrorCode::kIo, path,
                      "the reader '" + callbacks_->name +
                          "' is written in Python, and the interpreter has ended");
  }

  Status call_read(const ReadSpec& spec, const std::string& path, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) {
    if (!Py_IsInitialized() || interpreter_finalizing()) return stopped(path);
    GilAcquired gil;
    GcPause pause;
    try {
      std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(hi - lo)};
      for (const auto d : spec.trailing_shape) shape.push_back(static_cast<py::ssize_t>(d));
      // A view of the destination (the capsule as its base, so nothing is copied); read_into
      // writes the checked rows through it.
      const py::array view(py::dtype(spec.dtype.name()), shape, static_cast<void*>(dst),
                           py::capsule(dst, [](void*) {}));
      call_python([&] {
        py::reinterpret_borrow<py::object>(callbacks_->read_into)(path_str(path), lo, hi, view);
      });
      return Status::ok();
    } catch (py::error_already_set& e) {
      return status_of(e, ErrorCode::kIo, path);
    } catch (const std::exception& e) {
      return file_error(ErrorCode::kIo, path,
                        "rows [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "): the reader '" + callbacks_->name + "' failed: " + e.what());
    }
  }

  const Callbacks* callbacks_;
  std::shared_ptr<ShardSource> source_;
  bool check_;
};

}  // namespace

void register_python_reader(const std::string& name, const py::object& probe,
                            const py::object& read_into,
                            const std::vector<std::string>& extensions) {
  auto* callbacks = new Callbacks{name, probe.ptr(), read_into.ptr()};
  ReaderRegistration reg;
  reg.name = name;
  reg.extensions = extensions;
  reg.factory = [callbacks](const FormatOptions&,
                            const ReaderContext& context) -> Result<std::unique_ptr<ShardReader>> {
    return std::unique_ptr<ShardReader>(new PythonReader(callbacks, context));
  };
  if (Status st = register_reader(std::move(reg)); !st) {
    delete callbacks;
    throw py::value_error(st.message());
  }
  // Kept for the process, as the registration is.
  Py_INCREF(callbacks->probe);
  Py_INCREF(callbacks->read_into);
}

}  // namespace shardload::python
