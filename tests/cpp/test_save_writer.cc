// The save's one writer (engine/detail/save_files.hpp): every byte of a saved dataset goes
// into its keys through the store's sinks, whatever the store. A local directory (keys made by
// the launcher, rows written through sinks reopened on them), the in-memory store (the same
// steps) and the upload path of object storage (ShardUpload: each key opened on its first rows,
// here over the in-memory store) give the same keys holding the same bytes, for every format;
// the local one is what the formats' readers read back (test_writers.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/detail/save_files.hpp"
#include "engine/detail/save_remote.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/stores.hpp"
#include "store_util.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using detail::SaveSpec;
using testing::read_key;

// Every key below `prefix` (without it) and its bytes; a prefix (directory) with '/' and no
// bytes.
void contents(Store& store, const std::string& prefix, const std::string& below,
              std::map<std::string, std::string>* out) {
  auto keys = store.list(below);
  ASSERT_TRUE(keys.is_ok()) << keys.status().message();
  for (const std::string& k : *keys) {
    const std::string name = k.substr(prefix.size());
    if (k.back() == '/') {
      (*out)[name] = "";
      contents(store, prefix, k, out);
    } else {
      (*out)[name] = read_key(store, k);
    }
  }
}

std::map<std::string, std::string> contents(Store& store, const std::string& prefix) {
  std::map<std::string, std::string> out;
  contents(store, prefix, prefix, &out);
  return out;
}

SaveSpec spec_of(SaveFormat format, std::vector<std::int64_t> shard_rows) {
  SaveSpec spec;
  spec.format = format;
  spec.dtype = DType{DTypeKind::kFloat, 4};
  spec.trailing = {3};
  spec.row_bytes = 12;
  spec.offsets = {0};
  for (const auto r : shard_rows) spec.offsets.push_back(spec.offsets.back() + r);
  return spec;
}

std::vector<std::byte> rows_of(const SaveSpec& spec) {
  std::vector<std::byte> data(static_cast<std::size_t>(spec.offsets.back()) * spec.row_bytes);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7 % 251 + 1);
  return data;
}

// Each shard's rows in two pieces, the second half first.
template <class Write>
void write_halves(const SaveSpec& spec, const std::vector<std::byte>& data, Write write) {
  const auto rb = static_cast<std::int64_t>(spec.row_bytes);
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    const auto i = static_cast<std::size_t>(s);
    const std::int64_t lo = spec.offsets[i], hi = spec.offsets[i + 1], mid = (lo + hi) / 2;
    write(mid, hi, data.data() + mid * rb);
    write(lo, mid, data.data() + lo * rb);
  }
}

// A local save's directory as the writer leaves it (before any manifest).
std::map<std::string, std::string> local_keys(SaveSpec spec) {
  testing::TempDir dir;
  const auto data = rows_of(spec);
  EXPECT_TRUE(detail::create_shard_files(dir.path(), &spec));
  write_halves(spec, data, [&](std::int64_t lo, std::int64_t hi, const std::byte* src) {
    EXPECT_TRUE(detail::write_rows(dir.path(), spec, lo, hi, src));
  });
  EXPECT_TRUE(detail::write_metadata(dir.path(), spec, {{"_meta.json", "{}"}}));
  auto store = detail::make_local_store(dir.path());
  return contents(*store, "");
}

class SaveWriter : public ::testing::TestWithParam<SaveFormat> {};

TEST_P(SaveWriter, TheMemoryStoreGetsTheKeysOfALocalSave) {
  SaveSpec spec = spec_of(GetParam(), {5, 0, 3, 1});
  const auto want = local_keys(spec);
  ASSERT_FALSE(want.empty());
  detail::MemoryStore store;
  auto staging = store.stage("out", {});
  ASSERT_TRUE(staging.is_ok()) << staging.status().message();
  const auto data = rows_of(spec);
  ASSERT_TRUE(detail::create_shard_keys(store, *staging, &spec));
  write_halves(spec, data, [&](std::int64_t lo, std::int64_t hi, const std::byte* src) {
    ASSERT_TRUE(detail::write_shard_rows(store, *staging, spec, lo, hi, src));
  });
  ASSERT_TRUE(detail::write_metadata(store, *staging, spec, {{"_meta.json", "{}"}}));
  bool published = false;
  ASSERT_TRUE(store.publish(*staging, {}, &published));
  EXPECT_EQ(contents(store, "out/"), want);
}

TEST_P(SaveWriter, AnUploadInOrderGivesTheKeysOfALocalSave) {
  SaveSpec spec = spec_of(GetParam(), {5, 0, 3, 1});
  const auto want = local_keys(spec);
  auto store = std::make_shared<detail::MemoryStore>();
  const auto data = rows_of(spec);
  const auto rb = static_cast<std::int64_t>(spec.row_bytes);
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    const auto i = static_cast<std::size_t>(s);
    auto plan = detail::plan_shard(spec, s);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    detail::ShardUpload upload(store, *plan, detail::save_shard_name(spec.format, s));
    const std::int64_t lo = spec.offsets[i], hi = spec.offsets[i + 1], mid = (lo + hi) / 2;
    ASSERT_TRUE(upload.append(data.data() + lo * rb, mid - lo));
    ASSERT_TRUE(upload.append(data.data() + mid * rb, hi - mid));
    ASSERT_TRUE(upload.commit());
  }
  Staging in_place;
  in_place.in_place = true;
  SaveSpec planned = spec;
  ASSERT_TRUE(detail::plan_shard_keys("", &planned));
  ASSERT_TRUE(detail::write_metadata(*store, in_place, planned, {{"_meta.json", "{}"}}));
  EXPECT_EQ(contents(*store, ""), want);
}

// A Zarr store of several chunks: rows written across a chunk's edge land in both chunks, and
// the edge chunk is stored at full size, zeros after the rows.
TEST(SaveWriterZarr, RowsAcrossChunksAndThePaddedEdgeChunk) {
  SaveSpec spec = spec_of(SaveFormat::kZarr, {7});
  auto plan = detail::plan_shard(spec, 0);
  ASSERT_TRUE(plan.is_ok());
  // One chunk of 7 rows (well under the chunk limit): one key of 7 rows.
  ASSERT_EQ(plan->keys.size(), 1u);
  EXPECT_EQ(plan->keys[0].key, "shard_0000.zarr/0.0");
  EXPECT_EQ(plan->keys[0].size, 7u * 12u);
  // Chunks of 3 rows (as a larger shard gets): rows [2, 7) go to chunks 0, 1 and 2.
  plan->chunk_rows = 3;
  plan->keys = {{"c/0.0", 36}, {"c/1.0", 36}, {"c/2.0", 36}};
  const auto writes = plan->writes(2, 7);
  ASSERT_EQ(writes.size(), 3u);
  EXPECT_EQ(writes[0].key, 0u);
  EXPECT_EQ(writes[0].offset, 24u);
  EXPECT_EQ(writes[0].hi, 3);
  EXPECT_EQ(writes[1].key, 1u);
  EXPECT_EQ(writes[1].offset, 0u);
  EXPECT_EQ(writes[1].hi, 6);
  EXPECT_EQ(writes[2].key, 2u);
  EXPECT_EQ(writes[2].lo, 6);
  EXPECT_EQ(writes[2].hi, 7);
}

// A failure of the memory store at any step of the writer is returned (naming the key) and
// the staging's discard leaves nothing behind.
TEST(SaveWriterFaults, AFailureAtEachStepIsReturnedAndTheDiscardLeavesNothing) {
  for (std::uint64_t step = 1;; ++step) {
    SCOPED_TRACE(step);
    SaveSpec spec = spec_of(SaveFormat::kNpy, {2, 3});
    detail::MemoryStore store;
    auto staging = store.stage("out", {});
    ASSERT_TRUE(staging.is_ok());
    store.fail_step(step, file_error(ErrorCode::kIo, "memory://x", "injected", EIO));
    const auto data = rows_of(spec);
    Status st = detail::create_shard_keys(store, *staging, &spec);
    if (st) st = detail::write_shard_rows(store, *staging, spec, 0, 5, data.data());
    if (st) st = detail::write_metadata(store, *staging, spec);
    if (st) {
      store.discard(*staging, {});
      EXPECT_GT(step, 4u);  // two keys made (a write and a finish each), rows into both
      break;
    }
    EXPECT_NE(st.message().find("injected"), std::string::npos) << st.message();
    store.discard(*staging, {});
    EXPECT_TRUE(testing::everything(store).empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, SaveWriter,
                         ::testing::Values(SaveFormat::kNpy, SaveFormat::kRaw, SaveFormat::kZarr),
                         [](const auto& info) { return std::string(format_name(info.param)); });

}  // namespace
}  // namespace shardload

namespace shardload {
namespace {

// What each upload finished (ShardUpload::written): every key of the shard's plan, at its
// size, in order; and the fixed-size bytes a Legate save carries them in from a point to the
// commit (sized by written_record_bytes for any shard of the spec) give them back, an ETag too
// long for them as "" (not known: neither checked nor deleted).
TEST_P(SaveWriter, AnUploadsFinishedKeysTravelInTheSaveTasksBytesAndBack) {
  SaveSpec spec = spec_of(GetParam(), {5, 0, 3, 1});
  auto store = std::make_shared<detail::MemoryStore>();
  const auto data = rows_of(spec);
  const auto rb = static_cast<std::int64_t>(spec.row_bytes);
  const std::size_t slot = detail::written_record_bytes(spec);
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    const auto i = static_cast<std::size_t>(s);
    auto plan = detail::plan_shard(spec, s);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    detail::ShardUpload upload(store, *plan, detail::save_shard_name(spec.format, s));
    ASSERT_TRUE(
        upload.append(data.data() + spec.offsets[i] * rb, spec.offsets[i + 1] - spec.offsets[i]));
    ASSERT_TRUE(upload.commit());
    std::vector<WrittenKey> want;
    for (const auto& k : plan->keys) want.push_back({k.key, k.size, ""});
    EXPECT_EQ(upload.written(), want) << s;
    // With ETags as a store answers them, one of them longer than the record keeps.
    for (std::size_t k = 0; k < want.size(); ++k) {
      want[k].etag = k == 0 ? std::string(detail::kWrittenEtagMax + 1, 'e')
                            : "\"etag-" + std::to_string(k) + "\"";
    }
    std::vector<std::byte> bytes(slot, std::byte{0x5a});
    detail::encode_written(want, bytes.data(), bytes.size());
    std::vector<WrittenKey> back;
    ASSERT_TRUE(detail::decode_written(bytes.data(), bytes.size(), &back));
    if (!want.empty()) want[0].etag.clear();
    EXPECT_EQ(back, want) << s;
    // And the key begun without an answer (its longest: the slot has room for any of them),
    // the MD5 of its bytes in place of an ETag, after them.
    if (plan->keys.empty()) continue;
    const std::vector<WrittenKey> begun{
        {plan->keys.back().key, plan->keys.back().size, std::string(32, 'f')}};
    std::fill(bytes.begin(), bytes.end(), std::byte{0x5a});
    detail::encode_written(want, bytes.data(), bytes.size(), begun);
    back.clear();
    std::vector<WrittenKey> begun_back;
    ASSERT_TRUE(detail::decode_written(bytes.data(), bytes.size(), &back, &begun_back));
    EXPECT_EQ(back, want) << s;
    EXPECT_EQ(begun_back, begun) << s;
  }
  // Bytes cut short are refused, never read past.
  std::vector<WrittenKey> one{{"shard_0000.npy", 7, "\"x\""}};
  std::vector<std::byte> bytes(slot);
  detail::encode_written(one, bytes.data(), bytes.size());
  std::vector<WrittenKey> back;
  EXPECT_FALSE(detail::decode_written(bytes.data(), 10, &back));
}

}  // namespace
}  // namespace shardload
