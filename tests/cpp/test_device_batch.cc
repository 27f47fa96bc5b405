// The training feed's device batches (shardload/device_batch.hpp): the engine's device fill of
// row ranges, a host batch's copy, and the DLPack tensor handed over. On a GPU (the device
// check's bundle runs them: bench/device_check); elsewhere each test checks the clean
// "no CUDA device" error and skips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "shardload/cuda_backend.hpp"
#include "shardload/device_batch.hpp"
#include "shardload/fill.hpp"
#include "shardload/synth.hpp"
#include "util.hpp"

namespace shardload {
namespace {

#define SKIP_WITHOUT_DEVICE()                                                   \
  do {                                                                          \
    Status gpu = cuda_device_available();                                       \
    if (!gpu) {                                                                 \
      auto d = DeviceBatches::create();                                         \
      EXPECT_FALSE(d);                                                          \
      EXPECT_NE(d.status().message().find("no CUDA device"), std::string::npos) \
          << d.status().message();                                              \
      GTEST_SKIP() << gpu.message();                                            \
    }                                                                           \
  } while (0)

class DeviceBatchTest : public ::testing::Test {
 protected:
  Layout synth_layout(int shards, std::int64_t rows, std::int64_t width) {
    const auto split = synth_split(5, rows, shards);
    std::uint64_t first = 0;
    for (int i = 0; i < shards; ++i) {
      NpyWriteSpec spec{*parse_dtype("float32"), {split[static_cast<std::size_t>(i)], width}};
      EXPECT_TRUE(
          write_npy(dir_.file(NumberPattern{"shard_", 4, ".npy"}.format(i)), spec, 5, first));
      first += static_cast<std::uint64_t>(split[static_cast<std::size_t>(i)] * width);
    }
    auto l = try_discover(Source::directory(dir_.path()));
    EXPECT_TRUE(l) << l.status().message();
    return l.value();
  }
  testing::TempDir dir_;
};

// A batch of rows in order, and one that wraps (drop_last=False's padding): the host fill's
// bytes, bit for bit, in device memory at the pointer the DLPack tensor carries (kDLCUDA).
TEST_F(DeviceBatchTest, FilledRowsAreTheHostFillsInDeviceMemoryHandedOverByDlpack) {
  SKIP_WITHOUT_DEVICE();
  const Layout l = synth_layout(7, 5000, 37);
  const std::int64_t n = l.total_rows();
  auto batches = DeviceBatches::create();
  ASSERT_TRUE(batches) << batches.status().message();
  using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;
  for (const Ranges& ranges :
       {Ranges{{0, 256}}, Ranges{{1000, 3333}}, Ranges{{n - 100, n}, {0, 28}}, Ranges{{17, 17}}}) {
    std::vector<std::byte> want;
    std::int64_t rows = 0;
    for (const auto& [lo, hi] : ranges) {
      std::vector<std::byte> part(static_cast<std::size_t>(hi - lo) * l.row_bytes);
      ASSERT_TRUE(fill_rows(l, lo, hi, part.data()));
      want.insert(want.end(), part.begin(), part.end());
      rows += hi - lo;
    }
    auto b = (*batches)->fill_rows(l, ranges);
    ASSERT_TRUE(b) << b.status().message();
    ASSERT_EQ((*b)->bytes(), want.size());
    std::vector<std::byte> got(want.size());
    ASSERT_TRUE(copy_to_host(**b, got.data()));
    EXPECT_EQ(got, want) << ranges.front().first;
    if (want.empty()) continue;
    auto where = device_of_pointer((*b)->data());
    ASSERT_TRUE(where) << where.status().message();
    EXPECT_EQ(*where, (*batches)->device());
    auto t = to_dlpack(*b, l.dtype, {rows, 37});
    ASSERT_TRUE(t) << t.status().message();
    EXPECT_EQ((*t)->dl_tensor.data, (*b)->data());
    EXPECT_EQ((*t)->dl_tensor.device.device_type, dlpack::kCUDA);
    EXPECT_EQ((*t)->dl_tensor.device.device_id, (*batches)->device());
    EXPECT_EQ((*t)->dl_tensor.ndim, 2);
    EXPECT_EQ((*t)->dl_tensor.shape[0], rows);
    EXPECT_EQ((*t)->dl_tensor.dtype.code, dlpack::kFloat);
    EXPECT_EQ((*t)->dl_tensor.dtype.bits, 32);
    // The tensor holds the memory: the batch let go first, the bytes are still there.
    const void* data = (*b)->data();
    b = Status(ErrorCode::kIo, "let go");
    std::vector<std::byte> again(want.size());
    ASSERT_EQ(cudaMemcpy(again.data(), data, again.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(again, want);
    (*t)->deleter(*t);
  }
}

// A shuffled batch: the host gather copied in one async copy, from page-locked memory.
TEST_F(DeviceBatchTest, AHostBatchIsCopiedBitForBit) {
  SKIP_WITHOUT_DEVICE();
  auto batches = DeviceBatches::create();
  ASSERT_TRUE(batches) << batches.status().message();
  std::vector<std::byte> host(3 << 20);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::byte>(i * 7 + 3);
  ASSERT_EQ(cudaHostRegister(host.data(), host.size(), cudaHostRegisterPortable), cudaSuccess);
  auto b = (*batches)->copy(host.data(), host.size());
  ASSERT_EQ(cudaHostUnregister(host.data()), cudaSuccess);
  ASSERT_TRUE(b) << b.status().message();
  std::vector<std::byte> got(host.size());
  ASSERT_TRUE(copy_to_host(**b, got.data()));
  EXPECT_EQ(got, host);
  EXPECT_FALSE(to_dlpack(*b, *parse_dtype("float32"), {7, 5}));  // not the buffer's bytes
}

// A read error is the fill's Status naming the file, and the object goes on.
TEST_F(DeviceBatchTest, AShardChangedAfterDiscoveryIsTheFillsError) {
  SKIP_WITHOUT_DEVICE();
  Layout l = synth_layout(3, 600, 8);
  auto batches = DeviceBatches::create();
  ASSERT_TRUE(batches) << batches.status().message();
  const std::string victim = l.shards[1].path;
  NpyWriteSpec spec{*parse_dtype("float32"), {3, 8}};
  ASSERT_TRUE(write_npy(victim, spec, 9, 0));
  const std::vector<std::pair<std::int64_t, std::int64_t>> all{{0, l.total_rows()}};
  auto b = (*batches)->fill_rows(l, all);
  ASSERT_FALSE(b);
  EXPECT_NE(b.status().message().find(victim), std::string::npos) << b.status().message();
  const std::vector<std::pair<std::int64_t, std::int64_t>> first{{0, l.offsets[1]}};
  EXPECT_TRUE((*batches)->fill_rows(l, first));
}

}  // namespace
}  // namespace shardload
