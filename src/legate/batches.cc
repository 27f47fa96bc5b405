// Batches: one launch of the reporting load task per batch, submitted without waiting (a task
// that may throw makes Legate wait at submission), its failures read back from the error
// records when the batch is handed out.
#include "shardload/batches.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "legate/detail/launch.hpp"
#include "legate/detail/tasks.hpp"
#include "shardload/codec.hpp"
#include "shardload/legate.hpp"
#include "shardload/plan.hpp"

namespace shardload {

namespace {

template <typename T>
T value_or_throw(Result<T> r, const std::string& context, ErrorSite site) {
  if (!r) throw_status(r.status().with_context(context), site);
  return std::move(r).value();
}

std::string rows_text(std::int64_t lo, std::int64_t hi) {
  return "rows [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

// A record holds a message that names a path (or a file inside it, a Zarr chunk) and what was
// expected and found: room for the longest path twice and the rest.
std::uint64_t record_bytes_for(const Layout& layout) {
  std::size_t longest = 0;
  for (const auto& s : layout.shards) longest = std::max(longest, s.path.size());
  // The error's file as data and its message naming it (twice at most), with room to spare.
  const std::uint64_t bytes = detail::kRecordHeader + 2048 + 3 * longest;
  return (bytes + 7) / 8 * 8;
}

}  // namespace

Batches::Batches(Layout layout, const BatchOptions& options)
    : layout_(std::move(layout)), options_(options) {
  if (options_.rows_per_batch < 1) {
    throw ArgumentError("rows_per_batch must be at least 1, found " +
                        std::to_string(options_.rows_per_batch));
  }
  if (options_.prefetch < 0) {
    throw ArgumentError("prefetch must be at least 0, found " + std::to_string(options_.prefetch));
  }
  if (options_.overdecompose < 1) {
    throw ArgumentError("overdecompose (K) must be at least 1, found " +
                        std::to_string(options_.overdecompose));
  }
  check_legate_dims(layout_);
  const std::int64_t total = layout_.total_rows();
  count_ = total / options_.rows_per_batch + (total % options_.rows_per_batch != 0 ? 1 : 0);
  const detail::Target target = detail::choose_target();
  target_ = target.kind;
  processors_ = target.processors;
  if (count_ == 0) return;
  // The first batch is the largest; prefetch + 1 of them live at once (no more than there are).
  const Layout first =
      value_or_throw(slice_rows(layout_, 0, std::min(total, options_.rows_per_batch)), "batch 0",
                     ErrorSite::kDiscover);
  const ReadPlan plan = value_or_throw(plan_layout(first, processors_, options_.overdecompose),
                                       "planning", ErrorSite::kDiscover);
  const auto copies =
      static_cast<std::uint64_t>(std::min<std::int64_t>(options_.prefetch, count_ - 1) + 1);
  detail::check_memory(first, plan, target_, processors_, copies);
}

void Batches::launch_next() {
  auto* runtime = legate::Runtime::get_runtime();
  const std::int64_t index = launched_++;
  const std::int64_t lo = index * options_.rows_per_batch;
  const std::int64_t hi = std::min(layout_.total_rows(), lo + options_.rows_per_batch);
  const std::string what = "batch " + std::to_string(index) + " (" + rows_text(lo, hi) + ")";
  const Layout slice = value_or_throw(slice_rows(layout_, lo, hi), what, ErrorSite::kDiscover);
  const ReadPlan plan = value_or_throw(plan_layout(slice, processors_, options_.overdecompose),
                                       what + ": planning", ErrorSite::kDiscover);
  std::vector<std::uint64_t> extents;
  for (const auto d : slice.shape()) extents.push_back(static_cast<std::uint64_t>(d));
  Launched l{
      Batch{index, lo, hi, runtime->create_array(legate::Shape{extents}, legate_type(slice.dtype))},
      std::nullopt, 0};
  if (plan.tiles == 0 || slice.row_bytes == 0) {  // nothing to read
    pending_.push_back(std::move(l));
    return;
  }
  const detail::Tiling tiling = detail::tile_axis0(extents, plan.tile_rows, plan.tiles);
  // One record per point: the records lie along axis 0 with every other extent 1, so their
  // tiling has the launch's color space whatever the array's dimension.
  l.record_bytes = record_bytes_for(slice);
  std::vector<std::uint64_t> record_extents(extents.size(), 1);
  record_extents[0] = static_cast<std::uint64_t>(plan.tiles) * l.record_bytes;
  std::vector<std::uint64_t> record_tile(extents.size(), 1);
  record_tile[0] = l.record_bytes;
  legate::LogicalStore errors =
      runtime->create_store(legate::Shape{record_extents}, legate::uint8());

  const legate::Library lib = library();
  auto task = detail::tiled_task(lib, detail::LoadReportTask::TASK_CONFIG.task_id(), tiling);
  task.add_output(l.batch.array.data().partition_by_tiling(tiling.tile_shape));
  task.add_output(errors.partition_by_tiling(record_tile));
  const TileEncoding tiles =
      value_or_throw(encode_tiles(slice, plan), what + ": planning", ErrorSite::kDiscover);
  task.add_scalar_arg(legate::Scalar{tiles.bytes});
  task.add_scalar_arg(legate::Scalar{tiles.offsets});
  task.add_scalar_arg(legate::Scalar{plan.tile_rows});
  runtime->submit(std::move(task));  // does not wait: the task cannot throw
  l.errors = std::move(errors);
  pending_.push_back(std::move(l));
}

std::optional<Batch> Batches::next() {
  if (handed_out_ >= count_) return std::nullopt;
  // In flight: launched and not handed out (no sum that a prefetch near INT64_MAX overflows).
  while (launched_ < count_ && launched_ - handed_out_ <= options_.prefetch) launch_next();
  Launched l = std::move(pending_.front());
  pending_.pop_front();
  ++handed_out_;
  if (l.errors) {
    // Mapping the records waits for this batch's launch only.
    Status failure = Status::ok();
    {
      const legate::PhysicalStore records =
          l.errors->get_physical_store(legate::mapping::StoreTarget::SYSMEM);
      const legate::InlineAllocation alloc = records.get_inline_allocation();
      const auto* bytes = static_cast<const std::byte*>(alloc.ptr);
      const auto n = static_cast<std::size_t>(records.domain().get_volume() / l.record_bytes);
      for (std::size_t i = 0; i < n && failure; ++i) {
        failure = detail::decode_record(bytes + i * l.record_bytes, l.record_bytes);
      }
    }
    l.errors.reset();
    if (!failure) {
      // As load() reports it, with the batch's place in the whole dataset in front (the tile's
      // rows count from the batch's first row).
      throw_status(failure.with_context("batch " + std::to_string(l.batch.index) + " (" +
                                        rows_text(l.batch.lo, l.batch.hi) + ")"),
                   ErrorSite::kRead);
    }
  }
  return std::move(l.batch);
}

}  // namespace shardload
