// The device fill on a GPU through CudaCopyBackend. Without a usable GPU
// every test checks that the backend says so cleanly, then skips. The cuFile
// loader and reads (cuda/detail/cufile.hpp) run everywhere, against a
// stand-in library (fake_cufile.c).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "cuda/detail/cufile.hpp"
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
    auto l = try_discover(Source::directory(dir_.path()));
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
      // On the fill's stream: a cudaMemset on the legacy stream is not ordered before work on a
      // non-blocking stream, and could land after the fill's copies.
      ASSERT_EQ(cudaMemsetAsync(dev, 0xA5, want.size(), stream), cudaSuccess);
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
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// Many small shards (coalesced into shared buffers) and a column-major destination (the
// strided path), on the GPU.
TEST_F(CudaFillTest, SmallShardsAndStridedDestinations) {
  SKIP_WITHOUT_GPU();
  const Layout l = synth_layout(200, 3000, 5);
  std::vector<std::byte> want(l.total_bytes());
  ASSERT_TRUE(fill_rows(l, 0, l.total_rows(), want.data()));
  auto backend = CudaCopyBackend::create();
  ASSERT_TRUE(backend) << backend.status().message();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, want.size()), cudaSuccess);
  auto pool = StagingPool::create(**backend, StagingOptions{4096, 4});
  ASSERT_TRUE(pool) << pool.status().message();
  std::vector<std::byte> got(want.size());

  ASSERT_EQ(cudaMemsetAsync(dev, 0xA5, want.size(), stream), cudaSuccess);
  std::vector<Piece> pieces;
  pieces_for_rows(l.offsets, 0, l.total_rows(), &pieces);
  Status st = fill_device(l, pieces, dev, want.size(), stream, **pool);
  ASSERT_TRUE(st) << st.message();
  ASSERT_EQ(cudaMemcpy(got.data(), dev, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, want);

  const std::int64_t n = l.total_rows();
  ASSERT_EQ(cudaMemsetAsync(dev, 0xA5, want.size(), stream), cudaSuccess);
  const std::vector<std::int64_t> extents{n, 5};
  const std::vector<std::size_t> strides{4, static_cast<std::size_t>(n) * 4};
  st = fill_device_strided(l, 0, n, extents, strides, dev, stream, **pool);
  ASSERT_TRUE(st) << st.message();
  ASSERT_EQ(cudaMemcpy(got.data(), dev, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t k = 0; k < 5; ++k) {
      ASSERT_EQ(std::memcmp(got.data() + static_cast<std::size_t>(k * n + r) * 4,
                            want.data() + static_cast<std::size_t>(r * 5 + k) * 4, 4),
                0)
          << r << " " << k;
    }
  }
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
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
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

// The stand-in library: where the build put it, else beside this program (the device check's
// bundle carries it there).
std::string fake_cufile() {
#ifdef SHARDLOAD_FAKE_CUFILE
  return SHARDLOAD_FAKE_CUFILE;
#else
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : (exe.parent_path() / "fake_cufile.so").string();
#endif
}

#define FAKE_CUFILE_OR_SKIP()                                                          \
  const std::string fake = fake_cufile();                                              \
  if (fake.empty() || !std::filesystem::exists(fake)) {                                \
    GTEST_SKIP() << "the stand-in cuFile is not where it was built: '" << fake << "'"; \
  }                                                                                    \
  static_assert(true)

TEST(CuFile, LoadedOncePerProcessAndNeverUnloaded) {
  FAKE_CUFILE_OR_SKIP();
  auto a = detail::load_cufile(fake);
  ASSERT_TRUE(a) << a.status().message();
  auto b = detail::load_cufile(fake);
  ASSERT_TRUE(b);
  EXPECT_EQ(*a, *b);  // one per process, its driver opened once
  void* lib = dlopen(fake.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr) << "the library is not loaded";
  auto* opens = reinterpret_cast<int (*)()>(dlsym(lib, "fake_cufile_driver_opens"));
  ASSERT_NE(opens, nullptr);
  EXPECT_EQ(opens(), 1);
  // Dropping every reference this test holds leaves it loaded (RTLD_NODELETE): a library
  // unloaded while its threads or atexit handlers may still run can crash at exit.
  dlclose(lib);
  lib = dlopen(fake.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(lib, nullptr);
  if (lib != nullptr) dlclose(lib);

  auto missing = detail::load_cufile("libshardload-no-such-cufile.so.0");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("cuFile: "), std::string::npos);
}

TEST(CuFile, RefusedRegistrationIsDeclinedNotAnError) {
  FAKE_CUFILE_OR_SKIP();
  auto api = detail::load_cufile(fake);
  ASSERT_TRUE(api) << api.status().message();
  testing::TempDir dir;
  testing::write_file(dir.file("refused.bin"), std::string(100, 'x'));
  auto refused = detail::cufile_open(**api, dir.file("refused.bin"));
  ASSERT_TRUE(refused) << refused.status().message();
  EXPECT_EQ(*refused, nullptr);
  auto gone = detail::cufile_open(**api, dir.file("missing.bin"));
  ASSERT_FALSE(gone);  // a file that cannot be opened is an error, not a fallback
  EXPECT_NE(gone.status().message().find("missing.bin"), std::string::npos);
}

TEST(CuFile, ReadsExactlyAndThroughAlignedRanges) {
  FAKE_CUFILE_OR_SKIP();
  auto api = detail::load_cufile(fake);
  ASSERT_TRUE(api) << api.status().message();
  testing::TempDir dir;
  std::string bytes(10000, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + 3);
  testing::write_file(dir.file("data.bin"), bytes);
  auto h = detail::cufile_open(**api, dir.file("data.bin"));
  ASSERT_TRUE(h && *h != nullptr) << h.status().message();
  std::vector<char> got(5000);
  ASSERT_TRUE(detail::cufile_read(**api, **h, 1234, 5000, got.data()));  // several calls
  EXPECT_EQ(std::string(got.data(), got.size()), bytes.substr(1234, 5000));

  // The aligned range covers the bytes, starts and ends on the grid, and is the smallest such.
  for (std::uint64_t off : {0ULL, 1ULL, 128ULL, 4095ULL, 4096ULL, 12345ULL}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{4096}, std::size_t{5000}}) {
      const auto r = detail::aligned_range(off, n, 4096);
      EXPECT_EQ(r.offset % 4096, 0u);
      EXPECT_EQ(r.bytes % 4096, 0u);
      EXPECT_EQ(r.offset + r.skip, off);
      EXPECT_GE(r.offset + r.bytes, off + n);
      EXPECT_LT(r.offset + r.bytes, off + n + 4096);
      EXPECT_LE(r.skip, 4095u);
    }
  }
  EXPECT_TRUE(detail::is_aligned(8192, 4096, reinterpret_cast<void*>(4096)));
  EXPECT_FALSE(detail::is_aligned(128, 4096, reinterpret_cast<void*>(4096)));
  EXPECT_FALSE(detail::is_aligned(8192, 100, reinterpret_cast<void*>(4096)));
  EXPECT_FALSE(detail::is_aligned(8192, 4096, reinterpret_cast<void*>(4100)));

  // The aligned range of the file's last bytes runs past its end: what is wanted is enough.
  const auto r = detail::aligned_range(9000, 1000, 4096);
  std::vector<char> bounce(r.bytes);
  ASSERT_TRUE(detail::cufile_read(**api, **h, r.offset, r.bytes, r.skip + 1000, bounce.data()));
  EXPECT_EQ(std::string(bounce.data() + r.skip, 1000), bytes.substr(9000, 1000));
  Status short_read = detail::cufile_read(**api, **h, 9000, 2000, bounce.data());
  ASSERT_FALSE(short_read);
  EXPECT_NE(short_read.message().find("expected 2000 bytes, got 1000"), std::string::npos)
      << short_read.message();
  detail::cufile_close(**api, *h);
}

}  // namespace
}  // namespace shardload
