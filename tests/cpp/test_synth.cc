#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "shardload/fill.hpp"
#include "shardload/npy.hpp"
#include "shardload/synth.hpp"
#include "util.hpp"

namespace shardload {
namespace {

TEST(Synth, SplitSumsAndVaries) {
  for (std::int64_t total : {0, 1, 7, 1000, 4000000}) {
    for (std::int64_t n : {1, 2, 4, 13}) {
      auto rows = synth_split(9, total, n);
      ASSERT_EQ(static_cast<std::int64_t>(rows.size()), n);
      EXPECT_EQ(std::accumulate(rows.begin(), rows.end(), std::int64_t{0}), total);
      for (auto r : rows) EXPECT_GE(r, 0);
    }
  }
  auto rows = synth_split(1, 4000000, 4);
  EXPECT_FALSE(rows[0] == rows[1] && rows[1] == rows[2]) << "non-uniform";
  EXPECT_EQ(synth_split(1, 4000000, 4), rows) << "deterministic";
}

TEST(Synth, ValuesAreExactAndIndexed) {
  const DType f32 = *parse_dtype("float32");
  std::vector<float> a(100);
  std::vector<float> b(50);
  synth_fill(f32, 3, 0, 100, reinterpret_cast<std::byte*>(a.data()));
  synth_fill(f32, 3, 50, 50, reinterpret_cast<std::byte*>(b.data()));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a[50 + i], b[i]);
  for (float x : a) {
    EXPECT_EQ(x * 256.0f, std::round(x * 256.0f));
    EXPECT_LT(std::fabs(x), 32768.0f + 1);
  }
  std::vector<float> c(100);
  synth_fill(f32, 4, 0, 100, reinterpret_cast<std::byte*>(c.data()));
  EXPECT_NE(a, c) << "the seed matters";
  // float16 bits decode to the same exact value as the float64 formula.
  std::uint16_t h = 0;
  const std::uint64_t key = splitmix64(5);
  for (std::uint64_t i = 0; i < 2000; ++i) {
    synth_fill(*parse_dtype("float16"), 5, i, 1, reinterpret_cast<std::byte*>(&h));
    const auto v = static_cast<std::int64_t>(splitmix64(key + i) >> 53) - 1024;
    const int exp = (h >> 10) & 0x1F;
    const double mag = exp == 0 ? 0.0 : std::ldexp(1.0 + (h & 0x3FF) / 1024.0, exp - 15);
    EXPECT_EQ(((h & 0x8000) != 0 ? -mag : mag), std::ldexp(static_cast<double>(v), -8)) << i;
  }
}

TEST(Synth, WrittenNpyReadsBack) {
  testing::TempDir dir;
  const std::string path = dir.file("x.npy");
  const NpyWriteSpec spec{*parse_dtype("complex64"), {5, 3}};
  ASSERT_TRUE(write_npy(path, spec, 11, 30));
  auto l = try_discover(Source::list({path}));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->shape(), (std::vector<std::int64_t>{5, 3}));
  std::vector<std::byte> got(15 * 8);
  std::vector<std::byte> want(15 * 8);
  ASSERT_TRUE(fill_rows(*l, 0, 5, got.data()));
  synth_fill(spec.dtype, 11, 30, 15, want.data());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
}

}  // namespace
}  // namespace shardload
