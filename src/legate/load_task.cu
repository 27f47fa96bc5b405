// The GPU variant of the load task. A dense C-order tile is filled by the
// device-fill engine (pinned staging pool, reader threads, async copies on
// the task's stream); anything else goes through a bounded staging buffer
// and a strided copy. Either way the copies are complete before the task
// returns, and staging memory does not grow with the tile size.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/detail/strided.hpp"
#include "legate/detail/load_body.hpp"
#include "legate/detail/tasks.hpp"
#include "shardload/cuda_backend.hpp"
#include "shardload/device_fill.hpp"
#include "shardload/fill.hpp"

namespace shardload::detail {

namespace {

Status cuda_error(const char* call, cudaError_t err) {
  return {ErrorCode::kIo, std::string(call) + " failed: " + cudaGetErrorString(err)};
}

// What one GPU's fills share: the copy backend, the pinned staging pool and
// the reader threads, created on the first load task that runs on the GPU
// (sizes from SHARDLOAD_STAGING_BYTES / _BUFFERS / SHARDLOAD_READER_THREADS).
struct DeviceEngine {
  std::unique_ptr<CudaCopyBackend> backend;
  std::unique_ptr<StagingPool> pool;
  std::unique_ptr<ReaderThreads> readers;
  DeviceFillOptions options;
};

// The engines of this process, one per device. They live until the process
// exits and are deliberately never destroyed: static destructors run after
// the CUDA runtime may have shut down, and the OS reclaims pinned memory.
Result<DeviceEngine*> engine_for_current_device() {
  static std::mutex mu;
  static auto* engines = new std::map<int, std::unique_ptr<DeviceEngine>>();
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return cuda_error("cudaGetDevice", err);
  }
  const std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*engines)[device];
  if (slot) return slot.get();
  auto e = std::make_unique<DeviceEngine>();
  CudaBackendOptions bo;
  bo.device = device;
  SHARDLOAD_ASSIGN_OR_RETURN(e->backend, CudaCopyBackend::create(bo));
  StagingOptions so;
  SHARDLOAD_RETURN_IF_ERROR(staging_options_from_env(&so));
  SHARDLOAD_ASSIGN_OR_RETURN(e->pool, StagingPool::create(*e->backend, so));
  SHARDLOAD_RETURN_IF_ERROR(device_fill_options_from_env(&e->options));
  SHARDLOAD_ASSIGN_OR_RETURN(e->readers, ReaderThreads::create(e->options.reader_threads));
  e->options.readers = e->readers.get();
  slot = std::move(e);
  return slot.get();
}

// A tile whose piece of the store is not dense C-order: whole rows through
// one pinned buffer, scattered with one async copy per contiguous run.
Status fill_strided_device(const Tile& t, cudaStream_t stream) {
  constexpr std::size_t kStagingBytes = std::size_t{16} << 20;
  const std::size_t row_bytes = t.layout.row_bytes;
  const auto chunk_rows =
      static_cast<std::int64_t>(std::max<std::size_t>(1, kStagingBytes / row_bytes));
  void* staging = nullptr;
  if (const cudaError_t err = cudaHostAlloc(&staging, chunk_rows * row_bytes, cudaHostAllocDefault);
      err != cudaSuccess) {
    return cuda_error("cudaHostAlloc", err);
  }
  cudaError_t copy_err = cudaSuccess;
  const RunCopy copy = [&](std::byte* dst, const std::byte* src, std::size_t n) {
    copy_err = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream);
    return copy_err == cudaSuccess;
  };
  auto* buf = static_cast<std::byte*>(staging);
  const auto run = [&]() -> Status {
    for (std::int64_t a = 0; a < t.hi - t.lo; a += chunk_rows) {
      const std::int64_t b = std::min(t.hi - t.lo, a + chunk_rows);
      // The buffer is refilled only once its previous copies have finished.
      if (const cudaError_t err = cudaStreamSynchronize(stream); err != cudaSuccess) {
        return cuda_error("cudaStreamSynchronize", err);
      }
      SHARDLOAD_RETURN_IF_ERROR(fill_rows(t.layout, t.lo + a, t.lo + b, buf));
      if (!scatter_rows(buf, b - a, t.extents, t.strides, t.layout.dtype.size,
                        t.ptr + static_cast<std::size_t>(a) * t.strides[0], copy)) {
        return cuda_error("cudaMemcpyAsync", copy_err);
      }
    }
    return Status::ok();
  };
  const Status st = run();
  // Copies queued before an error may still read the buffer.
  const cudaError_t sync = cudaStreamSynchronize(stream);
  cudaFreeHost(staging);
  if (!st) return st;
  if (sync != cudaSuccess) return cuda_error("cudaStreamSynchronize", sync);
  return Status::ok();
}

Status fill_device_tile(const Tile& t, cudaStream_t stream) {
  if (t.ptr == nullptr) return Status::ok();
  if (!t.dense) return fill_strided_device(t, stream);
  SHARDLOAD_ASSIGN_OR_RETURN(DeviceEngine * engine, engine_for_current_device());
  const std::uint64_t bytes = static_cast<std::uint64_t>(t.hi - t.lo) * t.layout.row_bytes;
  return fill_device(t.layout, t.pieces, t.ptr, bytes, stream, *engine->pool, engine->options);
}

}  // namespace

void LoadTask::gpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const Tile tile = prepare_or_throw(context);
    finish_load(tile, fill_device_tile(tile, context.get_task_stream()));
  });
}

void LoadReportTask::gpu_variant(legate::TaskContext context) {
  const cudaStream_t stream = context.get_task_stream();
  const Status st =
      run_report_body(context, [&](const Tile& tile) { return fill_device_tile(tile, stream); });
  const RecordPiece record = record_piece(context);
  if (record.ptr == nullptr) {
    std::fprintf(stderr, "shardload: load task: its error record is not one dense piece\n");
    std::abort();
  }
  // The record lives where the mapper put the task's outputs (the framebuffer, as a rule; a
  // copy of kind Default serves any memory), written from the host and finished before the task
  // returns. A record left unwritten could read as success over unfilled data, and nothing may
  // leave this task, so a failure here ends the process with its reason.
  const char* failed = nullptr;
  try {
    std::vector<std::byte> host(record.size);
    encode_record(st, host.data(), host.size());
    cudaError_t err =
        cudaMemcpyAsync(record.ptr, host.data(), host.size(), cudaMemcpyDefault, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) failed = cudaGetErrorString(err);
  } catch (...) {
    failed = "out of memory";
  }
  if (failed != nullptr) {
    std::fprintf(stderr, "shardload: load task: cannot write its error record: %s\n", failed);
    std::abort();
  }
}

}  // namespace shardload::detail
