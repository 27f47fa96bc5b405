// The byte helpers every encoding and writer shares (base/detail/bytes.hpp).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "base/detail/bytes.hpp"
#include "util.hpp"

namespace shardload::detail {
namespace {

TEST(Bytes, LittleEndianRoundTripsEveryWidth) {
  std::mt19937_64 rng(5);
  for (int width = 1; width <= 8; ++width) {
    for (int i = 0; i < 100; ++i) {
      const std::uint64_t v = rng() >> (64 - 8 * width);
      std::vector<std::uint8_t> out{0xAA};
      put_le(out, v, width);
      ASSERT_EQ(out.size(), static_cast<std::size_t>(width) + 1);
      // Least significant byte first, as a little-endian machine stores it.
      for (int b = 0; b < width; ++b) {
        EXPECT_EQ(out[static_cast<std::size_t>(b) + 1], static_cast<std::uint8_t>(v >> (8 * b)));
      }
      EXPECT_EQ(get_le(out.data() + 1, width), v);
    }
  }
  std::vector<std::uint8_t> out(12, 0);
  put_le_at(out, 2, 0x0102030405060708ULL, 8);
  EXPECT_EQ(out[1], 0);
  EXPECT_EQ(out[2], 0x08);
  EXPECT_EQ(out[9], 0x01);
  EXPECT_EQ(out[10], 0);
  EXPECT_EQ(get_le(out.data() + 2, 8), 0x0102030405060708ULL);
}

TEST(Bytes, VarintsRoundTripAndRefuseWhatIsCut) {
  std::vector<std::uint64_t> values{0,
                                    1,
                                    127,
                                    128,
                                    16383,
                                    16384,
                                    std::uint64_t{1} << 63,
                                    std::numeric_limits<std::uint64_t>::max()};
  std::mt19937_64 rng(9);
  for (int i = 0; i < 200; ++i) values.push_back(rng() >> (rng() % 64));
  std::vector<std::uint8_t> out;
  for (const auto v : values) put_varint(out, v);
  std::size_t pos = 0;
  for (const auto v : values) {
    std::uint64_t got = 0;
    ASSERT_TRUE(get_varint(out, &pos, &got));
    EXPECT_EQ(got, v);
  }
  EXPECT_EQ(pos, out.size());
  std::uint64_t got = 0;
  EXPECT_FALSE(get_varint(out, &pos, &got));  // nothing left
  // 127 takes one byte, 128 two; the largest value ten.
  std::vector<std::uint8_t> one;
  put_varint(one, 127);
  EXPECT_EQ(one.size(), 1u);
  std::vector<std::uint8_t> ten;
  put_varint(ten, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(ten.size(), 10u);
  // A varint cut short, and one that never ends within 64 bits, are refused.
  const std::vector<std::uint8_t> cut{0x80, 0x80};
  pos = 0;
  EXPECT_FALSE(get_varint(cut, &pos, &got));
  const std::vector<std::uint8_t> endless(11, 0xFF);
  pos = 0;
  EXPECT_FALSE(get_varint(endless, &pos, &got));
}

TEST(Bytes, ZigzagKeepsSmallNegativesSmall) {
  EXPECT_EQ(zigzag(0), 0u);
  EXPECT_EQ(zigzag(-1), 1u);
  EXPECT_EQ(zigzag(1), 2u);
  EXPECT_EQ(zigzag(-2), 3u);
  for (const std::int64_t v :
       {std::int64_t{0}, std::int64_t{-7}, std::int64_t{123456789},
        std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()}) {
    EXPECT_EQ(unzigzag(zigzag(v)), v);
  }
}

TEST(Bytes, WriteAllWritesEverythingAndNamesTheFileOnFailure) {
  testing::TempDir dir;
  const std::string path = dir.file("out.bin");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  std::vector<std::uint8_t> data(100000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 7);
  ASSERT_TRUE(write_all(fd, path, data.data(), 10));                     // at the file position
  ASSERT_TRUE(write_all(fd, path, data.data() + 10, data.size() - 10));  // continues there
  ASSERT_TRUE(write_all(fd, path, data.data(), 3, 200000));              // positional, a hole
  std::vector<std::uint8_t> back(200003);
  ASSERT_EQ(::pread(fd, back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
  EXPECT_TRUE(std::equal(data.begin(), data.end(), back.begin()));
  EXPECT_EQ(back[200000], data[0]);
  EXPECT_EQ(back[200002], data[2]);
  ::close(fd);
  // A descriptor open for reading only: kIo naming the path, with the errno as data.
  const int ro = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ro, 0);
  const Status seq = write_all(ro, path, data.data(), 5);
  EXPECT_EQ(seq.code(), ErrorCode::kIo);
  EXPECT_EQ(seq.path(), path);
  EXPECT_EQ(seq.sys_errno(), EBADF);
  EXPECT_NE(seq.message().find(path + ": cannot write: "), std::string::npos) << seq.message();
  const Status at = write_all(ro, path, data.data(), 5, 64);
  EXPECT_NE(at.message().find(path + ": write of 5 bytes at offset 64 failed: "), std::string::npos)
      << at.message();
  ::close(ro);
}

TEST(Bytes, SizeStringPicksTheUnitThatKeepsTheNumberUnderAThousand) {
  EXPECT_EQ(size_string(0), "0 bytes");
  EXPECT_EQ(size_string(999), "999 bytes");
  EXPECT_EQ(size_string(1000), "1.00 kB (1000 bytes)");
  EXPECT_EQ(size_string(999994), "999.99 kB (999994 bytes)");
  EXPECT_EQ(size_string(999999), "1.00 MB (999999 bytes)");
  EXPECT_EQ(size_string(1234567890), "1.23 GB (1234567890 bytes)");
  EXPECT_EQ(size_string(8796093022208), "8.80 TB (8796093022208 bytes)");
  EXPECT_EQ(size_string(std::numeric_limits<std::uint64_t>::max()),
            "18.45 EB (18446744073709551615 bytes)");
}

}  // namespace
}  // namespace shardload::detail
