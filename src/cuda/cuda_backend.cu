#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "shardload/cuda_backend.hpp"
#include "shardload/io.hpp"

namespace shardload {

namespace {

std::string cuda_error(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
}

Status cuda_status(const char* call, cudaError_t e) {
  if (e == cudaSuccess) return Status::ok();
  return {ErrorCode::kIo, cuda_error(call, e)};
}

// Makes `device` current on this thread for one call and restores the
// caller's device: reader threads start on device 0, and a Legate task
// thread must find its own device unchanged.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      if (cudaSetDevice(device) == cudaSuccess) restore_ = true;
    }
  }
  ~DeviceScope() {
    if (restore_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// The part of cufile.h this backend uses, declared here so that the build
// needs neither the header nor the library (the ABI is stable since 1.0).
struct CUfileError_t {
  int err;     // CUfileOpError, CU_FILE_SUCCESS = 0
  int cu_err;  // CUresult
};
struct CUfileDescr_t {
  int type;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
using CUfileHandle_t = void*;

struct DirectHandle {
  int fd = -1;
  CUfileHandle_t handle = nullptr;
  std::string path;
};

}  // namespace

struct CudaCopyBackend::CuFile {
  void* lib = nullptr;
  CUfileError_t (*driver_open)() = nullptr;
  CUfileError_t (*driver_close)() = nullptr;
  CUfileError_t (*handle_register)(CUfileHandle_t*, CUfileDescr_t*) = nullptr;
  void (*handle_deregister)(CUfileHandle_t) = nullptr;
  ssize_t (*read)(CUfileHandle_t, void*, size_t, off_t, off_t) = nullptr;
  bool open = false;

  ~CuFile() {
    if (open && driver_close != nullptr) (void)driver_close();
    if (lib != nullptr) dlclose(lib);
  }

  // Loads the library and opens the driver; the reason why not otherwise.
  Status load() {
    lib = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      return {ErrorCode::kIo, std::string("cuFile: ") + (e != nullptr ? e : "dlopen failed")};
    }
    auto sym = [&](const char* name, auto* fn) {
      *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(dlsym(lib, name));
      return *fn != nullptr;
    };
    // cufile.h maps cuFileDriverClose to the _v2 entry point from CUDA 12.
    const bool have_close =
        sym("cuFileDriverClose_v2", &driver_close) || sym("cuFileDriverClose", &driver_close);
    if (!sym("cuFileDriverOpen", &driver_open) || !have_close ||
        !sym("cuFileHandleRegister", &handle_register) ||
        !sym("cuFileHandleDeregister", &handle_deregister) || !sym("cuFileRead", &read)) {
      return {ErrorCode::kIo, "cuFile: libcufile.so.0 lacks an entry point this build needs"};
    }
    const CUfileError_t e = driver_open();
    if (e.err != 0) {
      return {ErrorCode::kIo, "cuFile: cuFileDriverOpen failed: error " + std::to_string(e.err) +
                                  " (CUDA driver " + std::to_string(e.cu_err) + ")"};
    }
    open = true;
    return Status::ok();
  }
};

Status cuda_device_available() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave the error for the next call to find
    return {ErrorCode::kIo, "no CUDA device (" + cuda_error("cudaGetDeviceCount", e) + ")"};
  }
  if (count == 0) return {ErrorCode::kIo, "no CUDA device (cudaGetDeviceCount: 0 devices)"};
  return Status::ok();
}

Result<std::unique_ptr<CudaCopyBackend>> CudaCopyBackend::create(
    const CudaBackendOptions& options) {
  SHARDLOAD_RETURN_IF_ERROR(cuda_device_available());
  int device = options.device;
  if (device < 0) SHARDLOAD_RETURN_IF_ERROR(cuda_status("cudaGetDevice", cudaGetDevice(&device)));
  int count = 0;
  SHARDLOAD_RETURN_IF_ERROR(cuda_status("cudaGetDeviceCount", cudaGetDeviceCount(&count)));
  if (device >= count) {
    return Status(ErrorCode::kInvalidArgument, "CUDA device " + std::to_string(device) +
                                                   " does not exist (" + std::to_string(count) +
                                                   " devices)");
  }
  std::unique_ptr<CudaCopyBackend> b(new (std::nothrow) CudaCopyBackend(device));
  if (!b) return Status(ErrorCode::kIo, "cuda backend: out of memory");
  {
    // Creates the device's primary context now rather than in the first fill.
    DeviceScope scope(device);
    SHARDLOAD_RETURN_IF_ERROR(cuda_status("cudaFree(nullptr)", cudaFree(nullptr)));
  }
  if (options.direct_reads) {
    auto cufile = std::unique_ptr<CuFile>(new (std::nothrow) CuFile());
    if (!cufile) return Status(ErrorCode::kIo, "cuda backend: out of memory");
    Status s = cufile->load();
    if (s) {
      b->cufile_ = std::move(cufile);
      b->direct_status_ = "cuFile driver open";
    } else {
      b->direct_status_ = s.message();  // not an error: the pinned path serves
    }
  }
  // Spelled out: nvcc's front end does not apply C++20's implicit move here.
  return Result<std::unique_ptr<CudaCopyBackend>>(std::move(b));
}

CudaCopyBackend::CudaCopyBackend(int device) : device_(device) {}

CudaCopyBackend::~CudaCopyBackend() = default;

Result<void*> CudaCopyBackend::alloc_staging(std::size_t bytes) {
  DeviceScope scope(device_);
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    return Status(ErrorCode::kIo,
                  cuda_error(("cudaHostAlloc(" + std::to_string(bytes) + " bytes)").c_str(), e));
  }
  return p;
}

void CudaCopyBackend::free_staging(void* p) noexcept {
  DeviceScope scope(device_);
  (void)cudaFreeHost(p);
}

Result<CopyBackend::Fence> CudaCopyBackend::create_fence() {
  DeviceScope scope(device_);
  cudaEvent_t e = nullptr;
  SHARDLOAD_RETURN_IF_ERROR(
      cuda_status("cudaEventCreateWithFlags",
                  cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync)));
  return static_cast<Fence>(e);
}

void CudaCopyBackend::destroy_fence(Fence f) noexcept {
  DeviceScope scope(device_);
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(f));
}

Status CudaCopyBackend::copy_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  DeviceScope scope(device_);
  return cuda_status("cudaMemcpyAsync", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                                        static_cast<cudaStream_t>(stream)));
}

Status CudaCopyBackend::record(Fence f, void* stream) {
  DeviceScope scope(device_);
  return cuda_status("cudaEventRecord", cudaEventRecord(static_cast<cudaEvent_t>(f),
                                                        static_cast<cudaStream_t>(stream)));
}

Status CudaCopyBackend::wait(Fence f) {
  DeviceScope scope(device_);
  return cuda_status("cudaEventSynchronize", cudaEventSynchronize(static_cast<cudaEvent_t>(f)));
}

Status CudaCopyBackend::synchronize(void* stream) {
  DeviceScope scope(device_);
  return cuda_status("cudaStreamSynchronize",
                     cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

bool CudaCopyBackend::has_direct_reads() const { return cufile_ != nullptr; }

Result<void*> CudaCopyBackend::direct_open(const std::string& path) {
  if (!cufile_) return CopyBackend::direct_open(path);
  auto h = std::unique_ptr<DirectHandle>(new (std::nothrow) DirectHandle());
  if (!h) return Status(ErrorCode::kIo, "cuda backend: out of memory");
  h->path = path;
  // Opened like every other shard: without blocking, regular files only.
  auto open_direct = [&]() -> Result<int> {
    int err = 0;
    auto r = open_regular(path, O_DIRECT, &err);
    if (r || err != EINVAL) return r;
    // No O_DIRECT on this file system (tmpfs): cuFile may still serve it
    // in compatibility mode; its registration says whether it will.
    return open_regular(path);
  };
  auto opened = open_direct();
  if (!opened) return opened.status();
  h->fd = *opened;
  CUfileDescr_t d{};
  d.type = 1;
  d.handle.fd = h->fd;
  DeviceScope scope(device_);
  const CUfileError_t e = cufile_->handle_register(&h->handle, &d);
  if (e.err != 0) {
    ::close(h->fd);
    return Status(ErrorCode::kIo, path + ": cuFileHandleRegister failed: error " +
                                      std::to_string(e.err) + " (CUDA driver " +
                                      std::to_string(e.cu_err) + ")");
  }
  return static_cast<void*>(h.release());
}

void CudaCopyBackend::direct_close(void* handle) noexcept {
  auto* h = static_cast<DirectHandle*>(handle);
  if (h == nullptr) return;
  if (cufile_ && h->handle != nullptr) cufile_->handle_deregister(h->handle);
  if (h->fd >= 0) ::close(h->fd);
  delete h;
}

Status CudaCopyBackend::direct_read(void* handle, std::uint64_t offset, std::size_t bytes,
                                    void* dst) {
  if (!cufile_) return CopyBackend::direct_read(handle, offset, bytes, dst);
  auto* h = static_cast<DirectHandle*>(handle);
  DeviceScope scope(device_);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t got = cufile_->read(h->handle, dst, bytes - done,
                                      static_cast<off_t>(offset + done), static_cast<off_t>(done));
    if (got < 0) {
      const std::string why =
          got == -1 ? std::string(std::strerror(errno)) : "cuFile error " + std::to_string(-got);
      return {ErrorCode::kIo, h->path + ": cuFileRead of " + std::to_string(bytes) +
                                  " bytes at offset " + std::to_string(offset) + " failed after " +
                                  std::to_string(done) + " bytes: " + why};
    }
    if (got == 0) {
      return {ErrorCode::kIo, h->path + ": short read at offset " + std::to_string(offset) +
                                  ": expected " + std::to_string(bytes) + " bytes, got " +
                                  std::to_string(done) + " (file truncated?)"};
    }
    done += static_cast<std::size_t>(got);
  }
  return Status::ok();
}

}  // namespace shardload
