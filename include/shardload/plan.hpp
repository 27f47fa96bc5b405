// The read plan: a pure function from (rows per shard, processors P,
// over-decomposition K) to tiles along axis 0 and, per tile, the pieces of
// shards that fill it. No I/O and no runtime.
//
//   tile_rows = max(1, ceil(total / (K * P)))
//   tiles     = ceil(total / tile_rows)
//
// Tiles may span shards; the last tile may be short; zero-row shards
// contribute no pieces. The launch domain of a load equals `tiles`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "shardload/status.hpp"

namespace shardload {

struct Piece {
  std::int64_t shard = 0;
  std::int64_t lo = 0;       // first row within the shard
  std::int64_t hi = 0;       // one past the last row within the shard
  std::int64_t dst_row = 0;  // first row within the tile
  friend bool operator==(const Piece&, const Piece&) = default;
};

struct ReadPlan {
  std::int64_t total_rows = 0;
  std::int64_t processors = 1;
  std::int64_t overdecompose = 1;
  std::int64_t tile_rows = 1;
  std::int64_t tiles = 0;
  // Every shard has tile_rows rows and there is one shard per tile, so tile
  // t is exactly shard t and no search is needed.
  bool uniform = false;

  [[nodiscard]] std::int64_t tile_begin(std::int64_t t) const { return t * tile_rows; }
  [[nodiscard]] std::int64_t tile_end(std::int64_t t) const {
    return std::min(total_rows, (t + 1) * tile_rows);
  }
};

// offsets: cumulative rows, size shards+1, offsets[0] == 0, non-decreasing.
// kInvalidArgument when P < 1 or K < 1 or the offsets are malformed.
Result<ReadPlan> make_plan(std::span<const std::int64_t> offsets, std::int64_t processors,
                           std::int64_t overdecompose);

// The pieces covering global rows [lo, hi), in order, found by binary
// search over the offsets; dst_row is relative to lo.
void pieces_for_rows(std::span<const std::int64_t> offsets, std::int64_t lo, std::int64_t hi,
                     std::vector<Piece>* out);

// The pieces of tile t (uses the uniform fast path when the plan has it).
std::vector<Piece> tile_pieces(const ReadPlan& plan, std::span<const std::int64_t> offsets,
                               std::int64_t t);

}  // namespace shardload
