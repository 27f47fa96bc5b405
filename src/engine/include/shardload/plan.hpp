// The read plan: a pure function from (rows per shard, processors P,
// over-decomposition K, the decode unit grid) to tiles along axis 0 and, per
// tile, the pieces of shards that fill it. No I/O and no runtime.
//
//   parts     = min(min(K, kMaxOverdecompose) * P, max(P, kMaxTiles))
//   tile_rows = max(1, ceil(total / parts)), then moved onto the unit grid
//               (see "Decode units" below)
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
// tiles are as fine as with K = 1). The plan depends on (rows, P, K) and the
// unit grid below only; the launcher plans and cuts the layout at the tiles
// (encode_tiles), so the tasks need not replan.
//
// Decode units (chunk-aware tiles). Chunked formats decode whole units (an HDF5 or Zarr
// chunk, a Parquet row group), and a unit met by two tiles is decoded by both tasks: one
// 128 MiB Zarr chunk under 64 tiles was decoded 64 times. So the plan takes the layout's
// unit grid (unit_grid: from Shard::decode_rows, the one thing about units the layout
// carries) and moves tile boundaries onto it:
//
//   aligned grid (every unit starts at a multiple of u in global rows: one chunked file,
//   or shards whose rows are multiples of u):
//       tile_rows = ceil(tile_rows / u) * u       no unit is in two tiles
//   unaligned grid (largest unit u):
//       tile_rows = max(tile_rows, u)             a unit is in at most two tiles
//   tiles = ceil(total / tile_rows)
//
// Tiles stay uniform (the launch partitions by tiling, which has one tile size). The
// price is balance: a tile has at most tile_rows + u - 1 rows of the unit-free plan's
// tile_rows, the last tile may be short, and with units much larger than total / parts
// there are fewer tiles than parts (one 128 MiB chunk is one tile whatever K is: a unit
// is the least one task can decode anyway). The tile count never exceeds the unit-free
// plan's.
//
// Contract: pure functions of their arguments (no I/O, no state), safe from any thread;
// make_plan returns kInvalidArgument for P < 1 or K < 1.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "shardload/reader.hpp"
#include "shardload/status.hpp"

namespace shardload {

// At most this many tiles per processor, whatever K is asked for.
inline constexpr std::int64_t kMaxOverdecompose = 256;
// At most this many tiles in all, unless there are more processors.
inline constexpr std::int64_t kMaxTiles = 65536;

// The decode units of a layout as the plan sees them.
struct UnitGrid {
  std::int64_t rows = 0;  // 0: no units (rows are read directly)
  // Every unit of every shard starts at a multiple of `rows` in global rows.
  bool aligned = false;
  friend bool operator==(const UnitGrid&, const UnitGrid&) = default;
};

// From the shards' decode_rows (offsets as for make_plan, one shard per offset but the
// last): rows is the least common multiple of the shards' grids, aligned when each
// shard with rows has (its first global row - its first file row) a multiple of its own
// grid; when the multiple exceeds the total rows (or 64 bits), rows is the largest grid
// and aligned is false. Shards without a grid (0) constrain nothing.
UnitGrid unit_grid(std::span<const std::int64_t> offsets, std::span<const Shard> shards);

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
  UnitGrid units;  // as given to make_plan
  // Every shard has tile_rows rows and there is one shard per tile, so tile
  // t is exactly shard t and no search is needed.
  bool uniform = false;

  [[nodiscard]] std::int64_t tile_begin(std::int64_t t) const { return t * tile_rows; }
  [[nodiscard]] std::int64_t tile_end(std::int64_t t) const {
    return std::min(total_rows, (t + 1) * tile_rows);
  }
};

// offsets: cumulative rows, size shards+1, offsets[0] == 0, non-decreasing.
// kInvalidArgument when P < 1 or K < 1, the offsets are malformed or units.rows < 0.
Result<ReadPlan> make_plan(std::span<const std::int64_t> offsets, std::int64_t processors,
                           std::int64_t overdecompose, UnitGrid units = {});

struct Layout;
// The plan of a layout: make_plan over its offsets with its shards' unit grid. Every launcher
// (load, batches, the memory check) takes it from here, so they agree on it to the tile.
Result<ReadPlan> plan_layout(const Layout& layout, std::int64_t processors,
                             std::int64_t overdecompose);

// The pieces covering global rows [lo, hi), in order, found by binary
// search over the offsets; dst_row is relative to lo.
void pieces_for_rows(std::span<const std::int64_t> offsets, std::int64_t lo, std::int64_t hi,
                     std::vector<Piece>* out);

// The pieces of tile t (uses the uniform fast path when the plan has it).
std::vector<Piece> tile_pieces(const ReadPlan& plan, std::span<const std::int64_t> offsets,
                               std::int64_t t);

}  // namespace shardload
