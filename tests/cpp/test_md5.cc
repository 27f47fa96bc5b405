// The MD5 a save's clean-up compares with a store's ETag (storage/detail/md5.hpp) against RFC
// 1321's test suite, and fed in pieces that straddle its 64-byte blocks as an upload's buffers
// do: one wrong digest would make the clean-up leave its own object or think another's its own.
#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "storage/detail/md5.hpp"

namespace shardload::detail {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string md5_of(std::string_view s) {
  Md5 md5;
  md5.update(bytes_of(s));
  return md5.hex();
}

TEST(Md5, MatchesRfc1321sTestSuite) {
  EXPECT_EQ(md5_of(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5_of("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(md5_of("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5_of("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(md5_of("abcdefghijklmnopqrstuvwxyz"), "c3fcd3d76192e4007dfb496cca67e13b");
  EXPECT_EQ(md5_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            "d174ab98d277d9f5a5611c2c9f419d9f");
  EXPECT_EQ(md5_of("1234567890123456789012345678901234567890123456789012345678901234567890123456"
                   "7890"),
            "57edf4a22be3c955ac49da2e2107b67a");
}

TEST(Md5, PiecesOfAnySizeGiveTheDigestOfTheWhole) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>((i * 131 + 7) % 256);
  const std::string whole = md5_of(text);
  EXPECT_EQ(whole, "0b8ae90ded6089334e353eb2669ab5e6");  // Python's hashlib.md5 of the same bytes
  // Lengths around the block (64) and the padding's edge (55, 56): each split of the stream.
  for (const std::size_t piece : {1UL, 3UL, 55UL, 56UL, 63UL, 64UL, 65UL, 127UL, 999UL}) {
    Md5 md5;
    for (std::size_t at = 0; at < text.size(); at += piece) {
      md5.update(bytes_of(std::string_view(text).substr(at, piece)));
    }
    EXPECT_EQ(md5.hex(), whole) << "pieces of " << piece;
  }
  for (const std::size_t n : {55UL, 56UL, 63UL, 64UL, 119UL, 120UL}) {
    // The lengths where the padding needs one block or two: compared with a split feed.
    const std::string head = text.substr(0, n);
    Md5 split;
    split.update(bytes_of(std::string_view(head).substr(0, n / 2)));
    split.update(bytes_of(std::string_view(head).substr(n / 2)));
    EXPECT_EQ(split.hex(), md5_of(head)) << n << " bytes";
  }
}

}  // namespace
}  // namespace shardload::detail
