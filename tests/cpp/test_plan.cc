#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "shardload/plan.hpp"

namespace shardload {
namespace {

std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& rows) {
  std::vector<std::int64_t> o{0};
  for (const auto r : rows) o.push_back(o.back() + r);
  return o;
}

// Every row is covered once, in order, and pieces agree with the offsets.
void check_plan(const std::vector<std::int64_t>& rows, std::int64_t P, std::int64_t K) {
  const auto off = offsets_of(rows);
  auto plan = make_plan(off, P, K);
  ASSERT_TRUE(plan) << plan.status().message();
  const std::int64_t total = off.back();
  // The documented formula, caps included (see plan.hpp).
  const std::int64_t parts = std::min(std::min(K, kMaxOverdecompose) * P, std::max(P, kMaxTiles));
  EXPECT_EQ(plan->parts, parts);
  EXPECT_EQ(plan->tile_rows, std::max<std::int64_t>(1, (total + parts - 1) / parts));
  EXPECT_EQ(plan->tiles, (total + plan->tile_rows - 1) / plan->tile_rows);
  EXPECT_LE(plan->tiles, std::max<std::int64_t>(parts, 0));
  std::int64_t next = 0;  // next global row expected
  for (std::int64_t t = 0; t < plan->tiles; ++t) {
    const auto pieces = tile_pieces(*plan, off, t);
    const std::int64_t begin = plan->tile_begin(t);
    const std::int64_t end = plan->tile_end(t);
    ASSERT_EQ(begin, next);
    ASSERT_GT(end, begin) << "no tile is empty";
    std::int64_t dst = 0;
    for (const auto& p : pieces) {
      ASSERT_GT(p.hi, p.lo) << "no empty pieces";
      ASSERT_EQ(p.dst_row, dst);
      ASSERT_EQ(off[p.shard] + p.lo, begin + dst) << "piece starts where the tile needs it";
      ASSERT_LE(off[p.shard] + p.hi, off[p.shard + 1]);
      dst += p.hi - p.lo;
    }
    ASSERT_EQ(dst, end - begin);
    next = end;
  }
  EXPECT_EQ(next, total);
}

TEST(Plan, Basic) {
  auto plan = make_plan(offsets_of({10, 0, 7, 3}), 2, 1);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->tile_rows, 10);
  EXPECT_EQ(plan->tiles, 2);
  EXPECT_FALSE(plan->uniform);
  const auto off = offsets_of({10, 0, 7, 3});
  EXPECT_EQ(tile_pieces(*plan, off, 0), (std::vector<Piece>{{0, 0, 10, 0}}));
  EXPECT_EQ(tile_pieces(*plan, off, 1), (std::vector<Piece>{{2, 0, 7, 0}, {3, 0, 3, 7}}));
  EXPECT_TRUE(tile_pieces(*plan, off, 2).empty());
}

TEST(Plan, ShortLastTileAndSpanning) {
  const auto off = offsets_of({5, 5, 5});
  auto plan = make_plan(off, 2, 1);  // 15 rows / 2 -> 8-row tiles
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->tile_rows, 8);
  EXPECT_EQ(plan->tiles, 2);
  EXPECT_EQ(plan->tile_end(1) - plan->tile_begin(1), 7);
  EXPECT_EQ(tile_pieces(*plan, off, 0), (std::vector<Piece>{{0, 0, 5, 0}, {1, 0, 3, 5}}));
  EXPECT_EQ(tile_pieces(*plan, off, 1), (std::vector<Piece>{{1, 3, 5, 0}, {2, 0, 5, 2}}));
}

TEST(Plan, ZeroRows) {
  auto plan = make_plan(offsets_of({0, 0, 0}), 4, 3);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->tiles, 0);
  EXPECT_EQ(plan->tile_rows, 1);
  EXPECT_TRUE(tile_pieces(*plan, offsets_of({0, 0, 0}), 0).empty());
}

TEST(Plan, MoreProcessorsThanRows) {
  auto plan = make_plan(offsets_of({2, 1}), 8, 2);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->tile_rows, 1);
  EXPECT_EQ(plan->tiles, 3) << "the launch never exceeds the row count";
  check_plan({2, 1}, 8, 2);
}

TEST(Plan, UniformFastPath) {
  const std::vector<std::int64_t> rows(6, 100);
  const auto off = offsets_of(rows);
  auto plan = make_plan(off, 3, 2);
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->uniform);
  EXPECT_EQ(plan->tile_rows, 100);
  for (std::int64_t t = 0; t < 6; ++t) {
    EXPECT_EQ(tile_pieces(*plan, off, t), (std::vector<Piece>{{t, 0, 100, 0}}));
  }
  EXPECT_FALSE(make_plan(off, 2, 2)->uniform);
  EXPECT_FALSE(make_plan(offsets_of({100, 100, 99}), 3, 1)->uniform);
}

TEST(Plan, InvalidArguments) {
  const auto off = offsets_of({1, 2});
  EXPECT_EQ(make_plan(off, 0, 1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(make_plan(off, 1, 0).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(make_plan(off, 1, 0).status().message().find("found 0"), std::string::npos);
  const std::vector<std::int64_t> bad{0, 5, 3};
  EXPECT_FALSE(make_plan(bad, 1, 1));
  EXPECT_FALSE(make_plan(std::vector<std::int64_t>{}, 1, 1));
}

TEST(Plan, PropertyRandomLayouts) {
  std::mt19937_64 rng(12345);
  for (int iter = 0; iter < 3000; ++iter) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
    for (auto& r : rows) {
      const auto kind = rng() % 4;
      r = kind == 0 ? 0 : static_cast<std::int64_t>(rng() % (kind == 3 ? 1000 : 13));
    }
    const auto P = static_cast<std::int64_t>(1 + rng() % 9);
    const auto K = static_cast<std::int64_t>(1 + rng() % 4);
    SCOPED_TRACE("iter " + std::to_string(iter));
    check_plan(rows, P, K);
    if (HasFatalFailure()) return;
  }
}

// A huge K must not become a huge launch: the tile count is bounded by
// kMaxOverdecompose tiles per processor and kMaxTiles in all (or P when the
// processors alone are more), and every K past the cap gives the same plan.
TEST(Plan, HugeOverdecomposeIsCapped) {
  const auto off = offsets_of({10'000'000, 3, 0, 5'000'001});
  const std::int64_t total = off.back();
  for (const std::int64_t K : {std::int64_t{257}, std::int64_t{1'000'000'000'000},
                               std::numeric_limits<std::int64_t>::max()}) {
    SCOPED_TRACE("K " + std::to_string(K));
    auto plan = make_plan(off, 2, K);
    ASSERT_TRUE(plan) << plan.status().message();
    EXPECT_EQ(plan->overdecompose, K);
    EXPECT_EQ(plan->parts, 2 * kMaxOverdecompose);
    EXPECT_EQ(plan->tiles, 2 * kMaxOverdecompose);
    auto at_cap = make_plan(off, 2, kMaxOverdecompose);
    ASSERT_TRUE(at_cap);
    EXPECT_EQ(plan->tile_rows, at_cap->tile_rows);
    EXPECT_EQ(plan->tiles, at_cap->tiles);
    check_plan({10'000'000, 3, 0, 5'000'001}, 2, K);
  }
  // Many processors: the whole launch is capped at kMaxTiles ...
  auto many = make_plan(off, 1000, 1'000'000'000'000);
  ASSERT_TRUE(many);
  EXPECT_EQ(many->parts, kMaxTiles);
  EXPECT_LE(many->tiles, kMaxTiles);
  EXPECT_EQ(many->tile_rows, (total + kMaxTiles - 1) / kMaxTiles);
  // ... unless P alone is more: the tiles are as fine as with K = 1.
  auto huge_p = make_plan(off, 100'000, std::numeric_limits<std::int64_t>::max());
  ASSERT_TRUE(huge_p);
  EXPECT_EQ(huge_p->parts, 100'000);
  EXPECT_EQ(huge_p->tile_rows, make_plan(off, 100'000, 1)->tile_rows);
  // Below the caps nothing changes.
  auto small = make_plan(off, 4, 256);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->parts, 1024);
  EXPECT_EQ(small->tile_rows, (total + 1023) / 1024);
  // An absurd P saturates instead of overflowing.
  auto absurd = make_plan(off, std::numeric_limits<std::int64_t>::max(), 3);
  ASSERT_TRUE(absurd);
  EXPECT_EQ(absurd->tile_rows, 1);
  EXPECT_EQ(absurd->tiles, total);
}

TEST(Plan, PropertyRandomLayoutsWithLargeK) {
  std::mt19937_64 rng(777);
  for (int iter = 0; iter < 300; ++iter) {
    const int n = 1 + static_cast<int>(rng() % 8);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
    for (auto& r : rows) r = static_cast<std::int64_t>(rng() % 200'000);
    const auto P = static_cast<std::int64_t>(1 + rng() % 600);
    const std::int64_t K = static_cast<std::int64_t>(1 + rng() % 2000) << (rng() % 30);
    SCOPED_TRACE("iter " + std::to_string(iter));
    check_plan(rows, P, K);
    if (HasFatalFailure()) return;
  }
}

TEST(Plan, PiecesForArbitraryRanges) {
  const std::vector<std::int64_t> rows{3, 0, 0, 4, 1, 0, 6};
  const auto off = offsets_of(rows);
  std::vector<Piece> pieces;
  for (std::int64_t lo = 0; lo <= off.back(); ++lo) {
    for (std::int64_t hi = lo; hi <= off.back(); ++hi) {
      pieces_for_rows(off, lo, hi, &pieces);
      std::int64_t covered = 0;
      for (const auto& p : pieces) {
        EXPECT_GT(rows[static_cast<std::size_t>(p.shard)], 0);
        EXPECT_EQ(off[p.shard] + p.lo, lo + p.dst_row);
        covered += p.hi - p.lo;
      }
      EXPECT_EQ(covered, hi - lo);
    }
  }
}

}  // namespace
}  // namespace shardload
