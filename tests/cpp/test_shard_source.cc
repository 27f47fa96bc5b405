// The readers read keys of a ShardSource: one made over a Store reads what the store holds, and
// a store that fails, lies or changes makes the reader fail, naming the key.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "shardload/npy.hpp"
#include "shardload/reader.hpp"
#include "shardload/shard_source.hpp"
#include "storage/detail/stores.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using detail::MemoryFault;
using detail::MemoryStore;

// 4 x 3 int32 values 0..11 as a .npy file, as numpy writes it.
std::string npy_bytes(std::vector<std::int32_t>* values) {
  values->resize(12);
  std::iota(values->begin(), values->end(), 0);
  std::string bytes = encode_npy_header(*parse_dtype("int32"), {4, 3});
  bytes.append(reinterpret_cast<const char*>(values->data()), values->size() * 4);
  return bytes;
}

void put(MemoryStore& store, const std::string& key, const std::string& bytes) {
  ASSERT_TRUE(store.write(key, std::as_bytes(std::span(bytes.data(), bytes.size()))));
}

struct Loaded {
  Status status;
  std::vector<std::int32_t> rows;
};

// Reads rows [lo, hi) of the shard `probe` found, with `reader` (3 columns a row).
Loaded read_probed(ShardReader& reader, const ShardProbe& probe, const FormatOptions& options,
                   std::int64_t lo, std::int64_t hi) {
  ReadSpec spec;
  spec.options = options;
  spec.dtype = probe.dtype;
  spec.trailing_shape = probe.trailing_shape;
  spec.row_bytes = probe.dtype.size * 3;
  Loaded out;
  out.rows.resize(static_cast<std::size_t>(hi - lo) * 3);
  out.status =
      reader.read_rows(spec, probe.shard, lo, hi, reinterpret_cast<std::byte*>(out.rows.data()));
  return out;
}

// Probes `key` with a reader of `format` over `source` and reads rows [lo, hi) of it.
Loaded read_key(const std::shared_ptr<ShardSource>& source, Format format,
                const FormatOptions& options, const std::string& key, std::int64_t lo,
                std::int64_t hi) {
  ReaderContext ctx;
  ctx.source = source;
  auto reader = make_reader(format, options, ctx);
  if (!reader) return {reader.status(), {}};
  auto probe = (*reader)->probe(key);
  if (!probe) return {probe.status(), {}};
  return read_probed(**reader, *probe, options, lo, hi);
}

TEST(ShardSource, NpyReaderReadsAStoresKey) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::int32_t> values;
  put(*store, "d/a.npy", npy_bytes(&values));
  const Loaded got = read_key(ShardSource::of_store(store), Format::kNpy, {}, "d/a.npy", 1, 3);
  ASSERT_TRUE(got.status) << got.status.message();
  EXPECT_EQ(got.rows, std::vector<std::int32_t>(values.begin() + 3, values.begin() + 9));
}

TEST(ShardSource, RawReaderReadsAStoresKey) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::int32_t> values(12);
  std::iota(values.begin(), values.end(), 100);
  put(*store, "d/a.bin", std::string(reinterpret_cast<const char*>(values.data()), 48));
  FormatOptions o;
  o.dtype = *parse_dtype("int32");
  o.trailing_shape = std::vector<std::int64_t>{3};
  const Loaded got = read_key(ShardSource::of_store(store), Format::kRaw, o, "d/a.bin", 2, 4);
  ASSERT_TRUE(got.status) << got.status.message();
  EXPECT_EQ(got.rows, std::vector<std::int32_t>(values.begin() + 6, values.end()));
}

TEST(ShardSource, AStoresFailedReadFailsTheReaderNamingTheKey) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::int32_t> values;
  put(*store, "d/a.npy", npy_bytes(&values));
  auto source = ShardSource::of_store(store);
  ReaderContext ctx;
  ctx.source = source;
  auto reader = make_reader(Format::kNpy, {}, ctx);
  ASSERT_TRUE(reader);
  auto probe = (*reader)->probe("d/a.npy");
  ASSERT_TRUE(probe) << probe.status().message();
  MemoryFault fault;
  fault.fail = Status(ErrorCode::kIo, "injected: the disk is gone");
  fault.fail_times = 1;
  store->inject("d/a.npy", fault);
  const Status st = read_probed(**reader, *probe, {}, 0, 4).status;
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kIo) << st.message();
  EXPECT_NE(st.message().find(store->describe("d/a.npy")), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("injected: the disk is gone"), std::string::npos) << st.message();
  // The fault was once: the next read is the store's bytes.
  const Loaded again = read_probed(**reader, *probe, {}, 0, 4);
  ASSERT_TRUE(again.status) << again.status.message();
  EXPECT_EQ(again.rows, values);
}

TEST(ShardSource, AStoreThatAnswersShortIsAnErrorNotData) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::int32_t> values;
  put(*store, "d/a.npy", npy_bytes(&values));
  MemoryFault fault;
  fault.short_by = 5;
  store->inject("d/a.npy", fault);
  const Loaded got = read_key(ShardSource::of_store(store), Format::kNpy, {}, "d/a.npy", 0, 4);
  ASSERT_FALSE(got.status);
  EXPECT_EQ(got.status.code(), ErrorCode::kIo) << got.status.message();
}

TEST(ShardSource, AKeyRewrittenAfterItsProbeIsChanged) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::int32_t> values;
  const std::string bytes = npy_bytes(&values);
  put(*store, "d/a.npy", bytes);
  ReaderContext ctx;
  ctx.source = ShardSource::of_store(store);
  auto reader = make_reader(Format::kNpy, {}, ctx);
  ASSERT_TRUE(reader);
  auto probe = (*reader)->probe("d/a.npy");
  ASSERT_TRUE(probe) << probe.status().message();
  // The same bytes written again: another generation, as a file touched or an object uploaded
  // again between a discovery and a load.
  put(*store, "d/a.npy", bytes);
  const Status st = read_probed(**reader, *probe, {}, 0, 4).status;
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
  EXPECT_NE(st.message().find(store->describe("d/a.npy") + ": changed since discovery"),
            std::string::npos)
      << st.message();
}

TEST(ShardSource, AKeyRewrittenWhileItIsReadFailsTheRead) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::int32_t> values;
  put(*store, "d/a.npy", npy_bytes(&values));
  MemoryFault fault;
  fault.change_after_stat = true;  // a new generation right after each stat
  store->inject("d/a.npy", fault);
  const Loaded got = read_key(ShardSource::of_store(store), Format::kNpy, {}, "d/a.npy", 0, 4);
  ASSERT_FALSE(got.status);
  EXPECT_NE(got.status.message().find(store->describe("d/a.npy")), std::string::npos)
      << got.status.message();
  EXPECT_NE(got.status.message().find("generation"), std::string::npos) << got.status.message();
}

// A key opened with the snapshot discovery took (open_known) is held to that generation: a key
// written again after the open fails its read, one written again before it fails the open,
// each kChanged naming the key; neither reads the new bytes.
TEST(ShardSource, AKeyOpenedByItsKnownSnapshotIsHeldToItsGeneration) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::int32_t> values;
  const std::string bytes = npy_bytes(&values);
  put(*store, "d/a.npy", bytes);
  auto source = ShardSource::of_store(store);
  const auto snapshot = source->stat("d/a.npy");
  ASSERT_TRUE(snapshot) << snapshot.status().message();
  std::string other = bytes;  // the same size, its last value's low bit flipped
  other.back() = static_cast<char>(other.back() ^ 1);
  {
    auto f = source->open_known("d/a.npy", *snapshot);
    ASSERT_TRUE(f) << f.status().message();
    std::string got(bytes.size(), '\0');
    ASSERT_TRUE(f->read_exact(got.data(), got.size(), 0));
    EXPECT_EQ(got, bytes);
    put(*store, "d/a.npy", other);
    const Status st = f->read_exact(got.data(), got.size(), 0);
    ASSERT_FALSE(st) << "read the bytes of a key written after its open";
    EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
    EXPECT_NE(st.message().find(store->describe("d/a.npy")), std::string::npos) << st.message();
  }
  auto f = source->open_known("d/a.npy", *snapshot);
  ASSERT_FALSE(f) << "opened a key written since its snapshot";
  EXPECT_EQ(f.status().code(), ErrorCode::kChanged) << f.status().message();
  EXPECT_NE(f.status().message().find(store->describe("d/a.npy") + ": changed since discovery"),
            std::string::npos)
      << f.status().message();
  EXPECT_NE(f.status().message().find("generation differs"), std::string::npos)
      << f.status().message();
  // Opened with the key's snapshot now, it reads what the key now holds.
  const auto now = source->stat("d/a.npy");
  ASSERT_TRUE(now) << now.status().message();
  auto g = source->open_known("d/a.npy", *now);
  ASSERT_TRUE(g) << g.status().message();
  std::string got(other.size(), '\0');
  ASSERT_TRUE(g->read_exact(got.data(), got.size(), 0));
  EXPECT_EQ(got, other);
}

TEST(ShardSource, AKeyOutsideTheStoreIsRefused) {
  auto store = std::make_shared<MemoryStore>();
  auto source = ShardSource::of_store(store);
  FileInfo info;
  auto f = source->open_stat("../etc/passwd", &info);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.status().code(), ErrorCode::kInvalidArgument) << f.status().message();
}

TEST(ShardSource, LocalFilesKeepTheKernelsDescriptor) {
  testing::TempDir dir;
  const std::string path = dir.file("a.bin");
  testing::write_file(path, std::string(16, 'x'));
  FileInfo info;
  auto files = ShardSource::files();
  auto f = files->open_stat(path, &info);
  ASSERT_TRUE(f) << f.status().message();
  EXPECT_EQ(info.size, 16u);
  EXPECT_TRUE(files->kernel_descriptor(*f));
  EXPECT_FALSE(files->round_trips(path));
  auto store = std::make_shared<MemoryStore>();
  put(*store, "a.bin", std::string(16, 'x'));
  auto keys = ShardSource::of_store(store);
  auto k = keys->open_stat("a.bin", &info);
  ASSERT_TRUE(k) << k.status().message();
  EXPECT_FALSE(keys->kernel_descriptor(*k));
}

}  // namespace
}  // namespace shardload
