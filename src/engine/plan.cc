#include "shardload/plan.hpp"

#include "shardload/layout.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace shardload {

UnitGrid unit_grid(std::span<const std::int64_t> offsets, std::span<const Shard> shards) {
  UnitGrid g;
  if (offsets.size() != shards.size() + 1) return g;
  std::int64_t largest = 0;
  std::int64_t lcm = 0;  // of the grids met so far; -1 once past the total rows
  bool aligned = true;
  const std::int64_t total = offsets.back();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::int64_t u = shards[i].decode_rows;
    if (u <= 0) continue;
    largest = std::max(largest, u);
    if (lcm == 0) {
      lcm = u;
    } else if (lcm > 0) {
      const std::int64_t a = lcm / std::gcd(lcm, u);
      if (__builtin_mul_overflow(a, u, &lcm) || lcm > total) lcm = -1;
    }
    const std::int64_t start = offsets[i] - shards[i].first_row;
    if (offsets[i + 1] > offsets[i] && start % u != 0) aligned = false;
  }
  if (largest == 0) return g;
  g.aligned = aligned && lcm > 0;
  g.rows = g.aligned ? lcm : largest;
  return g;
}

Result<ReadPlan> make_plan(std::span<const std::int64_t> offsets, std::int64_t processors,
                           std::int64_t overdecompose, UnitGrid units) {
  if (units.rows < 0) {
    return Status(ErrorCode::kInvalidArgument,
                  "decode unit rows must not be negative, found " + std::to_string(units.rows));
  }
  if (processors < 1) {
    return Status(ErrorCode::kInvalidArgument,
                  "processors must be at least 1, found " + std::to_string(processors));
  }
  if (overdecompose < 1) {
    return Status(ErrorCode::kInvalidArgument,
                  "overdecompose (K) must be at least 1, found " + std::to_string(overdecompose));
  }
  if (offsets.empty() || offsets.front() != 0) {
    return Status(ErrorCode::kInvalidArgument, "row offsets must start at 0");
  }
  for (std::size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) {
      return Status(ErrorCode::kInvalidArgument,
                    "row offsets decrease at shard " + std::to_string(i - 1));
    }
  }
  ReadPlan p;
  p.total_rows = offsets.back();
  p.processors = processors;
  p.overdecompose = overdecompose;
  // See the header: K and the tile count are capped so that any K >= 1 gives
  // a launch of bounded size; P * kMaxOverdecompose cannot overflow for any P
  // a machine has, and saturating keeps even an absurd P well defined.
  std::int64_t parts = 0;
  if (__builtin_mul_overflow(processors, std::min(overdecompose, kMaxOverdecompose), &parts)) {
    parts = INT64_MAX;
  }
  parts = std::min(parts, std::max(processors, kMaxTiles));
  p.parts = parts;
  p.tile_rows = std::max<std::int64_t>(1, p.total_rows / parts + (p.total_rows % parts != 0));
  p.units = units;
  if (const std::int64_t u = units.rows; u > 0 && p.total_rows > 0) {
    // See the header: tile boundaries on the unit grid, or tiles at least a unit long. A
    // tile never needs more than all the rows, which also keeps the rounding in range.
    if (units.aligned) {
      const std::int64_t n = p.tile_rows / u + (p.tile_rows % u != 0);
      p.tile_rows = n > p.total_rows / u ? p.total_rows : n * u;
    } else {
      p.tile_rows = std::max(p.tile_rows, std::min(u, p.total_rows));
    }
  }
  p.tiles = p.total_rows / p.tile_rows + (p.total_rows % p.tile_rows != 0);
  const auto shards = static_cast<std::int64_t>(offsets.size()) - 1;
  if (shards == parts && shards == p.tiles) {
    p.uniform = true;
    for (std::int64_t i = 0; i < shards; ++i) {
      if (offsets[i + 1] - offsets[i] != p.tile_rows) {
        p.uniform = false;
        break;
      }
    }
  }
  return p;
}

Result<ReadPlan> plan_layout(const Layout& layout, std::int64_t processors,
                             std::int64_t overdecompose) {
  return make_plan(layout.offsets, processors, overdecompose,
                   unit_grid(layout.offsets, layout.shards));
}

void pieces_for_rows(std::span<const std::int64_t> offsets, std::int64_t lo, std::int64_t hi,
                     std::vector<Piece>* out) {
  out->clear();
  if (lo >= hi) return;
  // The shard holding row lo is the last one whose first row is <= lo; with
  // zero-row shards several share that first row, and upper_bound skips them.
  auto it = std::upper_bound(offsets.begin(), offsets.end() - 1, lo);
  auto s = static_cast<std::int64_t>(it - offsets.begin()) - 1;
  const auto shards = static_cast<std::int64_t>(offsets.size()) - 1;
  std::int64_t row = lo;
  while (row < hi && s < shards) {
    const std::int64_t first = offsets[s];
    const std::int64_t end = std::min(hi, offsets[s + 1]);
    if (end > row) out->push_back(Piece{s, row - first, end - first, row - lo});
    row = std::max(row, end);
    ++s;
  }
}

std::vector<Piece> tile_pieces(const ReadPlan& plan, std::span<const std::int64_t> offsets,
                               std::int64_t t) {
  std::vector<Piece> pieces;
  if (t < 0 || t >= plan.tiles) return pieces;
  if (plan.uniform) {
    pieces.push_back(Piece{t, 0, plan.tile_rows, 0});
    return pieces;
  }
  pieces_for_rows(offsets, plan.tile_begin(t), plan.tile_end(t), &pieces);
  return pieces;
}

}  // namespace shardload
