#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <tuple>

#include "shardload/fill.hpp"
#include "shardload/io.hpp"
#include "shardload/layout.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest.hpp"
#include "shardload/source.hpp"
#include "shardload/storage.hpp"
#include "shardload/store_options.hpp"
#include "storage/detail/transports.hpp"
#include "util.hpp"

namespace shardload {
namespace {

TEST(NumberPattern, FormatAndMatch) {
  auto p = NumberPattern::parse("shard_{:04d}.npy");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->format(7), "shard_0007.npy");
  EXPECT_EQ(p->format(12345), "shard_12345.npy");
  EXPECT_EQ(p->match("shard_0007.npy"), 7);
  EXPECT_EQ(p->match("shard_12345.npy"), 12345);
  EXPECT_EQ(p->match("shard_007.npy"), -1);
  EXPECT_EQ(p->match("shard_00007.npy"), -1);
  EXPECT_EQ(p->match("shard_0007.npy.tmp"), -1);
  EXPECT_EQ(p->match("shard_-007.npy"), -1);
  auto plain = NumberPattern::parse("x{}.bin");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->match("x10.bin"), 10);
  EXPECT_EQ(plain->match("x010.bin"), -1);
  for (const char* bad : {"nofield", "a{:4d}", "{:04x}", "{:04d}{:04d}", "d/{:04d}", "{:0d}"}) {
    EXPECT_FALSE(NumberPattern::parse(bad)) << bad;
  }
}

TEST(NumberPattern, DoubledBracesAreLiteral) {
  // A name holding braces ("a{b}_0000.npy") is numbered by a pattern that doubles them, as
  // str.format spells a literal brace; auto-discovery writes its patterns so.
  auto p = NumberPattern::parse("a{{b}}_{:04d}.n}}py");
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ(p->prefix, "a{b}_");
  EXPECT_EQ(p->suffix, ".n}py");
  EXPECT_EQ(p->format(3), "a{b}_0003.n}py");
  EXPECT_EQ(p->match("a{b}_0003.n}py"), 3);
  EXPECT_EQ(p->match("a{{b}}_0003.n}}py"), -1);
  for (const char* bad : {"a{b}_{:04d}", "a}_{}", "{{:04d}}", "a{{{:04d"}) {
    EXPECT_FALSE(NumberPattern::parse(bad)) << bad;
  }
  EXPECT_TRUE(NumberPattern::parse("a{{{:04d}}}"));
  EXPECT_EQ(NumberPattern::parse("a{{{:04d}")->prefix, "a{");
}

TEST(NaturalOrder, NumbersCompareByValue) {
  std::vector<std::string> v{"f10.npy", "f2.npy", "f1.npy", "f02.npy", "a.npy", "f100.npy", "f9z"};
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return natural_less(a, b); });
  EXPECT_EQ(v, (std::vector<std::string>{"a.npy", "f1.npy", "f2.npy", "f02.npy", "f9z", "f10.npy",
                                         "f100.npy"}));
  // A strict weak order: irreflexive and asymmetric on random names.
  std::mt19937 rng(1);
  for (int i = 0; i < 2000; ++i) {
    auto gen = [&] {
      std::string s;
      const int n = static_cast<int>(rng() % 6);
      for (int k = 0; k < n; ++k) s.push_back("a0123_9"[rng() % 7]);
      return s;
    };
    const auto a = gen();
    const auto b = gen();
    EXPECT_FALSE(natural_less(a, a));
    if (a != b) EXPECT_NE(natural_less(a, b), natural_less(b, a)) << a << " " << b;
  }
}

class SourceTest : public ::testing::Test {
 protected:
  void touch(const std::string& name) { testing::write_file(dir_.file(name), ""); }
  testing::TempDir dir_;
};

TEST_F(SourceTest, DirectoryDefaultNamingInOrder) {
  for (int i = 0; i < 12; ++i) touch(NumberPattern{"shard_", 4, ".npy"}.format(i));
  touch("shard_0003.npy.tmp");
  touch("_meta.json");
  touch("shard_03.npy");
  auto paths = resolve(Source::directory(dir_.path()));
  ASSERT_TRUE(paths) << paths.status().message();
  ASSERT_EQ(paths->size(), 12u);
  EXPECT_EQ((*paths)[11], dir_.file("shard_0011.npy"));
}

TEST_F(SourceTest, NumbersPastWidth) {
  const NumberPattern p{"shard_", 4, ".npy"};
  for (int i = 0; i < 10002; ++i) touch(p.format(i));
  auto paths = resolve(Source::directory(dir_.path()));
  ASSERT_TRUE(paths) << paths.status().message();
  ASSERT_EQ(paths->size(), 10002u);
  EXPECT_EQ(paths->back(), dir_.file("shard_10001.npy"));
  EXPECT_EQ((*paths)[9999], dir_.file("shard_9999.npy"));
}

TEST_F(SourceTest, GapNamesFirstFiveAndCount) {
  const NumberPattern p{"shard_", 4, ".npy"};
  for (int i : {0, 1, 3, 9, 20}) touch(p.format(i));
  auto paths = resolve(Source::directory(dir_.path()));
  ASSERT_FALSE(paths);
  EXPECT_EQ(paths.status().code(), ErrorCode::kLayout);
  const auto& m = paths.status().message();
  EXPECT_NE(m.find("16 of 21 files missing"), std::string::npos) << m;
  EXPECT_NE(m.find("shard_0002.npy, shard_0004.npy, shard_0005.npy, shard_0006.npy, "
                   "shard_0007.npy, ..."),
            std::string::npos)
      << m;
}

// The count and the first missing names come from the files present: one
// name with a 14-digit number must not make discovery walk 1e14 numbers.
TEST_F(SourceTest, HugeNumberIsAGapCountedFromTheFilesPresent) {
  touch("shard_0000.npy");
  touch("shard_99999999999999.npy");
  auto paths = resolve(Source::directory(dir_.path()));
  ASSERT_FALSE(paths);
  const auto& m = paths.status().message();
  EXPECT_NE(m.find("gap in the numbering: 99999999999998 of 100000000000000 files missing "
                   "(shard_0001.npy, shard_0002.npy, shard_0003.npy, shard_0004.npy, "
                   "shard_0005.npy, ...)"),
            std::string::npos)
      << m;
}

TEST_F(SourceTest, MissingStartIsAGap) {
  touch("shard_0001.npy");
  auto paths = resolve(Source::directory(dir_.path()));
  ASSERT_FALSE(paths);
  EXPECT_NE(paths.status().message().find("shard_0000.npy"), std::string::npos);
}

TEST_F(SourceTest, CustomPatternAndParse) {
  for (int i = 0; i < 3; ++i) touch(NumberPattern{"part-", 5, ".npy"}.format(i));
  auto src = Source::parse(dir_.path() + "/part-{:05d}.npy");
  ASSERT_TRUE(src);
  EXPECT_EQ(src->kind, Source::Kind::kDirectory);
  auto paths = resolve(*src);
  ASSERT_TRUE(paths) << paths.status().message();
  EXPECT_EQ(paths->size(), 3u);
  auto src2 = Source::parse(dir_.path(), "part-{:05d}.npy");
  ASSERT_TRUE(src2);
  EXPECT_EQ(resolve(*src2)->size(), 3u);
}

TEST_F(SourceTest, GlobIsNatural) {
  for (const char* n : {"x10.npy", "x2.npy", "x1.npy", "y.txt"}) touch(n);
  auto src = Source::parse(dir_.path() + "/x*.npy");
  ASSERT_TRUE(src);
  EXPECT_EQ(src->kind, Source::Kind::kGlob);
  auto paths = resolve(*src);
  ASSERT_TRUE(paths);
  EXPECT_EQ(*paths, (std::vector<std::string>{dir_.file("x1.npy"), dir_.file("x2.npy"),
                                              dir_.file("x10.npy")}));
}

// What exists is what it is, whatever characters its name holds.
TEST_F(SourceTest, ExistingDirectoryOrFileBeforePatternOrGlob) {
  for (const std::string name : {"run[1]", "a{b}", "q*?", "x{:04d}"}) {
    const std::string d = dir_.file(name);
    ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
    testing::write_file(d + "/shard_0000.npy", "");
    testing::write_file(d + "/p-00.npy", "");
    auto src = Source::parse(d);
    ASSERT_TRUE(src) << name;
    EXPECT_EQ(src->kind, Source::Kind::kDirectory) << name;
    EXPECT_EQ(src->dir_path, d);
    auto paths = resolve(*src);
    ASSERT_TRUE(paths) << paths.status().message();
    EXPECT_EQ(*paths, std::vector<std::string>{d + "/shard_0000.npy"});
    // A pattern's directory part is literal.
    auto pat = Source::parse(d + "/p-{:02d}.npy");
    ASSERT_TRUE(pat);
    EXPECT_EQ(pat->dir_path, d);
    paths = resolve(*pat);
    ASSERT_TRUE(paths) << paths.status().message();
    EXPECT_EQ(*paths, std::vector<std::string>{d + "/p-00.npy"});
    // A file with such a name is a one-shard list.
    touch(name + ".npy");
    auto file = Source::parse(dir_.file(name + ".npy"));
    ASSERT_TRUE(file);
    EXPECT_EQ(file->kind, Source::Kind::kList) << name;
  }
}

TEST_F(SourceTest, AGlobsBracesAreLiteral) {
  // The only brace in a directory part, or braces that make no field: a glob, as glob(3)
  // reads it (no GLOB_BRACE), escaped or not.
  const std::string d = dir_.file("run{1}");
  ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
  testing::write_file(d + "/a{b}_0.npy", "");
  testing::write_file(d + "/a{b}_1.npy", "");
  const std::vector<std::string> want{d + "/a{b}_0.npy", d + "/a{b}_1.npy"};
  for (const std::string glob : {"run{1}/*.npy", "run\\{1\\}/*.npy", "run{1}/a{b}_*.npy",
                                 "run{1}/a\\{b\\}_*.npy", "run{1}/a[{]b[}]_*.npy"}) {
    auto src = Source::parse(dir_.file(glob));
    ASSERT_TRUE(src) << glob;
    EXPECT_EQ(src->kind, Source::Kind::kGlob) << glob;
    auto paths = resolve(*src);
    ASSERT_TRUE(paths) << glob << ": " << paths.status().message();
    EXPECT_EQ(*paths, want) << glob;
  }
  // One field and no escaped brace: a numbered pattern, its directory part literal.
  auto pat = Source::parse(d + "/a{{b}}_{}.npy");
  ASSERT_TRUE(pat);
  EXPECT_EQ(pat->kind, Source::Kind::kDirectory);
  auto paths = resolve(*pat);
  ASSERT_TRUE(paths) << paths.status().message();
  EXPECT_EQ(*paths, want);
}

TEST_F(SourceTest, NulIsRefusedNeverCut) {
  touch("shard_0000.npy");
  const std::string nul("\0x", 2);
  auto expect_refused = [](const Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find(what + " '"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("\\0x' holds a NUL character"), std::string::npos) << st.message();
  };
  expect_refused(Source::parse(dir_.path() + nul).status(), "source");
  expect_refused(Source::parse(dir_.path() + "/shard_{:04d}.npy" + nul).status(), "source");
  expect_refused(Source::parse(dir_.path(), "shard_{:04d}.npy" + nul).status(), "pattern");
  expect_refused(resolve(Source::directory(dir_.path() + nul)).status(), "directory");
  expect_refused(resolve(Source::directory(dir_.path(), "shard_{:04d}.npy" + nul)).status(),
                 "pattern");
  expect_refused(resolve(Source::glob(dir_.path() + "/*" + nul)).status(), "glob");
  expect_refused(resolve(Source::list({dir_.file("shard_0000.npy") + nul})).status(), "path");
  expect_refused(NumberPattern::parse("shard_{:04d}" + nul).status(), "pattern");
  EXPECT_EQ(posix_io().open(dir_.file("shard_0000.npy") + nul).status().code(),
            ErrorCode::kInvalidArgument);
}

TEST_F(SourceTest, UnservedSchemesAreRefusedByName) {
  auto expect_refused = [](const Status& st, const std::string& what, const std::string& scheme) {
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find(what + " '" + scheme + "://"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("the " + scheme + ":// scheme is not supported"), std::string::npos)
        << st.message();
  };
  expect_refused(Source::parse("gs://bucket/train/").status(), "source", "gs");
  expect_refused(Source::parse("az://container/train/*.npy").status(), "source", "az");
  expect_refused(Source::parse("abfss://c@acct.dfs.core.windows.net/d/").status(), "source",
                 "abfss");
  expect_refused(resolve(Source::list({"gs://bucket/a.npy"})).status(), "path", "gs");
  expect_refused(resolve(Source::directory("hdfs://nn/d")).status(), "directory", "hdfs");
  // A local path that is spelled like a URL and exists is that path (relative: from the
  // directory that holds "gs:").
  ASSERT_EQ(::mkdir(dir_.file("gs:").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir_.file("gs:/b").c_str(), 0755), 0);
  char* const cwd = ::getcwd(nullptr, 0);
  ASSERT_NE(cwd, nullptr);
  ASSERT_EQ(::chdir(dir_.path().c_str()), 0);
  auto local = Source::parse("gs://b");
  EXPECT_EQ(::chdir(cwd), 0);
  std::free(cwd);
  ASSERT_TRUE(local) << local.status().message();
  EXPECT_EQ(local->kind, Source::Kind::kDirectory);
  // An absolute path holding "://" is a path, not a URL.
  auto path = resolve(Source::directory("/no/such/dir/gs://b"));
  ASSERT_FALSE(path);
  EXPECT_EQ(path.status().message().find("scheme"), std::string::npos) << path.status().message();
}

TEST_F(SourceTest, Errors) {
  auto missing = resolve(Source::directory(dir_.file("nope")));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find(dir_.file("nope")), std::string::npos);
  EXPECT_NE(missing.status().message().find("not found"), std::string::npos);

  auto empty = resolve(Source::directory(dir_.path()));
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.status().message().find("no files match"), std::string::npos);

  auto noglob = resolve(Source::glob(dir_.path() + "/*.zzz"));
  ASSERT_FALSE(noglob);
  EXPECT_NE(noglob.status().message().find("no files match the glob"), std::string::npos);

  touch("file.npy");
  auto notdir = resolve(Source::directory(dir_.file("file.npy")));
  ASSERT_FALSE(notdir);
  EXPECT_NE(notdir.status().message().find("not a directory"), std::string::npos);

  EXPECT_FALSE(resolve(Source::list({})));
  EXPECT_FALSE(Source::parse(""));
  EXPECT_FALSE(Source::parse(dir_.path() + "/*.npy", "p{}.npy"));
}

}  // namespace
}  // namespace shardload

namespace shardload {
namespace {

// Object storage in memory, to test what the sources and posix_io() do with "s3://" URLs
// without a server (tests/python/test_s3.py reads from a real one). Discovery probes from
// several threads, so every call takes the lock; the test body reads the members directly
// only while nothing else runs.
class MemoryRemote final : public RemoteIo {
 public:
  MemoryRemote() = default;
  std::map<std::string, std::string> objects;  // by URL without its query
  std::map<int, std::string> open_files;
  std::vector<std::tuple<std::string, std::uint64_t, std::size_t>> reads;  // url, offset, n

  static std::string key(const std::string& url) { return url.substr(0, url.find('?')); }

  Result<int> open(const std::string& url) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (objects.count(key(url)) == 0) return file_error(ErrorCode::kIo, url, "missing", ENOENT);
    open_files[next_] = key(url);
    return next_++;
  }
  Result<FileInfo> stat(int fd, const std::string& /*path*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    FileInfo info;
    info.size = objects.at(open_files.at(fd)).size();
    info.regular = true;
    return info;
  }
  // A failed read, as a store that gave up after retrying says it: an errno, its words
  // (last_read_error) and the retries counted.
  std::string fail_reads;  // the words; "" reads
  std::uint64_t retried = 0;
  std::uint64_t retries() const override { return retried; }
  std::string last_read_error() const override { return t_said; }
  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) override {
    std::lock_guard<std::mutex> lock(mu_);
    t_said.clear();
    if (!fail_reads.empty()) {
      retried += 2;
      t_said = fail_reads;
      return -EIO;
    }
    reads.emplace_back(open_files.at(fd), offset, n);
    const std::string& s = objects.at(open_files.at(fd));
    if (offset >= s.size()) return 0;
    n = std::min<std::size_t>(n, s.size() - offset);
    std::memcpy(buf, s.data() + offset, n);
    return static_cast<std::int64_t>(n);
  }
  void close(int fd) override {
    std::lock_guard<std::mutex> lock(mu_);
    open_files.erase(fd);
  }
  int lists = 0;  // LIST requests made
  Result<std::vector<std::string>> list(const std::string& dir_url) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++lists;
    std::string base = key(dir_url);
    if (base.back() != '/') base += '/';
    std::vector<std::string> names;
    for (const auto& [url, bytes] : objects) {
      if (url.rfind(base, 0) == 0 && url.find('/', base.size()) == std::string::npos) {
        names.push_back(url.substr(base.size()));
      }
    }
    return names;
  }
  Result<bool> is_object(const std::string& url) override {
    std::lock_guard<std::mutex> lock(mu_);
    return objects.count(key(url)) != 0;
  }
  Result<FileInfo> stat_path(const std::string& url) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (objects.count(key(url)) == 0) return file_error(ErrorCode::kIo, url, "missing", ENOENT);
    FileInfo info;
    info.size = objects.at(key(url)).size();
    info.regular = true;
    return info;
  }
  bool refuse_writes = false;
  Status write_object(const std::string& url, const void* data, std::size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (refuse_writes) return file_error(ErrorCode::kIo, url, "cannot write: refused", EACCES);
    objects[key(url)].assign(static_cast<const char*>(data), n);
    return Status::ok();
  }

 private:
  std::mutex mu_;
  int next_ = detail::kTransportFdBase;
  static thread_local std::string t_said;
};

thread_local std::string MemoryRemote::t_said;

// Puts `io` in place of a driver's transport (`set`: the s3:// or the http(s):// one) for one
// test, or one block of it.
template <RemoteIo* (*set)(RemoteIo*)>
struct TransportSwap {
  explicit TransportSwap(RemoteIo* io) : before(set(io)) {}
  ~TransportSwap() { set(before); }
  TransportSwap(const TransportSwap&) = delete;
  TransportSwap& operator=(const TransportSwap&) = delete;
  RemoteIo* before;
};
using RemoteSwap = TransportSwap<detail::set_s3_transport>;
using HttpSwap = TransportSwap<detail::set_http_transport>;

// Objects in memory in place of both remote drivers' transports: s3_ serves s3:// URLs, web_
// http(s):// ones.
class RemoteSource : public ::testing::Test {
 protected:
  MemoryRemote s3_;
  MemoryRemote web_;
  RemoteSwap swap_s3_{&s3_};
  HttpSwap swap_web_{&web_};
};

TEST_F(RemoteSource, DirectoryPatternGlobAndListKeepTheQuery) {
  for (const char* n : {"shard_0000.npy", "shard_0001.npy", "shard_0002.npy", "notes.txt"}) {
    s3_.objects[std::string("s3://b/d/") + n] = "x";
  }
  s3_.objects["s3://b/d/sub/shard_0003.npy"] = "x";  // not directly under the prefix
  const std::string q = "?endpoint_override=h:1&scheme=http";
  std::vector<std::string> want;
  for (int i = 0; i < 3; ++i) want.push_back("s3://b/d/shard_000" + std::to_string(i) + ".npy" + q);
  for (const std::string text : {"s3://b/d/" + q, "s3://b/d" + q, "s3://b/d/shard_{:04d}.npy" + q,
                                 "s3://b/d/*.npy" + q, "s3://b/d/shard_000[0-2].npy" + q}) {
    auto source = Source::parse(text);
    ASSERT_TRUE(source) << text << ": " << source.status().message();
    auto paths = resolve(*source);
    ASSERT_TRUE(paths) << text << ": " << paths.status().message();
    EXPECT_EQ(*paths, want) << text;
  }
  auto one = Source::parse("s3://b/d/shard_0001.npy" + q);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->kind, Source::Kind::kList);
  EXPECT_EQ(one->paths, std::vector<std::string>{want[1]});
  // Wildcards and numbering are read in the key's last part only: the prefix before it is
  // taken as spelled, as a save writes it.
  auto deep = Source::parse("s3://b/*/shard_*.npy");
  ASSERT_TRUE(deep);
  auto nothing = resolve(*deep);
  ASSERT_FALSE(nothing);
  EXPECT_NE(nothing.status().message().find("the prefix 's3://b/*/' is taken as spelled"),
            std::string::npos)
      << nothing.status().message();
  for (const std::string dir : {"s3://b/run[1]/", "s3://b/x*y/", "s3://b/v{2}/"}) {
    std::vector<std::string> odd;
    for (int i = 0; i < 2; ++i) {
      odd.push_back(dir + "shard_000" + std::to_string(i) + ".npy");
      s3_.objects[odd.back()] = "x";
    }
    for (const std::string text :
         {dir, dir + "shard_{:04d}.npy", dir + "shard_*.npy", dir + "shard_000[01].npy"}) {
      auto source = Source::parse(text + q);
      ASSERT_TRUE(source) << text << ": " << source.status().message();
      auto paths = resolve(*source);
      ASSERT_TRUE(paths) << text << ": " << paths.status().message();
      EXPECT_EQ(*paths, (std::vector<std::string>{odd[0] + q, odd[1] + q})) << text;
    }
    auto object = Source::parse(odd[1] + q);
    ASSERT_TRUE(object);
    EXPECT_EQ(object->kind, Source::Kind::kList) << odd[1];
  }
  s3_.objects.erase("s3://b/d/shard_0001.npy");
  auto gap = resolve(*Source::parse("s3://b/d/" + q));
  ASSERT_FALSE(gap);
  EXPECT_NE(gap.status().message().find("s3://b/d/shard_{:04d}.npy" + q + ": gap in the numbering"),
            std::string::npos)
      << gap.status().message();
  auto scan = scan_directory("s3://b/d/" + q);
  ASSERT_TRUE(scan);
  EXPECT_EQ(scan->entries, 3);
}

TEST_F(RemoteSource, PosixIoRoutesUrlsAndTheirDescriptors) {
  s3_.objects["s3://b/x"] = "hello world";
  {
    auto f = File::open(posix_io(), "s3://b/x?scheme=http");
    ASSERT_TRUE(f) << f.status().message();
    EXPECT_GE(f->fd(), kRemoteFdBase);
    char buf[5];
    ASSERT_TRUE(f->read_exact(buf, 5, 6).is_ok());
    EXPECT_EQ(std::string(buf, 5), "world");
    EXPECT_FALSE(f->read_exact(buf, 5, 8).is_ok());  // past the end: a short read
    auto st = f->stat();
    ASSERT_TRUE(st);
    EXPECT_EQ(st->size, 11u);
    *f = File();
    EXPECT_TRUE(s3_.open_files.empty());
  }
  RemoteSwap none(nullptr);
  auto f = File::open(posix_io(), "s3://b/x");
  ASSERT_FALSE(f);
  EXPECT_NE(f.status().message().find("not supported by this build"), std::string::npos);
  EXPECT_FALSE(Source::parse("s3://b/x"));
}

// A transport's failed read reaches read_exact's message with the transport's own words,
// whether the key is read by a reader (posix_io(): the adapter asks the transport that read)
// or by its store (a File over the transport), and its retries reach remote_retries().
TEST_F(RemoteSource, AFailedReadSaysTheTransportsWordsAndItsRetriesAreCounted) {
  s3_.objects["s3://b/x"] = "hello world";
  web_.objects["https://h/x"] = "hello web";
  const std::uint64_t before = remote_retries();
  auto f = File::open(posix_io(), "s3://b/x");
  ASSERT_TRUE(f) << f.status().message();
  s3_.fail_reads = "SlowDown: reduce your request rate";
  char buf[5];
  const Status read = f->read_exact(buf, 5, 0);
  ASSERT_FALSE(read.is_ok());
  EXPECT_NE(read.message().find("(SlowDown: reduce your request rate)"), std::string::npos)
      << read.message();
  auto store = open_store("https://h/");
  ASSERT_TRUE(store) << store.status().message();
  web_.fail_reads = "HTTP 503";
  std::byte bytes[5];
  const auto got = (*store)->read("x", 0, bytes, "");
  ASSERT_FALSE(got);
  EXPECT_NE(got.status().message().find("(HTTP 503)"), std::string::npos) << got.status().message();
  EXPECT_EQ(remote_retries() - before, 4u);
  // A local file's failed read after them says no transport's words.
  auto local = File::open(posix_io(), "/proc/self/mem");
  if (local) {
    const Status st = local->read_exact(buf, 5, 0);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.message().find("HTTP 503"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find("SlowDown"), std::string::npos) << st.message();
  }
}

// One answer to "which shards lie side by side" for a raw sidecar and for the positions in
// its rows list: a URL's query tells stores apart, a local path keeps its '?'.
TEST_F(RemoteSource, DirectoryKeyKeepsAUrlsQueryAndALocalPathsName) {
  EXPECT_EQ(directory_key("s3://b/d/x.bin"), "s3://b/d");
  EXPECT_EQ(directory_key("s3://b/d/x.bin?endpoint_override=h:1"),
            "s3://b/d?endpoint_override=h:1");
  EXPECT_NE(directory_key("s3://b/d/x.bin?region=a"), directory_key("s3://b/d/y.bin?region=b"));
  EXPECT_EQ(directory_key("s3://b/d/x.bin?a=1"), directory_key("s3://b/d/y.bin?a=1"));
  // An http(s) URL's secret query items are named by their handle (seal_credentials).
  const std::string http_key = directory_key("https://h/d/x?sig=1/2");
  EXPECT_EQ(http_key, directory_key("https://h/d/y?sig=1/2"));
  EXPECT_EQ(http_key, "https://h/d" + seal_credentials("https://h/d/x?sig=1/2").substr(13));
  EXPECT_TRUE(http_key.starts_with("https://h/d?credentials=")) << http_key;
  EXPECT_EQ(directory_key("/data/d?x/shard_0000.bin"), "/data/d?x");
  EXPECT_EQ(directory_key("shard_0000.bin"), ".");
  EXPECT_EQ(directory_key("/shard_0000.bin"), "/");
}

TEST_F(RemoteSource, S3AndHttpBackendsCoexist) {
  s3_.objects["s3://b/x"] = "from s3";
  web_.objects["https://h/x"] = "from the web";
  {
    EXPECT_TRUE(is_remote_url("http://h/x") && is_http_url("https://h/x"));
    EXPECT_FALSE(is_http_url("s3://b/x"));
    auto a = File::open(posix_io(), "s3://b/x");
    auto b = File::open(posix_io(), "https://h/x");
    ASSERT_TRUE(a && b);
    // Both through the one adapter, each key by its own store's transport.
    EXPECT_GE(a->fd(), kRemoteFdBase);
    EXPECT_GE(b->fd(), kRemoteFdBase);
    EXPECT_NE(a->fd(), b->fd());
    EXPECT_EQ(s3_.open_files.size(), 1u);
    EXPECT_EQ(web_.open_files.size(), 1u);
    char buf[8];
    ASSERT_TRUE(a->read_exact(buf, 2, 5).is_ok());
    EXPECT_EQ(std::string(buf, 2), "s3");
    ASSERT_TRUE(b->read_exact(buf, 3, 9).is_ok());
    EXPECT_EQ(std::string(buf, 3), "web");
    *a = File();
    *b = File();
    EXPECT_TRUE(s3_.open_files.empty() && web_.open_files.empty());
    // A URL names an object; HTTP has nothing to list: a URL ending in '/' is a directory
    // only through its manifest (discovery's part), its query kept for every URL made from it.
    auto one = Source::parse("https://h/x?sig=1");
    ASSERT_TRUE(one) << one.status().message();
    EXPECT_EQ(one->kind, Source::Kind::kList);
    auto dir = Source::parse("http://h/d/?sig=1");
    ASSERT_TRUE(dir) << dir.status().message();
    EXPECT_EQ(dir->kind, Source::Kind::kDirectory);
    EXPECT_EQ(dir->dir_path, seal_credentials("http://h/d/?sig=1"));
    EXPECT_EQ(dir->dir_path.find("sig=1"), std::string::npos) << dir->dir_path;
    EXPECT_TRUE(dir->pattern.empty());
    EXPECT_FALSE(Source::parse("http://h/d/", "s_{:04d}.npy"));
    for (const std::string text : {"http://h/d/*.npy", "http://h/d/s_{:04d}.npy"}) {
      auto bad = Source::parse(text);
      ASSERT_FALSE(bad) << text;
      EXPECT_NE(bad.status().message().find("HTTP has no directory listing"), std::string::npos)
          << bad.status().message();
    }
    EXPECT_FALSE(Source::parse("http://h/x.npy", "p{}.npy"));
  }
  HttpSwap none(nullptr);
  auto f = File::open(posix_io(), "http://h/x");
  ASSERT_FALSE(f);
  EXPECT_NE(f.status().message().find("not built with http support"), std::string::npos)
      << f.status().message();
}

TEST_F(RemoteSource, HostFillReadsOnlyTheRowsRangesOfEachObject) {
  using testing::npy_bytes;
  using testing::npy_dict;
  using testing::raw;
  std::vector<std::int32_t> all;
  const std::vector<std::int64_t> rows{5, 0, 9, 4};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::vector<std::int32_t> v;
    for (std::int64_t e = 0; e < rows[i] * 3; ++e)
      v.push_back(static_cast<std::int32_t>(all.size() + v.size()));
    all.insert(all.end(), v.begin(), v.end());
    s3_.objects["s3://b/d/shard_000" + std::to_string(i) + ".npy"] =
        npy_bytes(npy_dict("<i4", false, "(" + std::to_string(rows[i]) + ", 3)"), raw(v));
  }
  auto layout = try_discover(*Source::parse("s3://b/d/?scheme=http"));
  ASSERT_TRUE(layout) << layout.status().message();
  ASSERT_EQ(layout->total_rows(), 18);
  // One LIST, though the format's scan and the pattern's resolve both need the names; the
  // next discovery lists again.
  EXPECT_EQ(s3_.lists, 1);
  const std::string last = s3_.objects.at("s3://b/d/shard_0003.npy");
  s3_.objects.erase("s3://b/d/shard_0003.npy");
  auto again = try_discover(*Source::parse("s3://b/d/?scheme=http"));
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_EQ(again->shards.size(), 3u);
  EXPECT_EQ(s3_.lists, 2);
  s3_.objects["s3://b/d/shard_0003.npy"] = last;
  s3_.reads.clear();
  std::vector<std::int32_t> got((12 - 3) * 3);
  ASSERT_TRUE(fill_rows(*layout, 3, 12, reinterpret_cast<std::byte*>(got.data())).is_ok());
  EXPECT_EQ(got, std::vector<std::int32_t>(all.begin() + 3 * 3, all.begin() + 12 * 3));
  // Rows [3, 5) of shard 0 and [0, 7) of shard 2, each one read at its rows' bytes: no
  // object is read whole.
  std::uint64_t bytes = 0;
  for (const auto& [url, offset, n] : s3_.reads) {
    EXPECT_GT(offset, 0u) << url;  // past the header
    bytes += n;
  }
  EXPECT_EQ(bytes, got.size() * sizeof(std::int32_t));
}

// The manifest of a remote directory: one object written whole, keys relative to the prefix
// and no query in it; discovery reads it back under the query of the URL it was given.
TEST_F(RemoteSource, ManifestIsOneObjectWithoutTheQuery) {
  using testing::npy_bytes;
  using testing::npy_dict;
  for (int i = 0; i < 3; ++i) {
    s3_.objects["s3://b/d/shard_000" + std::to_string(i) + ".npy"] = npy_bytes(
        npy_dict("<f4", false, "(" + std::to_string(i + 2) + ",)"), std::string(4 * (i + 2), 'x'));
  }
  const std::string dir = "s3://b/d/?scheme=http";
  auto probed = try_discover(*Source::parse(dir));
  ASSERT_TRUE(probed) << probed.status().message();
  EXPECT_EQ(probed->manifest_state, ManifestState::kAbsent);
  auto written = write_manifest(*probed, dir);
  ASSERT_TRUE(written) << written.status().message();
  EXPECT_EQ(*written, "s3://b/d/shardload.manifest?scheme=http");
  const std::string& bytes = s3_.objects.at("s3://b/d/shardload.manifest");
  EXPECT_EQ(bytes.find("scheme"), std::string::npos);
  EXPECT_EQ(bytes.find("s3://"), std::string::npos);
  auto read = read_manifest(*written);
  ASSERT_TRUE(read) << read.status().message();
  EXPECT_EQ(read->pattern, "shard_{:04d}.npy");
  ASSERT_EQ(read->layout.shards.size(), 3u);
  EXPECT_EQ(read->layout.shards[2].path, "s3://b/d/shard_0002.npy?scheme=http");
  auto used = try_discover(*Source::parse(dir));
  ASSERT_TRUE(used) << used.status().message();
  EXPECT_EQ(used->manifest_state, ManifestState::kUsed) << used->manifest_status;
  EXPECT_EQ(used->shards.size(), 3u);
  EXPECT_EQ(used->shards[1].path, probed->shards[1].path);
  // Another size under the same name: stale, probed again.
  s3_.objects["s3://b/d/shard_0001.npy"] =
      npy_bytes(npy_dict("<f4", false, "(4,)"), std::string(16, 'y'));
  auto stale = try_discover(*Source::parse(dir));
  ASSERT_TRUE(stale) << stale.status().message();
  EXPECT_EQ(stale->manifest_state, ManifestState::kStale);
  EXPECT_NE(stale->manifest_status.find("s3://b/d/shard_0001.npy?scheme=http: size"),
            std::string::npos)
      << stale->manifest_status;
  EXPECT_EQ(stale->total_rows(), 2 + 4 + 4);
  // A shard under other store options, or outside the prefix, cannot be written relative.
  Layout other = *probed;
  other.shards[1].path = "s3://b/d/shard_0001.npy?scheme=https";
  auto refused = write_manifest(other, dir);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("store options"), std::string::npos)
      << refused.status().message();
  other.shards[1].path = "s3://b/e/shard_0001.npy?scheme=http";
  refused = write_manifest(other, dir);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("not inside " + dir), std::string::npos)
      << refused.status().message();
  // A refused upload: an error naming the object, the old manifest kept.
  const std::string before = s3_.objects.at("s3://b/d/shardload.manifest");
  s3_.refuse_writes = true;
  auto failed = write_manifest(*stale, dir);
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.status().message().find("s3://b/d/shardload.manifest?scheme=http"),
            std::string::npos)
      << failed.status().message();
  EXPECT_EQ(s3_.objects.at("s3://b/d/shardload.manifest"), before);
}

}  // namespace
}  // namespace shardload
