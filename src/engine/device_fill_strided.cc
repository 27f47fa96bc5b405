// The device fill of a destination that is not dense C-order: rows filled on the host into the
// staging pool's buffers, then scattered to the destination's strides with async copies.
#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/detail/device_fill.hpp"
#include "engine/detail/strided.hpp"
#include "shardload/device_fill.hpp"
#include "shardload/fill.hpp"
#include "shardload/shard_source.hpp"

namespace shardload {

namespace {

using detail::rows_string;

// The staging buffers of one strided fill: each buffer's fence is waited for before the buffer
// is refilled, and every copy before the pool (or a one-off buffer) is handed back, whichever
// way the fill ends.
class StridedStaging {
 public:
  StridedStaging(StagingPool& pool, void* stream) : pool_(pool), stream_(stream) {}
  StridedStaging(const StridedStaging&) = delete;
  StridedStaging& operator=(const StridedStaging&) = delete;
  ~StridedStaging() { (void)finish(); }

  // A buffer of at least `bytes` whose earlier copies have completed.
  Result<StagingPool::Slot*> next(std::size_t bytes) {
    CopyBackend& b = pool_.backend();
    StagingPool::Slot* slot = nullptr;
    if (bytes > pool_.buffer_bytes()) {
      if (!big_) {
        SHARDLOAD_ASSIGN_OR_RETURN(void* mem, b.alloc_staging(bytes));
        big_ = std::make_unique<StagingPool::Slot>();
        big_->data = static_cast<std::byte*>(mem);
        auto fence = b.create_fence();
        if (!fence) return fence.status();
        big_->fence = *fence;
      }
      slot = big_.get();
    } else {
      slot = &pool_.slots()[turn_++ % pool_.slots().size()];
    }
    if (slot->pending) {
      SHARDLOAD_RETURN_IF_ERROR(
          b.wait(slot->fence).with_context("waiting for an earlier copy from staging buffer"));
      slot->pending = false;
    }
    return slot;
  }

  // Every copy done; the first error met doing so. Leaves nothing in flight even then.
  Status finish() noexcept {
    CopyBackend& b = pool_.backend();
    Status end;
    bool stuck = false;
    auto drain = [&](StagingPool::Slot& s) {
      if (!s.pending) return;
      Status w = b.wait(s.fence);
      if (w) {
        s.pending = false;
      } else {
        stuck = true;
        if (end) end = w.with_context("device fill: waiting for the last copies");
      }
    };
    for (auto& s : pool_.slots()) drain(s);
    if (big_) drain(*big_);
    if (stuck || unfenced_) {
      // A copy may have been queued without its fence; the stream covers it.
      Status sync = b.synchronize(stream_);
      if (sync) {
        for (auto& s : pool_.slots()) s.pending = false;
        if (big_) big_->pending = false;
      } else if (end) {
        end = sync.with_context("device fill: synchronizing after an error");
      }
      unfenced_ = false;
    }
    if (big_ && !big_->pending) {
      b.destroy_fence(big_->fence);
      b.free_staging(big_->data);
      big_.reset();
    }
    return end;
  }

  void set_unfenced() { unfenced_ = true; }
  void set_unfenced_done() { unfenced_ = false; }

 private:
  StagingPool& pool_;
  void* stream_;
  std::unique_ptr<StagingPool::Slot> big_;  // a row larger than the pool's buffers
  std::size_t turn_ = 0;
  bool unfenced_ = false;  // a copy was enqueued after the last fence of its buffer
};

Status strided_fill(const Layout& layout, std::int64_t lo, std::int64_t hi,
                    std::span<const std::int64_t> extents, std::span<const std::size_t> strides,
                    std::byte* dst, void* stream, StagingPool& pool,
                    const DeviceFillOptions& options) {
  const std::size_t row = layout.row_bytes;
  if (extents.empty() || extents.size() != strides.size() || extents[0] != hi - lo || lo < 0 ||
      hi < lo || hi > layout.total_rows()) {
    return {ErrorCode::kInvalidArgument,
            "device fill (strided): rows " + rows_string(lo, hi) + " of " +
                std::to_string(layout.total_rows()) + " do not match the destination's " +
                std::to_string(extents.empty() ? 0 : extents[0]) + " rows in " +
                std::to_string(extents.size()) + " dimensions (" + std::to_string(strides.size()) +
                " strides)"};
  }
  if (hi == lo || row == 0) return Status::ok();
  if (dst == nullptr)
    return {ErrorCode::kInvalidArgument, "device fill (strided): null destination"};
  CopyBackend& backend = pool.backend();
  std::unique_lock pool_lock(pool.in_use());
  FillOptions fo;
  if (options.io != nullptr) fo.source = ShardSource::over(*options.io);
  fo.scratch_bytes = options.scratch_bytes;
  fo.check_snapshot = options.check_snapshot;
  fo.unit_cache_bytes = options.unit_cache_bytes;
  fo.stats = options.stats;
  SHARDLOAD_ASSIGN_OR_RETURN(auto filler, RowFiller::create(layout, fo));
  const auto rows_per_buffer =
      static_cast<std::int64_t>(std::max<std::size_t>(1, pool.buffer_bytes() / row));
  StridedStaging staging(pool, stream);
  Status copy_error;
  for (std::int64_t a = lo; a < hi; a += rows_per_buffer) {
    const std::int64_t b = std::min(hi, a + rows_per_buffer);
    const std::size_t bytes = static_cast<std::size_t>(b - a) * row;
    SHARDLOAD_ASSIGN_OR_RETURN(StagingPool::Slot * slot, staging.next(bytes));
    SHARDLOAD_RETURN_IF_ERROR(filler->fill(a, b, slot->data));  // bools normalised there
    // Pending from the first enqueue on: a failed one may have queued part of the work.
    slot->pending = true;
    staging.set_unfenced();
    const detail::RunCopy copy = [&](std::byte* to, const std::byte* from, std::size_t n) {
      copy_error = backend.copy_async(to, from, n, stream);
      return copy_error.is_ok();
    };
    std::vector<std::int64_t> chunk_extents(extents.begin(), extents.end());
    chunk_extents[0] = b - a;
    if (!detail::scatter_rows(slot->data, b - a, chunk_extents, strides, layout.dtype.size,
                              dst + static_cast<std::size_t>(a - lo) * strides[0], copy)) {
      return copy_error.with_context("device fill (strided): rows " + rows_string(a, b) +
                                     ": copying to the device");
    }
    SHARDLOAD_RETURN_IF_ERROR(backend.record(slot->fence, stream)
                                  .with_context("device fill (strided): rows " + rows_string(a, b) +
                                                ": after the copies"));
    staging.set_unfenced_done();
  }
  return staging.finish();
}

}  // namespace

Status fill_device_strided(const Layout& layout, std::int64_t lo, std::int64_t hi,
                           std::span<const std::int64_t> extents,
                           std::span<const std::size_t> strides, void* device_dst, void* stream,
                           StagingPool& pool, const DeviceFillOptions& options) {
  try {
    return strided_fill(layout, lo, hi, extents, strides, static_cast<std::byte*>(device_dst),
                        stream, pool, options);
  } catch (const std::exception& e) {
    // The staging guard has waited for every copy while unwinding.
    return {ErrorCode::kIo, std::string("device fill (strided): ") + e.what()};
  }
}

}  // namespace shardload
