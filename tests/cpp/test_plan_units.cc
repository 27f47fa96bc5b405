// The read plan with decode units (chunk-aware tiles): properties over random layouts
// with unit grids, alongside test_plan.cc's properties of the unit-free plan.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>
#include <set>

#include "shardload/plan.hpp"

namespace shardload {
namespace {

std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& rows) {
  std::vector<std::int64_t> o{0};
  for (const auto r : rows) o.push_back(o.back() + r);
  return o;
}

std::vector<Shard> shards_of(const std::vector<std::int64_t>& rows,
                             const std::vector<std::int64_t>& units,
                             const std::vector<std::int64_t>& first_rows = {}) {
  std::vector<Shard> v(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    v[i].rows = rows[i];
    v[i].decode_rows = units[i];
    if (!first_rows.empty() && first_rows[i] > 0) {
      v[i].first_row = first_rows[i];
      v[i].file_rows = first_rows[i] + rows[i] + 1;
    }
  }
  return v;
}

// The units of shard i that global rows [lo, hi) meet, as (shard, file unit index).
void units_met(const std::vector<std::int64_t>& off, const std::vector<Shard>& shards,
               std::int64_t lo, std::int64_t hi,
               std::set<std::pair<std::size_t, std::int64_t>>* out) {
  std::vector<Piece> pieces;
  pieces_for_rows(off, lo, hi, &pieces);
  for (const auto& p : pieces) {
    const Shard& s = shards[static_cast<std::size_t>(p.shard)];
    if (s.decode_rows <= 0) continue;
    const std::int64_t a = (s.first_row + p.lo) / s.decode_rows;
    const std::int64_t b = (s.first_row + p.hi - 1) / s.decode_rows;
    for (std::int64_t u = a; u <= b; ++u) out->insert({static_cast<std::size_t>(p.shard), u});
  }
}

// Coverage, no overlap, the tile count bound, the alignment property and the balance bound
// of plan.hpp, for one layout with units.
void check_units_plan(const std::vector<std::int64_t>& rows, const std::vector<Shard>& shards,
                      std::int64_t P, std::int64_t K) {
  const auto off = offsets_of(rows);
  const UnitGrid g = unit_grid(off, shards);
  auto base = make_plan(off, P, K);
  auto plan = make_plan(off, P, K, g);
  ASSERT_TRUE(base && plan) << plan.status().message();
  const std::int64_t total = off.back();
  EXPECT_EQ(plan->units, g);
  EXPECT_LE(plan->tiles, base->tiles) << "never more tiles than without units";
  EXPECT_GE(plan->tile_rows, base->tile_rows);
  if (g.rows > 0 && total > 0) {
    // Balance: a tile grows by less than one unit, or to the whole dataset.
    EXPECT_TRUE(plan->tile_rows < base->tile_rows + g.rows || plan->tile_rows == total)
        << plan->tile_rows << " vs " << base->tile_rows << " + " << g.rows;
    if (g.aligned) {
      EXPECT_TRUE(plan->tile_rows % g.rows == 0 || plan->tile_rows == total);
    } else {
      EXPECT_GE(plan->tile_rows, std::min(g.rows, total));
    }
  } else {
    EXPECT_EQ(plan->tile_rows, base->tile_rows);
  }
  // Coverage and no overlap: tiles follow each other to the end.
  std::int64_t next = 0;
  std::map<std::pair<std::size_t, std::int64_t>, int> tasks_per_unit;
  for (std::int64_t t = 0; t < plan->tiles; ++t) {
    ASSERT_EQ(plan->tile_begin(t), next);
    ASSERT_GT(plan->tile_end(t), plan->tile_begin(t));
    std::int64_t dst = 0;
    for (const auto& p : tile_pieces(*plan, off, t)) {
      ASSERT_EQ(p.dst_row, dst);
      ASSERT_EQ(off[p.shard] + p.lo, plan->tile_begin(t) + dst);
      dst += p.hi - p.lo;
    }
    ASSERT_EQ(dst, plan->tile_end(t) - plan->tile_begin(t));
    std::set<std::pair<std::size_t, std::int64_t>> met;
    units_met(off, shards, plan->tile_begin(t), plan->tile_end(t), &met);
    for (const auto& u : met) ++tasks_per_unit[u];
    next = plan->tile_end(t);
  }
  EXPECT_EQ(next, total);
  // Alignment: on an aligned grid no unit is met by two tiles; otherwise by two at most.
  for (const auto& [u, n] : tasks_per_unit) {
    EXPECT_LE(n, g.aligned ? 1 : 2) << "shard " << u.first << " unit " << u.second;
  }
}

TEST(PlanUnits, OneLargeChunkIsOneTileWhateverK) {
  // One Zarr array of 4096 rows in one chunk: every K gives one tile, as K = 1 with one
  // processor would.
  const std::vector<std::int64_t> rows{4096};
  const auto off = offsets_of(rows);
  const auto shards = shards_of(rows, {4096});
  const UnitGrid g = unit_grid(off, shards);
  EXPECT_EQ(g, (UnitGrid{4096, true}));
  for (const std::int64_t K : {1, 4, 64, 256}) {
    auto plan = make_plan(off, 2, K, g);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->tiles, 1) << "K " << K;
    EXPECT_EQ(plan->tile_rows, 4096);
    // Without the units the same K cuts the chunk into 2 K tiles.
    EXPECT_EQ(make_plan(off, 2, K)->tiles, 2 * K);
  }
}

TEST(PlanUnits, AlignedTilesAreWholeUnits) {
  // 4096 rows in chunks of 512, P = 3, K = 1: 1366-row tiles become 1536 (3 chunks).
  const std::vector<std::int64_t> rows{4096};
  const auto off = offsets_of(rows);
  auto plan = make_plan(off, 3, 1, unit_grid(off, shards_of(rows, {512})));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->tile_rows, 1536);
  EXPECT_EQ(plan->tiles, 3);
  check_units_plan(rows, shards_of(rows, {512}), 3, 1);
}

TEST(PlanUnits, GridFromShards) {
  // Equal shards whose rows are multiples of the unit: aligned.
  EXPECT_EQ(unit_grid(offsets_of({64, 64, 32}), shards_of({64, 64, 32}, {32, 32, 32})),
            (UnitGrid{32, true}));
  // A shard starting off the grid: the largest unit, unaligned.
  EXPECT_EQ(unit_grid(offsets_of({60, 64}), shards_of({60, 64}, {32, 32})), (UnitGrid{32, false}));
  // The last shard's length does not matter; a shard without units constrains nothing.
  EXPECT_EQ(unit_grid(offsets_of({64, 0, 7}), shards_of({64, 0, 7}, {32, 0, 32})),
            (UnitGrid{32, true}));
  EXPECT_EQ(unit_grid(offsets_of({10, 64}), shards_of({10, 64}, {0, 32})), (UnitGrid{32, false}));
  // Different grids: their least common multiple, when it is aligned for each.
  EXPECT_EQ(unit_grid(offsets_of({48, 48}), shards_of({48, 48}, {16, 24})), (UnitGrid{48, true}));
  // A view starting mid-file: file row 10 is global row 0, off a grid of 8.
  EXPECT_EQ(unit_grid(offsets_of({30}), shards_of({30}, {8}, {10})), (UnitGrid{8, false}));
  EXPECT_EQ(unit_grid(offsets_of({30}), shards_of({30}, {8}, {16})), (UnitGrid{8, true}));
  // No units at all, or offsets that do not match the shards.
  EXPECT_EQ(unit_grid(offsets_of({5, 5}), shards_of({5, 5}, {0, 0})), UnitGrid{});
  EXPECT_EQ(unit_grid(offsets_of({5}), shards_of({5, 5}, {1, 1})), UnitGrid{});
}

TEST(PlanUnits, NegativeUnitIsRefused) {
  auto plan = make_plan(offsets_of({5}), 1, 1, UnitGrid{-1, true});
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("found -1"), std::string::npos);
}

TEST(PlanUnits, HugeUnitsAndRowsStayInRange) {
  const std::int64_t big = std::numeric_limits<std::int64_t>::max() / 2;
  const auto off = offsets_of({big});
  for (const bool aligned : {true, false}) {
    auto plan = make_plan(off, 7, 256, UnitGrid{big - 1, aligned});
    ASSERT_TRUE(plan);
    EXPECT_GE(plan->tiles, 1);
    EXPECT_LE(plan->tiles, 2);
    EXPECT_LE(plan->tile_rows, big);
  }
}

TEST(PlanUnits, PropertyRandomLayoutsWithUnits) {
  std::mt19937_64 rng(2026);
  for (int iter = 0; iter < 2000; ++iter) {
    const int n = 1 + static_cast<int>(rng() % 12);
    const auto kind = rng() % 3;  // 0: aligned equal shards, 1: random, 2: one file
    const std::int64_t unit = 1 + static_cast<std::int64_t>(rng() % 300);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(kind == 2 ? 1 : n));
    std::vector<std::int64_t> units(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (kind == 0) {
        rows[i] = unit * static_cast<std::int64_t>(rng() % 5);
      } else {
        rows[i] = static_cast<std::int64_t>(rng() % 2000);
      }
      units[i] =
          rng() % 5 == 0 ? 0 : (kind == 1 ? 1 + static_cast<std::int64_t>(rng() % 300) : unit);
    }
    const auto P = static_cast<std::int64_t>(1 + rng() % 9);
    const auto K = static_cast<std::int64_t>(1 + rng() % 64);
    SCOPED_TRACE("iter " + std::to_string(iter));
    check_units_plan(rows, shards_of(rows, units), P, K);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace shardload
