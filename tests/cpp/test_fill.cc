#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "engine/detail/lanes.hpp"
#include "shardload/fill.hpp"
#include "shardload/shard_source.hpp"
#include "shardload/synth.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::Change;
using testing::ChangingIo;
using testing::CountingIo;
using testing::FaultyIo;

class FillTest : public ::testing::Test {
 protected:
  void c_shard(int i, std::int32_t base, std::int64_t rows, bool big = false) {
    testing::write_iota_shard(dir_, i, base, rows, big);
  }
  void f_shard(int i, std::int32_t base, std::int64_t rows, bool big = false) {
    testing::write_iota_shard(dir_, i, base, rows, big, /*fortran=*/true);
  }
  Layout layout() {
    auto l = try_discover(Source::directory(dir_.path()));
    EXPECT_TRUE(l) << l.status().message();
    return l.value();
  }
  testing::TempDir dir_;
};

// A slice is a layout of its own whose shards are views of their files:
// every sub-range of every slice reads the same values as the whole
// layout, through C, Fortran, empty and byte-swapped shards.
TEST_F(FillTest, EverySliceReadsItsRowsOfTheFiles) {
  c_shard(0, 0, 4);
  f_shard(1, 24, 5);
  c_shard(2, 54, 0);
  c_shard(3, 54, 3, true);
  f_shard(4, 72, 6, true);
  c_shard(5, 108, 1);
  const Layout l = layout();
  for (std::int64_t lo = 0; lo <= 19; ++lo) {
    for (std::int64_t hi = lo; hi <= 19; ++hi) {
      auto sub = slice_rows(l, lo, hi);
      ASSERT_TRUE(sub) << sub.status().message();
      ASSERT_EQ(sub->total_rows(), hi - lo);
      ASSERT_FALSE(sub->shards.empty());
      for (const auto& s : sub->shards) {
        ASSERT_LE(s.first_row + s.rows, s.stored_rows());
        // Only shards the range covers are kept (one, empty, for an empty range).
        if (hi > lo) ASSERT_GT(s.rows, 0);
      }
      std::vector<std::int32_t> out(static_cast<std::size_t>((hi - lo) * 6), -1);
      FillOptions o;
      o.scratch_bytes = 8;
      Status st = fill_rows(*sub, 0, hi - lo, reinterpret_cast<std::byte*>(out.data()), o);
      ASSERT_TRUE(st) << st.message();
      for (std::size_t k = 0; k < out.size(); ++k) {
        ASSERT_EQ(out[k], lo * 6 + static_cast<std::int64_t>(k)) << lo << " " << hi << " " << k;
      }
      // A slice of a slice counts rows of the slice.
      if (hi - lo >= 2) {
        auto inner = slice_rows(*sub, 1, hi - lo);
        ASSERT_TRUE(inner) << inner.status().message();
        std::vector<std::int32_t> in(static_cast<std::size_t>((hi - lo - 1) * 6), -1);
        ASSERT_TRUE(fill_rows(*inner, 0, hi - lo - 1, reinterpret_cast<std::byte*>(in.data())));
        ASSERT_EQ(in[0], (lo + 1) * 6);
      }
    }
  }
}

TEST_F(FillTest, SliceBoundsAreChecked) {
  c_shard(0, 0, 4);
  const Layout l = layout();
  for (auto [lo, hi] : {std::pair{-1, 2}, {3, 2}, {0, 5}}) {
    auto sub = slice_rows(l, lo, hi);
    ASSERT_FALSE(sub);
    EXPECT_EQ(sub.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(sub.status().message().find("the dataset's rows"), std::string::npos)
        << sub.status().message();
  }
  // The whole range is the layout itself, no view.
  auto whole = slice_rows(l, 0, 4);
  ASSERT_TRUE(whole);
  EXPECT_FALSE(whole->shards[0].is_view());
}

// Bool bytes other than 0 and 1 land as numpy reads them: nonzero is True,
// stored as 1, from C-order and Fortran-order .npy and raw shards alike.
TEST_F(FillTest, BoolBytesLandAsZeroOrOne) {
  testing::TempDir u8;
  testing::write_bool_byte_shards(dir_, u8);
  const Layout l = layout();
  auto lu = try_discover(Source::directory(u8.path()));
  ASSERT_TRUE(lu) << lu.status().message();
  ASSERT_EQ(l.dtype.kind, DTypeKind::kBool);
  ASSERT_EQ(l.total_rows(), 131);
  for (const auto& [lo, hi] : {std::pair{0, 131}, {1, 70}, {63, 65}, {100, 131}}) {
    std::vector<std::byte> got(static_cast<std::size_t>(hi - lo) * 4, std::byte{0xA5});
    std::vector<std::uint8_t> raw(got.size());
    ASSERT_TRUE(fill_rows(l, lo, hi, got.data()));
    ASSERT_TRUE(fill_rows(*lu, lo, hi, reinterpret_cast<std::byte*>(raw.data())));
    EXPECT_GT(*std::max_element(raw.begin(), raw.end()), 1);
    for (std::size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(std::to_integer<int>(got[k]), raw[k] != 0 ? 1 : 0)
          << "rows [" << lo << ", " << hi << ") byte " << k;
    }
  }
  // The same bytes as a raw shard.
  testing::TempDir rawdir;
  std::string all(256, '\0');
  for (int i = 0; i < 256; ++i) all[static_cast<std::size_t>(i)] = static_cast<char>(i);
  testing::write_file(rawdir.file("shard_0000.bin"), all);
  testing::write_file(rawdir.file("shardload.json"), R"({"dtype": "bool", "shape": [2, 2]})");
  DiscoverOptions d;
  d.format.format = Format::kRaw;
  auto lr = try_discover(Source::directory(rawdir.path()), d);
  ASSERT_TRUE(lr) << lr.status().message();
  std::vector<std::byte> got(256);
  ASSERT_TRUE(fill_rows(*lr, 0, 64, got.data()));
  for (int k = 0; k < 256; ++k) ASSERT_EQ(std::to_integer<int>(got[k]), k != 0 ? 1 : 0) << k;
}

TEST(NormalizeBools, EveryByteAndLength) {
  for (std::size_t n : {0, 1, 15, 16, 17, 255, 256, 1000}) {
    std::vector<std::byte> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 37 + n) & 0xFF);
    const auto before = b;
    normalize_bools(b.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::to_integer<int>(b[i]), before[i] != std::byte{0} ? 1 : 0) << n << " " << i;
    }
  }
}

TEST_F(FillTest, InterruptedAndPartialReadsAreRetried) {
  c_shard(0, 0, 7);
  f_shard(1, 42, 9, true);
  const Layout l = layout();
  for (auto mode : {FaultyIo::Mode::kEintrEvery, FaultyIo::Mode::kShortReads}) {
    FaultyIo io(mode);
    FillOptions o;
    o.source = ShardSource::over(io);
    std::vector<std::int32_t> out(96, -1);
    Status st = fill_rows(l, 0, 16, reinterpret_cast<std::byte*>(out.data()), o);
    ASSERT_TRUE(st) << st.message();
    for (std::size_t k = 0; k < out.size(); ++k) ASSERT_EQ(out[k], static_cast<std::int32_t>(k));
  }
}

// What users do to keep a file looking untouched (rewrite it in place, then
// touch -d or cp -p the old mtime back) leaves ctime moved: refused. So is
// a same-content copy renamed over the path.
TEST_F(FillTest, RewriteThatKeepsSizeAndMtimeIsSeenByCtime) {
  c_shard(0, 0, 4);
  c_shard(1, 24, 4);
  Layout l = layout();
  const std::string path = dir_.file("shard_0001.npy");
  testing::change_file(path, Change::kRewriteInPlace);
  std::vector<std::int32_t> out(48);
  Status st = fill_rows(l, 0, 8, reinterpret_cast<std::byte*>(out.data()));
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kChanged);
  EXPECT_NE(st.message().find(path + ": changed since discovery: size 224 -> 224 bytes"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(", ctime "), std::string::npos) << st.message();

  c_shard(1, 24, 4);
  l = layout();
  testing::change_file(path, Change::kRenameOver);
  st = fill_rows(l, 4, 8, reinterpret_cast<std::byte*>(out.data()));
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kChanged);
  EXPECT_NE(st.message().find("replaced by another file (inode "), std::string::npos)
      << st.message();
}

// Many pieces of one shard (a gather of scattered rows) read through one reader open the file
// once, not once per piece, and every piece is still checked: a file rewritten in place
// between two pieces is refused.
TEST_F(FillTest, PiecesOfOneShardOpenItOnceAndAreEachChecked) {
  c_shard(0, 0, 10);
  c_shard(1, 60, 10);
  const Layout l = layout();
  // Every other row of both shards, each its own piece, in order.
  std::vector<Piece> pieces;
  for (std::int64_t r = 0; r < 20; r += 2) {
    pieces.push_back({r / 10, r % 10, r % 10 + 1, static_cast<std::int64_t>(pieces.size())});
  }
  CountingIo io;
  FillOptions o;
  o.source = ShardSource::over(io);
  std::vector<std::int32_t> out(pieces.size() * 6, -1);
  ASSERT_TRUE(fill_pieces(l, pieces, reinterpret_cast<std::byte*>(out.data()), o));
  EXPECT_EQ(io.opens, 2);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    for (std::size_t k = 0; k < 6; ++k) {
      ASSERT_EQ(out[i * 6 + k], static_cast<std::int32_t>(i * 2 * 6 + k));
    }
  }
  // The shard rewritten in place (size and mtime kept) at the third read: refused.
  ChangingIo changing(dir_.file("shard_0000.npy"), Change::kRewriteInPlace, ChangingIo::On::kPread,
                      3);
  o.source = ShardSource::over(changing);
  Status st = fill_pieces(l, pieces, reinterpret_cast<std::byte*>(out.data()), o);
  ASSERT_TRUE(changing.changed());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
}

// The parts of a gather (fill_parts: the training feed's scattered rows) check each local npy
// file when it is opened and once after all the reads, not after each read (an fstat per 1 KiB
// row cost as much as its pread), and still refuse a file rewritten in place between two reads.
TEST_F(FillTest, PartsCheckEachFileAtItsOpenAndOnceAfterAllTheReads) {
  c_shard(0, 0, 10);
  c_shard(1, 60, 10);
  const Layout l = layout();
  // Every other row of both shards, each its own piece: shard 0's on one thread, 1's on another.
  std::vector<std::vector<Piece>> parts(2);
  std::int64_t at = 0;
  for (std::int64_t r = 0; r < 20; r += 2)
    parts[r / 10].push_back({r / 10, r % 10, r % 10 + 1, at++});
  CountingIo io;
  FillOptions o;
  o.source = ShardSource::over(io);
  std::vector<std::int32_t> out(static_cast<std::size_t>(at) * 6, -1);
  ASSERT_TRUE(fill_parts(l, parts, reinterpret_cast<std::byte*>(out.data()), o));
  for (std::size_t i = 0; i < static_cast<std::size_t>(at); ++i) {
    for (std::size_t k = 0; k < 6; ++k) {
      ASSERT_EQ(out[i * 6 + k], static_cast<std::int32_t>(i * 2 * 6 + k));
    }
  }
  EXPECT_EQ(io.opens, 2);
  EXPECT_EQ(io.preads, 10);
  EXPECT_EQ(io.stats, 2);       // each file's open
  EXPECT_EQ(io.path_stats, 2);  // each file once after the reads (was: an fstat per read)

  // Shard 0 rewritten in place (size and mtime kept) at the third of its reads: refused, and
  // named, though every read after it succeeded.
  const std::string path = dir_.file("shard_0000.npy");
  ChangingIo changing(path, Change::kRewriteInPlace, ChangingIo::On::kPread, 3);
  o.source = ShardSource::over(changing);
  Status st = fill_parts(l, parts, reinterpret_cast<std::byte*>(out.data()), o);
  ASSERT_TRUE(changing.changed());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
  EXPECT_NE(st.message().find(path + ": changed while reading: "), std::string::npos)
      << st.message();

  // Unchecked fills (check_snapshot off) ask nothing after their reads.
  c_shard(0, 0, 10);
  const Layout again = layout();
  CountingIo quiet;
  o.source = ShardSource::over(quiet);
  o.check_snapshot = false;
  ASSERT_TRUE(fill_parts(again, parts, reinterpret_cast<std::byte*>(out.data()), o));
  EXPECT_EQ(quiet.stats + quiet.path_stats, 0);
}

TEST_F(FillTest, RangeOutsideTheDataset) {
  c_shard(0, 0, 4);
  const Layout l = layout();
  std::vector<std::int32_t> out(48);
  EXPECT_EQ(fill_rows(l, 2, 5, reinterpret_cast<std::byte*>(out.data())).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(fill_rows(l, 3, 2, reinterpret_cast<std::byte*>(out.data())).code(),
            ErrorCode::kInvalidArgument);
}

TEST(ByteSwap, AllUnits) {
  std::uint64_t v[2] = {0x0102030405060708ULL, 0x1122334455667788ULL};
  byte_swap(reinterpret_cast<std::byte*>(v), 2, 8);
  EXPECT_EQ(v[0], 0x0807060504030201ULL);
  byte_swap(reinterpret_cast<std::byte*>(v), 4, 4);
  EXPECT_EQ(v[0], 0x0506070801020304ULL);  // each 4-byte half reversed in memory
  std::uint16_t h = 0xABCD;
  byte_swap(reinterpret_cast<std::byte*>(&h), 1, 2);
  EXPECT_EQ(h, 0xCDAB);
  std::uint8_t b = 7;
  byte_swap(reinterpret_cast<std::byte*>(&b), 1, 1);
  EXPECT_EQ(b, 7);
}

// The lanes behind discovery's probes and a tile's remote pieces: every index below the lowest
// failure runs, none past it starts once it is known, and that lowest index is the same
// whatever the timing.
TEST(RunInLanes, EveryIndexBelowTheLowestFailureRunsAndNonePastItStartsAfter) {
  for (const std::size_t lanes : {1u, 2u, 4u}) {
    for (const std::size_t chunk : {1u, 3u}) {
      constexpr std::size_t kN = 40;
      std::vector<std::atomic<int>> ran(kN);
      std::atomic<std::size_t> max_lane{0};
      detail::run_in_lanes(kN, lanes, chunk, [&](std::size_t lane, std::size_t i) {
        ran[i]++;
        std::size_t seen = max_lane.load();
        while (lane > seen && !max_lane.compare_exchange_weak(seen, lane)) {
        }
        // A later failure that finishes first: index 30 at once, 17 after a wait.
        if (i == 17) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return i != 17 && i != 30;
      });
      for (std::size_t i = 0; i <= 17; ++i) EXPECT_EQ(ran[i], 1) << lanes << " " << i;
      // Each index at most once; with one lane, nothing after the failure.
      for (std::size_t i = 18; i < kN; ++i) {
        EXPECT_LE(ran[i], 1) << i;
        if (lanes == 1) EXPECT_EQ(ran[i], 0) << i;
      }
      EXPECT_LT(max_lane.load(), lanes);
    }
  }
  // Nothing to run, and every index when nothing fails.
  detail::run_in_lanes(0, 4, 1, [](std::size_t, std::size_t) { return false; });
  std::vector<std::atomic<int>> all(100);
  detail::run_in_lanes(100, 3, 7, [&](std::size_t, std::size_t i) { return ++all[i] > 0; });
  for (auto& a : all) EXPECT_EQ(a, 1);
}

}  // namespace
}  // namespace shardload
