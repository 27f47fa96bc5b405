// The CUDA copy backend of the device fill (built only where CUDA is: the
// shardload_cuda target, SHARDLOAD_WITH_CUDA). This header includes no CUDA
// header, so host-only translation units of a CUDA build can use it; streams
// are passed as void* (a cudaStream_t).
//
//   staging memory  cudaHostAlloc (page-locked, portable), freed with cudaFreeHost
//   copies          cudaMemcpyAsync host-to-device on the caller's stream
//   fences          one cudaEvent per staging buffer (blocking sync, no timing),
//                   so a waiting reader sleeps instead of spinning on a core
//   direct reads    GPUDirect Storage through cuFile, loaded at run time with
//                   dlopen("libcufile.so.0") when asked for, once per process and
//                   never unloaded (cuda/detail/cufile.hpp); absent or failing to
//                   open, the backend simply has no direct reads. A file whose
//                   registration cuFile refuses (a file system it does not serve)
//                   is declined (direct_open gives nullptr) and the fill stages it.
//                   A read whose file offset, size or destination is not 4 KiB
//                   aligned goes through an aligned bounce range in device memory
//                   (one per open file, a staging buffer's size plus 8 KiB), so that
//                   cuFile can still move it peer-to-peer.
//
// Contract: a CudaCopyBackend owns its staging memory and events (freed by the destructor
// after the stream's copies are waited for) and is used by one fill at a time. Errors are
// Status (kIo, naming the CUDA call); "no CUDA device" is one, not a crash. Every CUDA call is
// checked: one that fails makes the operation fail (the device switch included), and one in a
// function that cannot return an error (the frees) is reported on stderr.
#pragma once

#include <memory>
#include <string>

#include "shardload/device_fill.hpp"

namespace shardload {

namespace detail {
struct CuFileApi;
}

struct CudaBackendOptions {
  int device = -1;  // -1: the device current on the creating thread
  // Load cuFile and open its driver (costs tens of milliseconds once).
  bool direct_reads = false;
};

// kIo "no CUDA device (cudaGetDeviceCount: ...)" where no usable GPU is, so
// callers can tell "no GPU here" from a failure on a GPU.
Status cuda_device_available();

class CudaCopyBackend final : public CopyBackend {
 public:
  // One per process and device; thread-safe. Errors name the CUDA call.
  static Result<std::unique_ptr<CudaCopyBackend>> create(const CudaBackendOptions& options = {});
  CudaCopyBackend(const CudaCopyBackend&) = delete;
  CudaCopyBackend& operator=(const CudaCopyBackend&) = delete;
  ~CudaCopyBackend() override;

  [[nodiscard]] const char* name() const override { return "cuda"; }
  [[nodiscard]] int device() const { return device_; }
  // Why direct reads are, or are not, available: "cuFile 1.x driver open",
  // "libcufile.so.0: cannot open shared object file", "not requested", ...
  [[nodiscard]] const std::string& direct_status() const { return direct_status_; }

  Result<void*> alloc_staging(std::size_t bytes) override;
  void free_staging(void* p) noexcept override;
  Result<Fence> create_fence() override;
  void destroy_fence(Fence f) noexcept override;
  Status copy_async(void* dst, const void* src, std::size_t bytes, void* stream) override;
  Status record(Fence f, void* stream) override;
  Status wait(Fence f) override;
  Status synchronize(void* stream) override;

  [[nodiscard]] bool has_direct_reads() const override;
  Result<void*> direct_open(const std::string& path) override;
  void direct_close(void* handle) noexcept override;
  Status direct_read(void* handle, std::uint64_t offset, std::size_t bytes, void* dst) override;

 private:
  explicit CudaCopyBackend(int device);
  int device_ = 0;
  const detail::CuFileApi* cufile_ = nullptr;  // the process's, never unloaded
  std::string direct_status_ = "not requested";
};

}  // namespace shardload
