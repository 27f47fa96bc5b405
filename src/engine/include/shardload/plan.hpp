// The read plan: a pure function from (rows per shard, processors P,
// over-decomposition K) to tiles along axis 0 and, per tile, the pieces of
// shards that fill it. No I/O and no runtime.
//
//   parts     = min(min(K, kMaxOverdecompose) * P, max(P, kMaxTiles))
//   tile_rows = max(1, ceil(total / parts))
//   tiles     = ceil(total / tile_rows)          (<= parts, <= total)
//
// Tiles may span shards; the last tile may be short; zero-row shards
// contribute no pieces. The launch domain of a load equals `tiles`.
//
// The caps keep a huge K from becoming a huge launch: every point costs the
// runtime a fixed amount (mapping, an instance, the task itself: 0.3-1 ms per
// tile measured with Legate 26.06 on two CPUs, so 65,536 tiles took about a
// minute), while past a few dozen tiles per processor finer tiles balance
// nothing more. Whatever K is asked for, a processor gets at most 256 tiles
// and the launch at most 65,536 points, unless P alone exceeds that (then the
// tiles are as fine as with K = 1). The caps depend on (rows, P, K) only, so
// the task side recomputes the same plan from the same inputs.
//
// Contract: pure functions of their arguments (no I/O, no state), safe from any thread;
// make_plan returns kInvalidArgument for P < 1 or K < 1.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "shardload/status.hpp"

namespace shardload {

// At most this many tiles per processor, whatever K is asked for.
inline constexpr std::int64_t kMaxOverdecompose = 256;
// At most this many tiles in all, unless there are more processors.
inline constexpr std::int64_t kMaxTiles = 65536;

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
  std::int64_t overdecompose = 1;  // K as asked for, before the caps
  std::int64_t parts = 1;          // the tile count aimed at, after the caps
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
