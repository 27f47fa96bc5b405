#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>

#include "engine/detail/strided.hpp"

namespace shardload::detail {
namespace {

TEST(Strided, DenseCheck) {
  const std::vector<std::int64_t> e{4, 3, 2};
  EXPECT_TRUE(is_dense_c_order(e, std::vector<std::size_t>{24, 8, 4}, 4));
  EXPECT_FALSE(is_dense_c_order(e, std::vector<std::size_t>{32, 8, 4}, 4));   // padded rows
  EXPECT_FALSE(is_dense_c_order(e, std::vector<std::size_t>{4, 16, 48}, 4));  // transposed
  // Extent-1 dimensions may carry any stride.
  EXPECT_TRUE(
      is_dense_c_order(std::vector<std::int64_t>{1, 5}, std::vector<std::size_t>{999, 8}, 8));
  EXPECT_FALSE(is_dense_c_order(e, std::vector<std::size_t>{24, 8}, 4));
}

// Scatters into random strided layouts and checks every element by index.
TEST(Strided, ScatterMatchesIndexing) {
  std::mt19937 rng(3);
  for (int iter = 0; iter < 300; ++iter) {
    const std::size_t nd = 1 + rng() % 4;
    std::vector<std::int64_t> ext(nd);
    for (auto& x : ext) x = static_cast<std::int64_t>(1 + rng() % 4);
    const std::size_t item = std::size_t{1} << (rng() % 4);
    // A permuted, padded layout: strides from a random dimension order.
    std::vector<std::size_t> order(nd);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::size_t> strides(nd);
    std::size_t s = item * (1 + rng() % 2);
    for (const auto k : order) {
      strides[k] = s;
      s *= static_cast<std::size_t>(ext[k]) + rng() % 2;
    }
    std::int64_t total = 1;
    for (auto x : ext) total *= x;
    std::vector<std::byte> src(static_cast<std::size_t>(total) * item);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(rng());
    std::vector<std::byte> dst(s + item, std::byte{0});
    ASSERT_TRUE(scatter_rows(src.data(), ext[0], ext, strides, item, dst.data(),
                             [](std::byte* d, const std::byte* f, std::size_t n) {
                               std::memcpy(d, f, n);
                               return true;
                             }));
    std::vector<std::int64_t> idx(nd, 0);
    for (std::int64_t flat = 0; flat < total; ++flat) {
      std::int64_t rem = flat;
      std::size_t off = 0;
      for (std::size_t k = nd; k-- > 0;) {
        idx[k] = rem % ext[k];
        rem /= ext[k];
        off += static_cast<std::size_t>(idx[k]) * strides[k];
      }
      ASSERT_EQ(std::memcmp(dst.data() + off, src.data() + flat * item, item), 0)
          << "iter " << iter << " flat " << flat;
    }
  }
}

TEST(Strided, StopsWhenTheCopyFails) {
  std::vector<std::byte> src(64);
  std::vector<std::byte> dst(64);
  int calls = 0;
  EXPECT_FALSE(scatter_rows(
      src.data(), 4, std::vector<std::int64_t>{4, 4}, std::vector<std::size_t>{16, 4}, 1,
      dst.data(), [&](std::byte*, const std::byte*, std::size_t) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace shardload::detail
