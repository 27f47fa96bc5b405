// Device batches of the training feed: see shardload/device_batch.hpp.
#include "shardload/device_batch.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <new>
#include <string>

#include "shardload/cuda_backend.hpp"
#include "shardload/plan.hpp"

namespace shardload {

namespace {

Status cuda_call(const char* call, cudaError_t e) {
  if (e == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();  // not left for the next call to find
  return {ErrorCode::kIo,
          std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

// The caller's device made `device` for one call, and put back after it.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    // (void): nvcc's front end reads the assignment's Status& as a discarded [[nodiscard]].
    (void)(status_ = cuda_call("cudaGetDevice", cudaGetDevice(&previous_)));
    if (!status_.is_ok() || previous_ == device) return;
    (void)(status_ = cuda_call("cudaSetDevice", cudaSetDevice(device)));
    restore_ = status_.is_ok();
  }
  ~OnDevice() {
    if (restore_ && cudaSetDevice(previous_) != cudaSuccess) {
      std::fprintf(stderr, "shardload: device batches: cudaSetDevice (restoring %d) failed\n",
                   previous_);
    }
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  [[nodiscard]] const Status& status() const { return status_; }

 private:
  int previous_ = 0;
  bool restore_ = false;
  Status status_;
};

// What a batch's DLManagedTensor owns: the buffer and the shape the tensor points into.
struct DlpackContext {
  dlpack::ManagedTensor tensor{};
  std::shared_ptr<DeviceBuffer> buffer;
  std::vector<std::int64_t> shape;
};

void delete_dlpack(dlpack::ManagedTensor* self) {
  delete static_cast<DlpackContext*>(self->manager_ctx);
}

}  // namespace

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  OnDevice on(device_);
  // A batch freed after the runtime unloaded (a tensor alive at the process's exit) has no
  // memory left to free: not a failure worth a line.
  if (const cudaError_t e = cudaFree(data_); e != cudaSuccess && e != cudaErrorCudartUnloading) {
    std::fprintf(stderr, "shardload: device batches: cudaFree: %s\n", cudaGetErrorName(e));
  }
}

Result<std::shared_ptr<DeviceBuffer>> DeviceBuffer::allocate(int device, std::size_t bytes) {
  OnDevice on(device);
  SHARDLOAD_RETURN_IF_ERROR(on.status());
  void* p = nullptr;
  if (bytes > 0) {
    if (const cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
      return cuda_call(("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str(), e);
    }
  }
  std::shared_ptr<DeviceBuffer> b(new (std::nothrow) DeviceBuffer(p, bytes, device));
  if (!b) {
    (void)cudaFree(p);
    return Status(ErrorCode::kNoMemory, "device batches: out of host memory");
  }
  return b;
}

Result<std::unique_ptr<DeviceBatches>> DeviceBatches::create(int device) {
  SHARDLOAD_RETURN_IF_ERROR(cuda_device_available());
  CudaBackendOptions o;
  o.device = device;
  SHARDLOAD_ASSIGN_OR_RETURN(std::unique_ptr<CudaCopyBackend> backend, CudaCopyBackend::create(o));
  std::unique_ptr<DeviceBatches> d(new (std::nothrow) DeviceBatches());
  if (!d) return Status(ErrorCode::kNoMemory, "device batches: out of host memory");
  const int dev = backend->device();
  d->backend_ = std::move(backend);
  // A feed's batches are megabytes: 4 staging buffers of 8 MiB (32 MiB page-locked) instead of
  // the load's 128 MiB; their readers run on the process's work pool (fill_rows).
  StagingOptions staging;
  staging.buffers = 4;
  SHARDLOAD_RETURN_IF_ERROR(staging_options_from_env(&staging));
  SHARDLOAD_ASSIGN_OR_RETURN(d->pool_, StagingPool::create(*d->backend_, staging));
  OnDevice on(dev);
  SHARDLOAD_RETURN_IF_ERROR(on.status());
  cudaStream_t s = nullptr;
  SHARDLOAD_RETURN_IF_ERROR(
      cuda_call("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)));
  d->stream_ = s;
  return Result<std::unique_ptr<DeviceBatches>>(std::move(d));
}

DeviceBatches::~DeviceBatches() {
  if (stream_ == nullptr) return;
  OnDevice on(device());
  (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

int DeviceBatches::device() const {
  return static_cast<const CudaCopyBackend&>(*backend_).device();
}

Result<std::shared_ptr<DeviceBuffer>> DeviceBatches::fill_rows(
    const Layout& layout, std::span<const std::pair<std::int64_t, std::int64_t>> ranges) {
  std::vector<Piece> pieces;
  std::vector<Piece> part;
  std::int64_t rows = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo < 0 || hi < lo || hi > layout.total_rows()) {
      return Status(ErrorCode::kInvalidArgument,
                    "device batch: rows [" + std::to_string(lo) + ", " + std::to_string(hi) +
                        ") outside the layout's " + std::to_string(layout.total_rows()));
    }
    part.clear();
    pieces_for_rows(layout.offsets, lo, hi, &part);
    for (Piece p : part) {
      p.dst_row += rows;
      pieces.push_back(p);
    }
    rows += hi - lo;
  }
  const std::size_t bytes = static_cast<std::size_t>(rows) * layout.row_bytes;
  SHARDLOAD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> buffer,
                             DeviceBuffer::allocate(device(), bytes));
  if (bytes == 0) return buffer;
  OnDevice on(device());
  SHARDLOAD_RETURN_IF_ERROR(on.status());
  DeviceFillOptions o;
  o.reader_threads = 4;  // one per staging buffer, on the process's work pool
  SHARDLOAD_RETURN_IF_ERROR(fill_device(layout, pieces, buffer->data(), bytes, stream_, *pool_, o));
  return buffer;
}

Result<std::shared_ptr<DeviceBuffer>> DeviceBatches::copy(const void* host, std::size_t bytes) {
  SHARDLOAD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> buffer,
                             DeviceBuffer::allocate(device(), bytes));
  if (bytes == 0) return buffer;
  OnDevice on(device());
  SHARDLOAD_RETURN_IF_ERROR(on.status());
  auto* s = static_cast<cudaStream_t>(stream_);
  SHARDLOAD_RETURN_IF_ERROR(cuda_call(
      "cudaMemcpyAsync", cudaMemcpyAsync(buffer->data(), host, bytes, cudaMemcpyHostToDevice, s)));
  SHARDLOAD_RETURN_IF_ERROR(cuda_call("cudaStreamSynchronize", cudaStreamSynchronize(s)));
  return buffer;
}

Status copy_to_host(const DeviceBuffer& buffer, void* host) {
  if (buffer.bytes() == 0) return Status::ok();
  OnDevice on(buffer.device());
  SHARDLOAD_RETURN_IF_ERROR(on.status());
  return cuda_call("cudaMemcpy",
                   cudaMemcpy(host, buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost));
}

Result<int> device_of_pointer(const void* p) {
  cudaPointerAttributes a{};
  SHARDLOAD_RETURN_IF_ERROR(cuda_call("cudaPointerGetAttributes", cudaPointerGetAttributes(&a, p)));
  switch (a.type) {
    case cudaMemoryTypeDevice:
      return a.device;
    case cudaMemoryTypeHost:
      return Status(ErrorCode::kInvalidArgument, "page-locked host memory, not device memory");
    case cudaMemoryTypeManaged:
      return Status(ErrorCode::kInvalidArgument, "managed memory, not device memory");
    default:
      return Status(ErrorCode::kInvalidArgument,
                    "memory the CUDA runtime does not know (pageable host memory)");
  }
}

Result<dlpack::ManagedTensor*> to_dlpack(std::shared_ptr<DeviceBuffer> buffer, const DType& dtype,
                                         std::vector<std::int64_t> shape) {
  dlpack::DataType t{0, static_cast<std::uint8_t>(8 * dtype.size), 1};
  switch (dtype.kind) {
    case DTypeKind::kBool:
      t.code = dlpack::kBool;
      break;
    case DTypeKind::kInt:
      t.code = dlpack::kInt;
      break;
    case DTypeKind::kUInt:
      t.code = dlpack::kUInt;
      break;
    case DTypeKind::kFloat:
      t.code = dlpack::kFloat;
      break;
    case DTypeKind::kComplex:
      t.code = dlpack::kComplex;
      break;
  }
  if (dtype.size > 16) {
    return Status(ErrorCode::kInvalidArgument, dtype.name() + ": no DLPack type for it");
  }
  std::uint64_t bytes = dtype.size;
  for (const auto d : shape) bytes *= static_cast<std::uint64_t>(d < 0 ? 0 : d);
  if (bytes != buffer->bytes()) {
    return Status(ErrorCode::kInvalidArgument,
                  "device batch: " + std::to_string(bytes) + " bytes in the shape, " +
                      std::to_string(buffer->bytes()) + " in the buffer");
  }
  auto* ctx = new (std::nothrow) DlpackContext();
  if (ctx == nullptr) return Status(ErrorCode::kNoMemory, "device batches: out of host memory");
  ctx->buffer = std::move(buffer);
  ctx->shape = std::move(shape);
  dlpack::Tensor& d = ctx->tensor.dl_tensor;
  d.data = ctx->buffer->data();
  d.device = {dlpack::kCUDA, ctx->buffer->device()};
  d.ndim = static_cast<std::int32_t>(ctx->shape.size());
  d.dtype = t;
  d.shape = ctx->shape.data();
  d.strides = nullptr;
  d.byte_offset = 0;
  ctx->tensor.manager_ctx = ctx;
  ctx->tensor.deleter = &delete_dlpack;
  return &ctx->tensor;
}

}  // namespace shardload
