// shardload._feed_cuda: the training feed's device batches (shardload.feed.Feed(device=)),
// over shardload/device_batch.hpp. Built only with the CUDA backend; a build without it has no
// such module, and the feed says so.
//
//   device_status()        "" where a CUDA device is usable, else why not ("no CUDA device
//                          (cudaGetDeviceCount: ...)")
//   Device(index)          the staging pool, reader threads and stream of one device
//     .fill_rows(layout, ranges, shape)   the engine's device fill of row ranges
//     .copy(host, shape)   a host batch (page-locked) in one async copy
//   DeviceBatch            the batch: __dlpack__ (kDLCUDA, no copy), __dlpack_device__,
//                          ptr, shape, dtype, device, numpy() (a copy back, for checks)
//   pointer_device(ptr)    the device of device memory (cudaPointerGetAttributes), else raises
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "gil.hpp"
#include "shardload/cuda_backend.hpp"
#include "shardload/device_batch.hpp"
#include "shardload/errors.hpp"
#include "shardload/layout.hpp"

namespace py = pybind11;
using namespace shardload;

namespace {

// DLPack's capsule protocol: named "dltensor" until a consumer takes it (and renames it
// "used_dltensor"); a capsule never taken frees its tensor itself.
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor") == 0) return;  // taken: the consumer frees it
  auto* t = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (t != nullptr && t->deleter != nullptr) t->deleter(t);
}

struct DeviceBatch {
  std::shared_ptr<DeviceBuffer> buffer;
  DType dtype;
  std::vector<std::int64_t> shape;

  py::capsule dlpack() const {
    Result<dlpack::ManagedTensor*> t = to_dlpack(buffer, dtype, shape);
    if (!t) throw_status(t.status(), ErrorSite::kRead);
    PyObject* c = PyCapsule_New(*t, "dltensor", &capsule_destructor);
    if (c == nullptr) {
      (*t)->deleter(*t);
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::capsule>(c);
  }

  py::array numpy() const {
    py::array out(py::dtype(dtype.name()), shape);
    Status st;
    {
      shardload::python::GilReleased release;
      st = copy_to_host(*buffer, out.mutable_data());
    }
    if (!st.is_ok()) throw_status(st, ErrorSite::kRead);
    return out;
  }
};

DType dtype_of(const py::dtype& d) {
  auto t = parse_dtype(py::str(d).cast<std::string>());
  if (!t)
    throw py::value_error("device batch: unsupported dtype " + py::str(d).cast<std::string>());
  return *t;
}

}  // namespace

PYBIND11_MODULE(_feed_cuda, m) {
  m.doc() = "Private binding of the training feed's device batches (shardload.feed).";
  python::register_error_translator();

  m.def("device_status", [] {
    Status s = cuda_device_available();
    return s.is_ok() ? std::string() : s.message();
  });

  m.def("pointer_device", [](std::uintptr_t ptr) {
    Result<int> d = device_of_pointer(reinterpret_cast<const void*>(ptr));
    if (!d) throw py::value_error(d.status().message());
    return *d;
  });

  py::class_<DeviceBatch>(m, "DeviceBatch")
      .def("__dlpack__", [](const DeviceBatch& b, const py::kwargs&) { return b.dlpack(); })
      .def("__dlpack_device__",
           [](const DeviceBatch& b) {
             return py::make_tuple(static_cast<int>(dlpack::kCUDA), b.buffer->device());
           })
      .def_property_readonly(
          "ptr",
          [](const DeviceBatch& b) { return reinterpret_cast<std::uintptr_t>(b.buffer->data()); })
      .def_property_readonly("shape",
                             [](const DeviceBatch& b) {
                               py::tuple t(b.shape.size());
                               for (std::size_t i = 0; i < b.shape.size(); ++i) t[i] = b.shape[i];
                               return t;
                             })
      .def_property_readonly("dtype",
                             [](const DeviceBatch& b) { return py::dtype(b.dtype.name()); })
      .def_property_readonly("device", [](const DeviceBatch& b) { return b.buffer->device(); })
      .def("numpy", &DeviceBatch::numpy)
      .def("__repr__", [](const DeviceBatch& b) {
        std::string s = "DeviceBatch(cuda:" + std::to_string(b.buffer->device()) + ", shape (";
        for (std::size_t i = 0; i < b.shape.size(); ++i) {
          s += (i ? ", " : "") + std::to_string(b.shape[i]);
        }
        return s + (b.shape.size() == 1 ? ",), " : "), ") + b.dtype.name() + ")";
      });

  py::class_<DeviceBatches>(m, "Device")
      .def(py::init([](int index) {
             Result<std::unique_ptr<DeviceBatches>> d = DeviceBatches::create(index);
             if (!d) throw std::runtime_error(d.status().message());
             return std::move(d).value();
           }),
           py::arg("index"))
      .def_property_readonly("index", &DeviceBatches::device)
      .def(
          "fill_rows",
          [](DeviceBatches& d, const Layout& l,
             const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges,
             std::vector<std::int64_t> shape) {
            Result<std::shared_ptr<DeviceBuffer>> b = [&] {
              shardload::python::GilReleased release;
              return d.fill_rows(l, ranges);
            }();
            if (!b) throw_status(b.status(), ErrorSite::kRead);
            return DeviceBatch{std::move(b).value(), l.dtype, std::move(shape)};
          },
          py::arg("layout"), py::arg("ranges"), py::arg("shape"))
      .def(
          "copy",
          [](DeviceBatches& d, const py::array& host) {
            if ((host.flags() & py::array::c_style) == 0) {
              throw py::value_error("device batch: the host batch is not C-contiguous");
            }
            std::vector<std::int64_t> shape(host.shape(), host.shape() + host.ndim());
            const DType t = dtype_of(host.dtype());
            Result<std::shared_ptr<DeviceBuffer>> b = [&] {
              shardload::python::GilReleased release;
              return d.copy(host.data(), static_cast<std::size_t>(host.nbytes()));
            }();
            if (!b) throw_status(b.status(), ErrorSite::kRead);
            return DeviceBatch{std::move(b).value(), t, std::move(shape)};
          },
          py::arg("host"));
}
