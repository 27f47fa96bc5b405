#include <cuda_runtime.h>

#include <cstdio>
#include <new>
#include <string>

#include "cuda/detail/cufile.hpp"
#include "shardload/cuda_backend.hpp"

namespace shardload {

namespace {

std::string cuda_error(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
}

Status cuda_status(const char* call, cudaError_t e) {
  if (e == cudaSuccess) return Status::ok();
  return {ErrorCode::kIo, cuda_error(call, e)};
}

// Reports a failure that a function without a way to return it (a free, a destructor) met.
void report(const char* call, cudaError_t e) noexcept {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "shardload: cuda backend: %s: %s: %s\n", call, cudaGetErrorName(e),
               cudaGetErrorString(e));
}

// Makes `device` current on this thread for one call and restores the
// caller's device: reader threads start on device 0, and a Legate task
// thread must find its own device unchanged. A failed switch is the call's
// error (status()): work issued on the wrong device would fail later, or
// worse, not at all.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaError_t e = cudaGetDevice(&previous_);
    if (e != cudaSuccess) {
      // (void): nvcc's front end reads the assignment's Status& as a discarded [[nodiscard]].
      (void)(status_ = cuda_status("cudaGetDevice", e));
      return;
    }
    if (previous_ == device) return;
    e = cudaSetDevice(device);
    if (e != cudaSuccess) {
      (void)(status_ = cuda_status(("cudaSetDevice(" + std::to_string(device) + ")").c_str(), e));
      return;
    }
    restore_ = true;
  }
  ~DeviceScope() {
    if (restore_) report("cudaSetDevice (restoring the caller's device)", cudaSetDevice(previous_));
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  [[nodiscard]] const Status& status() const { return status_; }

 private:
  int previous_ = 0;
  bool restore_ = false;
  Status status_;
};

// An open file for direct reads, and what its unaligned reads bounce through.
struct DirectHandle {
  detail::CuFileHandle* file = nullptr;
  void* bounce = nullptr;  // device memory (cudaMalloc's is aligned far beyond 4 KiB)
  std::size_t bounce_bytes = 0;
  cudaStream_t stream = nullptr;  // the bounce's device-to-device copies
};

}  // namespace

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
    SHARDLOAD_RETURN_IF_ERROR(scope.status());
    SHARDLOAD_RETURN_IF_ERROR(cuda_status("cudaFree(nullptr)", cudaFree(nullptr)));
  }
  if (options.direct_reads) {
    auto api = detail::load_cufile();
    if (api) {
      b->cufile_ = *api;
      b->direct_status_ = "cuFile driver open (" + (*api)->library + ")";
    } else {
      b->direct_status_ = api.status().message();  // not an error: the pinned path serves
    }
  }
  // Spelled out: nvcc's front end does not apply C++20's implicit move here.
  return Result<std::unique_ptr<CudaCopyBackend>>(std::move(b));
}

CudaCopyBackend::CudaCopyBackend(int device) : device_(device) {}

CudaCopyBackend::~CudaCopyBackend() = default;

Result<void*> CudaCopyBackend::alloc_staging(std::size_t bytes) {
  DeviceScope scope(device_);
  SHARDLOAD_RETURN_IF_ERROR(scope.status());
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    return Status(ErrorCode::kIo,
                  cuda_error(("cudaHostAlloc(" + std::to_string(bytes) + " bytes)").c_str(), e));
  }
  return p;
}

void CudaCopyBackend::free_staging(void* p) noexcept {
  // Portable pinned memory is freed from any device.
  report("cudaFreeHost", cudaFreeHost(p));
}

Result<CopyBackend::Fence> CudaCopyBackend::create_fence() {
  DeviceScope scope(device_);
  SHARDLOAD_RETURN_IF_ERROR(scope.status());
  cudaEvent_t e = nullptr;
  SHARDLOAD_RETURN_IF_ERROR(
      cuda_status("cudaEventCreateWithFlags",
                  cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync)));
  return static_cast<Fence>(e);
}

void CudaCopyBackend::destroy_fence(Fence f) noexcept {
  DeviceScope scope(device_);
  if (!scope.status()) {
    std::fprintf(stderr, "shardload: cuda backend: destroying an event: %s\n",
                 scope.status().message().c_str());
    return;
  }
  report("cudaEventDestroy", cudaEventDestroy(static_cast<cudaEvent_t>(f)));
}

Status CudaCopyBackend::copy_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  DeviceScope scope(device_);
  SHARDLOAD_RETURN_IF_ERROR(scope.status());
  return cuda_status("cudaMemcpyAsync", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                                        static_cast<cudaStream_t>(stream)));
}

Status CudaCopyBackend::record(Fence f, void* stream) {
  DeviceScope scope(device_);
  SHARDLOAD_RETURN_IF_ERROR(scope.status());
  return cuda_status("cudaEventRecord", cudaEventRecord(static_cast<cudaEvent_t>(f),
                                                        static_cast<cudaStream_t>(stream)));
}

Status CudaCopyBackend::wait(Fence f) {
  DeviceScope scope(device_);
  SHARDLOAD_RETURN_IF_ERROR(scope.status());
  return cuda_status("cudaEventSynchronize", cudaEventSynchronize(static_cast<cudaEvent_t>(f)));
}

Status CudaCopyBackend::synchronize(void* stream) {
  DeviceScope scope(device_);
  SHARDLOAD_RETURN_IF_ERROR(scope.status());
  return cuda_status("cudaStreamSynchronize",
                     cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

bool CudaCopyBackend::has_direct_reads() const { return cufile_ != nullptr; }

Result<void*> CudaCopyBackend::direct_open(const std::string& path) {
  if (cufile_ == nullptr) return CopyBackend::direct_open(path);
  DeviceScope scope(device_);
  SHARDLOAD_RETURN_IF_ERROR(scope.status());
  auto h = std::unique_ptr<DirectHandle>(new (std::nothrow) DirectHandle());
  if (!h) return Status(ErrorCode::kIo, "cuda backend: out of memory");
  SHARDLOAD_ASSIGN_OR_RETURN(h->file, detail::cufile_open(*cufile_, path));
  if (h->file == nullptr) return static_cast<void*>(nullptr);  // refused: staged instead
  const cudaError_t e = cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    detail::cufile_close(*cufile_, h->file);
    return Status(ErrorCode::kIo, path + ": " + cuda_error("cudaStreamCreateWithFlags", e));
  }
  return static_cast<void*>(h.release());
}

void CudaCopyBackend::direct_close(void* handle) noexcept {
  auto* h = static_cast<DirectHandle*>(handle);
  if (h == nullptr) return;
  if (cufile_ != nullptr) detail::cufile_close(*cufile_, h->file);
  DeviceScope scope(device_);
  if (scope.status()) {
    if (h->bounce != nullptr) report("cudaFree (direct-read bounce)", cudaFree(h->bounce));
    if (h->stream != nullptr) report("cudaStreamDestroy", cudaStreamDestroy(h->stream));
  } else {
    std::fprintf(stderr, "shardload: cuda backend: closing a direct-read file: %s\n",
                 scope.status().message().c_str());
  }
  delete h;
}

Status CudaCopyBackend::direct_read(void* handle, std::uint64_t offset, std::size_t bytes,
                                    void* dst) {
  if (cufile_ == nullptr) return CopyBackend::direct_read(handle, offset, bytes, dst);
  auto* h = static_cast<DirectHandle*>(handle);
  DeviceScope scope(device_);
  SHARDLOAD_RETURN_IF_ERROR(scope.status());
  if (detail::is_aligned(offset, bytes, dst)) {
    return detail::cufile_read(*cufile_, *h->file, offset, bytes, dst);
  }
  // Read the aligned range that covers the bytes into the bounce buffer, peer-to-peer, then
  // move the bytes into place on the device.
  const detail::AlignedRange r = detail::aligned_range(offset, bytes);
  if (h->bounce_bytes < r.bytes) {
    if (h->bounce != nullptr) {
      SHARDLOAD_RETURN_IF_ERROR(cuda_status("cudaFree (direct-read bounce)", cudaFree(h->bounce)));
    }
    h->bounce = nullptr;
    h->bounce_bytes = 0;
    SHARDLOAD_RETURN_IF_ERROR(cuda_status(
        ("cudaMalloc(" + std::to_string(r.bytes) + " bytes, direct-read bounce)").c_str(),
        cudaMalloc(&h->bounce, r.bytes)));
    h->bounce_bytes = r.bytes;
  }
  SHARDLOAD_RETURN_IF_ERROR(
      detail::cufile_read(*cufile_, *h->file, r.offset, r.bytes, r.skip + bytes, h->bounce));
  SHARDLOAD_RETURN_IF_ERROR(
      cuda_status("cudaMemcpyAsync (direct-read bounce to its place)",
                  cudaMemcpyAsync(dst, static_cast<std::byte*>(h->bounce) + r.skip, bytes,
                                  cudaMemcpyDeviceToDevice, h->stream)));
  // Synchronous, as a direct read is: the bounce is reused by the next read.
  return cuda_status("cudaStreamSynchronize (direct-read bounce)",
                     cudaStreamSynchronize(h->stream));
}

}  // namespace shardload
