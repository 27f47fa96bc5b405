// The cases every fill must pass, run through the host fill (fill_rows) and the device fill
// (fill_device, against HostCopyBackend) alike: every row range and slice of mixed shards (C,
// Fortran, empty, big-endian), a file changed after discovery or while it is read, a short read
// and an I/O error, each named by file. What only one path has (the device fill's staging
// pool, readers and copies; the host fill's retries) stays in test_fill.cc and
// test_device_fill.cc.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "shardload/device_fill.hpp"
#include "shardload/fill.hpp"
#include "shardload/host_copy_backend.hpp"
#include "shardload/shard_source.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::Change;
using testing::ChangingIo;
using testing::FaultyIo;

// What a case asks of a fill, besides the rows.
struct FillCase {
  IoBackend* io = nullptr;
  int config = 0;   // which of the fill's kConfigs
  int readers = 1;  // the device fill's reader threads where io is set
};

struct HostFill {
  // 0: the default scratch; 1: an 8-byte scratch, many bounded chunks in the Fortran path.
  static constexpr int kConfigs = 2;
  Status fill(const Layout& l, std::int64_t lo, std::int64_t hi, std::byte* out,
              const FillCase& c) {
    FillOptions o;
    if (c.io != nullptr) o.source = ShardSource::over(*c.io);
    if (c.config == 1) o.scratch_bytes = 8;
    return fill_rows(l, lo, hi, out, o);
  }
  // Nothing outlives a host fill.
  void expect_nothing_left() const {}
};

struct DeviceFill {
  // Staging buffers of 24, 50 and 1000 bytes (a row of the mixed shards is 24), 3 of each,
  // with 3 reader threads and an 8-byte scratch; 1 reader where a case injects faults, so
  // that the failing read is the one the case expects.
  static constexpr int kConfigs = 3;
  Status fill(const Layout& l, std::int64_t lo, std::int64_t hi, std::byte* out,
              const FillCase& c) {
    static constexpr std::size_t kBytes[kConfigs] = {24, 50, 1000};
    auto& pool = pools_[static_cast<std::size_t>(c.config)];
    if (!pool) {
      auto p = StagingPool::create(backend_, StagingOptions{kBytes[c.config], 3});
      EXPECT_TRUE(p) << p.status().message();
      pool = std::move(p).value();
    }
    if (!readers_) {
      auto r = ReaderThreads::create(3);
      EXPECT_TRUE(r) << r.status().message();
      readers_ = std::move(r).value();
    }
    DeviceFillOptions o;
    o.io = c.io;
    o.scratch_bytes = 8;
    if (c.io == nullptr) {
      o.readers = readers_.get();
    } else {
      o.reader_threads = c.readers;
    }
    std::vector<Piece> pieces;
    pieces_for_rows(l.offsets, lo, hi, &pieces);
    return fill_device(l, pieces, out, static_cast<std::uint64_t>(hi - lo) * l.row_bytes, &stream_,
                       *pool, o);
  }
  // No staging buffer overwritten before its copy ran; every buffer whole again, and nothing
  // allocated or fenced once the pools are gone.
  void expect_nothing_left() {
    EXPECT_EQ(backend_.overwrites(), 0);
    for (auto& pool : pools_) {
      if (!pool) continue;
      for (const auto& s : pool->slots()) EXPECT_FALSE(s.pending);
      pool.reset();
    }
    EXPECT_EQ(backend_.live_allocations(), 0);
    EXPECT_EQ(backend_.live_fences(), 0);
  }

  HostCopyBackend backend_;
  // The address is the stream, one for every fill as the backend expects: a member, not a local,
  // whose address ASan's fake stacks (clang: detect_stack_use_after_return) change per call.
  int stream_ = 0;
  std::unique_ptr<ReaderThreads> readers_;
  std::unique_ptr<StagingPool> pools_[kConfigs];
};

template <typename Fill>
class FillConformance : public ::testing::Test {
 protected:
  void c_shard(int i, std::int32_t base, std::int64_t rows, bool big = false) {
    testing::write_iota_shard(dir_, i, base, rows, big);
  }
  void f_shard(int i, std::int32_t base, std::int64_t rows, bool big = false) {
    testing::write_iota_shard(dir_, i, base, rows, big, /*fortran=*/true);
  }
  // C, Fortran, empty, big-endian C and Fortran shards; 0, 1, 2, ... in C order, 6 a row.
  void mixed() {
    c_shard(0, 0, 4);
    f_shard(1, 24, 5);
    c_shard(2, 54, 0);
    c_shard(3, 54, 3, true);
    f_shard(4, 72, 6, true);
    c_shard(5, 108, 1);
  }
  Layout layout() {
    auto l = try_discover(Source::directory(dir_.path()));
    EXPECT_TRUE(l) << l.status().message();
    return l.value();
  }
  // Rows [lo, hi) of l through the fill, into a poisoned buffer of int32 values.
  Status fill(const Layout& l, std::int64_t lo, std::int64_t hi, std::vector<std::int32_t>* out,
              FillCase c = {}) {
    out->assign(static_cast<std::size_t>((hi - lo) * (l.row_bytes / 4)), -1);
    return fill_.fill(l, lo, hi, reinterpret_cast<std::byte*>(out->data()), c);
  }
  void TearDown() override { fill_.expect_nothing_left(); }

  Fill fill_;
  testing::TempDir dir_;
};

struct FillName {
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, HostFill> ? "host" : "device";
  }
};

using Fills = ::testing::Types<HostFill, DeviceFill>;
TYPED_TEST_SUITE(FillConformance, Fills, FillName);

// Any row range of the result must be a run of consecutive integers.
TYPED_TEST(FillConformance, EveryRangeOfMixedShards) {
  this->mixed();
  const Layout l = this->layout();
  ASSERT_EQ(l.total_rows(), 19);
  for (int config = 0; config < TypeParam::kConfigs; ++config) {
    for (std::int64_t lo = 0; lo <= 19; ++lo) {
      for (std::int64_t hi = lo; hi <= 19; ++hi) {
        std::vector<std::int32_t> out;
        Status st = this->fill(l, lo, hi, &out, FillCase{nullptr, config});
        ASSERT_TRUE(st) << st.message();
        for (std::size_t k = 0; k < out.size(); ++k) {
          ASSERT_EQ(out[k], lo * 6 + static_cast<std::int64_t>(k))
              << "config " << config << " [" << lo << ", " << hi << ") " << k;
        }
      }
    }
  }
}

// A slice's shards are views of their files: every sub-range of every slice reads the rows of
// the files it covers, not their first rows.
TYPED_TEST(FillConformance, SlicesReadTheirRowsOfTheFiles) {
  this->mixed();
  const Layout l = this->layout();
  for (std::int64_t lo = 0; lo <= 19; ++lo) {
    for (std::int64_t hi = lo; hi <= 19; ++hi) {
      auto sub = slice_rows(l, lo, hi);
      ASSERT_TRUE(sub) << sub.status().message();
      for (std::int64_t a = 0; a <= hi - lo; a += std::max<std::int64_t>(1, (hi - lo) / 3)) {
        std::vector<std::int32_t> out;
        Status st = this->fill(*sub, a, hi - lo, &out, FillCase{nullptr, 1});
        ASSERT_TRUE(st) << st.message();
        for (std::size_t k = 0; k < out.size(); ++k) {
          ASSERT_EQ(out[k], (lo + a) * 6 + static_cast<std::int64_t>(k))
              << "[" << lo << ", " << hi << ") from " << a << " " << k;
        }
      }
    }
  }
}

TYPED_TEST(FillConformance, ChangedAfterDiscovery) {
  this->c_shard(0, 0, 4);
  this->c_shard(1, 24, 4);
  const Layout l = this->layout();
  const std::string path = this->dir_.file("shard_0001.npy");
  std::vector<std::int32_t> out;
  // Same size, another mtime.
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  Status st = this->fill(l, 0, 8, &out);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kChanged);
  EXPECT_NE(st.message().find(path + ": changed since discovery"), std::string::npos)
      << st.message();
  // Truncated: the size differs.
  this->c_shard(1, 24, 2);
  st = this->fill(l, 4, 8, &out);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kChanged);
  EXPECT_NE(st.message().find(path + ": changed since discovery: size"), std::string::npos)
      << st.message();
  // Deleted.
  ASSERT_EQ(std::remove(path.c_str()), 0);
  st = this->fill(l, 4, 8, &out);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("No such file"), std::string::npos) << st.message();
  // The untouched shard still reads.
  ASSERT_TRUE(this->fill(l, 0, 4, &out));
  for (std::size_t k = 0; k < out.size(); ++k) ASSERT_EQ(out[k], static_cast<std::int32_t>(k));
}

// A file appended to, rewritten in place with its size and mtime put back, truncated or
// replaced by a rename while its rows are read is kChanged "changed while reading" naming the
// file: never rows of old and new bytes mixed, never returned as if nothing happened.
TYPED_TEST(FillConformance, ChangedWhileReading) {
  for (Change how :
       {Change::kAppend, Change::kRewriteInPlace, Change::kTruncate, Change::kRenameOver}) {
    for (bool fortran : {false, true}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(how)) + (fortran ? " fortran" : " C"));
      this->c_shard(0, 0, 4);
      if (fortran) {
        this->f_shard(1, 24, 6);
      } else {
        this->c_shard(1, 24, 6);
      }
      const std::string path = this->dir_.file("shard_0001.npy");
      // The device fill with one reader sees the change after the chunk it landed in; with
      // several, a reader may also open the file only after the change.
      for (int readers : {1, 3}) {
        if (readers > 1 && std::is_same_v<TypeParam, HostFill>) continue;
        SCOPED_TRACE("readers " + std::to_string(readers));
        if (readers > 1) this->c_shard(1, 24, 6);
        const Layout l = this->layout();
        ChangingIo io(path, how);
        std::vector<std::int32_t> out;
        Status st = this->fill(l, 4, 10, &out, FillCase{&io, 1, readers});
        EXPECT_TRUE(io.changed());
        ASSERT_FALSE(st);
        EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
        EXPECT_NE(st.message().find(
                      path + (readers == 1 ? ": changed while reading: size" : ": changed ")),
                  std::string::npos)
            << st.message();
      }
      // The fill works again once the file is whole.
      this->c_shard(1, 24, 6);
      const Layout again = this->layout();
      std::vector<std::int32_t> out;
      ASSERT_TRUE(this->fill(again, 0, 10, &out));
      for (std::size_t k = 0; k < out.size(); ++k) ASSERT_EQ(out[k], static_cast<std::int32_t>(k));
    }
  }
}

TYPED_TEST(FillConformance, ShortReadNamesFileOffsetExpectedGot) {
  this->c_shard(0, 0, 10);
  this->c_shard(1, 60, 10);
  const Layout l = this->layout();
  FaultyIo io(FaultyIo::Mode::kEofAfter, 240 + 100);  // all of shard 0, 100 bytes of shard 1
  std::vector<std::int32_t> out;
  Status st = this->fill(l, 0, 20, &out, FillCase{&io, 2});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_NE(st.message().find(this->dir_.file("shard_0001.npy") +
                              ": short read at offset 128: expected 240 bytes, got 100"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("rows [0, 10)"), std::string::npos) << st.message();
  // Nothing of the failed fill is left in the way of the next one.
  ASSERT_TRUE(this->fill(l, 0, 20, &out));
  for (std::size_t k = 0; k < out.size(); ++k) ASSERT_EQ(out[k], static_cast<std::int32_t>(k));
}

TYPED_TEST(FillConformance, IoErrorInTheMiddle) {
  this->f_shard(0, 0, 50);
  const Layout l = this->layout();
  FaultyIo io(FaultyIo::Mode::kErrorAfter, 333);
  std::vector<std::int32_t> out;
  Status st = this->fill(l, 0, 50, &out, FillCase{&io, 1});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_NE(st.message().find("Input/output error"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(this->dir_.file("shard_0000.npy")), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace shardload
