// Batches of consecutive rows of a dataset, each loaded in parallel into its own
// legate::LogicalArray, the next ones read while the caller works on the current one: for
// data larger than the memory Legate has.
//
//   shardload::Batches batches(shardload::discover("data/"), {.rows_per_batch = 1 << 20});
//   while (auto batch = batches.next()) {   // throws ShardReadError for a failed batch
//     use(batch->array);                     // rows [batch->lo, batch->hi)
//   }
//
// Contract: as load() (shardload/legate.hpp): one thread, the one that drives the Legate
// program, and alike on every rank. A Batches holds the batches it has launched and not yet
// handed out (up to prefetch of them beyond the one next() returns); the caller owns what
// next() returns, and keeps memory bounded by dropping a batch before asking for the next.
#pragma once

#include <legate.h>

#include <cstdint>
#include <deque>
#include <optional>

#include "shardload/errors.hpp"
#include "shardload/layout.hpp"

namespace shardload {

struct BatchOptions {
  std::int64_t rows_per_batch = 0;  // >= 1; the last batch may be shorter
  std::int64_t prefetch = 1;        // batches read ahead of the one handed out, >= 0
  std::int64_t overdecompose = 1;   // K of each batch's launch, as LoadOptions
};

struct Batch {
  std::int64_t index = 0;  // 0, 1, ...
  std::int64_t lo = 0;     // the global rows [lo, hi) of the layout it holds
  std::int64_t hi = 0;
  legate::LogicalArray array;  // shape (hi - lo, *trailing_shape); no default: always given
};

class Batches {
 public:
  // Checks the options (ArgumentError) and that prefetch + 1 batches fit the memory Legate
  // has for the processors of the load (OutOfMemoryError), as load() checks a whole dataset.
  // Launches nothing yet. The Legate runtime must be started.
  Batches(Layout layout, const BatchOptions& options);

  // The next batch, or nullopt after the last (an empty dataset has none). Launches the
  // batches up to prefetch past it that are not launched yet, without waiting for them, then
  // waits for this one. A failure found while reading this batch, in any point, is thrown
  // here as load() throws it (ShardReadError naming the file and rows), when this batch
  // would be handed out and not before: the batches before it were handed out whole, and
  // a later call goes on with the batch after it.
  std::optional<Batch> next();

  [[nodiscard]] std::int64_t size() const { return count_; }  // the number of batches
  [[nodiscard]] const Layout& layout() const { return layout_; }
  [[nodiscard]] const BatchOptions& options() const { return options_; }

 private:
  struct Launched {
    Batch batch;
    std::optional<legate::LogicalStore> errors;  // the point tasks' error records, if launched
    std::uint64_t record_bytes = 0;
  };
  void launch_next();

  Layout layout_;
  BatchOptions options_;
  std::int64_t count_ = 0;
  std::int64_t launched_ = 0;
  std::int64_t handed_out_ = 0;
  legate::mapping::TaskTarget target_ = legate::mapping::TaskTarget::CPU;
  std::int64_t processors_ = 0;
  std::deque<Launched> pending_;
};

}  // namespace shardload
