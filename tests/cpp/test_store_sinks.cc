// A store's sinks (shardload/storage.hpp: Store::open_sink, KeySink): a key of a staging written
// at its size by positional writes, on the local POSIX driver and the in-memory store alike;
// then, in memory, a failure injected at each step of a save written through sinks (a sink's
// write, its finish, the publish): nothing becomes visible and nothing is left. The s3:// sink
// is run against a real S3 server by the save tests (tests/python/test_s3_save.py); here only
// its failures are injected, through a stand-in ObjectStore.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/detail/save_files.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/object_store.hpp"
#include "storage/detail/stores.hpp"
#include "storage/detail/transports.hpp"
#include "store_util.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using detail::MemoryStore;
using detail::ObjectEntry;
using detail::ObjectStore;
using detail::ObjectWriter;
using testing::bytes_of;
using testing::everything;
using testing::open_test_store;
using testing::read_key;
using testing::walk;

// The keys of `staging` (below its prefix) as the store lists them now.
std::map<std::string, std::string> staged_keys(Store& store, const Staging& staging) {
  std::map<std::string, std::string> out;
  walk(store, staging.prefix, &out);
  return out;
}

Status write_text(KeySink& sink, std::uint64_t offset, const std::string& text) {
  return sink.write(offset, bytes_of(text));
}

class StoreSinks : public testing::StoreWithAKeyBeside {};

TEST_P(StoreSinks, WritesInAnyOrderMakeTheKeyAndUnwrittenBytesAreZeros) {
  Store& store = *store_;
  auto staging = store.stage("out", {});
  ASSERT_TRUE(staging.is_ok()) << staging.status().message();
  auto sink = store.open_sink(*staging, "shard_0", 10);
  ASSERT_TRUE(sink.is_ok()) << sink.status().message();
  EXPECT_EQ((*sink)->size(), 10u);
  ASSERT_TRUE(write_text(**sink, 6, "ghij"));
  ASSERT_TRUE(write_text(**sink, 0, "ab"));
  ASSERT_TRUE((*sink)->finish());
  // A key in a sub-prefix (a Zarr store's chunk): its prefix is made.
  auto chunk = store.open_sink(*staging, "store_1/0.0", 3);
  ASSERT_TRUE(chunk.is_ok()) << chunk.status().message();
  ASSERT_TRUE(write_text(**chunk, 0, "one"));
  ASSERT_TRUE((*chunk)->finish());
  EXPECT_FALSE(store.stat("out/shard_0").is_ok());  // nothing at the destination yet
  bool published = false;
  ASSERT_TRUE(store.publish(*staging, {}, &published));
  ASSERT_TRUE(published);
  EXPECT_EQ(read_key(store, "out/shard_0"), std::string("ab\0\0\0\0ghij", 10));
  EXPECT_EQ(read_key(store, "out/store_1/0.0"), "one");
  EXPECT_EQ(read_key(store, "keep/x"), "mine");
}

TEST_P(StoreSinks, AnAbortedOrDroppedSinkLeavesNothing) {
  Store& store = *store_;
  const auto before = everything(store);
  auto staging = store.stage("out", {});
  ASSERT_TRUE(staging.is_ok()) << staging.status().message();
  {
    auto sink = store.open_sink(*staging, "shard_0", 8);
    ASSERT_TRUE(sink.is_ok()) << sink.status().message();
    ASSERT_TRUE(write_text(**sink, 0, "half"));
    (*sink)->abort();
    EXPECT_FALSE(write_text(**sink, 4, "more").is_ok());  // an aborted sink takes no bytes
    EXPECT_FALSE((*sink)->finish().is_ok());
  }
  {
    auto sink = store.open_sink(*staging, "store_1/0.0", 8);
    ASSERT_TRUE(sink.is_ok()) << sink.status().message();
    ASSERT_TRUE(write_text(**sink, 0, "half"));
  }  // destroyed unfinished: aborted
  std::map<std::string, std::string> left = staged_keys(store, *staging);
  std::erase_if(left, [](const auto& kv) { return kv.first.back() == '/'; });  // a made prefix
  EXPECT_TRUE(left.empty()) << left.begin()->first;
  store.discard(*staging, {});
  EXPECT_EQ(everything(store), before);
}

TEST_P(StoreSinks, AWritePastTheKeysSizeIsRefusedAndWritesNothing) {
  Store& store = *store_;
  auto staging = store.stage("out", {});
  ASSERT_TRUE(staging.is_ok()) << staging.status().message();
  auto sink = store.open_sink(*staging, "shard_0", 4);
  ASSERT_TRUE(sink.is_ok()) << sink.status().message();
  for (const auto& [offset, text] :
       std::vector<std::pair<std::uint64_t, std::string>>{{2, "abc"}, {5, "a"}, {~0ull, "a"}}) {
    const Status st = write_text(**sink, offset, text);
    ASSERT_FALSE(st.is_ok()) << offset;
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("passes the key's size of 4 bytes"), std::string::npos)
        << st.message();
  }
  ASSERT_TRUE(write_text(**sink, 0, "abcd"));
  ASSERT_TRUE((*sink)->finish());
  bool published = false;
  ASSERT_TRUE(store.publish(*staging, {}, &published));
  EXPECT_EQ(read_key(store, "out/shard_0"), "abcd");
}

TEST_P(StoreSinks, ThreadsWriteTheirRangesAtOnce) {
  Store& store = *store_;
  auto staging = store.stage("out", {});
  ASSERT_TRUE(staging.is_ok()) << staging.status().message();
  constexpr std::size_t kPiece = 1 << 16, kThreads = 4;
  auto sink = store.open_sink(*staging, "shard_0", kPiece * kThreads);
  ASSERT_TRUE(sink.is_ok()) << sink.status().message();
  std::string expected;
  for (std::size_t t = 0; t < kThreads; ++t) expected += std::string(kPiece, char('a' + t));
  std::vector<std::thread> threads;
  std::vector<Status> results(kThreads, Status::ok());
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread's range in pieces, from its end backwards.
      for (std::size_t p = 4; p-- > 0;) {
        const std::size_t at = t * kPiece + p * (kPiece / 4);
        const Status st = (*sink)->write(at, bytes_of(expected.substr(at, kPiece / 4)));
        if (!st) results[t] = st;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const Status& st : results) ASSERT_TRUE(st) << st.message();
  ASSERT_TRUE((*sink)->finish());
  bool published = false;
  ASSERT_TRUE(store.publish(*staging, {}, &published));
  EXPECT_EQ(read_key(store, "out/shard_0"), expected);
}

TEST_P(StoreSinks, ABadKeyIsRefusedBeforeAnythingIsMade) {
  Store& store = *store_;
  auto staging = store.stage("out", {});
  ASSERT_TRUE(staging.is_ok()) << staging.status().message();
  const auto before = everything(store);
  for (const char* bad : {"../x", "a/./b", "a//b", "/x"}) {
    const auto sink = store.open_sink(*staging, bad, 1);
    ASSERT_FALSE(sink.is_ok()) << bad;
    EXPECT_EQ(sink.status().code(), ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(everything(store), before);
  store.discard(*staging, {});
}

// A key made by one sink and finished is filled by others reopened on it (what the other
// ranks and workers of a save do), each writing its range; an aborted or failed reopened sink
// leaves the key to the staging, bytes written included.
TEST_P(StoreSinks, AReopenedSinkWritesIntoTheStagedKeyAndAnAbortLeavesIt) {
  Store& store = *store_;
  auto staging = store.stage("out", {});
  ASSERT_TRUE(staging.is_ok()) << staging.status().message();
  auto made = store.open_sink(*staging, "s.zarr/0.0", 10);
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  ASSERT_TRUE(write_text(**made, 0, "h"));
  ASSERT_TRUE((*made)->finish());
  auto first = store.reopen_sink(*staging, "s.zarr/0.0");
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  EXPECT_EQ((*first)->size(), 10u);
  auto second = store.reopen_sink(*staging, "s.zarr/0.0");
  ASSERT_TRUE(second.is_ok()) << second.status().message();
  ASSERT_TRUE(write_text(**second, 6, "ghij"));
  ASSERT_TRUE(write_text(**first, 1, "bc"));
  EXPECT_EQ(write_text(**first, 8, "xyz").code(), ErrorCode::kInvalidArgument);  // past the size
  ASSERT_TRUE((*first)->finish());
  (*second)->abort();
  second->reset();
  EXPECT_EQ(read_key(store, staging->prefix + "s.zarr/0.0"), std::string("hbc\0\0\0ghij", 10));
  // A key nobody made is no reopened sink's.
  const auto missing = store.reopen_sink(*staging, "s.zarr/1.0");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kIo);
  EXPECT_NE(missing.status().message().find("s.zarr/1.0"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(read_key(store, staging->prefix + "s.zarr/1.0"), "<missing>");
  store.discard(*staging, {});
}

INSTANTIATE_TEST_SUITE_P(Drivers, StoreSinks, ::testing::Values("local", "memory"),
                         [](const auto& info) { return info.param; });

// A local store in a temporary directory, with a staging of "out" made in it.
class StoreSinksLocal : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = open_store(dir_.path());
    ASSERT_TRUE(store.is_ok()) << store.status().message();
    store_ = std::move(*store);
    auto staging = store_->stage("out", {});
    ASSERT_TRUE(staging.is_ok()) << staging.status().message();
    staging_ = *std::move(staging);
  }

  testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  Staging staging_;
};

TEST_F(StoreSinksLocal, AKeyAlreadyThereIsNotASinksAndIsLeftAlone) {
  ASSERT_TRUE(store_->write_staged(staging_, "shard_0", bytes_of("theirs")));
  const auto sink = store_->open_sink(staging_, "shard_0", 4);
  ASSERT_FALSE(sink.is_ok());
  EXPECT_EQ(sink.status().sys_errno(), EEXIST);
  EXPECT_EQ(read_key(*store_, staging_.prefix + "shard_0"), "theirs");
  store_->discard(staging_, {});
}

TEST_F(StoreSinksLocal, TheFileIsMadeAtItsSizeWhenTheSinkOpens) {
  auto sink = store_->open_sink(staging_, "shard_0", 1000);
  ASSERT_TRUE(sink.is_ok()) << sink.status().message();
  auto info = store_->stat(staging_.prefix + "shard_0");
  ASSERT_TRUE(info.is_ok()) << info.status().message();
  EXPECT_EQ(info->size, 1000u);
  (*sink)->abort();
  EXPECT_FALSE(store_->stat(staging_.prefix + "shard_0").is_ok());
  store_->discard(staging_, {});
}

// Several processes write one staged local file, each through a sink of its own on the file
// the launcher's sink made (as the ranks of a Legate save write one shard): pwrite(2) at
// disjoint offsets of one file, with no lock, is what makes that safe.
TEST_F(StoreSinksLocal, SeveralProcessesWriteOneStagedFile) {
  constexpr int kProcesses = 4;
  constexpr std::size_t kEach = 1 << 16;
  {
    auto made = store_->open_sink(staging_, "shard_0", kProcesses * kEach);
    ASSERT_TRUE(made.is_ok()) << made.status().message();
    ASSERT_TRUE((*made)->finish());
  }
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child has only the staging's plain values and the store's location.
      auto own = open_store(dir_.path());
      if (!own.is_ok()) ::_exit(2);
      auto sink = (*own)->reopen_sink(staging_, "shard_0");
      if (!sink.is_ok()) ::_exit(3);
      const std::string part(kEach, static_cast<char>('a' + p));
      if (!(*sink)->write(p * kEach, bytes_of(part)).is_ok() || !(*sink)->finish().is_ok()) {
        ::_exit(4);
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  std::string want;
  for (int p = 0; p < kProcesses; ++p) want += std::string(kEach, static_cast<char>('a' + p));
  EXPECT_EQ(read_key(*store_, staging_.prefix + "shard_0"), want);
  store_->discard(staging_, {});
}

// A file put in a staged key's place (not a regular file) is refused, not waited on.
TEST_F(StoreSinksLocal, AReopenedSinkRefusesWhatIsNotARegularFile) {
  const std::string fifo = staging_.location + "/shard_0";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto sink = store_->reopen_sink(staging_, "shard_0");
  ASSERT_FALSE(sink.is_ok());
  EXPECT_EQ(sink.status().code(), ErrorCode::kIo);
  EXPECT_NE(sink.status().message().find(fifo), std::string::npos) << sink.status().message();
  store_->discard(staging_, {});
}

// A staged key's file replaced during the save by another regular file (a hard link to a file
// outside the staging, renamed over it) is refused when a sink is reopened on it: nothing is
// written into the outside file.
TEST_F(StoreSinksLocal, AReopenedSinkRefusesAnotherFileLinkedIntoItsPlace) {
  {
    auto made = store_->open_sink(staging_, "shard_0", 4);
    ASSERT_TRUE(made.is_ok()) << made.status().message();
    ASSERT_TRUE((*made)->finish());
  }
  ASSERT_TRUE(store_->write("outside", bytes_of("keep")));
  const std::string staged = staging_.location + "/shard_0";
  const std::string tmp = staging_.location + "/.x";
  ASSERT_EQ(::link((dir_.path() + "/outside").c_str(), tmp.c_str()), 0);
  ASSERT_EQ(::rename(tmp.c_str(), staged.c_str()), 0);
  const auto sink = store_->reopen_sink(staging_, "shard_0");
  ASSERT_FALSE(sink.is_ok());
  EXPECT_EQ(sink.status().code(), ErrorCode::kIo);
  EXPECT_NE(sink.status().message().find(staged), std::string::npos) << sink.status().message();
  EXPECT_NE(sink.status().message().find("not the file the save made"), std::string::npos)
      << sink.status().message();
  EXPECT_EQ(read_key(*store_, "outside"), "keep");
  store_->discard(staging_, {});
  EXPECT_EQ(read_key(*store_, "outside"), "keep");
}

// The keys a save made, their files' identities carried with the spec (encoded, as it
// travels to a Dask worker or a Legate task): a writer in another process, whose table knows
// none of them, refuses a key whose file is another one (a hard link to a file outside the
// destination renamed into the staging) before writing into it. Another process is seen here
// through another spelling of the staging's path (a link to it), which this process's table
// does not hold either.
TEST_F(StoreSinksLocal, AWriterOfAnotherProcessRefusesAnotherFileLinkedIntoAStagedKey) {
  detail::SaveSpec spec;
  spec.format = SaveFormat::kRaw;
  spec.dtype = DType{DTypeKind::kFloat, 8};
  spec.row_bytes = 8;
  spec.offsets = {0, 4};
  ASSERT_TRUE(detail::create_shard_files(staging_.location, &spec));
  const auto travelled = detail::SaveSpec::decode(spec.encode());
  ASSERT_TRUE(travelled.is_ok()) << travelled.status().message();
  const std::string alias = dir_.path() + "/alias";
  ASSERT_EQ(::symlink(staging_.location.c_str(), alias.c_str()), 0);
  const std::string keep(32, 'k');  // the shard's size
  ASSERT_TRUE(store_->write("outside", bytes_of(keep)));
  const std::string staged = staging_.location + "/" + detail::save_shard_name(spec.format, 0);
  const std::string tmp = staging_.location + "/.x";
  ASSERT_EQ(::link((dir_.path() + "/outside").c_str(), tmp.c_str()), 0);
  ASSERT_EQ(::rename(tmp.c_str(), staged.c_str()), 0);
  const double rows[4] = {1, 2, 3, 4};
  const Status st =
      detail::write_rows(alias, *travelled, 0, 4, reinterpret_cast<const std::byte*>(rows));
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.sys_errno(), ESTALE);
  EXPECT_NE(st.message().find("not the file the save made"), std::string::npos) << st.message();
  EXPECT_EQ(read_key(*store_, "outside"), keep);
  // The keys left as made are written through the alias alike.
  store_->discard(staging_, {});
  EXPECT_EQ(read_key(*store_, "outside"), keep);
}

// The manifest a save writes last, just before the publish, is checked with the staged keys:
// another file renamed over it is never published.
TEST_F(StoreSinksLocal, APublishRefusesAManifestReplacedBeforeIt) {
  detail::SaveSpec spec;
  spec.format = SaveFormat::kNpy;
  spec.dtype = DType{DTypeKind::kFloat, 8};
  spec.row_bytes = 8;
  spec.offsets = {0, 4};
  ASSERT_TRUE(detail::create_shard_files(staging_.location, &spec));
  const double rows[4] = {1, 2, 3, 4};
  ASSERT_TRUE(
      detail::write_rows(staging_.location, spec, 0, 4, reinterpret_cast<const std::byte*>(rows)));
  ASSERT_TRUE(detail::write_metadata(staging_.location, spec));
  ASSERT_TRUE(detail::write_save_manifest(staging_.location, Checksum::kNone));
  const std::string manifest = manifest_path(staging_.location);
  const std::string tmp = staging_.location + "/.x";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite("forged", 1, 6, f), 6u);
  ASSERT_EQ(std::fclose(f), 0);
  ASSERT_EQ(::rename(tmp.c_str(), manifest.c_str()), 0);
  bool published = true;
  const Status st = store_->publish(staging_, {}, &published);
  ASSERT_FALSE(st.is_ok());
  EXPECT_FALSE(published);
  EXPECT_NE(st.message().find(manifest), std::string::npos) << st.message();
  EXPECT_EQ(read_key(*store_, "out/shardload.manifest"), "<missing>");
  store_->discard(staging_, {});
}

// A staged key's file replaced after its rows were written (another regular file of its size)
// is found by the publish, which then publishes nothing.
TEST_F(StoreSinksLocal, APublishRefusesAStagedFileReplacedAfterItsRows) {
  for (const char* key : {"shard_0", "shard_1"}) {
    auto made = store_->open_sink(staging_, key, 4);
    ASSERT_TRUE(made.is_ok()) << made.status().message();
    ASSERT_TRUE(write_text(**made, 0, "rows"));
    ASSERT_TRUE((*made)->finish());
  }
  ASSERT_TRUE(store_->write_staged(staging_, "meta", bytes_of("m")));  // a whole-key write
  const std::string staged = staging_.location + "/shard_1";
  const std::string tmp = staging_.location + "/.x";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite("zero", 1, 4, f), 4u);
  ASSERT_EQ(std::fclose(f), 0);
  ASSERT_EQ(::rename(tmp.c_str(), staged.c_str()), 0);
  bool published = true;
  const Status st = store_->publish(staging_, {}, &published);
  ASSERT_FALSE(st.is_ok());
  EXPECT_FALSE(published);
  EXPECT_NE(st.message().find(staged), std::string::npos) << st.message();
  EXPECT_EQ(read_key(*store_, "out/shard_0"), "<missing>");
  store_->discard(staging_, {});
}

// Keys written whole into a staging, and sinks' keys left as made, publish as before.
TEST_F(StoreSinksLocal, APublishTakesTheStagedFilesItMade) {
  {
    auto made = store_->open_sink(staging_, "z/0.0", 4);
    ASSERT_TRUE(made.is_ok()) << made.status().message();
    ASSERT_TRUE((*made)->finish());
    auto again = store_->reopen_sink(staging_, "z/0.0");
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    ASSERT_TRUE(write_text(**again, 0, "rows"));
    ASSERT_TRUE((*again)->finish());
  }
  ASSERT_TRUE(store_->write_staged(staging_, "meta", bytes_of("m")));
  ASSERT_TRUE(store_->write_staged(staging_, "meta", bytes_of("n")));
  bool published = false;
  const Status st = store_->publish(staging_, {}, &published);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_TRUE(published);
  EXPECT_EQ(read_key(*store_, "out/z/0.0"), "rows");
  EXPECT_EQ(read_key(*store_, "out/meta"), "n");
}

TEST(StoreSinksStores, AReadOnlyStoreRefusesASink) {
  if (detail::http_transport() == nullptr) GTEST_SKIP() << "built without http(s)";
  auto store = open_store("http://127.0.0.1:9/data/");
  ASSERT_TRUE(store.is_ok()) << store.status().message();
  Staging staging;
  staging.prefix = "out/";
  const auto sink = (*store)->open_sink(staging, "shard_0", 1);
  ASSERT_FALSE(sink.is_ok());
  EXPECT_EQ(sink.status().sys_errno(), ENOTSUP);
  EXPECT_NE(sink.status().message().find("read-only"), std::string::npos)
      << sink.status().message();
}

// --- The memory store's failures, at each step of a save written through sinks.

void fill(MemoryStore& store, bool old_dataset) {
  ASSERT_TRUE(store.write("keep/x", bytes_of("mine")));
  if (!old_dataset) return;
  ASSERT_TRUE(store.write("out/shard_0", bytes_of("old zero")));
  ASSERT_TRUE(store.write("out/manifest", bytes_of("old manifest")));
}

// A save through sinks: shard_0 in two writes, a chunk in one, each finished, then the seal's
// manifest and the publish; on an error, the sinks dropped and the staging discarded.
Status save_with_sinks(Store& store, bool* published) {
  *published = false;
  PublishSteps steps;
  steps.overwrite = true;
  steps.commit_key = "manifest";
  steps.check = [&store](std::vector<ReplacedKey>* replaced) {
    auto keys = store.list("out/");
    if (!keys) return Status::ok();
    for (const std::string& k : *keys) {
      SHARDLOAD_ASSIGN_OR_RETURN(const KeyInfo info, store.stat(k));
      replaced->push_back({k.substr(4), info.generation});
    }
    return Status::ok();
  };
  SHARDLOAD_ASSIGN_OR_RETURN(const Staging staging, store.stage("out", steps));
  const auto body = [&]() -> Status {
    SHARDLOAD_ASSIGN_OR_RETURN(auto shard, store.open_sink(staging, "shard_0", 8));
    SHARDLOAD_ASSIGN_OR_RETURN(auto chunk, store.open_sink(staging, "store_1/0.0", 3));
    SHARDLOAD_RETURN_IF_ERROR(shard->write(4, bytes_of("zero")));
    SHARDLOAD_RETURN_IF_ERROR(shard->write(0, bytes_of("new ")));
    SHARDLOAD_RETURN_IF_ERROR(chunk->write(0, bytes_of("one")));
    SHARDLOAD_RETURN_IF_ERROR(shard->finish());
    SHARDLOAD_RETURN_IF_ERROR(chunk->finish());
    steps.seal = [&](const std::string&) {
      return store.write_staged(staging, "manifest", bytes_of("new manifest"));
    };
    return store.publish(staging, steps, published);
  };
  const Status st = body();
  if (!*published) store.discard(staging, steps);
  return st;
}

void fail_each_step(bool old_dataset) {
  std::uint64_t total = 0;
  {
    MemoryStore clean;
    fill(clean, old_dataset);
    const std::uint64_t base = clean.steps();
    bool published = false;
    ASSERT_TRUE(save_with_sinks(clean, &published));
    total = clean.steps() - base;
  }
  // stage, three sink writes, two finishes, the seal's write, the check, the swap
  ASSERT_EQ(total, 9u);
  for (std::uint64_t n = 0; n < total; ++n) {
    SCOPED_TRACE("step " + std::to_string(n));
    MemoryStore store;
    fill(store, old_dataset);
    const auto before = everything(store);
    store.fail_step(store.steps() + n,
                    file_error(ErrorCode::kIo, "memory://out", "injected failure", EIO));
    bool published = true;
    const Status st = save_with_sinks(store, &published);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("injected failure"), std::string::npos) << st.message();
    EXPECT_FALSE(published);
    EXPECT_EQ(everything(store), before);  // nothing visible, nothing staged left
    ASSERT_TRUE(save_with_sinks(store, &published));
    EXPECT_EQ(read_key(store, "out/shard_0"), "new zero");
    EXPECT_EQ(read_key(store, "out/store_1/0.0"), "one");
    EXPECT_EQ(read_key(store, "out/manifest"), "new manifest");
    EXPECT_EQ(read_key(store, "keep/x"), "mine");
  }
}

TEST(StoreSinksFaults, AFailureAtEachStepOfANewSaveLeavesNothing) { fail_each_step(false); }

TEST(StoreSinksFaults, AFailureAtEachStepOfAnOverwriteLeavesTheOldDatasetWhole) {
  fail_each_step(true);
}

TEST(StoreSinksFaults, AFailedWriteFailsTheSinkAndItsKeyIsNeverPut) {
  MemoryStore store;
  auto staging = store.stage("out", {});
  ASSERT_TRUE(staging.is_ok());
  auto sink = store.open_sink(*staging, "shard_0", 4);
  ASSERT_TRUE(sink.is_ok());
  store.fail_step(store.steps(), file_error(ErrorCode::kIo, "memory://out", "injected", EIO));
  EXPECT_FALSE(write_text(**sink, 0, "ab").is_ok());
  ASSERT_TRUE(write_text(**sink, 2, "cd").message().find("injected") != std::string::npos);
  const Status finished = (*sink)->finish();
  ASSERT_FALSE(finished.is_ok());
  EXPECT_NE(finished.message().find("injected"), std::string::npos) << finished.message();
  EXPECT_TRUE(staged_keys(store, *staging).empty());
}

TEST(StoreSinksFaults, AFailedFinishPutsNothing) {
  MemoryStore store;
  auto staging = store.stage("out", {});
  ASSERT_TRUE(staging.is_ok());
  auto sink = store.open_sink(*staging, "shard_0", 4);
  ASSERT_TRUE(sink.is_ok());
  ASSERT_TRUE(write_text(**sink, 0, "abcd"));
  store.fail_step(store.steps(), file_error(ErrorCode::kIo, "memory://out", "injected", EIO));
  EXPECT_FALSE((*sink)->finish().is_ok());
  EXPECT_TRUE(staged_keys(store, *staging).empty());
  EXPECT_FALSE((*sink)->finish().is_ok());  // a failed sink stays failed
  EXPECT_TRUE(staged_keys(store, *staging).empty());
}

// --- The s3:// sink's failures, through a stand-in ObjectStore that records what it is sent.

struct Upload {
  std::string url, bytes;
  std::int64_t size = 0;
  bool committed = false, aborted = false;
};

class StandInWriter final : public ObjectWriter {
 public:
  StandInWriter(Upload* u, Status fail_append, Status fail_commit)
      : u_(u), fail_append_(std::move(fail_append)), fail_commit_(std::move(fail_commit)) {}
  Status append(const void* data, std::size_t n) override {
    if (!fail_append_.is_ok()) return fail_append_;
    u_->bytes.append(static_cast<const char*>(data), n);
    return Status::ok();
  }
  Status commit() override {
    if (!fail_commit_.is_ok()) return fail_commit_;
    u_->committed = true;
    return Status::ok();
  }
  void abort() noexcept override {
    if (!u_->committed) u_->aborted = true;
  }

 private:
  Upload* u_;
  Status fail_append_, fail_commit_;
};

class StandInObjects final : public ObjectStore {
 public:
  Result<std::unique_ptr<ObjectWriter>> open_writer(const std::string& url,
                                                    std::int64_t size) override {
    uploads.push_back(std::make_unique<Upload>());
    uploads.back()->url = url;
    uploads.back()->size = size;
    return std::unique_ptr<ObjectWriter>(
        new StandInWriter(uploads.back().get(), fail_append, fail_commit));
  }
  Status remove(const std::string&) override { return Status::ok(); }
  Result<std::vector<ObjectEntry>> list_entries(const std::string&) override {
    return std::vector<ObjectEntry>{};
  }
  std::vector<std::unique_ptr<Upload>> uploads;
  Status fail_append = Status::ok(), fail_commit = Status::ok();
};

class StoreSinksObjects : public ::testing::Test {
 protected:
  void SetUp() override {
    if (remote_io_for("s3://b/p/") == nullptr) GTEST_SKIP() << "built without s3://";
    saved_ = detail::object_store_for("s3://b/p/");
    detail::set_object_store(&objects_);
    auto store = open_store("s3://b/p/?endpoint_override=127.0.0.1:9&scheme=http");
    ASSERT_TRUE(store.is_ok()) << store.status().message();
    store_ = std::move(*store);
    staging_.prefix = "out/";
    staging_.in_place = true;
  }
  void TearDown() override {
    if (store_ != nullptr) detail::set_object_store(saved_);
  }
  ObjectStore* saved_ = nullptr;
  StandInObjects objects_;
  std::unique_ptr<Store> store_;
  Staging staging_;
};

TEST_F(StoreSinksObjects, OneUploadInOrderWithTheGapsAsZerosAtFinish) {
  auto sink = store_->open_sink(staging_, "shard_0", 10);
  ASSERT_TRUE(sink.is_ok()) << sink.status().message();
  ASSERT_EQ(objects_.uploads.size(), 1u);
  EXPECT_EQ(objects_.uploads[0]->size, 10);
  EXPECT_NE(objects_.uploads[0]->url.find("s3://b/p/out/shard_0?"), std::string::npos);
  ASSERT_TRUE(write_text(**sink, 6, "gh"));  // ahead: held
  EXPECT_EQ(objects_.uploads[0]->bytes, "");
  ASSERT_TRUE(write_text(**sink, 0, "abc"));  // continues: sent
  EXPECT_EQ(objects_.uploads[0]->bytes, "abc");
  ASSERT_TRUE(write_text(**sink, 3, "def"));  // fills the gap: the held bytes follow
  EXPECT_EQ(objects_.uploads[0]->bytes, "abcdefgh");
  const Status again = write_text(**sink, 1, "x");  // sent already
  EXPECT_EQ(again.code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE((*sink)->finish());
  EXPECT_TRUE(objects_.uploads[0]->committed);
  EXPECT_EQ(objects_.uploads[0]->bytes, std::string("abcdefgh\0\0", 10));
}

TEST_F(StoreSinksObjects, AFailedAppendAbortsTheUploadAndNeverCommits) {
  objects_.fail_append = file_error(ErrorCode::kIo, "s3://b/p/out/shard_0", "injected", EIO);
  auto sink = store_->open_sink(staging_, "shard_0", 4);
  ASSERT_TRUE(sink.is_ok()) << sink.status().message();
  EXPECT_FALSE(write_text(**sink, 0, "ab").is_ok());
  const Status finished = (*sink)->finish();
  EXPECT_NE(finished.message().find("injected"), std::string::npos) << finished.message();
  sink->reset();
  EXPECT_FALSE(objects_.uploads[0]->committed);
  EXPECT_TRUE(objects_.uploads[0]->aborted);
}

TEST_F(StoreSinksObjects, AFailedCommitAbortsTheUpload) {
  objects_.fail_commit = file_error(ErrorCode::kIo, "s3://b/p/out/shard_0", "injected", EIO);
  auto sink = store_->open_sink(staging_, "shard_0", 2);
  ASSERT_TRUE(sink.is_ok()) << sink.status().message();
  ASSERT_TRUE(write_text(**sink, 1, "b"));
  EXPECT_FALSE((*sink)->finish().is_ok());
  EXPECT_FALSE(objects_.uploads[0]->committed);
  EXPECT_TRUE(objects_.uploads[0]->aborted);
}

// An object is uploaded whole by the sink that made it: no sink reopens it.
TEST_F(StoreSinksObjects, AnObjectIsNeverReopened) {
  const auto sink = store_->reopen_sink(staging_, "shard_0");
  ASSERT_FALSE(sink.is_ok());
  EXPECT_EQ(sink.status().code(), ErrorCode::kIo);
  EXPECT_EQ(sink.status().sys_errno(), ENOTSUP);
  EXPECT_TRUE(objects_.uploads.empty());
}

TEST_F(StoreSinksObjects, ADroppedSinkAbortsItsUpload) {
  {
    auto sink = store_->open_sink(staging_, "shard_0", 2);
    ASSERT_TRUE(sink.is_ok()) << sink.status().message();
    ASSERT_TRUE(write_text(**sink, 0, "a"));
  }
  EXPECT_FALSE(objects_.uploads[0]->committed);
  EXPECT_TRUE(objects_.uploads[0]->aborted);
}

}  // namespace
}  // namespace shardload
