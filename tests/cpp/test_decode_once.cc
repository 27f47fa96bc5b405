// Decode once: each decode unit (HDF5 chunk, Zarr chunk, Parquet row group) is decoded once
// by a fill, however the fill cuts its rows (staging buffers smaller than a unit, host
// chunks, tiles of a plan), counted through ReaderContext::stats. h5py, zarr and pyarrow
// write the files (the interpreter CMake found), numpy's arange is the oracle.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "shardload/codec.hpp"
#include "shardload/device_fill.hpp"
#include "shardload/fill.hpp"
#include "shardload/host_copy_backend.hpp"
#include "shardload/layout.hpp"
#include "shardload/plan.hpp"
#include "util.hpp"

namespace shardload {
namespace {

constexpr std::int64_t kRows = 4096;
constexpr std::int64_t kCols = 64;

// The datasets: 4096 x 64 float32 = arange, in 512 x 16 chunks (8 x 4 = 32 chunks, each
// slab of 512 rows 128 KiB, more than the 16 KiB staging buffers below); Parquet: 4096 rows
// of 4 float64 columns (column c = row * 4 + c) in row groups of 1024 (4 groups).
constexpr const char* kWriter = R"(
import sys, numpy as np, h5py, zarr, numcodecs, pyarrow as pa, pyarrow.parquet as pq
d = sys.argv[1]
a = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
with h5py.File(d + "/data.h5", "w") as f:
    f.create_dataset("data", data=a, chunks=(512, 16), compression="gzip")
z = zarr.create_array(store=d + "/data.zarr", shape=a.shape, chunks=(512, 16), dtype="float32",
                      zarr_format=2, compressors=numcodecs.Zlib(level=1))
z[:] = a
p = np.arange(4096 * 4, dtype=np.float64).reshape(4096, 4)
t = pa.table({"c%d" % c: p[:, c] for c in range(4)})
pq.write_table(t, d + "/data.parquet", row_group_size=1024)
with pq.ParquetWriter(d + "/irregular.parquet", t.schema) as w:
    for lo, hi in ((0, 300), (300, 1000), (1000, 4096)):
        w.write_table(t.slice(lo, hi - lo))
big = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
z = zarr.create_array(store=d + "/one.zarr", shape=big.shape, chunks=big.shape, dtype="float32",
                      zarr_format=2, compressors=numcodecs.Zlib(level=1))
z[:] = big
)";

class DecodeOnce : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    written_ = testing::run_python_writer(*dir_, kWriter, dir_->path());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(written_) << "the writer script failed (h5py, zarr, pyarrow)";
  }

  static Layout layout(const std::string& name) {
    auto l = try_discover_paths({dir_->file(name)});
    EXPECT_TRUE(l) << l.status().message();
    return std::move(l).value();
  }
  // The expected bytes of global rows [lo, hi): arange over the row's elements.
  static std::vector<std::byte> expected(const Layout& l, std::int64_t lo, std::int64_t hi) {
    const std::uint64_t n = l.row_elements();
    std::vector<std::byte> out(static_cast<std::size_t>(hi - lo) * l.row_bytes);
    for (std::uint64_t i = 0; i < static_cast<std::uint64_t>(hi - lo) * n; ++i) {
      const auto v = static_cast<double>(static_cast<std::uint64_t>(lo) * n + i);
      if (l.dtype.size == 4) {
        const auto f = static_cast<float>(v);
        std::memcpy(out.data() + i * 4, &f, 4);
      } else {
        std::memcpy(out.data() + i * 8, &v, 8);
      }
    }
    return out;
  }
  // Device-fills rows [lo, hi) through 16 KiB staging buffers and three reader threads.
  static Status device(const Layout& l, std::int64_t lo, std::int64_t hi, ReaderStats* stats,
                       std::vector<std::byte>* out, std::size_t cache = kDefaultUnitCacheBytes) {
    HostCopyBackend backend;
    auto pool = StagingPool::create(backend, StagingOptions{16 << 10, 4});
    if (!pool) return pool.status();
    DeviceFillOptions o;
    o.reader_threads = 3;
    o.stats = stats;
    o.unit_cache_bytes = cache;
    std::vector<Piece> pieces;
    pieces_for_rows(l.offsets, lo, hi, &pieces);
    out->assign(static_cast<std::size_t>(hi - lo) * l.row_bytes, std::byte{0xA5});
    static int stream = 0;
    return fill_device(l, pieces, out->data(), out->size(), &stream, **pool, o);
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline bool written_ = false;
};

TEST_F(DecodeOnce, DiscoveryCarriesTheUnitGridThroughTheCodec) {
  EXPECT_EQ(layout("data.h5").shards[0].decode_rows, 512);
  EXPECT_EQ(layout("data.zarr").shards[0].decode_rows, 512);
  EXPECT_EQ(layout("data.parquet").shards[0].decode_rows, 1024);
  const Layout l = layout("data.h5");
  auto back = decode_layout(encode_layout(l));
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->shards[0].decode_rows, 512);
  auto view = slice_rows(l, 100, 2000);
  ASSERT_TRUE(view);
  auto view_back = decode_layout(encode_layout(*view));
  ASSERT_TRUE(view_back);
  EXPECT_EQ(view_back->shards[0].decode_rows, 512) << "a view keeps its file's grid";
}

TEST_F(DecodeOnce, Hdf5GzipDeviceFillDecodesEachChunkOnce) {
  const Layout l = layout("data.h5");
  ReaderStats stats;
  std::vector<std::byte> got;
  Status st = device(l, 0, kRows, &stats, &got);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(got, expected(l, 0, kRows));
  EXPECT_EQ(stats.decodes.load(), 32u) << "8 x 4 chunks";
}

TEST_F(DecodeOnce, ZarrDeviceFillDecodesEachChunkOnce) {
  const Layout l = layout("data.zarr");
  ReaderStats stats;
  std::vector<std::byte> got;
  Status st = device(l, 0, kRows, &stats, &got);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(got, expected(l, 0, kRows));
  EXPECT_EQ(stats.decodes.load(), 32u);
}

TEST_F(DecodeOnce, ParquetDeviceFillDecodesEachRowGroupOnce) {
  const Layout l = layout("data.parquet");
  ReaderStats stats;
  std::vector<std::byte> got;
  Status st = device(l, 0, kRows, &stats, &got);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(got, expected(l, 0, kRows));
  EXPECT_EQ(stats.decodes.load(), 4u);
}

TEST_F(DecodeOnce, RowsStartingMidUnitStillDecodeEachUnitOnce) {
  // Rows [700, 3000): chunk rows 512..3071, i.e. 5 slabs of 4 chunks.
  const Layout l = layout("data.h5");
  ReaderStats stats;
  std::vector<std::byte> got;
  Status st = device(l, 700, 3000, &stats, &got);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(got, expected(l, 700, 3000));
  EXPECT_EQ(stats.decodes.load(), 20u);
}

TEST_F(DecodeOnce, TilesOfAChunkAwarePlanDecodeEachChunkOnceInAll) {
  const Layout l = layout("data.h5");
  auto plan = make_plan(l.offsets, 3, 4, unit_grid(l.offsets, l.shards));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->tile_rows % 512, 0);
  ReaderStats device_stats;
  ReaderStats host_stats;
  for (std::int64_t t = 0; t < plan->tiles; ++t) {
    std::vector<std::byte> got;
    Status st = device(l, plan->tile_begin(t), plan->tile_end(t), &device_stats, &got);
    ASSERT_TRUE(st) << st.message();
    EXPECT_EQ(got, expected(l, plan->tile_begin(t), plan->tile_end(t)));
    FillOptions o;
    o.stats = &host_stats;
    std::vector<std::byte> host(got.size());
    ASSERT_TRUE(fill_rows(l, plan->tile_begin(t), plan->tile_end(t), host.data(), o));
    EXPECT_EQ(host, got);
  }
  EXPECT_EQ(device_stats.decodes.load(), 32u);
  EXPECT_EQ(host_stats.decodes.load(), 32u);
}

TEST_F(DecodeOnce, HostRowFillerDecodesEachChunkOnceAcrossCalls) {
  // The non-dense host path fills a tile a bounded buffer at a time; 100-row calls meet
  // each 512-row slab five or six times.
  for (const char* name : {"data.h5", "data.zarr", "data.parquet"}) {
    SCOPED_TRACE(name);
    const Layout l = layout(name);
    ReaderStats stats;
    FillOptions o;
    o.stats = &stats;
    auto filler = RowFiller::create(l, o);
    ASSERT_TRUE(filler) << filler.status().message();
    std::vector<std::byte> got(static_cast<std::size_t>(kRows) * l.row_bytes);
    for (std::int64_t a = 0; a < kRows; a += 100) {
      const std::int64_t b = std::min(kRows, a + 100);
      Status st = (*filler)->fill(a, b, got.data() + static_cast<std::size_t>(a) * l.row_bytes);
      ASSERT_TRUE(st) << st.message();
    }
    EXPECT_EQ(got, expected(l, 0, kRows));
    EXPECT_EQ(stats.decodes.load(), l.format == Format::kParquet ? 4u : 32u);
    EXPECT_GT(stats.unit_cache_hits.load(), 0u);
  }
}

TEST_F(DecodeOnce, IrregularRowGroupsAreFoundFromTheShardAndDecodedOnce) {
  // Groups of 300, 700 and 3096 rows: no grid, decode_unit finds them in the shard's data.
  const Layout l = layout("irregular.parquet");
  EXPECT_EQ(l.shards[0].decode_rows, 0);
  ReaderStats stats;
  FillOptions o;
  o.stats = &stats;
  auto filler = RowFiller::create(l, o);
  ASSERT_TRUE(filler) << filler.status().message();
  std::vector<std::byte> got(static_cast<std::size_t>(kRows) * l.row_bytes);
  for (std::int64_t a = 0; a < kRows; a += 100) {
    const std::int64_t b = std::min(kRows, a + 100);
    Status st = (*filler)->fill(a, b, got.data() + static_cast<std::size_t>(a) * l.row_bytes);
    ASSERT_TRUE(st) << st.message();
  }
  EXPECT_EQ(got, expected(l, 0, kRows));
  EXPECT_EQ(stats.decodes.load(), 3u);
  // One read of rows [250, 4000): the run of whole groups is read straight, the two
  // partial groups through the cache: 3 decodes again.
  ReaderStats once;
  o.stats = &once;
  std::vector<std::byte> part(static_cast<std::size_t>(4000 - 250) * l.row_bytes);
  auto again = RowFiller::create(l, o);
  ASSERT_TRUE(again);
  ASSERT_TRUE((*again)->fill(250, 4000, part.data()));
  EXPECT_EQ(part, expected(l, 250, 4000));
  EXPECT_EQ(once.decodes.load(), 3u);
}

TEST_F(DecodeOnce, UnitOverTheCacheBoundIsReadAsBefore) {
  // A 1 KiB bound holds no 512-row slab: every buffer decodes its chunks again (today's
  // behaviour, documented), and the data is still right.
  const Layout l = layout("data.h5");
  ReaderStats stats;
  std::vector<std::byte> got;
  Status st = device(l, 0, kRows, &stats, &got, 1024);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(got, expected(l, 0, kRows));
  EXPECT_EQ(stats.decodes.load(), 32u * 8u) << "a 128 KiB slab over 16 KiB buffers";
  EXPECT_EQ(stats.unit_cache_hits.load(), 0u);
}

TEST_F(DecodeOnce, OneLargeChunkUnderManyTilesIsOneTile) {
  // One 1 MiB chunk: whatever K, the chunk-aware plan gives one tile, decoded once.
  const Layout l = layout("one.zarr");
  EXPECT_EQ(l.shards[0].decode_rows, kRows);
  auto plan = make_plan(l.offsets, 2, 64, unit_grid(l.offsets, l.shards));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->tiles, 1);
  ReaderStats stats;
  std::vector<std::byte> got;
  Status st = device(l, 0, kRows, &stats, &got);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(got, expected(l, 0, kRows));
  EXPECT_EQ(stats.decodes.load(), 1u);
}

TEST_F(DecodeOnce, FileChangedAfterItsUnitWasCachedIsStillCaught) {
  // The cache never hides a change: the next read of another unit opens the file and
  // compares it with the snapshot.
  const std::string path = dir_->file("changed.h5");
  std::filesystem::copy_file(dir_->file("data.h5"), path);
  auto l = try_discover_paths({path});
  ASSERT_TRUE(l);
  auto filler = RowFiller::create(*l);
  ASSERT_TRUE(filler);
  std::vector<std::byte> got(static_cast<std::size_t>(kRows) * l->row_bytes);
  ASSERT_TRUE((*filler)->fill(0, 10, got.data()));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) + 1);
  Status st = (*filler)->fill(600, 610, got.data());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kChanged);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
}

TEST(DecodeUnitCodec, RejectsAZeroGridAndOldVersions) {
  Shard s;
  s.path = "/d/a.h5";
  s.rows = 10;
  s.decode_rows = 4;
  auto l = assemble_layout(Format::kHdf5, {}, *parse_dtype("float32"), {}, {s});
  ASSERT_TRUE(l);
  auto bytes = encode_layout(*l);
  auto back = decode_layout(bytes);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->shards[0].decode_rows, 4);
  // Version 3 bytes (no grid) are another version.
  auto old = bytes;
  old[3] = '3';
  EXPECT_FALSE(decode_layout(old));
  // The grid's varint is the last byte before the snapshot: find it by re-encoding
  // without a grid and flipping the flag on.
  Shard plain = s;
  plain.decode_rows = 0;
  auto l0 = assemble_layout(Format::kHdf5, {}, *parse_dtype("float32"), {}, {plain});
  auto b0 = encode_layout(*l0);
  ASSERT_EQ(b0.size() + 1, bytes.size());
  std::size_t at = 0;
  while (at < b0.size() && b0[at] == bytes[at]) ++at;  // the flags byte
  ASSERT_LT(at, b0.size());
  auto zero = bytes;
  zero[at + 1] = 0;  // a grid of 0 rows
  auto bad = decode_layout(zero);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("decode unit rows"), std::string::npos)
      << bad.status().message();
  // Every truncation is refused.
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_layout(std::span(bytes.data(), n))) << n;
  }
}

}  // namespace
}  // namespace shardload
