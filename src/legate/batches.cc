// Batches: one launch of the load task per batch, submitted without waiting (the task never
// throws, so Legate does not wait at submission), its failures read back from the error
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
  const TileEncoding tiles =
      value_or_throw(encode_tiles(slice, plan), what + ": planning", ErrorSite::kDiscover);
  detail::LoadLaunch launch = detail::submit_load(library(), l.batch.array, slice, plan, tiles);
  l.errors = std::move(launch.records);
  l.record_bytes = launch.record_bytes;
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
    // Waits for this batch's launch only.
    const Status failure = detail::load_failure(*l.errors, l.record_bytes);
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
