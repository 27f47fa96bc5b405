// The GPU variant of the load task. A dense C-order tile is filled by the
// device-fill engine (pinned staging pool, reader threads, async copies on
// the task's stream); anything else goes through the same pool, scattered
// by fill_device_strided. Either way the copies are complete before the task
// returns, and staging memory does not grow with the tile size.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

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

// What one GPU's fills share (the copy backend, the pinned staging pool, the fill options:
// SHARDLOAD_STAGING_BYTES / _BUFFERS / SHARDLOAD_READER_THREADS), made on the first load task
// that runs on the GPU and kept by the process's resource owner for the process's life (never
// destroyed: static destructors run after the CUDA runtime may have shut down, and the OS
// reclaims pinned memory). The fills' readers run on the process's work pool.
Result<DeviceResources*> engine_for_current_device() {
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return cuda_error("cudaGetDevice", err);
  }
  return device_resources("cuda:" + std::to_string(device),
                          [device]() -> Result<std::unique_ptr<CopyBackend>> {
                            CudaBackendOptions bo;
                            bo.device = device;
                            SHARDLOAD_ASSIGN_OR_RETURN(std::unique_ptr<CudaCopyBackend> backend,
                                                       CudaCopyBackend::create(bo));
                            return std::unique_ptr<CopyBackend>(std::move(backend));
                          });
}

Status fill_device_tile(const Tile& t, cudaStream_t stream) {
  if (t.ptr == nullptr) return Status::ok();
  SHARDLOAD_ASSIGN_OR_RETURN(DeviceResources * engine, engine_for_current_device());
  if (!t.dense) {
    // Through the same pinned pool: no per-task pinned allocation (a device-wide stall), reads
    // overlapping the copies, nothing left allocated or in flight on an error.
    return fill_device_strided(t.layout, 0, t.hi - t.lo, t.extents, t.strides, t.ptr, stream,
                               *engine->pool, engine->options);
  }
  const std::uint64_t bytes = static_cast<std::uint64_t>(t.hi - t.lo) * t.layout.row_bytes;
  return fill_device(t.layout, t.pieces, t.ptr, bytes, stream, *engine->pool, engine->options);
}

}  // namespace

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
