// The device-fill pipeline against HostCopyBackend: every byte compared with
// fill_rows / fill_pieces, whatever the staging sizes, readers and faults.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

#include "shardload/device_fill.hpp"
#include "shardload/fill.hpp"
#include "shardload/host_copy_backend.hpp"
#include "shardload/synth.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::Change;
using testing::ChangingIo;
using testing::FaultyIo;

class DeviceFillTest : public ::testing::Test {
 protected:
  void c_shard(int i, std::int32_t base, std::int64_t rows, bool big = false) {
    testing::write_iota_shard(dir_, i, base, rows, big);
  }
  void f_shard(int i, std::int32_t base, std::int64_t rows) {
    testing::write_iota_shard(dir_, i, base, rows, /*big=*/false, /*fortran=*/true);
  }
  // Mixed shards: C, Fortran, empty, big-endian; 0, 1, 2, ... in C order.
  void mixed() {
    c_shard(0, 0, 4);
    f_shard(1, 24, 5);
    c_shard(2, 54, 0);
    c_shard(3, 54, 3, true);
    f_shard(4, 72, 6);
    c_shard(5, 108, 1);
  }
  // Native C-order float64 shards from synth, of synth_split rows.
  void synth_shards(int n, std::int64_t total, std::int64_t width) {
    const auto rows = synth_split(11, total, n);
    std::uint64_t first = 0;
    for (int i = 0; i < n; ++i) {
      NpyWriteSpec spec{*parse_dtype("float64"), {rows[static_cast<std::size_t>(i)], width}};
      ASSERT_TRUE(
          write_npy(dir_.file(NumberPattern{"shard_", 4, ".npy"}.format(i)), spec, 11, first));
      first += static_cast<std::uint64_t>(rows[static_cast<std::size_t>(i)] * width);
    }
  }
  Layout layout() {
    auto l = try_discover(Source::directory(dir_.path()));
    EXPECT_TRUE(l) << l.status().message();
    return l.value();
  }
  static std::vector<std::byte> expected(const Layout& l, std::int64_t lo, std::int64_t hi) {
    std::vector<std::byte> out(static_cast<std::size_t>(hi - lo) * l.row_bytes);
    Status st = fill_rows(l, lo, hi, out.data());
    EXPECT_TRUE(st) << st.message();
    return out;
  }
  // Fills rows [lo, hi) through the pipeline into a fresh, poisoned buffer.
  static Status device_rows(const Layout& l, std::int64_t lo, std::int64_t hi, StagingPool& pool,
                            const DeviceFillOptions& o, std::vector<std::byte>* out) {
    std::vector<Piece> pieces;
    pieces_for_rows(l.offsets, lo, hi, &pieces);
    out->assign(static_cast<std::size_t>(hi - lo) * l.row_bytes, std::byte{0xA5});
    return fill_device(l, pieces, out->data(), out->size(), &stream_, pool, o);
  }
  static std::unique_ptr<StagingPool> pool(CopyBackend& b, std::size_t bytes, int n) {
    auto p = StagingPool::create(b, StagingOptions{bytes, n});
    EXPECT_TRUE(p) << p.status().message();
    return std::move(p).value();
  }
  static inline int stream_ = 0;  // the address is the stream
  testing::TempDir dir_;
};

TEST_F(DeviceFillTest, StagingSizesBuffersAndReaders) {
  mixed();
  const Layout l = layout();
  const auto want = expected(l, 0, 19);
  for (std::size_t bytes : {24, 30, 48, 72, 240, 1 << 20}) {
    for (int buffers : {2, 3, 8}) {
      for (int readers : {1, 2, 3, 8}) {
        HostCopyBackend backend;
        auto p = pool(backend, bytes, buffers);
        DeviceFillOptions o;
        o.reader_threads = readers;
        std::vector<std::byte> out;
        Status st = device_rows(l, 0, 19, *p, o, &out);
        ASSERT_TRUE(st) << st.message();
        ASSERT_EQ(out, want) << bytes << " " << buffers << " " << readers;
        EXPECT_EQ(backend.overwrites(), 0);
        if (bytes == 24) EXPECT_EQ(backend.copies(), 19);  // one row per chunk
      }
    }
  }
}

// A device's fill resources are the process's: made once per device name, sized from the
// environment, kept by the resource owner, and the fills that use them read on the work pool.
TEST_F(DeviceFillTest, DeviceResourcesOnePerDeviceSizedFromTheEnvironment) {
  mixed();
  const Layout l = layout();
  ::setenv("SHARDLOAD_STAGING_BUFFERS", "3", 1);
  ::setenv("SHARDLOAD_STAGING_BYTES", "48", 1);
  ::setenv("SHARDLOAD_READER_THREADS", "3", 1);
  int made = 0;
  const auto make = [&]() -> Result<std::unique_ptr<CopyBackend>> {
    ++made;
    return std::unique_ptr<CopyBackend>(std::make_unique<HostCopyBackend>());
  };
  auto first = device_resources("host-test:0", make);
  ASSERT_TRUE(first) << first.status().message();
  auto again = device_resources("host-test:0", make);
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_EQ(*first, *again);
  EXPECT_EQ(made, 1);
  DeviceResources& r = **first;
  EXPECT_EQ(r.pool->buffers(), 3);
  EXPECT_EQ(r.pool->buffer_bytes(), 48u);
  EXPECT_EQ(r.options.reader_threads, 3);
  EXPECT_EQ(r.options.readers, nullptr);
  std::vector<std::byte> out;
  Status st = device_rows(l, 0, 19, *r.pool, r.options, &out);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(out, expected(l, 0, 19));
  // Another device has its own; a malformed variable makes nothing, and a later call with
  // it fixed makes the resources.
  ::setenv("SHARDLOAD_STAGING_BUFFERS", "1", 1);
  auto bad = device_resources("host-test:1", make);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("SHARDLOAD_STAGING_BUFFERS"), std::string::npos)
      << bad.status().message();
  ::setenv("SHARDLOAD_STAGING_BUFFERS", "2", 1);
  auto other = device_resources("host-test:1", make);
  ASSERT_TRUE(other) << other.status().message();
  EXPECT_NE(*other, *first);
  EXPECT_EQ((*other)->pool->buffers(), 2);
  // A backend that cannot be made is its error.
  auto none = device_resources("host-test:2", []() -> Result<std::unique_ptr<CopyBackend>> {
    return Status(ErrorCode::kIo, "no device here");
  });
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().message(), "no device here");
  ::unsetenv("SHARDLOAD_STAGING_BUFFERS");
  ::unsetenv("SHARDLOAD_STAGING_BYTES");
  ::unsetenv("SHARDLOAD_READER_THREADS");
}

// Buffers smaller than a row: native C-order rows are split by bytes.
TEST_F(DeviceFillTest, TinyBuffersSplitRowsByBytes) {
  synth_shards(7, 61, 5);  // 40-byte rows
  const Layout l = layout();
  const auto want = expected(l, 0, 61);
  for (std::size_t bytes : {1, 3, 7, 39, 40, 41}) {
    HostCopyBackend backend;
    auto p = pool(backend, bytes, 2);
    for (int readers : {1, 4}) {
      DeviceFillOptions o;
      o.reader_threads = readers;
      std::vector<std::byte> out;
      Status st = device_rows(l, 0, 61, *p, o, &out);
      ASSERT_TRUE(st) << st.message();
      ASSERT_EQ(out, want) << bytes;
      std::vector<std::byte> part;
      st = device_rows(l, 13, 29, *p, o, &part);
      ASSERT_TRUE(st) << st.message();
      ASSERT_EQ(part, expected(l, 13, 29)) << bytes;
    }
    EXPECT_EQ(backend.overwrites(), 0);
  }
}

TEST_F(DeviceFillTest, RowLargerThanBufferMustBeWholeForSwappedOrFortran) {
  mixed();
  const Layout l = layout();
  HostCopyBackend backend;
  auto p = pool(backend, 23, 2);
  std::vector<std::byte> out;
  // Rows 0-3 are native C order and split by bytes; row 4 is Fortran.
  ASSERT_TRUE(device_rows(l, 0, 4, *p, {}, &out));
  EXPECT_EQ(out, expected(l, 0, 4));
  Status st = device_rows(l, 0, 19, *p, {}, &out);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find(dir_.file("shard_0001.npy") + ": one row is 24 bytes, more than "
                                                            "a staging buffer of 23 bytes"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(backend.copies(), 4 * 2);  // nothing of the refused fill was queued
}

// Slow copies and few buffers: a buffer reused before its fence would be
// caught by the backend; reads still overlap queued copies.
TEST_F(DeviceFillTest, BuffersRotateOnlyAfterTheirFence) {
  synth_shards(3, 200, 4);
  const Layout l = layout();
  const auto want = expected(l, 0, 200);
  for (int readers : {1, 3}) {
    HostCopyBackend::Hooks h;
    h.copy_delay = std::chrono::microseconds(300);
    HostCopyBackend backend(h);
    auto p = pool(backend, 5 * 32, readers == 1 ? 2 : 3);
    DeviceFillOptions o;
    o.reader_threads = readers;
    std::vector<std::byte> out;
    Status st = device_rows(l, 0, 200, *p, o, &out);
    ASSERT_TRUE(st) << st.message();
    ASSERT_EQ(out, want);
    EXPECT_EQ(backend.overwrites(), 0);
    EXPECT_GE(backend.max_queued(), 2) << "no read overlapped a copy";
    EXPECT_EQ(backend.copied_bytes(), want.size());
  }
}

// The check the previous test relies on does catch a buffer reused early.
TEST(HostCopyBackend, CatchesABufferOverwrittenBeforeItsCopyRan) {
  HostCopyBackend::Hooks h;
  h.copy_delay = std::chrono::microseconds(20000);
  HostCopyBackend backend(h);
  int stream = 0;
  auto mem = backend.alloc_staging(64);
  ASSERT_TRUE(mem);
  std::vector<std::byte> dst(64);
  std::memset(*mem, 1, 64);
  ASSERT_TRUE(backend.copy_async(dst.data(), *mem, 64, &stream));
  std::memset(*mem, 2, 64);
  Status st = backend.synchronize(&stream);
  EXPECT_FALSE(st);
  EXPECT_EQ(backend.overwrites(), 1);
  EXPECT_NE(st.message().find("overwritten before the copy ran"), std::string::npos);
  // And refuses a source outside staging memory.
  EXPECT_EQ(backend.copy_async(dst.data(), dst.data(), 8, &stream).code(),
            ErrorCode::kInvalidArgument);
  backend.free_staging(*mem);
}

TEST_F(DeviceFillTest, ManyPiecesOverTheTilesOfAPlan) {
  synth_shards(300, 5000, 3);
  const Layout l = layout();
  HostCopyBackend backend;
  auto p = pool(backend, 7 * 24, 4);
  auto readers = ReaderThreads::create(4);
  ASSERT_TRUE(readers);
  DeviceFillOptions o;
  o.readers = readers->get();
  auto plan = make_plan(l.offsets, 3, 2);
  ASSERT_TRUE(plan);
  for (std::int64_t t = 0; t < plan->tiles; ++t) {
    const auto pieces = tile_pieces(*plan, l.offsets, t);
    const auto rows = plan->tile_end(t) - plan->tile_begin(t);
    std::vector<std::byte> want(static_cast<std::size_t>(rows) * l.row_bytes);
    ASSERT_TRUE(fill_pieces(l, pieces, want.data()));
    std::vector<std::byte> got(want.size(), std::byte{0x5A});
    Status st = fill_device(l, pieces, got.data(), got.size(), &stream_, *p, o);
    ASSERT_TRUE(st) << st.message();
    ASSERT_EQ(got, want) << "tile " << t;
  }
  EXPECT_EQ(backend.overwrites(), 0);
}

TEST_F(DeviceFillTest, IoErrorWithManyReadersStopsCleanly) {
  synth_shards(5, 3000, 8);
  const Layout l = layout();
  HostCopyBackend::Hooks h;
  h.copy_delay = std::chrono::microseconds(50);
  HostCopyBackend backend(h);
  {
    auto p = pool(backend, 64 * 10, 6);
    for (std::uint64_t after : {0, 1, 5000, 100000}) {
      FaultyIo io(FaultyIo::Mode::kErrorAfter, after);
      DeviceFillOptions o;
      o.io = &io;
      o.reader_threads = 5;
      std::vector<std::byte> out;
      Status st = device_rows(l, 0, 3000, *p, o, &out);
      ASSERT_FALSE(st) << after;
      EXPECT_EQ(st.code(), ErrorCode::kIo);
      EXPECT_NE(st.message().find("Input/output error"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("device fill rows"), std::string::npos) << st.message();
      for (const auto& s : p->slots()) EXPECT_FALSE(s.pending);
    }
  }
  EXPECT_EQ(backend.overwrites(), 0);
  EXPECT_EQ(backend.live_allocations(), 0);
  EXPECT_EQ(backend.live_fences(), 0);
}

TEST_F(DeviceFillTest, CopyErrorsAreReturned) {
  synth_shards(2, 100, 4);
  const Layout l = layout();
  for (bool async : {false, true}) {
    for (int readers : {1, 3}) {
      HostCopyBackend::Hooks h;
      (async ? h.fail_copy_async : h.fail_copy_enqueue) = 5;
      HostCopyBackend backend(h);
      {
        auto p = pool(backend, 32 * 3, 3);
        DeviceFillOptions o;
        o.reader_threads = readers;
        std::vector<std::byte> out;
        Status st = device_rows(l, 0, 100, *p, o, &out);
        ASSERT_FALSE(st);
        EXPECT_EQ(st.code(), ErrorCode::kIo);
        EXPECT_NE(st.message().find(async ? "failure of copy 5 while it ran"
                                          : "injected refusal of copy 5"),
                  std::string::npos)
            << st.message();
        if (!async) {
          EXPECT_NE(st.message().find("device fill rows"), std::string::npos) << st.message();
          EXPECT_NE(st.message().find("copying 96 bytes to device offset"), std::string::npos)
              << st.message();
        }
      }
      EXPECT_EQ(backend.live_allocations(), 0);
      EXPECT_EQ(backend.live_fences(), 0);
    }
  }
}

TEST(StagingPool, AllocationFailureFreesWhatItGot) {
  HostCopyBackend::Hooks h;
  h.fail_alloc_after = 3;
  HostCopyBackend backend(h);
  auto p = StagingPool::create(backend, StagingOptions{4096, 5});
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("staging pool: buffer 3 of 5 (4096 bytes each)"),
            std::string::npos)
      << p.status().message();
  EXPECT_EQ(backend.live_allocations(), 0);
  EXPECT_EQ(backend.live_fences(), 0);
}

TEST(StagingPool, SizesAndOptions) {
  HostCopyBackend backend;
  auto p = StagingPool::create(backend);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)->buffers(), 16);
  EXPECT_EQ((*p)->buffer_bytes(), std::size_t{8} << 20);
  EXPECT_EQ((*p)->total_bytes(), std::size_t{128} << 20);
  EXPECT_EQ(validate(StagingOptions{0, 4}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(validate(StagingOptions{1024, 1}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(validate(StagingOptions{std::size_t{1} << 30, 100}).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(validate(StagingOptions{1, 2}));

  StagingOptions o;
  ::setenv("SHARDLOAD_STAGING_BYTES", "1048576", 1);
  ::setenv("SHARDLOAD_STAGING_BUFFERS", "3", 1);
  ASSERT_TRUE(staging_options_from_env(&o));
  EXPECT_EQ(o.buffer_bytes, std::size_t{1} << 20);
  EXPECT_EQ(o.buffers, 3);
  ::setenv("SHARDLOAD_STAGING_BUFFERS", "3x", 1);
  Status st = staging_options_from_env(&o);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("SHARDLOAD_STAGING_BUFFERS: expected a whole number in [2, 1024], "
                              "found '3x'"),
            std::string::npos)
      << st.message();
  ::unsetenv("SHARDLOAD_STAGING_BYTES");
  ::unsetenv("SHARDLOAD_STAGING_BUFFERS");
  DeviceFillOptions d;
  ::setenv("SHARDLOAD_READER_THREADS", "6", 1);
  ASSERT_TRUE(device_fill_options_from_env(&d));
  EXPECT_EQ(d.reader_threads, 6);
  ::setenv("SHARDLOAD_READER_THREADS", "0", 1);
  EXPECT_FALSE(device_fill_options_from_env(&d));
  ::unsetenv("SHARDLOAD_READER_THREADS");
  EXPECT_FALSE(ReaderThreads::create(0));
}

TEST_F(DeviceFillTest, BadArguments) {
  mixed();
  const Layout l = layout();
  HostCopyBackend backend;
  auto p = pool(backend, 64, 2);
  std::vector<Piece> pieces;
  pieces_for_rows(l.offsets, 0, 19, &pieces);
  std::vector<std::byte> out(19 * 24);
  Status st = fill_device(l, pieces, out.data(), out.size() - 1, &stream_, *p);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("overruns the destination of 455 bytes"), std::string::npos)
      << st.message();
  EXPECT_EQ(fill_device(l, {Piece{1, 0, 6, 0}}, out.data(), out.size(), &stream_, *p).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(fill_device(l, {Piece{1, 0, 5, 0}}, nullptr, 1000, &stream_, *p).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(fill_device(l, {}, nullptr, 0, &stream_, *p));
  EXPECT_TRUE(fill_device(l, {Piece{2, 0, 0, 0}}, nullptr, 0, &stream_, *p));
  EXPECT_EQ(backend.copies(), 0);
}

TEST_F(DeviceFillTest, DirectReads) {
  mixed();
  const Layout l = layout();
  const auto want = expected(l, 0, 19);
  {
    // kOn: native C-order chunks go direct, the others are staged.
    HostCopyBackend::Hooks h;
    h.direct_reads = true;
    HostCopyBackend backend(h);
    auto p = pool(backend, 48, 3);
    DeviceFillOptions o;
    o.direct = DirectReads::kOn;
    o.reader_threads = 2;
    std::vector<std::byte> out;
    ASSERT_TRUE(device_rows(l, 0, 19, *p, o, &out));
    EXPECT_EQ(out, want);
    EXPECT_EQ(backend.direct_reads(), 3);  // rows 0-1, 2-3, 18
    EXPECT_EQ(backend.copies(), 8);        // Fortran 3 + 3, big-endian 2
    EXPECT_EQ(backend.live_direct_handles(), 0);
    o.direct = DirectReads::kOff;
    ASSERT_TRUE(device_rows(l, 0, 19, *p, o, &out));
    EXPECT_EQ(backend.direct_reads(), 3);
  }
  for (bool slow_direct : {true, false}) {
    HostCopyBackend::Hooks h;
    h.direct_reads = true;
    if (slow_direct) {
      h.direct_delay = std::chrono::milliseconds(30);
    } else {
      h.copy_delay = std::chrono::milliseconds(30);
    }
    HostCopyBackend backend(h);
    auto p = pool(backend, 48, 3);
    DeviceFillOptions o;
    o.direct = DirectReads::kAuto;
    o.reader_threads = 1;
    std::vector<std::byte> out;
    ASSERT_TRUE(device_rows(l, 0, 19, *p, o, &out));
    EXPECT_EQ(out, want);
    EXPECT_EQ(p->direct_choice.load(), slow_direct ? -1 : 1);
    const auto before = backend.direct_reads();
    ASSERT_TRUE(device_rows(l, 0, 19, *p, o, &out));
    EXPECT_EQ(out, want);
    EXPECT_EQ(backend.direct_reads() - before, slow_direct ? 0 : 3);
  }
  {
    // A backend without direct reads: kOn falls back to staging.
    HostCopyBackend backend;
    auto p = pool(backend, 48, 3);
    DeviceFillOptions o;
    o.direct = DirectReads::kOn;
    std::vector<std::byte> out;
    ASSERT_TRUE(device_rows(l, 0, 19, *p, o, &out));
    EXPECT_EQ(out, want);
  }
}

// A file the backend declines (cuFile refusing its file system) is staged; the other files still
// go direct, and the fill succeeds, with kOn and with kAuto.
TEST_F(DeviceFillTest, DeclinedFilesFallBackToStaging) {
  synth_shards(4, 300, 5);
  const Layout l = layout();
  const auto want = expected(l, 0, l.total_rows());
  for (const DirectReads direct : {DirectReads::kOn, DirectReads::kAuto}) {
    for (int readers : {1, 3}) {
      HostCopyBackend::Hooks h;
      h.direct_reads = true;
      h.decline_direct = "shard_0001";
      // kAuto measures one chunk both ways and keeps the faster; a slow copy makes that direct
      // on a loaded machine too, so the declined file is reached by a direct attempt.
      if (direct == DirectReads::kAuto) h.copy_delay = std::chrono::milliseconds(3);
      HostCopyBackend backend(h);
      auto p = pool(backend, 400, 4);
      DeviceFillOptions o;
      o.direct = direct;
      o.reader_threads = readers;
      std::vector<std::byte> out;
      Status st = device_rows(l, 0, l.total_rows(), *p, o, &out);
      ASSERT_TRUE(st) << st.message();
      EXPECT_EQ(out, want);
      EXPECT_GE(backend.direct_declined(), 1);
      EXPECT_GT(backend.copies(), 0);  // shard 1 staged
      EXPECT_GT(backend.direct_reads(), 0);
      if (direct == DirectReads::kAuto) {
        EXPECT_EQ(p->direct_choice.load(), 1);
      }
      EXPECT_EQ(backend.live_direct_handles(), 0);
      EXPECT_EQ(backend.overwrites(), 0);
    }
  }
}

#ifdef SHARDLOAD_TEST_PYTHON
// HDF5 shards differ in where their rows lie: a contiguous dataset stored in the array's own type
// is one byte range at its offset (after a user block too) and goes direct, as a .npy does; a
// chunked or byte-swapped one is staged through its reader. h5py writes the files.
TEST_F(DeviceFillTest, ContiguousHdf5ShardsGoDirect) {
  const std::string script = R"(
import sys, numpy as np, h5py
d = sys.argv[1]
a = np.arange(120 * 5, dtype="<f8").reshape(120, 5)
with h5py.File(d + "/shard_0000.h5", "w") as f:
    f.create_dataset("x", data=a[:40])
with h5py.File(d + "/shard_0001.h5", "w") as f:
    f.create_dataset("x", data=a[40:70], chunks=(8, 5), compression="gzip")
with h5py.File(d + "/shard_0002.h5", "w") as f:
    f.create_dataset("x", data=a[70:95].astype(">f8"))
with h5py.File(d + "/shard_0003.h5", "w", userblock_size=1024) as f:
    f.create_dataset("x", data=a[95:110])
t = h5py.h5t.IEEE_F64LE.copy()
t.set_norm(h5py.h5t.NORM_NONE)  # IEEE's fields, not its bits: HDF5 converts
with h5py.File(d + "/shard_0004.h5", "w") as f:
    x = h5py.h5d.create(f.id, b"x", t, h5py.h5s.create_simple((10, 5)))
    x.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(a[110:]))
)";
  ASSERT_TRUE(testing::run_python_writer(dir_, script, dir_.path()))
      << "h5py could not write the shards";
  auto found = try_discover(Source::directory(dir_.path()));
  ASSERT_TRUE(found) << found.status().message();
  const Layout& l = *found;
  ASSERT_EQ(l.total_rows(), 120);
  std::vector<std::byte> want(120 * 5 * 8);
  for (std::size_t i = 0; i < 120 * 5; ++i) {
    const auto v = static_cast<double>(i);
    std::memcpy(want.data() + i * 8, &v, 8);
  }
  for (int readers : {1, 3}) {
    HostCopyBackend::Hooks h;
    h.direct_reads = true;
    HostCopyBackend backend(h);
    auto p = pool(backend, 400, 3);  // 10 rows of 40 bytes a buffer
    DeviceFillOptions o;
    o.direct = DirectReads::kOn;
    o.reader_threads = readers;
    std::vector<std::byte> out;
    Status st = device_rows(l, 0, 120, *p, o, &out);
    ASSERT_TRUE(st) << st.message();
    EXPECT_EQ(out, want);
    // Direct: shard 0 in 4 chunks of 10 rows, shard 3 in 2. Staged: shard 1 (gzip) on its
    // 8-row chunk grid, 4 chunks; shard 2 (big-endian) 3; shard 4 (unnormalised) 1.
    EXPECT_EQ(backend.direct_reads(), 6);
    EXPECT_EQ(backend.copies(), 4 + 3 + 1);
    EXPECT_EQ(backend.live_direct_handles(), 0);
  }
  // A layout (or manifest) of a build whose rule for rows at an offset was looser carries
  // offsets without this build's marker: every shard is read through HDF5, and right.
  Layout earlier = l;
  for (Shard& s : earlier.shards) s.extra = s.extra.substr(0, s.extra.find('\0'));
  EXPECT_EQ(expected(earlier, 0, 120), want);
  HostCopyBackend::Hooks h;
  h.direct_reads = true;
  HostCopyBackend backend(h);
  auto p = pool(backend, 400, 3);
  DeviceFillOptions o;
  o.direct = DirectReads::kOn;
  std::vector<std::byte> out;
  Status st = device_rows(earlier, 0, 120, *p, o, &out);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(out, want);
  EXPECT_EQ(backend.direct_reads(), 0);
}
#endif

// Many small pieces share staging buffers: one copy and one fence per buffer, not per piece,
// with every byte in place, for native and byte-swapped shards, whatever the readers; a read
// error inside a group names its file's rows.
TEST_F(DeviceFillTest, SmallPiecesAreCoalescedIntoStagingBuffers) {
  for (int i = 0; i < 60; ++i) c_shard(i, 12 * i, 2, /*big=*/i % 7 == 3);
  const Layout l = layout();  // 60 shards of 2 rows of 24 bytes
  const auto want = expected(l, 0, l.total_rows());
  for (int readers : {1, 3}) {
    HostCopyBackend backend;
    auto p = pool(backend, 480, 4);  // 10 pieces a buffer
    DeviceFillOptions o;
    o.reader_threads = readers;
    std::vector<std::byte> out;
    Status st = device_rows(l, 0, l.total_rows(), *p, o, &out);
    ASSERT_TRUE(st) << st.message();
    EXPECT_EQ(out, want);
    EXPECT_EQ(backend.copies(), 6) << readers;  // 60 before
    EXPECT_EQ(backend.overwrites(), 0);
    // A range starting and ending inside shards.
    ASSERT_TRUE(device_rows(l, 3, 101, *p, o, &out));
    EXPECT_EQ(out, expected(l, 3, 101));
  }
  // Direct reads go piece by piece: nothing to share.
  HostCopyBackend::Hooks h;
  h.direct_reads = true;
  HostCopyBackend direct(h);
  auto p = pool(direct, 480, 4);
  DeviceFillOptions o;
  o.direct = DirectReads::kOn;
  std::vector<std::byte> out;
  ASSERT_TRUE(device_rows(l, 0, l.total_rows(), *p, o, &out));
  EXPECT_EQ(out, want);
  // A shard truncated since discovery, inside a group: the error names it and its rows.
  ASSERT_EQ(::truncate(dir_.file("shard_0025.npy").c_str(), 100), 0);
  HostCopyBackend backend;
  auto q = pool(backend, 480, 4);
  Status st = device_rows(l, 0, l.total_rows(), *q, DeviceFillOptions{}, &out);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("shard_0025.npy"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("of shard 25"), std::string::npos) << st.message();
}

// The non-dense destination (a column-major store's piece): rows through the pool's buffers,
// scattered; reads overlap the copies; no allocation beyond the pool's, on errors and
// exceptions too, and the pool serves the next fill.
class StridedFillTest : public DeviceFillTest {
 protected:
  // Rows [lo, hi) as a column-major (hi - lo) x 5 array of float64.
  static std::vector<std::byte> column_major(const std::vector<std::byte>& dense, std::int64_t n) {
    std::vector<std::byte> out(dense.size());
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t k = 0; k < 5; ++k) {
        std::memcpy(out.data() + static_cast<std::size_t>(k * n + r) * 8,
                    dense.data() + static_cast<std::size_t>(r * 5 + k) * 8, 8);
      }
    }
    return out;
  }
  static Status strided(const Layout& l, std::int64_t lo, std::int64_t hi, StagingPool& pool,
                        std::vector<std::byte>* out, const DeviceFillOptions& o = {}) {
    const std::int64_t n = hi - lo;
    out->assign(static_cast<std::size_t>(n) * l.row_bytes, std::byte{0xA5});
    const std::vector<std::int64_t> extents{n, 5};
    const std::vector<std::size_t> strides{8, static_cast<std::size_t>(n) * 8};
    return fill_device_strided(l, lo, hi, extents, strides, out->data(), &stream_, pool, o);
  }
};

TEST_F(StridedFillTest, MatchesTheHostScatterWithOverlapAndNoExtraMemory) {
  synth_shards(3, 301, 5);
  const Layout l = layout();
  for (const auto& [lo, hi] :
       {std::pair<std::int64_t, std::int64_t>{0, 301}, {7, 150}, {299, 301}}) {
    const auto want = column_major(expected(l, lo, hi), hi - lo);
    for (std::size_t bytes : {std::size_t{40}, std::size_t{400}, std::size_t{1} << 20}) {
      HostCopyBackend::Hooks h;
      h.copy_delay = std::chrono::microseconds(200);
      HostCopyBackend backend(h);
      auto p = pool(backend, bytes, 3);
      std::vector<std::byte> out;
      Status st = strided(l, lo, hi, *p, &out);
      ASSERT_TRUE(st) << st.message();
      EXPECT_EQ(out, want) << lo << " " << hi << " " << bytes;
      EXPECT_EQ(backend.live_allocations(), 3);  // the pool's, nothing per fill
      EXPECT_EQ(backend.overwrites(), 0);
      if (bytes == 40 && hi - lo > 100) {
        EXPECT_GT(backend.max_queued(), 5);  // reads overlapped the copies
      }
    }
  }
}

TEST_F(StridedFillTest, RowsLargerThanABufferGoThroughOneAllocationFreedAfter) {
  synth_shards(2, 20, 5);
  const Layout l = layout();
  HostCopyBackend backend;
  auto p = pool(backend, 16, 2);  // a row is 40 bytes
  std::vector<std::byte> out;
  ASSERT_TRUE(strided(l, 0, 20, *p, &out));
  EXPECT_EQ(out, column_major(expected(l, 0, 20), 20));
  EXPECT_EQ(backend.live_allocations(), 2);
  EXPECT_EQ(backend.live_fences(), 2);
}

TEST_F(StridedFillTest, ErrorsAndExceptionsLeaveNothingInFlightOrAllocated) {
  synth_shards(3, 200, 5);
  const Layout l = layout();
  for (int fault = 0; fault < 3; ++fault) {
    HostCopyBackend::Hooks h;
    h.copy_delay = std::chrono::microseconds(100);
    if (fault == 0) h.fail_copy_enqueue = 7;
    if (fault == 1) h.fail_copy_async = 7;
    if (fault == 2) h.throw_copy_enqueue = 7;
    HostCopyBackend backend(h);
    {
      auto p = pool(backend, 80, 3);
      std::vector<std::byte> out;
      Status st = strided(l, 0, 200, *p, &out);
      ASSERT_FALSE(st) << fault;
      EXPECT_NE(st.message().find(fault == 2 ? "injected exception" : "copy 7"), std::string::npos)
          << st.message();
      // A transfer error is sticky (as CUDA's are): every later wait reports it, so the
      // buffers stay marked and the pool waits again before freeing them.
      if (fault != 1) {
        for (auto& s : p->slots()) EXPECT_FALSE(s.pending) << fault;
      }
      EXPECT_EQ(backend.live_allocations(), 3);
      EXPECT_EQ(backend.overwrites(), 0);
    }
    EXPECT_EQ(backend.live_allocations(), 0);
    EXPECT_EQ(backend.live_fences(), 0);
  }
  // A read error: the same, and the pool serves the next fill.
  HostCopyBackend backend;
  auto p = pool(backend, 80, 3);
  std::vector<std::byte> out;
  EXPECT_FALSE(strided(l, 0, 300, *p, &out));  // more rows than the layout has
  ASSERT_TRUE(strided(l, 3, 200, *p, &out));
  EXPECT_EQ(out, column_major(expected(l, 3, 200), 197));
}

// Bool bytes reach the destination as 0 or 1 on every path: native C-order
// rows read whole or split by bytes, Fortran rows through the reader, and
// with direct reads asked for (which bool data must not take: its bytes are
// normalised in the staging buffer).
TEST_F(DeviceFillTest, BoolBytesLandAsZeroOrOneOnEveryPath) {
  testing::TempDir u8;
  testing::write_bool_byte_shards(dir_, u8);
  const Layout l = layout();
  auto lu = try_discover(Source::directory(u8.path()));
  ASSERT_TRUE(lu) << lu.status().message();
  std::vector<std::uint8_t> raw(static_cast<std::size_t>(l.total_rows()) * 4);
  ASSERT_TRUE(fill_rows(*lu, 0, l.total_rows(), reinterpret_cast<std::byte*>(raw.data())));
  for (const DirectReads direct : {DirectReads::kOff, DirectReads::kOn, DirectReads::kAuto}) {
    for (std::size_t bytes : {3, 8, 40, 1 << 20}) {
      HostCopyBackend::Hooks h;
      h.direct_reads = true;
      HostCopyBackend backend(h);
      auto p = pool(backend, bytes, 3);
      DeviceFillOptions o;
      o.direct = direct;
      o.reader_threads = 2;
      for (const auto& [lo, hi] : {std::pair{0, 131}, {0, 64}, {5, 66}, {64, 128}, {128, 131}}) {
        std::vector<std::byte> out;
        Status st = device_rows(l, lo, hi, *p, o, &out);
        if (bytes < 4 && lo < 128 && hi > 64) {  // Fortran rows must be whole: refused
          ASSERT_FALSE(st);
          continue;
        }
        ASSERT_TRUE(st) << st.message();
        for (std::size_t k = 0; k < out.size(); ++k) {
          ASSERT_EQ(std::to_integer<int>(out[k]), raw[static_cast<std::size_t>(lo) * 4 + k] != 0)
              << bytes << " [" << lo << ", " << hi << ") byte " << k;
        }
      }
      EXPECT_EQ(backend.direct_reads(), 0);
      EXPECT_EQ(backend.overwrites(), 0);
    }
  }
}

TEST(ReaderThreads, RunsEachIndexOnceAndIsReusable) {
  auto r = ReaderThreads::create(4);
  ASSERT_TRUE(r);
  for (int round = 0; round < 50; ++round) {
    std::array<std::atomic<int>, 4> hits{};
    const int n = 1 + round % 4;
    (*r)->run(n, [&](int i) { hits[static_cast<std::size_t>(i)].fetch_add(1); });
    for (int i = 0; i < 4; ++i) EXPECT_EQ(hits[static_cast<std::size_t>(i)].load(), i < n ? 1 : 0);
  }
}

// Reader threads made by a thread pinned to one core (a Legate task's) run on the process's
// CPUs, not on that core; an explicit list is taken as given.
TEST(ReaderThreads, AffinityIsSetNotInherited) {
  cpu_set_t all;
  ASSERT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one CPU: nothing to tell apart";
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  std::vector<int> seen;
  int explicit_cpus = -1;
  std::thread task([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(::pthread_setaffinity_np(::pthread_self(), sizeof one, &one), 0);
    auto r = ReaderThreads::create(3);
    ASSERT_TRUE(r);
    EXPECT_EQ((*r)->cpus(), CPU_COUNT(&all));
    std::array<int, 3> counts{};
    (*r)->run(3, [&](int i) {
      cpu_set_t mine;
      ::sched_getaffinity(0, sizeof mine, &mine);
      counts[static_cast<std::size_t>(i)] = CPU_COUNT(&mine);
    });
    seen.assign(counts.begin(), counts.end());
    const std::vector<int> just_first{first};
    auto pinned = ReaderThreads::create(2, just_first);
    ASSERT_TRUE(pinned);
    (*pinned)->run(1, [&](int) {
      cpu_set_t mine;
      ::sched_getaffinity(0, sizeof mine, &mine);
      explicit_cpus = CPU_ISSET(first, &mine) ? CPU_COUNT(&mine) : -2;
    });
  });
  task.join();
  EXPECT_EQ(seen, std::vector<int>(3, CPU_COUNT(&all)));
  EXPECT_EQ(explicit_cpus, 1);
  const std::vector<int> bad{-1};
  EXPECT_FALSE(ReaderThreads::create(1, bad));
}

}  // namespace
}  // namespace shardload
