// The GPU variant of the load task: positional reads into pinned staging
// buffers, asynchronous copies on the task's stream, double buffered, and
// complete before the task returns. Staging memory is bounded (two buffers)
// whatever the tile size.
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "load_body.hpp"
#include "shardload/detail/strided.hpp"
#include "shardload/fill.hpp"
#include "tasks.hpp"

namespace shardload::detail {

namespace {

constexpr std::size_t kStagingBytes = std::size_t{16} << 20;
constexpr int kBuffers = 2;

Status cuda_error(const char* call, cudaError_t err) {
  return {ErrorCode::kIo, std::string(call) + " failed: " + cudaGetErrorString(err)};
}

#define SHARDLOAD_CUDA(call)                                 \
  do {                                                       \
    const cudaError_t shardload_err_ = (call);               \
    if (shardload_err_ != cudaSuccess) return cuda_error(#call, shardload_err_); \
  } while (0)

// Owns the staging buffers and events of one fill; frees them on every path.
class Staging {
 public:
  explicit Staging(cudaStream_t stream) : stream_(stream) {}
  ~Staging() {
    // Copies queued before an error may still read the buffers.
    cudaStreamSynchronize(stream_);
    for (int i = 0; i < kBuffers; ++i) {
      if (events[i] != nullptr) cudaEventDestroy(events[i]);
      if (buffers[i] != nullptr) cudaFreeHost(buffers[i]);
    }
  }
  Status init(std::size_t bytes) {
    for (int i = 0; i < kBuffers; ++i) {
      SHARDLOAD_CUDA(cudaHostAlloc(&buffers[i], bytes, cudaHostAllocDefault));
      SHARDLOAD_CUDA(cudaEventCreateWithFlags(&events[i], cudaEventDisableTiming));
    }
    return Status::ok();
  }
  void* buffers[kBuffers] = {};
  cudaEvent_t events[kBuffers] = {};

 private:
  cudaStream_t stream_;
};

Status fill_device_tile(const Tile& t, cudaStream_t stream) {
  if (t.ptr == nullptr) return Status::ok();
  const std::size_t row_bytes = t.layout.row_bytes;
  const std::int64_t rows = t.hi - t.lo;
  const auto chunk_rows = static_cast<std::int64_t>(std::max<std::size_t>(1, kStagingBytes / row_bytes));
  Staging staging(stream);
  SHARDLOAD_RETURN_IF_ERROR(staging.init(static_cast<std::size_t>(chunk_rows) * row_bytes));
  cudaError_t copy_err = cudaSuccess;
  const RunCopy copy = [&](std::byte* dst, const std::byte* src, std::size_t n) {
    copy_err = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream);
    return copy_err == cudaSuccess;
  };
  int k = 0;
  for (std::int64_t a = 0; a < rows; a += chunk_rows, k = (k + 1) % kBuffers) {
    const std::int64_t b = std::min(rows, a + chunk_rows);
    // The buffer's previous copy must have finished before it is refilled.
    SHARDLOAD_CUDA(cudaEventSynchronize(staging.events[k]));
    auto* buf = static_cast<std::byte*>(staging.buffers[k]);
    SHARDLOAD_RETURN_IF_ERROR(fill_rows(t.layout, t.lo + a, t.lo + b, buf));
    if (t.dense) {
      copy(t.ptr + static_cast<std::size_t>(a) * row_bytes, buf,
           static_cast<std::size_t>(b - a) * row_bytes);
    } else {
      scatter_rows(buf, b - a, t.extents, t.strides, t.layout.dtype.size,
                   t.ptr + static_cast<std::size_t>(a) * t.strides[0], copy);
    }
    if (copy_err != cudaSuccess) return cuda_error("cudaMemcpyAsync", copy_err);
    SHARDLOAD_CUDA(cudaEventRecord(staging.events[k], stream));
  }
  SHARDLOAD_CUDA(cudaStreamSynchronize(stream));
  return Status::ok();
}

}  // namespace

void LoadTask::gpu_variant(legate::TaskContext context) {
  const Tile tile = prepare_or_throw(context);
  finish_load(tile, fill_device_tile(tile, context.get_task_stream()));
}

}  // namespace shardload::detail
