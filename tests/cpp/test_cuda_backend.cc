// The device fill on a GPU through CudaCopyBackend. Without a usable GPU
// every test checks that the backend says so cleanly, then skips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "shardload/cuda_backend.hpp"
#include "shardload/fill.hpp"
#include "shardload/synth.hpp"
#include "util.hpp"

namespace shardload {
namespace {

#define SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                     \
    Status gpu = cuda_device_available();                                                  \
    if (!gpu) {                                                                            \
      EXPECT_NE(gpu.message().find("no CUDA device"), std::string::npos) << gpu.message(); \
      auto b = CudaCopyBackend::create();                                                  \
      EXPECT_FALSE(b);                                                                     \
      EXPECT_EQ(b.status().message(), gpu.message());                                      \
      GTEST_SKIP() << gpu.message();                                                       \
    }                                                                                      \
  } while (0)

class CudaFillTest : public ::testing::Test {
 protected:
  Layout synth_layout(int shards, std::int64_t rows, std::int64_t width) {
    const auto split = synth_split(3, rows, shards);
    std::uint64_t first = 0;
    for (int i = 0; i < shards; ++i) {
      NpyWriteSpec spec{*parse_dtype("float32"), {split[static_cast<std::size_t>(i)], width}};
      EXPECT_TRUE(
          write_npy(dir_.file(NumberPattern{"shard_", 4, ".npy"}.format(i)), spec, 3, first));
      first += static_cast<std::uint64_t>(split[static_cast<std::size_t>(i)] * width);
    }
    auto l = discover(Source::dir(dir_.path()));
    EXPECT_TRUE(l) << l.status().message();
    return l.value();
  }
  testing::TempDir dir_;
};

TEST_F(CudaFillTest, FillMatchesHostFill) {
  SKIP_WITHOUT_GPU();
  const Layout l = synth_layout(9, 20000, 37);
  std::vector<std::byte> want(l.total_bytes());
  ASSERT_TRUE(fill_rows(l, 0, l.total_rows(), want.data()));
  auto backend = CudaCopyBackend::create();
  ASSERT_TRUE(backend) << backend.status().message();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, want.size()), cudaSuccess);
  for (std::size_t bytes : {std::size_t{100}, std::size_t{4096}, std::size_t{1} << 20}) {
    auto pool = StagingPool::create(**backend, StagingOptions{bytes, 4});
    ASSERT_TRUE(pool) << pool.status().message();
    for (int readers : {1, 3}) {
      ASSERT_EQ(cudaMemset(dev, 0xA5, want.size()), cudaSuccess);
      std::vector<Piece> pieces;
      pieces_for_rows(l.offsets, 0, l.total_rows(), &pieces);
      DeviceFillOptions o;
      o.reader_threads = readers;
      Status st = fill_device(l, pieces, dev, want.size(), stream, **pool, o);
      ASSERT_TRUE(st) << st.message();
      std::vector<std::byte> got(want.size());
      ASSERT_EQ(cudaMemcpy(got.data(), dev, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(got, want) << bytes << " " << readers;
    }
  }
  cudaFree(dev);
  cudaStreamDestroy(stream);
}

TEST_F(CudaFillTest, DirectReadsWhenCuFileIsThere) {
  SKIP_WITHOUT_GPU();
  const Layout l = synth_layout(3, 5000, 16);
  std::vector<std::byte> want(l.total_bytes());
  ASSERT_TRUE(fill_rows(l, 0, l.total_rows(), want.data()));
  CudaBackendOptions bo;
  bo.direct_reads = true;
  auto backend = CudaCopyBackend::create(bo);
  ASSERT_TRUE(backend) << backend.status().message();
  if (!(*backend)->has_direct_reads()) GTEST_SKIP() << (*backend)->direct_status();
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, want.size()), cudaSuccess);
  auto pool = StagingPool::create(**backend, StagingOptions{1 << 16, 4});
  ASSERT_TRUE(pool);
  std::vector<Piece> pieces;
  pieces_for_rows(l.offsets, 0, l.total_rows(), &pieces);
  DeviceFillOptions o;
  o.direct = DirectReads::kAuto;
  Status st = fill_device(l, pieces, dev, want.size(), nullptr, **pool, o);
  ASSERT_TRUE(st) << st.message();
  std::vector<std::byte> got(want.size());
  ASSERT_EQ(cudaMemcpy(got.data(), dev, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, want);
  cudaFree(dev);
}

}  // namespace
}  // namespace shardload
