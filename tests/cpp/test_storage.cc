// The store contract (shardload/storage.hpp) on the local POSIX driver and the in-memory store
// alike, and the faults the in-memory store injects.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shardload/location.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/stores.hpp"
#include "storage/detail/transports.hpp"
#include "store_util.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using detail::MemoryFault;
using detail::MemoryStore;

using testing::bytes_of;
using testing::open_test_store;

std::string file_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string read_all(Store& store, const std::string& key, std::uint64_t offset, std::size_t n,
                     const std::string& if_generation = "") {
  std::string out(n, '\0');
  auto got = store.read(key, offset, std::as_writable_bytes(std::span<char>(out)), if_generation);
  EXPECT_TRUE(got.is_ok()) << got.status().message();
  if (!got.is_ok()) return "<error>";
  out.resize(*got);
  return out;
}

// One fixture per driver: a fresh, empty store.
class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    store_ = open_test_store(GetParam(), dir_);
    ASSERT_NE(store_, nullptr);
  }
  testing::TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreContract, WriteStatReadRanges) {
  ASSERT_TRUE(store_->write("a.bin", bytes_of("0123456789")).is_ok());
  auto info = store_->stat("a.bin");
  ASSERT_TRUE(info.is_ok()) << info.status().message();
  EXPECT_EQ(info->size, 10u);
  EXPECT_FALSE(info->generation.empty());
  EXPECT_EQ(read_all(*store_, "a.bin", 0, 10), "0123456789");
  EXPECT_EQ(read_all(*store_, "a.bin", 3, 4), "3456");
  // Short only at the end; nothing at or past it.
  EXPECT_EQ(read_all(*store_, "a.bin", 7, 100), "789");
  EXPECT_EQ(read_all(*store_, "a.bin", 10, 5), "");
  EXPECT_EQ(read_all(*store_, "a.bin", 1000, 5), "");
  EXPECT_EQ(read_all(*store_, "a.bin", 2, 3, info->generation), "234");
}

TEST_P(StoreContract, RewriteChangesTheGenerationAndFailsTheCondition) {
  ASSERT_TRUE(store_->write("k", bytes_of("old bytes")).is_ok());
  auto before = store_->stat("k");
  ASSERT_TRUE(before.is_ok());
  // Same size, new bytes: a size check alone would not see it.
  ASSERT_TRUE(store_->write("k", bytes_of("new bytes")).is_ok());
  auto after = store_->stat("k");
  ASSERT_TRUE(after.is_ok());
  EXPECT_NE(before->generation, after->generation);
  std::string buf(4, '\0');
  auto got = store_->read("k", 0, std::as_writable_bytes(std::span<char>(buf)), before->generation);
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), ErrorCode::kChanged);
  EXPECT_NE(got.status().message().find(store_->describe("k")), std::string::npos)
      << got.status().message();
  EXPECT_EQ(read_all(*store_, "k", 0, 9, after->generation), "new bytes");
}

TEST_P(StoreContract, ListsKeysAndPrefixesInNameOrder) {
  for (const char* key : {"b.npy", "a.npy", "s.zarr/0.0", "s.zarr/.zarray", "s.zarr/1.0"}) {
    ASSERT_TRUE(store_->write(key, bytes_of(key)).is_ok()) << key;
  }
  auto top = store_->list("");
  ASSERT_TRUE(top.is_ok()) << top.status().message();
  EXPECT_EQ(*top, (std::vector<std::string>{"a.npy", "b.npy", "s.zarr/"}));
  auto inner = store_->list("s.zarr/");
  ASSERT_TRUE(inner.is_ok()) << inner.status().message();
  EXPECT_EQ(*inner, (std::vector<std::string>{"s.zarr/.zarray", "s.zarr/0.0", "s.zarr/1.0"}));
  auto missing = store_->list("nothing/");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kIo);
  EXPECT_EQ(store_->list("s.zarr").status().code(), ErrorCode::kInvalidArgument);
}

TEST_P(StoreContract, RemoveDeletesAndAMissingKeyIsNoError) {
  ASSERT_TRUE(store_->write("gone", bytes_of("x")).is_ok());
  ASSERT_TRUE(store_->remove("gone").is_ok());
  auto info = store_->stat("gone");
  ASSERT_FALSE(info.is_ok());
  EXPECT_EQ(info.status().code(), ErrorCode::kIo);
  EXPECT_TRUE(store_->remove("gone").is_ok());
  EXPECT_TRUE(store_->remove("never-there").is_ok());
}

TEST_P(StoreContract, MissingKeyIsAnIoErrorNamingIt) {
  std::string buf(4, '\0');
  auto got = store_->read("absent.npy", 0, std::as_writable_bytes(std::span<char>(buf)), "");
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), ErrorCode::kIo);
  EXPECT_NE(got.status().message().find("absent.npy"), std::string::npos);
}

// A key never reaches outside the store's location, whatever it spells.
TEST_P(StoreContract, HostileKeysAreRefusedBeforeAnyIo) {
  for (const std::string& key :
       {std::string(""), std::string("/etc/passwd"), std::string("../x"), std::string("a/../../x"),
        std::string("a/./b"), std::string("a//b"), std::string("a\0b", 3), std::string("..")}) {
    EXPECT_EQ(store_->stat(key).status().code(), ErrorCode::kInvalidArgument) << key;
    EXPECT_EQ(store_->write(key, bytes_of("x")).code(), ErrorCode::kInvalidArgument) << key;
    EXPECT_EQ(store_->remove(key).code(), ErrorCode::kInvalidArgument) << key;
    std::string buf(1, '\0');
    EXPECT_EQ(
        store_->read(key, 0, std::as_writable_bytes(std::span<char>(buf)), "").status().code(),
        ErrorCode::kInvalidArgument)
        << key;
  }
  EXPECT_EQ(store_->list("../").status().code(), ErrorCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Drivers, StoreContract, ::testing::Values("local", "memory"),
                         [](const auto& info) { return info.param; });

TEST(LocalStore, GenerationIsTheFilesSnapshot) {
  testing::TempDir dir;
  auto store = open_store("file://" + dir.path());
  ASSERT_TRUE(store.is_ok()) << store.status().message();
  EXPECT_EQ((*store)->scheme(), "file");
  testing::write_file(dir.file("f.bin"), "abcdef");
  auto a = (*store)->stat("f.bin");
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->size, 6u);
  // A file renamed over the path (a new inode), same size and mtime set back: a new generation.
  testing::write_file(dir.file("g.bin"), "ABCDEF");
  struct ::stat st {};
  ASSERT_EQ(::stat(dir.file("f.bin").c_str(), &st), 0);
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, dir.file("g.bin").c_str(), times, 0), 0);
  std::filesystem::rename(dir.file("g.bin"), dir.file("f.bin"));
  auto b = (*store)->stat("f.bin");
  ASSERT_TRUE(b.is_ok());
  EXPECT_NE(a->generation, b->generation);
}

TEST(LocalStore, RefusesWhatIsNotARegularFileWithoutBlocking) {
  testing::TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store.is_ok());
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  std::filesystem::create_directory(dir.file("sub"));
  std::string buf(4, '\0');
  for (const char* key : {"fifo", "sub"}) {
    auto got = (*store)->read(key, 0, std::as_writable_bytes(std::span<char>(buf)), "");
    ASSERT_FALSE(got.is_ok()) << key;
    EXPECT_EQ(got.status().code(), ErrorCode::kIo) << key;
    EXPECT_FALSE((*store)->stat(key).is_ok()) << key;
  }
}

// A key that is a link whose target is gone (a pool file deleted) is no key never written:
// its stat and read name it without ENOENT (which a Zarr reader takes for a missing chunk, the
// fill value), and a listing has it (left out, numbered shards would end before it).
TEST(LocalStore, AKeyLinkWhoseTargetIsGoneIsNamedNotMissing) {
  testing::TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store.is_ok());
  testing::write_file(dir.file("a.bin"), "abcd");
  ASSERT_EQ(::symlink(dir.file("gone").c_str(), dir.file("b.bin").c_str()), 0);
  std::string buf(4, '\0');
  auto got = (*store)->read("b.bin", 0, std::as_writable_bytes(std::span<char>(buf)), "");
  ASSERT_FALSE(got.is_ok());
  EXPECT_NE(got.status().sys_errno(), ENOENT);
  EXPECT_NE(got.status().message().find(dir.file("b.bin") +
                                        ": a symbolic link whose target does not exist"),
            std::string::npos)
      << got.status().message();
  auto st = (*store)->stat("b.bin");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().sys_errno(), ENOENT) << st.status().message();
  auto keys = (*store)->list("");
  ASSERT_TRUE(keys.is_ok()) << keys.status().message();
  EXPECT_EQ(*keys, (std::vector<std::string>{"a.bin", "b.bin"}));
  // No entry at all is still missing.
  EXPECT_EQ((*store)->stat("c.bin").status().sys_errno(), ENOENT);
}

TEST(LocalStore, WriteLeavesNoTemporaryBehind) {
  testing::TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store.is_ok());
  ASSERT_TRUE((*store)->write("d/e/f.bin", bytes_of("payload")).is_ok());
  auto keys = (*store)->list("d/e/");
  ASSERT_TRUE(keys.is_ok()) << keys.status().message();
  EXPECT_EQ(*keys, std::vector<std::string>{"d/e/f.bin"});
}

// A store's directory `store` in which two directories are links to one outside it
// (`outside`, holding a file `victim` and a directory `deep`): store/link and
// store/real/inner; store/real is a real directory.
class LocalStoreLinks : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(outside + "/deep");
    testing::write_file(outside + "/victim", "keep");
    std::filesystem::create_directories(dir.file("store/real"));
    std::filesystem::create_directory_symlink(outside, dir.file("store/link"));
    std::filesystem::create_directory_symlink(outside, dir.file("store/real/inner"));
  }

  testing::TempDir dir;
  const std::string outside = dir.file("outside");
};

// A directory of the store that is a link to another place: keys below it would write,
// replace and delete files outside the store's location; refused before a file is touched.
TEST_F(LocalStoreLinks, AKeyThroughALinkedDirectoryNeverTouchesAFileOutside) {
  auto store = open_store(dir.file("store"));
  ASSERT_TRUE(store.is_ok()) << store.status().message();
  for (const std::string key : {"link/victim", "link/new", "link/deep/new", "link/made/new",
                                "real/inner/victim", "real/inner/new"}) {
    const Status w = (*store)->write(key, bytes_of("overwritten"));
    EXPECT_FALSE(w.is_ok()) << key;
    EXPECT_NE(w.message().find("link"), std::string::npos) << w.message();
    EXPECT_FALSE((*store)->remove(key).is_ok()) << key;
  }
  EXPECT_EQ(file_text(outside + "/victim"), "keep");
  EXPECT_FALSE(std::filesystem::exists(outside + "/new"));
  EXPECT_FALSE(std::filesystem::exists(outside + "/deep/new"));
  EXPECT_FALSE(std::filesystem::exists(outside + "/made"));
  // Keys below real directories are written and removed as before.
  ASSERT_TRUE((*store)->write("real/x/y.bin", bytes_of("ok")).is_ok());
  EXPECT_EQ(file_text(dir.file("store/real/x/y.bin")), "ok");
  EXPECT_TRUE((*store)->remove("real/x/y.bin").is_ok());
  EXPECT_FALSE(std::filesystem::exists(dir.file("store/real/x/y.bin")));
}

// Reading, as writing, never leaves the location through a linked directory, and a link loop
// is refused at once, never walked.
TEST_F(LocalStoreLinks, AKeyThroughALinkedDirectoryIsNeitherReadNorListed) {
  testing::write_file(dir.file("store/real/own.bin"), "own");
  std::filesystem::create_directory_symlink("loop", dir.file("store/loop"));
  std::filesystem::create_directory_symlink("b", dir.file("store/a"));
  std::filesystem::create_directory_symlink("a", dir.file("store/b"));
  // A link to a file is a key, read as that file (as discovery reads a linked shard).
  std::filesystem::create_symlink("real/own.bin", dir.file("store/file_link"));
  auto store = open_store(dir.file("store"));
  ASSERT_TRUE(store.is_ok()) << store.status().message();
  std::string buf(8, '\0');
  const auto into = std::as_writable_bytes(std::span<char>(buf));
  for (const std::string key :
       {"link/victim", "link/deep/x", "real/inner/victim", "loop/x", "a/x", "loop/loop/x"}) {
    const Status st = (*store)->stat(key).status();
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << key << ": " << st.message();
    EXPECT_NE(st.message().find("is a symbolic link"), std::string::npos) << st.message();
    EXPECT_EQ((*store)->read(key, 0, into, "").status().code(), ErrorCode::kInvalidArgument) << key;
  }
  for (const std::string prefix : {"link/", "link/deep/", "real/inner/", "loop/", "a/"}) {
    EXPECT_EQ((*store)->list(prefix).status().code(), ErrorCode::kInvalidArgument) << prefix;
  }
  auto top = (*store)->list("");
  ASSERT_TRUE(top.is_ok()) << top.status().message();
  EXPECT_EQ(*top, (std::vector<std::string>{"file_link", "real/"}));
  auto real = (*store)->list("real/");
  ASSERT_TRUE(real.is_ok()) << real.status().message();
  EXPECT_EQ(*real, (std::vector<std::string>{"real/own.bin"}));
  auto got = (*store)->read("file_link", 0, into, "");
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(buf.substr(0, *got), "own");
  auto own = (*store)->stat("real/own.bin");
  ASSERT_TRUE(own.is_ok()) << own.status().message();
  EXPECT_EQ(own->size, 3u);
}

TEST(OpenStore, RefusesWhatNoDriverServes) {
  EXPECT_EQ(open_store("").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(open_store("file://").status().code(), ErrorCode::kInvalidArgument);
  auto gs = open_store("gs://bucket/p/");
  ASSERT_FALSE(gs.is_ok());
  EXPECT_EQ(gs.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(gs.status().message().find("gs://bucket/p/"), std::string::npos);
  // A location with a dot segment would let a key reach another prefix than the one named.
  if (detail::s3_transport() != nullptr) {
    EXPECT_EQ(open_store("s3://b/x/../y/").status().code(), ErrorCode::kInvalidArgument);
  }
}

// A URL's query begins at its first '?': a key holding one would have its rest taken as the
// store's options (another endpoint, say) and the key before it written, read or deleted.
TEST(RemoteStore, AKeyHoldingAQuestionMarkIsRefusedBeforeAnyRequest) {
  if (detail::s3_transport() == nullptr) GTEST_SKIP() << "built without object storage";
  // Nothing listens on port 9: a request would fail as an I/O error, not as a refused key.
  for (const std::string location :
       {"s3://b/p/", "s3://b/p/?endpoint_override=127.0.0.1:9&scheme=http&region=us-east-1"}) {
    auto store = open_store(location);
    ASSERT_TRUE(store.is_ok()) << store.status().message();
    for (const std::string key :
         {"a?endpoint_override=127.0.0.1:9&scheme=http&region=x", "d/a?max_attempts=1", "a?"}) {
      const Status st = (*store)->stat(key).status();
      EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << location << " " << key;
      EXPECT_NE(st.message().find("'?'"), std::string::npos) << st.message();
      EXPECT_EQ((*store)->write(key, bytes_of("x")).code(), ErrorCode::kInvalidArgument) << key;
      EXPECT_EQ((*store)->remove(key).code(), ErrorCode::kInvalidArgument) << key;
      std::string buf(1, '\0');
      EXPECT_EQ(
          (*store)->read(key, 0, std::as_writable_bytes(std::span<char>(buf)), "").status().code(),
          ErrorCode::kInvalidArgument)
          << key;
    }
  }
}

// Over http(s) a key's '#' begins the URL's fragment (never sent), its '?' the query, and its
// '%' is decoded by the server ("q%2Fx" reaches "q/x"): each is percent-encoded in the key's
// URL, so the server looks up the key itself (it was refused).
TEST(RemoteStore, AnHttpKeysPercentHashAndQuestionMarkArePercentEncoded) {
  EXPECT_EQ(url_key("http://h/p/", "q%2Fx_0.npy"), "q%252Fx_0.npy");
  EXPECT_EQ(url_key("https://h/p/?token=t", "a#b?c%.npy"), "a%23b%3Fc%25.npy");
  EXPECT_EQ(url_key("http://h/p/", "d/plain_0.npy"), "d/plain_0.npy");
  // A space, a control, a byte past ASCII: no URL holds them as they are.
  EXPECT_EQ(url_key("https://h/p/", "a b\t\xc3\xa9\x7f.npy"), "a%20b%09%C3%A9%7F.npy");
  EXPECT_EQ(url_key("http://h/p/", "x-y_z.~!$&'()*+,;=:@/k.npy"), "x-y_z.~!$&'()*+,;=:@/k.npy");
  EXPECT_EQ(url_key("http://h/p/", "q\"<>\\^`{|}[].npy"), "q%22%3C%3E%5C%5E%60%7B%7C%7D%5B%5D.npy");
  EXPECT_EQ(url_key("s3://b/p/", "a b.npy"), "a b.npy");
  EXPECT_EQ(url_key("s3://b/p/", "q%2Fx#.npy"), "q%2Fx#.npy");  // S3's client encodes
  EXPECT_EQ(url_key("/data/p/", "q%2Fx#?.npy"), "q%2Fx#?.npy");
  if (detail::http_transport() == nullptr) GTEST_SKIP() << "built without http(s)";
  // Nothing listens on port 9: the request fails as an I/O error naming the encoded URL.
  auto store = open_store("http://127.0.0.1:9/p/");
  ASSERT_TRUE(store.is_ok()) << store.status().message();
  for (const std::string key : {"a#b_0.npy", "q%2Fx_0.npy", "a?b_0.npy"}) {
    const Status st = (*store)->stat(key).status();
    EXPECT_NE(st.code(), ErrorCode::kInvalidArgument) << key << ": " << st.message();
    EXPECT_NE(st.message().find("http://127.0.0.1:9/p/" + url_key("http://h/", key)),
              std::string::npos)
        << st.message();
  }
}

// location() is shown as it is (the header says no secret is in it): a password in the
// location's user part is not either.
TEST(RemoteStore, TheLocationHoldsNoSecret) {
  if (detail::s3_transport() == nullptr) GTEST_SKIP() << "built without object storage";
  for (const std::string location :
       {"s3://AKID:TopSecret1@b/p/", "https://user:TopSecret1@127.0.0.1:9/p/",
        "http://TopSecret1@127.0.0.1:9/p/?token=TopSecret1",
        "s3://b/p/?secret_key=TopSecret1&access_key=AKID"}) {
    auto store = open_store(location);
    if (!store.is_ok()) {
      EXPECT_EQ(store.status().message().find("TopSecret1"), std::string::npos)
          << store.status().message();
      continue;
    }
    EXPECT_EQ((*store)->location().find("TopSecret1"), std::string::npos) << (*store)->location();
  }
}

// describe() is for messages and says its secrets are redacted: a password in the location's
// user part was returned whole.
TEST(RemoteStore, TheDescribedKeyHoldsNoSecret) {
  if (detail::s3_transport() == nullptr) GTEST_SKIP() << "built without object storage";
  for (const std::string location :
       {"s3://AKID:TopSecret1@b/p/", "https://user:TopSecret1@127.0.0.1:9/p/",
        "http://TopSecret1@127.0.0.1:9/p/?token=TopSecret1",
        "s3://b/p/?secret_key=TopSecret1&access_key=AKID"}) {
    auto store = open_store(location);
    if (!store.is_ok()) continue;  // a scheme this build has no driver for
    const std::string shown = (*store)->describe("d/x.npy");
    EXPECT_EQ(shown.find("TopSecret1"), std::string::npos) << shown;
    EXPECT_TRUE(shown.ends_with("/p/d/x.npy")) << shown;
  }
}

TEST(MemoryStore, InjectedFailureIsReturnedThenClears) {
  MemoryStore store;
  ASSERT_TRUE(store.write("k", bytes_of("abcdef")).is_ok());
  store.inject("k", MemoryFault{file_error(ErrorCode::kIo, "memory://k", "injected", 5), 2});
  std::string buf(6, '\0');
  for (int i = 0; i < 2; ++i) {
    auto got = store.read("k", 0, std::as_writable_bytes(std::span<char>(buf)), "");
    ASSERT_FALSE(got.is_ok());
    EXPECT_EQ(got.status().sys_errno(), 5);
  }
  EXPECT_EQ(read_all(store, "k", 0, 6), "abcdef");
  EXPECT_EQ(store.reads(), 3u);
}

TEST(MemoryStore, ShortReadsLie) {
  MemoryStore store;
  ASSERT_TRUE(store.write("k", bytes_of("abcdef")).is_ok());
  MemoryFault f;
  f.short_by = 2;
  store.inject("k", f);
  EXPECT_EQ(read_all(store, "k", 0, 6), "abcd");
}

TEST(MemoryStore, ChangeAfterStatFailsAConditionalRead) {
  MemoryStore store;
  ASSERT_TRUE(store.write("k", bytes_of("abcdef")).is_ok());
  MemoryFault f;
  f.change_after_stat = true;
  store.inject("k", f);
  auto info = store.stat("k");
  ASSERT_TRUE(info.is_ok());
  std::string buf(6, '\0');
  auto got = store.read("k", 0, std::as_writable_bytes(std::span<char>(buf)), info->generation);
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), ErrorCode::kChanged);
  // Without a condition the bytes are still there.
  EXPECT_EQ(read_all(store, "k", 0, 6), "abcdef");
}

TEST(MemoryStore, SlowReadsTakeTheirTime) {
  MemoryStore store;
  ASSERT_TRUE(store.write("k", bytes_of("abc")).is_ok());
  MemoryFault f;
  f.delay = std::chrono::milliseconds(50);
  store.inject("k", f);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(read_all(store, "k", 0, 3), "abc");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
}

}  // namespace
}  // namespace shardload
