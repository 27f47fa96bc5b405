// MD5 (RFC 1321) of a stream of bytes, for what a store's ETag says of an object: S3 and the
// stores that follow it answer a plain PUT with the MD5 of its bytes, so the digest of what an
// upload sent tells whether the object a HEAD finds is that upload's, where the answer to the
// upload never came (a save's clean-up: save_remote.cc). Not for security: MD5 is no proof
// against a writer who wants a collision, only against another writer's other bytes.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace shardload::detail {

class Md5 {
 public:
  void update(std::span<const std::byte> data) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(data.data());
    std::size_t n = data.size();
    bytes_ += n;
    while (n > 0) {
      const std::size_t take = std::min(n, block_.size() - used_);
      std::memcpy(block_.data() + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ == block_.size()) {
        transform(block_.data());
        used_ = 0;
      }
    }
  }

  // The digest as 32 lower-case hex digits, an ETag's spelling without its quotes. Ends the
  // stream: no update after it.
  std::string hex() {
    const std::uint64_t bits = bytes_ * 8;
    static constexpr std::uint8_t kPad[64] = {0x80};
    const std::size_t pad = used_ < 56 ? 56 - used_ : 120 - used_;
    update(std::as_bytes(std::span(kPad, pad)));
    std::array<std::uint8_t, 8> length{};
    for (std::size_t i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(bits >> (8 * i));
    update(std::as_bytes(std::span(length)));
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (const std::uint32_t word : state_) {
      for (int i = 0; i < 4; ++i) {
        const auto b = static_cast<std::uint8_t>(word >> (8 * i));
        out += kHex[b >> 4];
        out += kHex[b & 15];
      }
    }
    return out;
  }

 private:
  static std::uint32_t rotl(std::uint32_t x, int c) { return (x << c) | (x >> (32 - c)); }

  void transform(const std::uint8_t* b) {
    static constexpr std::uint32_t kK[64] = {
        0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
        0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
        0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
        0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
        0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
        0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
        0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
        0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
        0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
        0xeb86d391};
    static constexpr int kS[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                   5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                   4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                   6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};
    std::uint32_t m[16];
    for (int i = 0; i < 16; ++i) {
      m[i] = std::uint32_t{b[4 * i]} | (std::uint32_t{b[4 * i + 1]} << 8) |
             (std::uint32_t{b[4 * i + 2]} << 16) | (std::uint32_t{b[4 * i + 3]} << 24);
    }
    std::uint32_t a = state_[0], bb = state_[1], c = state_[2], d = state_[3];
    for (int i = 0; i < 64; ++i) {
      std::uint32_t f = 0;
      int g = 0;
      if (i < 16) {
        f = (bb & c) | (~bb & d);
        g = i;
      } else if (i < 32) {
        f = (d & bb) | (~d & c);
        g = (5 * i + 1) % 16;
      } else if (i < 48) {
        f = bb ^ c ^ d;
        g = (3 * i + 5) % 16;
      } else {
        f = c ^ (bb | ~d);
        g = (7 * i) % 16;
      }
      f += a + kK[i] + m[g];
      a = d;
      d = c;
      c = bb;
      bb += rotl(f, kS[i]);
    }
    state_[0] += a;
    state_[1] += bb;
    state_[2] += c;
    state_[3] += d;
  }

  std::array<std::uint32_t, 4> state_{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
  std::array<std::uint8_t, 64> block_{};
  std::size_t used_ = 0;
  std::uint64_t bytes_ = 0;
};

}  // namespace shardload::detail
