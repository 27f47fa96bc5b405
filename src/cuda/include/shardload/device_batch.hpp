// Device batches of the training feed (shardload.feed.Feed(device="cuda")): rows of a layout in
// device memory of their own, handed over by DLPack (kDLCUDA) without a copy.
//
//   rows in order    fill_rows: the engine's device fill (fill_device) of each row range into
//                    the batch, through a staging pool made once, its readers on the
//                    process's work pool
//   shuffled rows    copy: a batch the host gathered (into page-locked memory) to the device
//                    in one cudaMemcpyAsync
//
// Each call returns once its copies have completed on the object's stream, so a batch is ready
// on any stream its consumer uses. This header includes no CUDA header; built only with the
// CUDA backend (SHARDLOAD_WITH_CUDA).
//
// Contract: one DeviceBatches per feed and device, used by one thread at a time. A batch owns
// its device memory (freed when the last holder, a DLPack consumer included, lets it go), and
// may outlive the DeviceBatches that made it. Errors are Status: "no CUDA device (...)" (kIo)
// where there is none, the CUDA call and its error otherwise, the file and rows for a read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "shardload/device_fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/status.hpp"

namespace shardload {

// DLPack's C ABI: the unversioned DLManagedTensor that torch, JAX and CuPy take, as the DLPack
// specification lays it out.
namespace dlpack {
enum DeviceType : std::int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3 };
enum TypeCode : std::uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kComplex = 5, kBool = 6 };
struct Device {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  std::int32_t ndim;
  DataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // nullptr: C order
  std::uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};
}  // namespace dlpack

// Device memory of one batch; freed (cudaFree) with the last holder.
class DeviceBuffer {
 public:
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  [[nodiscard]] int device() const { return device_; }
  // kIo naming the CUDA call where `bytes` cannot be allocated on `device`.
  static Result<std::shared_ptr<DeviceBuffer>> allocate(int device, std::size_t bytes);

 private:
  DeviceBuffer(void* data, std::size_t bytes, int device)
      : data_(data), bytes_(bytes), device_(device) {}
  void* data_;
  std::size_t bytes_;
  int device_;
};

class DeviceBatches {
 public:
  // `device` < 0: the current one. kIo "no CUDA device (...)" where none is.
  static Result<std::unique_ptr<DeviceBatches>> create(int device = -1);
  DeviceBatches(const DeviceBatches&) = delete;
  DeviceBatches& operator=(const DeviceBatches&) = delete;
  ~DeviceBatches();

  [[nodiscard]] int device() const;
  // The rows of each range [lo, hi) of `layout`, one range after the other, in a new buffer
  // (sum of (hi - lo) * row_bytes bytes), by the engine's device fill.
  Result<std::shared_ptr<DeviceBuffer>> fill_rows(
      const Layout& layout, std::span<const std::pair<std::int64_t, std::int64_t>> ranges);
  // `bytes` of host memory in a new buffer: one async copy (from page-locked memory it does
  // not stage), waited for.
  Result<std::shared_ptr<DeviceBuffer>> copy(const void* host, std::size_t bytes);

 private:
  DeviceBatches() = default;
  std::unique_ptr<CopyBackend> backend_;
  std::unique_ptr<StagingPool> pool_;
  void* stream_ = nullptr;
};

// The bytes of `buffer` back in host memory `host` (buffer.bytes() of them): for checks.
Status copy_to_host(const DeviceBuffer& buffer, void* host);

// Whether `p` is device memory: its device's number, or kInvalidArgument saying what it is
// (host memory, managed, unregistered) from cudaPointerGetAttributes.
Result<int> device_of_pointer(const void* p);

// A DLManagedTensor over `buffer` (which it holds until its deleter runs) with `shape` (C
// order) and `dtype`; kInvalidArgument for a dtype DLPack has no code for or a shape whose
// bytes are not the buffer's.
Result<dlpack::ManagedTensor*> to_dlpack(std::shared_ptr<DeviceBuffer> buffer, const DType& dtype,
                                         std::vector<std::int64_t> shape);

}  // namespace shardload
