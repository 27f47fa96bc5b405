// A store's publish (shardload/storage.hpp: stage, publish, discard), the atomic step of a save,
// on the local POSIX driver and the in-memory store alike; then, in memory, a failure injected
// at each step of a save's writes and publish: nothing becomes visible half-way, and nothing
// outside the destination (and its staging) is written, replaced or deleted.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardload/io.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/stores.hpp"
#include "storage/detail/transports.hpp"
#include "store_util.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using detail::MemoryStore;

using testing::bytes_of;
using testing::everything;
using testing::open_test_store;
using testing::read_key;

// The check of an overwrite that replaces whatever is at `dest`: each key at its generation now,
// the keys below a prefix before it.
Status replace_all(Store& store, const std::string& prefix, std::vector<ReplacedKey>* replaced,
                   std::size_t strip) {
  auto keys = store.list(prefix);
  if (!keys) return keys.status().sys_errno() == ENOENT ? Status::ok() : keys.status();
  for (const std::string& k : *keys) {
    if (k.back() == '/') {
      SHARDLOAD_RETURN_IF_ERROR(replace_all(store, k, replaced, strip));
      replaced->push_back({k.substr(strip), ""});
    } else {
      SHARDLOAD_ASSIGN_OR_RETURN(const KeyInfo info, store.stat(k));
      replaced->push_back({k.substr(strip), info.generation});
    }
  }
  return Status::ok();
}

PublishSteps overwrite_steps(Store& store, const std::string& dest) {
  PublishSteps steps;
  steps.overwrite = true;
  steps.commit_key = "manifest";
  steps.check = [&store, dest](std::vector<ReplacedKey>* replaced) {
    return replace_all(store, dest + "/", replaced, dest.size() + 1);
  };
  return steps;
}

// A save's writes and publish through `store`: two shards (one in a sub-prefix, as a Zarr
// store's chunk), then the commit key written by the seal; on an error, discard.
Status save_through(Store& store, const std::string& dest, const PublishSteps& given,
                    bool* published) {
  *published = false;
  PublishSteps steps = given;
  SHARDLOAD_ASSIGN_OR_RETURN(const Staging staging, store.stage(dest, steps));
  Status st = store.write_staged(staging, "shard_0", bytes_of("new zero"));
  if (st) st = store.write_staged(staging, "store_1/0.0", bytes_of("new one"));
  if (st) {
    steps.seal = [&](const std::string&) {
      return store.write_staged(staging, "manifest", bytes_of("new manifest"));
    };
    st = store.publish(staging, steps, published);
  }
  if (!*published) store.discard(staging, steps);
  return st;
}

class SavePublish : public testing::StoreWithAKeyBeside {};

TEST_P(SavePublish, NothingIsVisibleBeforeThePublishAndAllOfItAfter) {
  Store& store = *store_;
  const auto before = everything(store);
  PublishSteps steps;
  steps.commit_key = "manifest";
  auto staging = store.stage("out", steps);
  ASSERT_TRUE(staging.is_ok()) << staging.status().message();
  EXPECT_FALSE(staging->in_place);
  ASSERT_TRUE(store.write_staged(*staging, "shard_0", bytes_of("zero")));
  ASSERT_TRUE(store.write_staged(*staging, "store_1/0.0", bytes_of("one")));
  EXPECT_FALSE(store.stat("out/shard_0").is_ok());
  EXPECT_FALSE(store.list("out/").is_ok());
  bool sealed_last = false;
  steps.seal = [&](const std::string&) {
    sealed_last = !store.stat("out/shard_0").is_ok();  // still invisible when sealed
    return store.write_staged(*staging, "manifest", bytes_of("m"));
  };
  bool published = false;
  ASSERT_TRUE(store.publish(*staging, steps, &published));
  EXPECT_TRUE(published);
  EXPECT_TRUE(sealed_last);
  EXPECT_EQ(read_key(store, "out/shard_0"), "zero");
  EXPECT_EQ(read_key(store, "out/store_1/0.0"), "one");
  EXPECT_EQ(read_key(store, "out/manifest"), "m");
  auto after = everything(store);
  for (const auto& [k, v] : before) EXPECT_EQ(after[k], v) << k;  // nothing else touched
  std::vector<std::string> staged;
  for (const auto& [k, v] : after) {
    if (k.find(".shardload-tmp-") != std::string::npos) staged.push_back(k);
  }
  EXPECT_TRUE(staged.empty()) << staged.front();
}

TEST_P(SavePublish, AnOverwriteReplacesOnlyTheCheckedKeys) {
  Store& store = *store_;
  bool published = false;
  ASSERT_TRUE(save_through(store, "out", overwrite_steps(store, "out"), &published));
  ASSERT_TRUE(store.write("out/old_shard", bytes_of("old")));
  ASSERT_TRUE(save_through(store, "out", overwrite_steps(store, "out"), &published));
  EXPECT_TRUE(published);
  EXPECT_FALSE(store.stat("out/old_shard").is_ok());
  EXPECT_EQ(read_key(store, "out/shard_0"), "new zero");
  EXPECT_EQ(read_key(store, "keep/x"), "mine");
}

TEST_P(SavePublish, ARefusedCheckPublishesNothingAndDiscardLeavesNothing) {
  Store& store = *store_;
  ASSERT_TRUE(store.write("out/users_file", bytes_of("precious")));
  const auto before = everything(store);
  PublishSteps steps;
  int checks = 0;
  steps.check = [&](std::vector<ReplacedKey>*) {
    // The first check (stage's) passes; the one before the swap refuses, as when a user's
    // file appeared meanwhile.
    return ++checks == 1 ? Status::ok()
                         : file_error(ErrorCode::kIo, "out", "holds a user's file", EEXIST);
  };
  bool published = true;
  const Status st = save_through(store, "out", steps, &published);
  EXPECT_FALSE(st.is_ok());
  EXPECT_FALSE(published);
  EXPECT_EQ(everything(store), before);
}

TEST_P(SavePublish, ADestinationWithADotSegmentIsRefusedBeforeAnythingIsMade) {
  Store& store = *store_;
  const auto before = everything(store);
  for (const char* bad : {"..", ".", "a/../out", "../out", "/out", ""}) {
    const auto staging = store.stage(bad, {});
    EXPECT_FALSE(staging.is_ok()) << bad;
    if (staging) continue;
    EXPECT_EQ(staging.status().code(), ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(everything(store), before);
}

TEST_P(SavePublish, ADamagedStagingIsNeitherPublishedNorDiscarded) {
  Store& store = *store_;
  const auto before = everything(store);
  Staging forged;
  forged.name = "out";
  forged.prefix = "keep/";
  forged.location = GetParam() == "memory" ? "memory://keep/" : dir_.file("keep");
  bool published = true;
  EXPECT_FALSE(store.publish(forged, {}, &published).is_ok());
  EXPECT_FALSE(published);
  store.discard(forged, {});
  EXPECT_EQ(everything(store), before);
}

INSTANTIATE_TEST_SUITE_P(Drivers, SavePublish, ::testing::Values("local", "memory"),
                         [](const auto& info) { return info.param; });

TEST(SavePublishStores, AReadOnlyStoreRefusesToStage) {
  if (detail::http_transport() == nullptr) GTEST_SKIP() << "built without http(s)";
  auto store = open_store("http://127.0.0.1:9/data/");
  ASSERT_TRUE(store.is_ok()) << store.status().message();
  const auto staging = (*store)->stage("out", {});
  ASSERT_FALSE(staging.is_ok());
  EXPECT_EQ(staging.status().sys_errno(), ENOTSUP);
  EXPECT_NE(staging.status().message().find("read-only"), std::string::npos)
      << staging.status().message();
}

// The memory store with an old dataset at "out" and a user's key beside it.
void fill(MemoryStore& store, bool old_dataset) {
  ASSERT_TRUE(store.write("keep/x", bytes_of("mine")));
  ASSERT_TRUE(store.write("outer", bytes_of("beside")));
  if (!old_dataset) return;
  ASSERT_TRUE(store.write("out/shard_0", bytes_of("old zero")));
  ASSERT_TRUE(store.write("out/shard_9", bytes_of("old nine")));
  ASSERT_TRUE(store.write("out/manifest", bytes_of("old manifest")));
}

// Every step of a save (stage, each write, the seal's write, the check before the swap, the
// swap) failed in turn: the error is the injected one, the store is exactly as it was (the old
// dataset whole, or no destination; the keys beside it untouched; no staged key left), and the
// next save succeeds.
void fail_each_step(bool old_dataset) {
  std::uint64_t total = 0;
  {
    MemoryStore clean;
    fill(clean, old_dataset);
    const std::uint64_t base = clean.steps();
    bool published = false;
    ASSERT_TRUE(save_through(clean, "out", overwrite_steps(clean, "out"), &published));
    total = clean.steps() - base;
  }
  ASSERT_EQ(total, 6u);  // stage, two writes, the seal's write, the check, the swap
  for (std::uint64_t n = 0; n < total; ++n) {
    SCOPED_TRACE("step " + std::to_string(n));
    MemoryStore store;
    fill(store, old_dataset);
    const auto before = everything(store);
    store.fail_step(store.steps() + n,
                    file_error(ErrorCode::kIo, "memory://out", "injected failure", EIO));
    bool published = true;
    const Status st = save_through(store, "out", overwrite_steps(store, "out"), &published);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("injected failure"), std::string::npos) << st.message();
    EXPECT_FALSE(published);
    EXPECT_EQ(everything(store), before);
    // The next save goes through.
    ASSERT_TRUE(save_through(store, "out", overwrite_steps(store, "out"), &published));
    EXPECT_EQ(read_key(store, "out/shard_0"), "new zero");
    EXPECT_EQ(read_key(store, "out/manifest"), "new manifest");
    EXPECT_FALSE(store.stat("out/shard_9").is_ok());
    EXPECT_EQ(read_key(store, "keep/x"), "mine");
    EXPECT_EQ(read_key(store, "outer"), "beside");
  }
}

TEST(SavePublishFaults, AFailureAtEachStepOfANewSaveLeavesNothing) { fail_each_step(false); }

TEST(SavePublishFaults, AFailureAtEachStepOfAnOverwriteLeavesTheOldDatasetWhole) {
  fail_each_step(true);
}

// A key put at the destination between the last check and the swap: the swap refuses it and
// replaces nothing (the memory store's swap is one step; locally the exchange's removal keeps
// such a file, LegateSave.TheRemovalOfAReplacedDatasetKeepsWhatAppearedAfterTheCheck).
TEST(SavePublishFaults, AKeyThatAppearsAfterTheCheckStopsTheSwap) {
  MemoryStore store;
  fill(store, true);
  PublishSteps steps = overwrite_steps(store, "out");
  auto staging = store.stage("out", steps);
  ASSERT_TRUE(staging.is_ok());
  ASSERT_TRUE(store.write_staged(*staging, "shard_0", bytes_of("new zero")));
  const auto check = steps.check;
  steps.check = [&](std::vector<ReplacedKey>* replaced) {
    const Status st = check(replaced);
    (void)store.write("out/late", bytes_of("late"));  // after the check, before the swap
    return st;
  };
  bool published = true;
  const Status st = store.publish(*staging, steps, &published);
  EXPECT_FALSE(st.is_ok());
  EXPECT_FALSE(published);
  EXPECT_NE(st.message().find("'late' changed since the check"), std::string::npos) << st.message();
  EXPECT_EQ(read_key(store, "out/shard_0"), "old zero");
  EXPECT_EQ(read_key(store, "out/late"), "late");
}

}  // namespace
}  // namespace shardload
