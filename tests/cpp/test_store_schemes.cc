// Store schemes (shardload/store_schemes.hpp): a store driver registered under a scheme is read
// by every reader through the one adapter. The in-memory store is registered here, by the test
// binary only ("memtest://bucket/..."), filled with files numpy, h5py, pyarrow and zarr wrote,
// loaded through every reader and compared with the arrays numpy wrote beside them; then its
// faults, injected per key: failing, short (lying), rewritten and slow reads.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/detail/work_pool.hpp"
#include "shardload/host_load.hpp"
#include "shardload/host_save.hpp"
#include "shardload/io.hpp"
#include "shardload/layout.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest.hpp"
#include "shardload/source.hpp"
#include "shardload/storage.hpp"
#include "shardload/store_schemes.hpp"
#include "storage/detail/context.hpp"
#include "storage/detail/stores.hpp"
#include "store_util.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using detail::MemoryFault;
using detail::MemoryStore;

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::string read_local(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Registers `scheme` over `store`, which serves the location "SCHEME://bucket/" only.
void register_memory(const std::string& scheme, std::shared_ptr<MemoryStore> store,
                     std::chrono::milliseconds deadline = std::chrono::milliseconds(0)) {
  StoreScheme s;
  s.scheme = scheme;
  s.read_deadline = deadline;
  const std::string root = scheme + "://bucket/";
  s.open = [store, root](std::string_view location) -> Result<std::shared_ptr<Store>> {
    if (location != root) {
      return file_error(ErrorCode::kIo, std::string(location), "no such store", ENOENT);
    }
    return std::shared_ptr<Store>(store);
  };
  const Status st = register_store_scheme(std::move(s));
  ASSERT_TRUE(st) << st.message();
}

Result<Layout> discover_url(const std::string& text, const FormatOptions& format = {}) {
  SHARDLOAD_ASSIGN_OR_RETURN(Source source, Source::parse(text, ""));
  DiscoverOptions o;
  o.format = format;
  return try_discover(source, o);
}

Result<std::string> load_bytes(const Layout& l) {
  std::string out(l.total_bytes(), '\xA5');
  HostLoadOptions o;
  o.threads = 2;
  SHARDLOAD_RETURN_IF_ERROR(host_load(l, reinterpret_cast<std::byte*>(out.data()), o).status());
  return out;
}

// A small npy dataset made here: three shards of float32 rows of 4, 5 + 1 + 7 rows.
std::string npy_shard(int first, int rows) {
  std::string data;
  for (int i = 0; i < rows * 4; ++i) {
    const float v = static_cast<float>(first * 4 + i);
    data.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  return testing::npy_bytes(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", 4), }",
      data);
}

class StoreSchemes : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_shared<MemoryStore>("memtest://bucket/");
    int first = 0;
    for (int i = 0; const int rows : {5, 1, 7}) {
      const std::string key = "ds/shard_000" + std::to_string(i++) + ".npy";
      ASSERT_TRUE(store_->write(key, as_bytes(npy_shard(first, rows))));
      first += rows;
    }
    register_memory("memtest", store_);
  }
  void TearDown() override { unregister_store_scheme("memtest"); }

  static std::string expected_npy() {
    std::string out;
    for (int i = 0; i < 13 * 4; ++i) {
      const float v = static_cast<float>(i);
      out.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    return out;
  }

  std::shared_ptr<MemoryStore> store_;
};

TEST_F(StoreSchemes, ARegisteredSchemeIsRoutedWithTheTraitsItRegistered) {
  const PathTraits t = path_traits("memtest://bucket/ds/shard_0000.npy");
  EXPECT_FALSE(t.kernel_files);
  EXPECT_TRUE(t.flat_keys);
  EXPECT_TRUE(t.round_trips);
  EXPECT_EQ(t.scheme_label, "memtest://");
  EXPECT_TRUE(is_remote_url("memtest://bucket/x"));
  EXPECT_EQ(unsupported_scheme("memtest://bucket/x"), "");
  EXPECT_EQ(remote_io_for("memtest://bucket/x"), store_io());
  // A local path is what it was.
  EXPECT_TRUE(path_traits("/tmp/x.npy").kernel_files);
  EXPECT_EQ(remote_io_for("/tmp/x.npy"), nullptr);

  unregister_store_scheme("memtest");
  EXPECT_EQ(unsupported_scheme("memtest://bucket/x"), "memtest");
  auto gone = Source::parse("memtest://bucket/ds/", "");
  ASSERT_FALSE(gone);
  RecordProperty("message", gone.status().message());
  EXPECT_EQ(gone.status().code(), ErrorCode::kInvalidArgument) << gone.status().message();
}

TEST_F(StoreSchemes, RegistrationRefusesMalformedAndBuiltInSchemes) {
  for (const char* bad : {"", "S3x", "1abc", "a b", "s3", "http", "https", "file"}) {
    StoreScheme s;
    s.scheme = bad;
    s.open = [](std::string_view) -> Result<std::shared_ptr<Store>> {
      return std::shared_ptr<Store>(std::make_shared<MemoryStore>());
    };
    const Status st = register_store_scheme(std::move(s));
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << bad;
  }
  StoreScheme none;
  none.scheme = "nofactory";
  EXPECT_EQ(register_store_scheme(std::move(none)).code(), ErrorCode::kInvalidArgument);
}

TEST_F(StoreSchemes, TheBuiltInDriversAreRegisteredSchemesTooAndStay) {
  // s3:// and http(s):// are rows of the same registry, read as every registered store is:
  // through the one adapter, which reads a key through the Store made for its URL (the
  // driver's, over its transport).
  EXPECT_EQ(path_traits("s3://b/k.npy").scheme_label, "s3://");
  EXPECT_TRUE(path_traits("s3://b/k.npy").uploads);
  EXPECT_EQ(path_traits("https://h/k.npy").scheme_label, "http(s)://");
  EXPECT_FALSE(path_traits("http://h/k.npy").listable);
  EXPECT_EQ(remote_io_for("s3://b/k.npy"), store_io());
  EXPECT_EQ(remote_io_for("http://h/k.npy"), store_io());
  EXPECT_EQ(remote_io_for("https://h/k.npy"), store_io());
  unregister_store_scheme("s3");
  unregister_store_scheme("https");
  EXPECT_TRUE(is_remote_url("s3://b/k.npy"));
  EXPECT_TRUE(is_remote_url("https://h/k.npy"));
  EXPECT_EQ(unsupported_scheme("s3://b/k.npy"), "");
}

TEST_F(StoreSchemes, EverySourceKindLoadsAsS3SourcesDo) {
  for (const std::string text :
       {"memtest://bucket/ds/", "memtest://bucket/ds", "memtest://bucket/ds/shard_{:04d}.npy",
        "memtest://bucket/ds/shard_*.npy", "memtest://bucket/ds/shard_000[0-2].npy"}) {
    SCOPED_TRACE(text);
    auto l = discover_url(text);
    ASSERT_TRUE(l) << l.status().message();
    ASSERT_EQ(l->shards.size(), 3u);
    EXPECT_EQ(l->total_rows(), 13);
    EXPECT_EQ(l->shards[2].path, "memtest://bucket/ds/shard_0002.npy");
    auto got = load_bytes(*l);
    ASSERT_TRUE(got) << got.status().message();
    EXPECT_EQ(*got, expected_npy());
  }
  auto one = discover_url("memtest://bucket/ds/shard_0001.npy");
  ASSERT_TRUE(one) << one.status().message();
  EXPECT_EQ(one->total_rows(), 1);
}

TEST_F(StoreSchemes, AMissingKeyOrStoreIsNotFoundNamingIt) {
  auto missing = discover_url("memtest://bucket/nothing/");
  ASSERT_FALSE(missing);
  RecordProperty("message", missing.status().message());
  EXPECT_NE(missing.status().message().find("memtest://bucket/nothing"), std::string::npos)
      << missing.status().message();
  auto no_store = discover_url("memtest://other/ds/");
  ASSERT_FALSE(no_store);
  RecordProperty("message_no_store", no_store.status().message());
  EXPECT_NE(no_store.status().message().find("memtest://other/"), std::string::npos)
      << no_store.status().message();
}

TEST_F(StoreSchemes, UrlsInMessagesAreRedacted) {
  auto user = discover_url("memtest://me:hunter2@bucket/ds/");
  ASSERT_FALSE(user);
  RecordProperty("message", user.status().message());
  EXPECT_EQ(user.status().message().find("hunter2"), std::string::npos) << user.status().message();
  EXPECT_EQ(user.status().path().find("hunter2"), std::string::npos) << user.status().path();
  auto query = discover_url("memtest://bucket/none/?secret_key=hunter3");
  ASSERT_FALSE(query);
  EXPECT_EQ(query.status().message().find("hunter3"), std::string::npos)
      << query.status().message();
}

TEST_F(StoreSchemes, OpenStoreOpensARegisteredSchemeBelowItsPrefix) {
  auto s = open_store("memtest://bucket/ds/");
  ASSERT_TRUE(s) << s.status().message();
  EXPECT_EQ((*s)->scheme(), "memtest");
  EXPECT_EQ((*s)->describe("shard_0000.npy"), "memtest://bucket/ds/shard_0000.npy");
  auto keys = (*s)->list("");
  ASSERT_TRUE(keys) << keys.status().message();
  EXPECT_EQ(*keys,
            (std::vector<std::string>{"shard_0000.npy", "shard_0001.npy", "shard_0002.npy"}));
  auto info = (*s)->stat("shard_0001.npy");
  ASSERT_TRUE(info) << info.status().message();
  EXPECT_EQ(info->size, npy_shard(5, 1).size());
  EXPECT_EQ((*s)->stat("../x").status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(StoreSchemes, AFailingReadIsATypedErrorNamingTheKey) {
  auto l = discover_url("memtest://bucket/ds/");
  ASSERT_TRUE(l) << l.status().message();
  store_->inject("ds/shard_0002.npy",
                 MemoryFault{.fail = Status(ErrorCode::kIo, "injected: connection reset"),
                             .fail_times = 1000});
  auto got = load_bytes(*l);
  ASSERT_FALSE(got);
  RecordProperty("message", got.status().message());
  EXPECT_EQ(got.status().code(), ErrorCode::kIo) << got.status().message();
  EXPECT_NE(got.status().message().find("memtest://bucket/ds/shard_0002.npy"), std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("injected: connection reset"), std::string::npos)
      << got.status().message();
}

TEST_F(StoreSchemes, AShortReadIsAnErrorNeverWrongData) {
  auto l = discover_url("memtest://bucket/ds/");
  ASSERT_TRUE(l) << l.status().message();
  for (const std::size_t short_by : {std::size_t{1}, std::size_t{4}, std::size_t{1000}}) {
    SCOPED_TRACE(short_by);
    store_->inject("ds/shard_0000.npy", MemoryFault{.short_by = short_by});
    auto got = load_bytes(*l);
    ASSERT_FALSE(got) << "a short read was taken as data";
    RecordProperty("message", got.status().message());
    EXPECT_EQ(got.status().code(), ErrorCode::kIo) << got.status().message();
    EXPECT_NE(got.status().message().find("memtest://bucket/ds/shard_0000.npy"), std::string::npos)
        << got.status().message();
    // Refused by the adapter at the first short answer, not left to a caller's loop.
    EXPECT_NE(got.status().message().find("a short read before the key's end is refused"),
              std::string::npos)
        << got.status().message();
  }
  // A discovery that meets it fails too, rather than probing a header cut short.
  store_->inject("ds/shard_0001.npy", MemoryFault{.short_by = 2});
  EXPECT_FALSE(discover_url("memtest://bucket/ds/"));
}

TEST_F(StoreSchemes, AKeyRewrittenAfterDiscoveryIsChanged) {
  auto l = discover_url("memtest://bucket/ds/");
  ASSERT_TRUE(l) << l.status().message();
  // The same bytes written again: a new generation, so another file to the readers.
  ASSERT_TRUE(store_->write("ds/shard_0001.npy", as_bytes(npy_shard(5, 1))));
  auto got = load_bytes(*l);
  ASSERT_FALSE(got);
  RecordProperty("message", got.status().message());
  EXPECT_EQ(got.status().code(), ErrorCode::kChanged) << got.status().message();
  EXPECT_NE(got.status().message().find("memtest://bucket/ds/shard_0001.npy: changed since "
                                        "discovery"),
            std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("its generation differs"), std::string::npos)
      << got.status().message();
}

TEST_F(StoreSchemes, AKeyRewrittenAfterItsStatIsChanged) {
  // Each stat is followed by a rewrite: what the open saw is gone by the read.
  store_->inject("ds/shard_0000.npy", MemoryFault{.change_after_stat = true});
  auto l = discover_url("memtest://bucket/ds/");
  ASSERT_FALSE(l) << "a probe read another generation than its open's";
  RecordProperty("message", l.status().message());
  EXPECT_NE(l.status().message().find("memtest://bucket/ds/shard_0000.npy"), std::string::npos)
      << l.status().message();
  EXPECT_NE(l.status().message().find("changed"), std::string::npos) << l.status().message();
}

TEST_F(StoreSchemes, AReadUnderTheOpensGenerationFailsOnceTheKeyChanged) {
  const std::string url = "memtest://bucket/ds/shard_0000.npy";
  FileInfo info;
  auto f = File::open_stat(posix_io(), url, &info);
  ASSERT_TRUE(f) << f.status().message();
  EXPECT_GE(f->fd(), kRemoteFdBase);
  EXPECT_EQ(info.size, npy_shard(0, 5).size());
  std::string head(8, '\0');
  ASSERT_TRUE(f->read_exact(head.data(), head.size(), 0));
  EXPECT_EQ(head.substr(1, 5), "NUMPY");
  ASSERT_TRUE(store_->write("ds/shard_0000.npy", as_bytes(npy_shard(0, 5))));
  const Status st = f->read_exact(head.data(), head.size(), 0);
  ASSERT_FALSE(st);
  RecordProperty("message", st.message());
  EXPECT_EQ(st.sys_errno(), ESTALE) << st.message();
  EXPECT_NE(st.message().find("changed"), std::string::npos) << st.message();
  auto now = f->stat();
  ASSERT_TRUE(now) << now.status().message();
  EXPECT_NE(now->inode, info.inode) << "another generation reads as another file";
  EXPECT_EQ(now->size, info.size);
}

// A scheme whose keys cost no request to ask (round_trips false) opens a key of a known snapshot
// as it opens any other: asked, and held to the generation found, so that a key written again
// before the open fails it and one written again after fails its read, never read as data.
TEST_F(StoreSchemes, AKnownSnapshotOfAStoreWithoutRoundTripsIsHeldToItsGeneration) {
  auto store = std::make_shared<MemoryStore>("memnear://bucket/");
  const std::string bytes = npy_shard(0, 5);
  ASSERT_TRUE(store->write("k.npy", as_bytes(bytes)));
  StoreScheme s;
  s.scheme = "memnear";
  s.traits.round_trips = false;
  s.open = [store](std::string_view) -> Result<std::shared_ptr<Store>> {
    return std::shared_ptr<Store>(store);
  };
  ASSERT_TRUE(register_store_scheme(std::move(s)));
  struct Unregister {
    ~Unregister() { unregister_store_scheme("memnear"); }
  } unregister;
  const std::string url = "memnear://bucket/k.npy";
  const auto snapshot = posix_io().stat_path(url);
  ASSERT_TRUE(snapshot) << snapshot.status().message();
  std::string other = bytes;
  other.back() = static_cast<char>(other.back() ^ 1);
  {
    auto fd = posix_io().open_known(url, *snapshot);
    ASSERT_TRUE(fd) << fd.status().message();
    File f(&posix_io(), *fd, url);
    ASSERT_TRUE(store->write("k.npy", as_bytes(other)));
    std::string got(bytes.size(), '\0');
    const Status st = f.read_exact(got.data(), got.size(), 0);
    ASSERT_FALSE(st) << "read the bytes of a key written after its open";
    EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
    EXPECT_NE(st.message().find(url), std::string::npos) << st.message();
  }
  auto fd = posix_io().open_known(url, *snapshot);
  ASSERT_FALSE(fd) << "opened a key written since its snapshot";
  EXPECT_EQ(fd.status().code(), ErrorCode::kChanged) << fd.status().message();
  EXPECT_NE(fd.status().message().find(url + ": changed since discovery"), std::string::npos)
      << fd.status().message();
  EXPECT_NE(fd.status().message().find("its generation differs"), std::string::npos)
      << fd.status().message();
}

TEST_F(StoreSchemes, ASlowReadPastTheDeadlineFailsNamingTheKey) {
  auto slow = std::make_shared<MemoryStore>("memslow://bucket/");
  ASSERT_TRUE(slow->write("ds/shard_0000.npy", as_bytes(npy_shard(0, 5))));
  register_memory("memslow", slow, std::chrono::milliseconds(100));
  auto l = discover_url("memslow://bucket/ds/");
  ASSERT_TRUE(l) << l.status().message();
  slow->inject("ds/shard_0000.npy", MemoryFault{.delay = std::chrono::milliseconds(3000)});
  auto got = load_bytes(*l);
  unregister_store_scheme("memslow");
  ASSERT_FALSE(got);
  RecordProperty("message", got.status().message());
  EXPECT_EQ(got.status().code(), ErrorCode::kIo) << got.status().message();
  EXPECT_NE(got.status().message().find("memslow://bucket/ds/shard_0000.npy"), std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("read deadline of 100 ms"), std::string::npos)
      << got.status().message();
}

// A read under a deadline is a job of the storage context's work pool, not a thread of its
// own: while the late read still runs after the deadline, a thread of the process's pool runs
// it. Before, each such read started a detached std::thread that no pool counted.
TEST_F(StoreSchemes, AReadUnderADeadlineRunsOnTheContextsPool) {
  auto slow = std::make_shared<MemoryStore>("mempool://bucket/");
  ASSERT_TRUE(slow->write("ds/shard_0000.npy", as_bytes(npy_shard(0, 5))));
  register_memory("mempool", slow, std::chrono::milliseconds(100));
  struct Unregister {
    ~Unregister() { unregister_store_scheme("mempool"); }
  } unregister;
  const std::string url = "mempool://bucket/ds/shard_0000.npy";
  FileInfo info;
  auto f = File::open_stat(posix_io(), url, &info);
  ASSERT_TRUE(f) << f.status().message();
  const detail::WorkPool& pool = detail::StorageContext::process().pool();
  // An earlier test's late read may still hold a pool thread: wait for it to end.
  for (int i = 0; i < 400 && pool.threads() != pool.idle_threads(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_EQ(pool.threads() - pool.idle_threads(), 0u) << "nothing else runs on the pool here";
  slow->inject("ds/shard_0000.npy", MemoryFault{.delay = std::chrono::milliseconds(2000)});
  std::string head(8, '\0');
  const Status st = f->read_exact(head.data(), head.size(), 0);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.sys_errno(), ETIMEDOUT) << st.message();
  EXPECT_NE(st.message().find(url), std::string::npos) << st.message();
  // The read that missed its deadline is still sleeping in the store: on a pool thread.
  EXPECT_GE(pool.threads() - pool.idle_threads(), 1u);
  slow->inject("ds/shard_0000.npy", MemoryFault{});
  // An answer in time is the read's: the same file read again gives its bytes.
  ASSERT_TRUE(f->read_exact(head.data(), head.size(), 0));
  EXPECT_EQ(head.substr(1, 5), "NUMPY");
}

// A store that does not answer, registered with a read deadline, read through its adapter:
// its key opened before it hangs, and the pool's threads, waited for until no job runs (an
// earlier test's late read may still hold one). Its hang is let go of at the end.
class HungStore : public ::testing::Test {
 protected:
  static constexpr const char* kKey = "ds/shard_0000.npy";

  void open(const std::string& scheme, std::size_t max_late_reads) {
    scheme_ = scheme;
    store_ = std::make_shared<MemoryStore>(scheme + "://bucket/");
    ASSERT_TRUE(store_->write(kKey, as_bytes(npy_shard(0, 5))));
    StoreScheme s;
    s.scheme = scheme;
    s.read_deadline = std::chrono::milliseconds(10);
    s.max_late_reads = max_late_reads;
    s.open = [store = store_](std::string_view) -> Result<std::shared_ptr<Store>> {
      return std::shared_ptr<Store>(store);
    };
    ASSERT_TRUE(register_store_scheme(std::move(s)));
    url_ = scheme + "://bucket/" + kKey;
    FileInfo info;
    auto f = File::open_stat(posix_io(), url_, &info);
    ASSERT_TRUE(f) << f.status().message();
    file_ = std::make_unique<File>(std::move(*f));
    for (int i = 0; i < 400 && pool().threads() != pool().idle_threads(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_EQ(pool().threads() - pool().idle_threads(), 0u) << "nothing else runs on the pool";
    store_->inject(kKey, MemoryFault{.hang = true});
  }

  void TearDown() override {
    if (store_ != nullptr) store_->inject(kKey, MemoryFault{});  // the late reads end
    file_.reset();
    if (!scheme_.empty()) unregister_store_scheme(scheme_);
  }

  static const detail::WorkPool& pool() { return detail::StorageContext::process().pool(); }
  static std::size_t busy() { return pool().threads() - pool().idle_threads(); }

  Status read() {
    std::string head(8, '\0');
    return file_->read_exact(head.data(), head.size(), 0);
  }

  // A local dataset loaded in the same process: its rows, as numpy wrote them.
  static void a_local_load_runs() {
    testing::TempDir dir;
    std::ofstream(dir.file("shard_0000.npy"), std::ios::binary) << npy_shard(0, 5);
    std::ofstream(dir.file("shard_0001.npy"), std::ios::binary) << npy_shard(5, 7);
    auto l = discover_url(dir.path());
    ASSERT_TRUE(l) << l.status().message();
    auto got = load_bytes(*l);
    ASSERT_TRUE(got) << got.status().message();
    std::string want;
    for (int i = 0; i < 12 * 4; ++i) {
      const float v = static_cast<float>(i);
      want.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    EXPECT_TRUE(*got == want) << "the local load's rows differ";
  }

  std::string scheme_;
  std::string url_;
  std::shared_ptr<MemoryStore> store_;
  std::unique_ptr<File> file_;
};

// A read past its deadline holds a pool thread until the store answers. A store that never
// answers took one more thread with each read, up to every thread of the process's pool (whose
// jobs every load shares). Its late reads are now bounded by its scheme's max_late_reads: past
// them, its reads are refused at once, naming the store, and the threads it holds stay that
// many; a local load still runs, and once the store answers, its reads do again.
TEST_F(HungStore, AStoreThatDoesNotAnswerHoldsAtMostItsMaxLateReadsThreads) {
  const std::size_t max_late = StoreScheme{}.max_late_reads;
  ASSERT_NO_FATAL_FAILURE(open("memhung", max_late));
  std::size_t timed_out = 0;
  std::size_t refused = 0;
  for (std::size_t i = 0; i < 4 * max_late + 8; ++i) {
    const Status st = read();
    ASSERT_FALSE(st) << "read " << i << " of a store that does not answer";
    ASSERT_NE(st.message().find(url_), std::string::npos) << st.message();
    if (st.sys_errno() == ETIMEDOUT) {
      ++timed_out;
    } else {
      ASSERT_EQ(st.sys_errno(), EBUSY) << st.message();
      EXPECT_NE(st.message().find("the store memhung://bucket/ has not answered"),
                std::string::npos)
          << st.message();
      EXPECT_NE(st.message().find("max_late_reads"), std::string::npos) << st.message();
      ++refused;
    }
  }
  EXPECT_GE(timed_out, max_late);
  EXPECT_GT(refused, 0u) << "every read was sent, each holding a thread";
  // (a thread started for a read its waiter gave up before it was sent is back in a moment)
  for (int i = 0; i < 200 && busy() > max_late; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LE(busy(), max_late) << "the threads a store that does not answer holds";
  a_local_load_runs();
  store_->inject(kKey, MemoryFault{});  // it answers: its late reads end, and new ones are sent
  Status st;
  for (int i = 0; i < 400; ++i) {
    st = read();
    if (st || (st.sys_errno() != EBUSY && st.sys_errno() != ETIMEDOUT)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(st) << st.message();
}

// When no thread of the pool is free (every one held by late reads: here one store allowed
// more than the pool has), a read's job that no thread started by its deadline ran on the
// waiter, with no deadline: for a store that does not answer, for ever. It fails by its
// deadline (ETIMEDOUT, never sent), and a local load still runs.
TEST_F(HungStore, AReadWithEveryPoolThreadHeldStillFailsByItsDeadline) {
  ASSERT_NO_FATAL_FAILURE(open("memhungall", std::size_t{1} << 20));
  // Reads until every thread the pool may start is held (a job no thread started by its
  // deadline holds none: more reads than threads may be needed).
  for (std::size_t i = 0; i < 8 * pool().max_threads() && busy() < pool().max_threads(); ++i) {
    const Status st = read();
    ASSERT_FALSE(st) << "read " << i << " of a store that does not answer";
    ASSERT_EQ(st.sys_errno(), ETIMEDOUT) << st.message();
  }
  ASSERT_EQ(busy(), pool().max_threads());
  // A read that ran on the waiter answers only when the store does: let it go after a while,
  // so that the failure is a read that answered, not a test that never ends.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; })) {
      store_->inject(kKey, MemoryFault{});
    }
  });
  const Status st = read();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  ASSERT_FALSE(st) << "the read ran without its deadline, and answered when the store did";
  EXPECT_EQ(st.sys_errno(), ETIMEDOUT) << st.message();
  EXPECT_NE(st.message().find("never sent"), std::string::npos) << st.message();
  a_local_load_runs();
}

#ifdef SHARDLOAD_TEST_PYTHON

// Each reader's files, and each dataset's array as numpy holds it (C order, native bytes) in
// NAME.expected beside them.
constexpr const char* kWriter = R"(
import sys, os, numpy as np, h5py, zarr, numcodecs, pyarrow as pa, pyarrow.parquet as pq
import pyarrow.ipc as ipc
d = sys.argv[1]
def expect(name, a):
    np.ascontiguousarray(a).tofile(os.path.join(d, name + ".expected"))
rng = np.random.default_rng(42)
os.makedirs(d + "/npy")
parts = [rng.standard_normal((r, 5)).astype(np.float32) for r in (7, 1, 13)]
np.save(d + "/npy/shard_0000.npy", parts[0])
np.save(d + "/npy/shard_0001.npy", parts[1])
np.save(d + "/npy/shard_0002.npy", np.asfortranarray(parts[2]))
expect("npy", np.concatenate(parts))
os.makedirs(d + "/raw")
raw = [np.arange(i * 100, i * 100 + r * 3, dtype="<i4").reshape(r, 3) for i, r in enumerate((10, 4))]
for i, p in enumerate(raw):
    p.tofile(d + "/raw/shard_%04d.bin" % i)
expect("raw", np.concatenate(raw))
z = rng.integers(-1000, 1000, size=(37, 3, 2)).astype(np.int64)
np.savez_compressed(d + "/data.npz", z)
expect("npz", z)
h = rng.standard_normal((70, 6))
with h5py.File(d + "/data.h5", "w") as f:
    f.create_dataset("data", data=h, chunks=(16, 4), compression="gzip")
expect("h5", h)
t = pa.table({"c%d" % c: rng.standard_normal(130) for c in range(3)})
pq.write_table(t, d + "/data.parquet", row_group_size=50)
with ipc.new_file(d + "/data.arrow", t.schema) as w:
    w.write_table(t, max_chunksize=40)
expect("columns", np.stack([t.column(c).to_numpy() for c in range(3)], axis=1))
v2 = rng.standard_normal((45, 7)).astype(np.float32)
a = zarr.create_array(store=d + "/v2.zarr", shape=v2.shape, chunks=(10, 4), dtype="float32",
                      zarr_format=2, compressors=numcodecs.Zlib(level=1))
a[:] = v2
expect("v2", v2)
v3 = rng.integers(-30000, 30000, size=(100, 6)).astype(np.int16)
a = zarr.create_array(store=d + "/v3.zarr", shape=v3.shape, chunks=(10, 3), shards=(40, 6),
                      dtype="int16", zarr_format=3)
a[:] = v3
expect("v3", v3)
)";

class StoreSchemeReaders : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const std::string out = dir_->file("files");
    std::filesystem::create_directory(out);
    written_ = testing::run_python_writer(*dir_, kWriter, out);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(written_) << "the writer script failed (numpy, h5py, zarr, pyarrow)";
    // Every file the writers made, as a key under "d/".
    store_ = std::make_shared<MemoryStore>("memtest://bucket/");
    ASSERT_TRUE(testing::put_tree(*store_, dir_->file("files"), "d/"));
    register_memory("memtest", store_);
  }
  void TearDown() override { unregister_store_scheme("memtest"); }

  static std::string expected(const std::string& name) {
    return read_local(dir_->file("files/" + name + ".expected"));
  }

  // Loads `text` from the store and compares it with numpy's array `name`.
  void check(const std::string& text, const std::string& name, const FormatOptions& format = {}) {
    SCOPED_TRACE(text);
    auto l = discover_url(text, format);
    ASSERT_TRUE(l) << l.status().message();
    const std::uint64_t reads = store_->reads();
    auto got = load_bytes(*l);
    ASSERT_TRUE(got) << got.status().message();
    EXPECT_GT(store_->reads(), reads) << "the load read the store";
    const std::string want = expected(name);
    ASSERT_EQ(got->size(), want.size());
    EXPECT_TRUE(*got == want) << "the bytes differ from numpy's";
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline bool written_ = false;
  std::shared_ptr<MemoryStore> store_;
};

TEST_F(StoreSchemeReaders, Npy) { check("memtest://bucket/d/npy/", "npy"); }

TEST_F(StoreSchemeReaders, Raw) {
  FormatOptions f;
  f.format = Format::kRaw;
  ASSERT_TRUE(set_dtype_option("<i4", &f));
  f.trailing_shape = std::vector<std::int64_t>{3};
  check("memtest://bucket/d/raw/shard_*.bin", "raw", f);
}

TEST_F(StoreSchemeReaders, Npz) { check("memtest://bucket/d/data.npz", "npz"); }

TEST_F(StoreSchemeReaders, Hdf5) { check("memtest://bucket/d/data.h5", "h5"); }

TEST_F(StoreSchemeReaders, Parquet) { check("memtest://bucket/d/data.parquet", "columns"); }

TEST_F(StoreSchemeReaders, ArrowIpc) { check("memtest://bucket/d/data.arrow", "columns"); }

TEST_F(StoreSchemeReaders, ZarrV2) { check("memtest://bucket/d/v2.zarr", "v2"); }

TEST_F(StoreSchemeReaders, ZarrV3Sharded) { check("memtest://bucket/d/v3.zarr", "v3"); }

TEST_F(StoreSchemeReaders, AFailingChunkOfEachFormatNamesItsKey) {
  // A key read after discovery fails: the load's error names that key, whatever the reader.
  struct Case {
    const char* source;
    const char* key;
  };
  for (const Case c : {Case{"memtest://bucket/d/data.h5", "d/data.h5"},
                       Case{"memtest://bucket/d/data.parquet", "d/data.parquet"},
                       Case{"memtest://bucket/d/data.arrow", "d/data.arrow"},
                       Case{"memtest://bucket/d/data.npz", "d/data.npz"},
                       Case{"memtest://bucket/d/v2.zarr", "d/v2.zarr/1.1"},
                       Case{"memtest://bucket/d/v3.zarr", "d/v3.zarr/c/1/0"}}) {
    SCOPED_TRACE(c.source);
    auto l = discover_url(c.source);
    ASSERT_TRUE(l) << l.status().message();
    store_->inject(
        c.key, MemoryFault{.fail = Status(ErrorCode::kIo, "injected failure"), .fail_times = 1000});
    auto got = load_bytes(*l);
    store_->inject(c.key, MemoryFault{});
    ASSERT_FALSE(got);
    RecordProperty("message", got.status().message());
    EXPECT_EQ(got.status().code(), ErrorCode::kIo) << got.status().message();
    EXPECT_NE(got.status().message().find(std::string("memtest://bucket/") + c.key),
              std::string::npos)
        << got.status().message();
  }
}

#endif  // SHARDLOAD_TEST_PYTHON

// The save's object pipeline (engine/save_remote.cc) names no transport: a store driver
// registered under a scheme that says it can be written is saved to through the same
// pipeline as s3:// (the check, the shards through the store's sinks, the metadata, the
// manifest last), and the dataset it makes loads back as the array saved. Before, the
// pipeline asked the s3 client for its writer and refused this save ("object storage is not
// supported by this build"), and a registered store could not be staged.
TEST(StoreSchemeSave, ASaveToAWritableRegisteredStoreGoesThroughTheObjectPipeline) {
  auto store = std::make_shared<MemoryStore>("memsave://bucket/");
  StoreScheme s;
  s.scheme = "memsave";
  s.traits = kObjectStoreTraits;
  s.traits.writable = true;
  s.open = [store](std::string_view location) -> Result<std::shared_ptr<Store>> {
    if (location != "memsave://bucket/") {
      return file_error(ErrorCode::kIo, std::string(location), "no such store", ENOENT);
    }
    return std::shared_ptr<Store>(store);
  };
  ASSERT_TRUE(register_store_scheme(std::move(s)));
  struct Unregister {
    ~Unregister() { unregister_store_scheme("memsave"); }
  } unregister;
  ASSERT_TRUE(store->write("keep/mine.txt", as_bytes("mine")));

  const DType i32{DTypeKind::kInt, 4};
  const std::vector<std::int64_t> shape{13, 3};
  std::vector<std::int32_t> a(13 * 3);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(i * 7 - 20);
  const auto* data = reinterpret_cast<const std::byte*>(a.data());
  const std::string expected(reinterpret_cast<const char*>(a.data()), a.size() * 4);
  for (const auto& [name, format] :
       {std::tuple{"npy", Format::kNpy}, std::tuple{"raw", Format::kRaw},
        std::tuple{"zarr", Format::kZarr}}) {
    SCOPED_TRACE(name);
    const std::string dest = std::string("memsave://bucket/") + name + "/";
    HostSaveOptions o;
    o.save.format = format;
    o.save.shard_rows = {5, 0, 8};
    o.threads = 2;
    const auto saved = host_save(data, shape, i32, dest, o);
    ASSERT_TRUE(saved) << saved.status().message();
    EXPECT_EQ(saved->shards, 3);
    // The manifest is there, under the dataset, and the load reads what was saved.
    EXPECT_TRUE(store->stat(std::string(name) + "/" + std::string(kManifestName)));
    auto l = discover_url(dest);
    ASSERT_TRUE(l) << l.status().message();
    EXPECT_EQ(l->total_rows(), 13);
    auto got = load_bytes(*l);
    ASSERT_TRUE(got) << got.status().message();
    EXPECT_EQ(*got, expected);

    // The destination's check is the store's listing: a second save is refused, an
    // overwrite replaces the dataset (fewer shards: the old third one is deleted).
    const auto again = host_save(data, shape, i32, dest, o);
    ASSERT_FALSE(again);
    EXPECT_EQ(again.status().sys_errno(), EEXIST) << again.status().message();
    o.save.overwrite = true;
    o.save.shard_rows = {13};
    const auto over = host_save(data, shape, i32, dest, o);
    ASSERT_TRUE(over) << over.status().message();
    auto l2 = discover_url(dest);
    ASSERT_TRUE(l2) << l2.status().message();
    EXPECT_EQ(l2->shards.size(), 1u);
    auto got2 = load_bytes(*l2);
    ASSERT_TRUE(got2) << got2.status().message();
    EXPECT_EQ(*got2, expected);
  }
  // Nothing outside the datasets was touched.
  auto mine = store->list("keep/");
  ASSERT_TRUE(mine);
  EXPECT_EQ(*mine, std::vector<std::string>{"keep/mine.txt"});
}

// Where a save's prefix sits is storage's answer for every scheme, not the text of an s3:// URL
// read by its lengths: the prefix, its query, the store one prefix up and the name there.
TEST(StorePlace, NamesAPrefixsParentAndNameWhateverTheSchemesLength) {
  struct Case {
    const char* location;
    const char* dir;
    const char* query;
    const char* parent;
    const char* name;
  };
  for (const Case c : {
           Case{"s3://b/p/d/?region=x", "s3://b/p/d/", "?region=x", "s3://b/p/?region=x", "d"},
           Case{"s3://b/d", "s3://b/d/", "", "s3://b/", "d"},
           Case{"s3://b", "s3://b/", "", "", ""},
           Case{"s3://b/?x=1", "s3://b/", "?x=1", "", ""},
           Case{"m://b/", "m://b/", "", "", ""},
           Case{"m://b/d", "m://b/d/", "", "m://b/", "d"},
           Case{"memsave://bucket/a/b/c/", "memsave://bucket/a/b/c/", "", "memsave://bucket/a/b/",
                "c"},
       }) {
    SCOPED_TRACE(c.location);
    const auto place = store_place(c.location);
    ASSERT_TRUE(place) << place.status().message();
    EXPECT_EQ(place->location, c.dir);
    EXPECT_EQ(place->query, c.query);
    EXPECT_EQ(place->parent, c.parent);
    EXPECT_EQ(place->name, c.name);
  }
  for (const char* no_bucket : {"s3://", "s3:///p/", "s3://?region=x"}) {
    const auto place = store_place(no_bucket);
    ASSERT_FALSE(place) << no_bucket;
    EXPECT_EQ(place.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(place.status().message(), std::string(no_bucket) + ": the URL names no bucket");
  }
  // A trailing empty segment names another prefix ("d//x" is no key of "d/"): taken for "d/",
  // a save there replaced the dataset under "d/" and its own URL read none of it.
  for (const char* empty : {"s3://b/d//", "s3://b/d///?x=1", "s3://b//", "m://b/p/d//"}) {
    const auto place = store_place(empty);
    ASSERT_FALSE(place) << empty;
    EXPECT_EQ(place.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(place.status().message(),
              std::string(empty) +
                  ": the URL ends in an empty segment ('//'); name the prefix with one '/'");
  }
  const auto no_authority = store_place("m:///d/");
  ASSERT_FALSE(no_authority);
  EXPECT_EQ(no_authority.status().message(), "m:///d/: the URL names no authority");
  EXPECT_FALSE(store_place("/tmp/d/"));
  EXPECT_FALSE(store_place("file:///tmp/d/"));
}

// The save to a registered store of a one-letter scheme ("m://b/"): its root is a store like a
// bucket, and a prefix that is an object there is refused as on s3://. Before, the save read
// the URL by s3's lengths ("s3://" is 5 characters) and refused "m://b/" as naming no bucket.
TEST(StoreSchemeSave, ASaveToTheRootOfAStoreWhoseSchemeIsNotS3sLengthIsWritten) {
  auto store = std::make_shared<MemoryStore>("m://b/");
  StoreScheme s;
  s.scheme = "m";
  s.traits = kObjectStoreTraits;
  s.traits.writable = true;
  s.open = [store](std::string_view location) -> Result<std::shared_ptr<Store>> {
    if (location != "m://b/") {
      return file_error(ErrorCode::kIo, std::string(location), "no such store", ENOENT);
    }
    return std::shared_ptr<Store>(store);
  };
  ASSERT_TRUE(register_store_scheme(std::move(s)));
  struct Unregister {
    ~Unregister() { unregister_store_scheme("m"); }
  } unregister;

  const DType i32{DTypeKind::kInt, 4};
  const std::vector<std::int64_t> shape{7, 2};
  std::vector<std::int32_t> a(7 * 2);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(i * 3 + 1);
  const auto* data = reinterpret_cast<const std::byte*>(a.data());
  HostSaveOptions o;
  o.save.format = Format::kNpy;
  o.save.shard_rows = {4, 3};
  o.threads = 2;
  const auto saved = host_save(data, shape, i32, "m://b/", o);
  ASSERT_TRUE(saved) << saved.status().message();
  EXPECT_TRUE(store->stat(std::string(kManifestName)));
  auto l = discover_url("m://b/");
  ASSERT_TRUE(l) << l.status().message();
  auto got = load_bytes(*l);
  ASSERT_TRUE(got) << got.status().message();
  EXPECT_EQ(*got, std::string(reinterpret_cast<const char*>(a.data()), a.size() * 4));

  // A prefix whose name is an object in the store one up: refused, nothing written.
  ASSERT_TRUE(store->write("sub/obj", as_bytes("x")));
  const auto onto = host_save(data, shape, i32, "m://b/sub/obj/", o);
  ASSERT_FALSE(onto);
  EXPECT_EQ(onto.status().sys_errno(), EEXIST) << onto.status().message();
  EXPECT_NE(onto.status().message().find("the destination is an object"), std::string::npos)
      << onto.status().message();
  EXPECT_EQ(*store->list("sub/"), std::vector<std::string>{"sub/obj"});

  // A URL of the scheme that names no authority is refused, nothing written.
  const auto none = host_save(data, shape, i32, "m:///d/", o);
  ASSERT_FALSE(none);
  EXPECT_NE(none.status().message().find("m:///d/: names no store"), std::string::npos)
      << none.status().message();
  EXPECT_FALSE(store->stat("d/" + std::string(kManifestName)));
}

// An s3:// URL without a bucket is refused before any request, in the save's words.
TEST(StoreSchemeSave, AnS3UrlWithoutABucketIsRefusedBeforeAnyRequest) {
  if (open_store("s3://b/").status().code() == ErrorCode::kInvalidArgument) {
    GTEST_SKIP() << "built without s3://";
  }
  const DType i32{DTypeKind::kInt, 4};
  const std::vector<std::int32_t> a{1, 2, 3};
  const std::vector<std::int64_t> shape{3};
  for (const std::string dest : {"s3://", "s3:///p/"}) {
    const auto saved =
        host_save(reinterpret_cast<const std::byte*>(a.data()), shape, i32, dest, {});
    ASSERT_FALSE(saved) << dest;
    EXPECT_EQ(saved.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(saved.status().message(), "save: " + dest + ": the URL names no bucket");
  }
}

// An old dataset's key that the in-place publish cannot delete stops it before the manifest:
// the error names the key and says the manifest was not written; the key is still there.
TEST(StoreSchemeSave, AnOldKeyThatCannotBeDeletedStopsThePublishBeforeTheManifest) {
  auto store = std::make_shared<MemoryStore>("memdel://bucket/");
  StoreScheme s;
  s.scheme = "memdel";
  s.traits = kObjectStoreTraits;
  s.traits.writable = true;
  s.open = [store](std::string_view location) -> Result<std::shared_ptr<Store>> {
    if (location != "memdel://bucket/") {
      return file_error(ErrorCode::kIo, std::string(location), "no such store", ENOENT);
    }
    return std::shared_ptr<Store>(store);
  };
  ASSERT_TRUE(register_store_scheme(std::move(s)));
  struct Unregister {
    ~Unregister() { unregister_store_scheme("memdel"); }
  } unregister;

  const DType i32{DTypeKind::kInt, 4};
  const std::vector<std::int64_t> shape{6, 2};
  std::vector<std::int32_t> a(12);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(i);
  const auto* data = reinterpret_cast<const std::byte*>(a.data());
  // The overwrite's changing steps are counted from its start: the first one that fails as a
  // delete is the removal of the old third shard (the steps before it are the check and the
  // writes, whose failures are other errors; each try saves to a prefix of its own).
  bool seen = false;
  for (int k = 0; k < 64 && !seen; ++k) {
    SCOPED_TRACE(k);
    const std::string prefix = "d" + std::to_string(k) + "/";
    const std::string dest = "memdel://bucket/" + prefix;
    HostSaveOptions o;
    o.save.format = Format::kNpy;
    o.save.shard_rows = {2, 2, 2};
    o.threads = 1;
    ASSERT_TRUE(host_save(data, shape, i32, dest, o));
    o.save.overwrite = true;
    o.save.shard_rows = {6};
    store->fail_step(store->steps() + static_cast<std::uint64_t>(k),
                     Status(ErrorCode::kIo, "injected delete failure"));
    const auto over = host_save(data, shape, i32, dest, o);
    if (over) continue;
    const std::string& m = over.status().message();
    if (m.find("cannot delete the old dataset's key") == std::string::npos) continue;
    seen = true;
    EXPECT_TRUE(m.find("'shard_0001.npy'") != std::string::npos ||
                m.find("'shard_0002.npy'") != std::string::npos)
        << m;
    EXPECT_NE(m.find("injected delete failure"), std::string::npos) << m;
    EXPECT_NE(m.find("the new dataset's manifest was not written"), std::string::npos) << m;
    EXPECT_NE(m.find("memdel://bucket/" + prefix), std::string::npos) << m;
    EXPECT_FALSE(store->stat(prefix + std::string(kManifestName)));
    EXPECT_TRUE(store->stat(prefix + "shard_0001.npy") || store->stat(prefix + "shard_0002.npy"));
  }
  EXPECT_TRUE(seen) << "no step of the overwrite failed as the delete of an old key";
}

}  // namespace
}  // namespace shardload
