// Many small shards: the open that also takes the snapshot, and discovery probing shards on
// several threads with the same errors as one thread.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/shard_source.hpp"
#include "shardload/source.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::npy_bytes;
using testing::npy_dict;
using testing::TempDir;
using testing::write_file;

// A backend over real files that counts its calls; the default open_stat is used unless
// `fused` (then it answers open_stat as posix_io() does, counted apart).
class CountingIo final : public IoBackend {
 public:
  explicit CountingIo(bool fused = false) : fused_(fused) {}
  Result<int> open(const std::string& p) override {
    ++opens;
    return posix_io().open(p);
  }
  Result<int> open_stat(const std::string& p, FileInfo* info) override {
    if (!fused_) return IoBackend::open_stat(p, info);
    ++open_stats;
    return posix_io().open_stat(p, info);
  }
  Result<FileInfo> stat(int fd, const std::string& p) override {
    ++stats;
    if (fail_stat) return Status(ErrorCode::kIo, p + ": cannot stat: injected");
    return posix_io().stat(fd, p);
  }
  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t off) override {
    ++preads;
    return posix_io().pread(fd, buf, n, off);
  }
  void close(int fd) override {
    ++closes;
    posix_io().close(fd);
  }
  std::atomic<int> opens{0}, open_stats{0}, stats{0}, preads{0}, closes{0};
  bool fail_stat = false;

 private:
  bool fused_;
};

std::string f32_rows(int rows, float first) {
  std::string data(static_cast<std::size_t>(rows) * 2 * sizeof(float), '\0');
  for (int i = 0; i < rows * 2; ++i) {
    const float v = first + static_cast<float>(i);
    std::memcpy(data.data() + static_cast<std::size_t>(i) * sizeof(float), &v, sizeof v);
  }
  return data;
}

// descr "<f4", or "<f8" (then each value takes the bytes of two floats).
void write_shard(const std::string& path, int rows, float first, const char* descr = "<f4") {
  const int per_value = std::string(descr) == "<f8" ? 2 : 1;
  write_file(path, npy_bytes(npy_dict(descr, false, "(" + std::to_string(rows) + ", 2)"),
                             f32_rows(rows * per_value, first)));
}

std::string shard_name(int i) { return NumberPattern{"shard_", 4, ".npy"}.format(i); }

TEST(OpenStat, PosixGivesTheDescriptorsSnapshot) {
  TempDir dir;
  write_shard(dir.file("a.npy"), 3, 0);
  FileInfo info;
  auto f = File::open_stat(posix_io(), dir.file("a.npy"), &info);
  ASSERT_TRUE(f) << f.status().message();
  auto st = f->stat();
  ASSERT_TRUE(st);
  EXPECT_EQ(info, *st);
  EXPECT_TRUE(info.regular);
  // The descriptor reads normally (no O_NONBLOCK left on it).
  EXPECT_EQ(::fcntl(f->fd(), F_GETFL) & O_NONBLOCK, 0);
}

TEST(OpenStat, RefusesAFifoWithoutBlockingAndNamesAMissingFile) {
  TempDir dir;
  const std::string fifo = dir.file("fifo.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  FileInfo info;
  auto f = File::open_stat(posix_io(), fifo, &info);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.status().message(), fifo + ": not a regular file");
  auto missing = File::open_stat(posix_io(), dir.file("gone.npy"), &info);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().sys_errno(), ENOENT);
  EXPECT_NE(missing.status().message().find(dir.file("gone.npy") + ": cannot open"),
            std::string::npos);
}

TEST(OpenStat, DefaultOpensThenStatsAndClosesOnAFailedStat) {
  TempDir dir;
  write_shard(dir.file("a.npy"), 3, 0);
  CountingIo io;
  FileInfo info;
  {
    auto f = File::open_stat(io, dir.file("a.npy"), &info);
    ASSERT_TRUE(f);
    EXPECT_EQ(info.size, static_cast<std::uint64_t>(std::filesystem::file_size(dir.file("a.npy"))));
  }
  EXPECT_EQ(io.opens.load(), 1);
  EXPECT_EQ(io.stats.load(), 1);
  EXPECT_EQ(io.closes.load(), 1);
  io.fail_stat = true;
  auto f = File::open_stat(io, dir.file("a.npy"), &info);
  ASSERT_FALSE(f);
  EXPECT_NE(f.status().message().find("injected"), std::string::npos);
  EXPECT_EQ(io.opens.load(), 2);
  EXPECT_EQ(io.closes.load(), 2);  // the descriptor of the failed open is not leaked
}

// Reading a small shard takes the snapshot from the open: one open_stat, one pread, one stat
// after the read (the check that it did not change), one close.
TEST(SmallFiles, ReadingAShardOpensWithItsSnapshot) {
  TempDir dir;
  write_shard(dir.file(shard_name(0)), 5, 0);
  auto layout = try_discover(Source::directory(dir.path(), "shard_{:04d}.npy"));
  ASSERT_TRUE(layout) << layout.status().message();
  CountingIo io(/*fused=*/true);
  FillOptions opts;
  opts.source = ShardSource::over(io);
  std::vector<float> out(10);
  ASSERT_TRUE(fill_rows(*layout, 0, 5, reinterpret_cast<std::byte*>(out.data()), opts));
  EXPECT_EQ(out[9], 9.0f);
  EXPECT_EQ(io.open_stats.load(), 1);
  EXPECT_EQ(io.opens.load(), 0);
  EXPECT_EQ(io.stats.load(), 1);
  EXPECT_EQ(io.preads.load(), 1);
  EXPECT_EQ(io.closes.load(), 1);
}

// A file changed after discovery is still caught at the open, from the open's own stat.
TEST(SmallFiles, AChangeBeforeTheReadIsCaughtAtTheOpen) {
  TempDir dir;
  write_shard(dir.file(shard_name(0)), 5, 0);
  write_shard(dir.file(shard_name(1)), 5, 10);
  auto layout = try_discover(Source::directory(dir.path(), "shard_{:04d}.npy"));
  ASSERT_TRUE(layout);
  testing::change_file(dir.file(shard_name(1)), testing::Change::kRewriteInPlace);
  std::vector<float> out(20);
  const Status st = fill_rows(*layout, 0, 10, reinterpret_cast<std::byte*>(out.data()));
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kChanged);
  EXPECT_NE(st.message().find(dir.file(shard_name(1)) + ": changed since discovery: "),
            std::string::npos)
      << st.message();
}

class ParallelProbe : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kShards; ++i) write_shard(dir.file(shard_name(i)), i % 3, float(i));
  }
  Result<Layout> run(unsigned threads) {
    DiscoverOptions o;
    o.probe_threads = threads;
    return try_discover(Source::directory(dir.path(), "shard_{:04d}.npy"), o);
  }
  static constexpr int kShards = 3000;
  TempDir dir;
};

TEST_F(ParallelProbe, SameLayoutAsOneThread) {
  auto one = run(1);
  auto many = run(8);
  auto picked = run(0);
  ASSERT_TRUE(one && many && picked);
  ASSERT_EQ(one->shards.size(), static_cast<std::size_t>(kShards));
  for (const Layout* l : {&*many, &*picked}) {
    ASSERT_EQ(l->offsets, one->offsets);
    for (std::size_t i = 0; i < one->shards.size(); ++i) {
      EXPECT_EQ(l->shards[i].path, one->shards[i].path);
      EXPECT_EQ(l->shards[i].snapshot, one->shards[i].snapshot);
      EXPECT_EQ(l->shards[i].data_offset, one->shards[i].data_offset);
    }
  }
}

// Several bad shards: the error names the first in path order, whatever the thread timing.
TEST_F(ParallelProbe, TheFirstBadShardIsNamedWhateverTheThreads) {
  // 2999: truncated; 2500: a FIFO (must not hang); 1700: another dtype; 1234: not .npy.
  ASSERT_EQ(::truncate(dir.file(shard_name(2999)).c_str(), 100), 0);
  ::unlink(dir.file(shard_name(2500)).c_str());
  ASSERT_EQ(::mkfifo(dir.file(shard_name(2500)).c_str(), 0644), 0);
  write_shard(dir.file(shard_name(1700)), 2, 0, "<f8");
  write_file(dir.file(shard_name(1234)), "not an npy file");
  const std::string first = dir.file(shard_name(1234));
  for (unsigned threads : {1u, 2u, 8u, 0u, 8u, 8u}) {
    auto l = run(threads);
    ASSERT_FALSE(l);
    EXPECT_EQ(l.status().code(), ErrorCode::kLayout);
    EXPECT_EQ(l.status().message().rfind(first + ":", 0), 0u)
        << threads << " threads: " << l.status().message();
  }
  // With 1234 fixed, the dtype of 1700 is the first problem.
  write_shard(dir.file(shard_name(1234)), 1, 0);
  for (unsigned threads : {1u, 8u}) {
    auto l = run(threads);
    ASSERT_FALSE(l);
    EXPECT_EQ(l.status().message(), dir.file(shard_name(1700)) + ": dtype float64 differs from " +
                                        "float32 of " + dir.file(shard_name(0)))
        << threads;
  }
  write_shard(dir.file(shard_name(1700)), 2, 0);
  for (unsigned threads : {1u, 8u}) {
    auto l = run(threads);
    ASSERT_FALSE(l);
    EXPECT_EQ(l.status().message(), dir.file(shard_name(2500)) + ": not a regular file") << threads;
  }
}

}  // namespace
}  // namespace shardload
