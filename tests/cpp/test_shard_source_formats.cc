// Every format reads the keys of a Store (ShardSource::of_store) as it reads the same bytes from
// local files: Zarr v2, v3 and sharded v3, HDF5 contiguous and gzip-chunked, Parquet and Arrow
// IPC, written by zarr-python, h5py and pyarrow (the interpreter CMake found) and copied into
// the in-memory store key by key. The local read of the same files is the oracle, and numpy's
// arange (the values the writer stored) the check that the oracle read data. A read the store
// fails, a key written again after the probe or between an open and its read, and a key that
// is not there each fail the read, naming the key.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "shardload/reader.hpp"
#include "shardload/shard_source.hpp"
#include "storage/detail/stores.hpp"
#include "store_util.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using detail::MemoryFault;
using detail::MemoryStore;

constexpr std::int64_t kRows = 50;
constexpr std::int64_t kCols = 6;

// 50 x 6 int32, element (r, c) = (r * 6 + c) * 7 - 100, in every format; the Zarr v2 array
// has rows 45.. unwritten (its last chunk row missing: the fill value -1).
constexpr const char* kWriter = R"(
import sys, numpy as np, h5py, zarr, numcodecs, pyarrow as pa, pyarrow.parquet as pq
import pyarrow.feather as feather
d = sys.argv[1]
a = np.arange(50 * 6, dtype=np.int32).reshape(50, 6) * 7 - 100
with h5py.File(d + "/contiguous.h5", "w") as f:
    f.create_dataset("x", data=a)
with h5py.File(d + "/gzip.h5", "w") as f:
    f.create_dataset("x", data=a, chunks=(8, 4), compression="gzip")
z = zarr.create_array(store=d + "/v2.zarr", shape=a.shape, chunks=(8, 4), dtype="int32",
                      zarr_format=2, compressors=numcodecs.Zlib(level=1), fill_value=-1)
z[:45] = a[:45]
z = zarr.create_array(store=d + "/v3.zarr", shape=a.shape, chunks=(8, 4), dtype="int32",
                      zarr_format=3, fill_value=-1)
z[:] = a
z = zarr.create_array(store=d + "/sharded.zarr", shape=a.shape, shards=(16, 6), chunks=(8, 3),
                      dtype="int32", zarr_format=3, fill_value=-1)
z[:] = a
t = pa.table({"c%d" % c: a[:, c] for c in range(6)})
pq.write_table(t, d + "/data.parquet", row_group_size=16)
feather.write_feather(t, d + "/data.arrow", compression="uncompressed", chunksize=16)
)";

struct Case {
  const char* name;
  Format format;
  std::string key;         // the shard: a file's key, or a Zarr array's prefix
  std::string data_key;    // a key that rows [0, 16) are read from: a chunk, a shard, the file
  std::string probed_key;  // the key whose snapshot the probe keeps (a Zarr array's metadata)
  std::int64_t filled_from = kRows;  // rows from here on hold the fill value
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const Case kCases[] = {
    {"ZarrV2", Format::kZarr, "v2.zarr", "v2.zarr/1.0", "v2.zarr/.zarray", 45},
    {"ZarrV3", Format::kZarr, "v3.zarr", "v3.zarr/c/1/0", "v3.zarr/zarr.json"},
    {"ZarrV3Sharded", Format::kZarr, "sharded.zarr", "sharded.zarr/c/0/0",
     "sharded.zarr/zarr.json"},
    {"Hdf5Contiguous", Format::kHdf5, "contiguous.h5", "contiguous.h5", "contiguous.h5"},
    {"Hdf5GzipChunked", Format::kHdf5, "gzip.h5", "gzip.h5", "gzip.h5"},
    {"Parquet", Format::kParquet, "data.parquet", "data.parquet", "data.parquet"},
    {"ArrowIpc", Format::kArrow, "data.arrow", "data.arrow", "data.arrow"},
};

// A shard probed by a reader over a source, kept for reads after the store is changed.
struct Opened {
  std::unique_ptr<ShardReader> reader;
  ShardProbe probe;
};

Result<Opened> open_shard(std::shared_ptr<ShardSource> source, Format format,
                          const std::string& key) {
  ReaderContext ctx;
  ctx.source = std::move(source);
  auto reader = make_reader(format, {}, ctx);
  if (!reader) return reader.status();
  auto probe = (*reader)->probe(key);
  if (!probe) return probe.status();
  return Opened{std::move(*reader), std::move(*probe)};
}

// Rows [lo, hi) of the opened shard as int32 values (its snapshots checked, as a load does).
Status read(Opened& o, std::int64_t lo, std::int64_t hi, std::vector<std::int32_t>* out) {
  ReadSpec spec;
  spec.dtype = o.probe.dtype;
  spec.trailing_shape = o.probe.trailing_shape;
  std::uint64_t elements = 1;
  for (const std::int64_t d : spec.trailing_shape) elements *= static_cast<std::uint64_t>(d);
  spec.row_bytes = spec.dtype.size * elements;
  out->assign(static_cast<std::size_t>(hi - lo) * elements, 0x5A5A5A5A);
  return o.reader->read_rows(spec, o.probe.shard, lo, hi,
                             reinterpret_cast<std::byte*>(out->data()));
}

class StoreKeys : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const std::string files = dir_->file("files");
    std::filesystem::create_directories(files);
    written_ = testing::run_python_writer(*dir_, kWriter, files);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(written_) << "the writer script failed (h5py, zarr, pyarrow)";
    // Every file the writer made, as the key of its path below the directory.
    ASSERT_TRUE(testing::put_tree(*store_, dir_->file("files"), ""));
  }

  static std::string local(const std::string& key) { return dir_->file("files/" + key); }

  // The store's key opened by the case's reader over the store.
  Opened open_key() {
    auto o = open_shard(ShardSource::of_store(store_), GetParam().format, GetParam().key);
    EXPECT_TRUE(o) << o.status().message();
    return o ? std::move(*o) : Opened{};
  }

  // What numpy wrote for rows [lo, hi).
  static std::vector<std::int32_t> written(std::int64_t lo, std::int64_t hi) {
    std::vector<std::int32_t> v;
    for (std::int64_t r = lo; r < hi; ++r) {
      for (std::int64_t c = 0; c < kCols; ++c) {
        v.push_back(r >= GetParam().filled_from
                        ? -1
                        : static_cast<std::int32_t>((r * kCols + c) * 7 - 100));
      }
    }
    return v;
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline bool written_ = false;
  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
};

TEST_P(StoreKeys, ReadsAStoresKeysAsItReadsTheLocalFiles) {
  const Case& c = GetParam();
  auto files = open_shard(ShardSource::files(), c.format, local(c.key));
  ASSERT_TRUE(files) << files.status().message();
  auto keys = open_shard(ShardSource::of_store(store_), c.format, c.key);
  ASSERT_TRUE(keys) << keys.status().message();
  EXPECT_EQ(keys->probe.dtype, files->probe.dtype);
  EXPECT_EQ(keys->probe.trailing_shape, files->probe.trailing_shape);
  EXPECT_EQ(keys->probe.shard.rows, files->probe.shard.rows);
  EXPECT_EQ(keys->probe.decode_rows, files->probe.decode_rows);
  ASSERT_EQ(files->probe.shard.rows, kRows);
  const std::uint64_t before = store_->reads();
  for (const auto& [lo, hi] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, kRows}, {3, 29}, {17, 18}, {40, kRows}}) {
    std::vector<std::int32_t> want;
    std::vector<std::int32_t> got;
    const Status from_files = read(*files, lo, hi, &want);
    ASSERT_TRUE(from_files) << from_files.message();
    ASSERT_EQ(want, written(lo, hi)) << "the local read, rows [" << lo << ", " << hi << ")";
    const Status from_keys = read(*keys, lo, hi, &got);
    ASSERT_TRUE(from_keys) << "rows [" << lo << ", " << hi << "): " << from_keys.message();
    EXPECT_EQ(got, want) << "rows [" << lo << ", " << hi << ")";
  }
  EXPECT_GT(store_->reads(), before) << "the rows were read from the store";
}

TEST_P(StoreKeys, AReadTheStoreFailsNamesTheKey) {
  const Case& c = GetParam();
  Opened o = open_key();
  ASSERT_TRUE(o.reader);
  MemoryFault fault;
  fault.fail = Status(ErrorCode::kIo, "injected: the store is gone");
  fault.fail_times = 1 << 20;
  store_->inject(c.data_key, fault);
  std::vector<std::int32_t> got;
  const Status st = read(o, 0, 16, &got);
  ASSERT_FALSE(st) << "rows read from a key whose every read fails";
  EXPECT_EQ(st.code(), ErrorCode::kIo) << st.message();
  EXPECT_NE(st.message().find(store_->describe(c.data_key)), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("injected: the store is gone"), std::string::npos) << st.message();
  // The store answers again: the same reader reads the rows.
  store_->inject(c.data_key, MemoryFault{});
  const Status again = read(o, 0, 16, &got);
  ASSERT_TRUE(again) << again.message();
  EXPECT_EQ(got, written(0, 16));
}

TEST_P(StoreKeys, AKeyWrittenAgainAfterItsProbeIsChanged) {
  const Case& c = GetParam();
  Opened o = open_key();
  ASSERT_TRUE(o.reader);
  // The same bytes written again: another generation, as a file touched or an object uploaded
  // again between a discovery and a load.
  FileInfo info;
  auto bytes = ShardSource::of_store(store_)->read_small(c.probed_key, 1 << 20, &info);
  ASSERT_TRUE(bytes) << bytes.status().message();
  ASSERT_TRUE(store_->write(c.probed_key, std::as_bytes(std::span(bytes->data(), bytes->size()))));
  std::vector<std::int32_t> got;
  const Status st = read(o, 0, 16, &got);
  ASSERT_FALSE(st) << "rows read from another generation than the probe's";
  EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
  EXPECT_NE(st.message().find(store_->describe(c.probed_key) + ": changed since discovery"),
            std::string::npos)
      << st.message();
}

TEST_P(StoreKeys, AKeyWrittenAgainBetweenItsOpenAndItsReadIsChanged) {
  const Case& c = GetParam();
  // Each stat of the key is followed by a write of it: what an open saw is gone by its read.
  MemoryFault fault;
  fault.change_after_stat = true;
  store_->inject(c.probed_key, fault);
  auto o = open_shard(ShardSource::of_store(store_), c.format, c.key);
  ASSERT_FALSE(o) << "a probe read another generation than its open's";
  EXPECT_EQ(o.status().code(), ErrorCode::kChanged) << o.status().message();
  EXPECT_NE(o.status().message().find(store_->describe(c.probed_key)), std::string::npos)
      << o.status().message();
}

TEST_P(StoreKeys, AMissingKeyIsAClearError) {
  const Case& c = GetParam();
  {
    // Nothing under the shard's key.
    auto o = open_shard(ShardSource::of_store(std::make_shared<MemoryStore>()), c.format, c.key);
    ASSERT_FALSE(o);
    EXPECT_NE(o.status().message().find(c.probed_key), std::string::npos) << o.status().message();
  }
  // The key removed after the probe.
  Opened o = open_key();
  ASSERT_TRUE(o.reader);
  ASSERT_TRUE(store_->remove(c.probed_key));
  std::vector<std::int32_t> got;
  const Status st = read(o, 0, 16, &got);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find(store_->describe(c.probed_key)), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("no such key"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Formats, StoreKeys, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace shardload
