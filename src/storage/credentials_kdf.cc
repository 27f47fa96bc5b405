#include "storage/detail/credentials_kdf.hpp"

#include <array>
#include <cstring>
#include <new>
#include <vector>

#if SHARDLOAD_HANDLE_OPENSSL
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#endif

namespace shardload::detail {

namespace {

// SHA-256 (FIPS 180-4).
class Sha256 {
 public:
  void update(std::string_view data) {
    for (const char c : data) {
      block_[fill_++] = static_cast<unsigned char>(c);
      if (fill_ == 64) {
        compress();
        fill_ = 0;
      }
    }
    bytes_ += data.size();
  }

  std::string finish() {
    const std::uint64_t bits = bytes_ * 8;
    update(std::string_view("\x80", 1));
    while (fill_ != 56) update(std::string_view("\0", 1));
    for (int i = 7; i >= 0; --i) {
      const char c = static_cast<char>((bits >> (8 * i)) & 0xff);
      update(std::string_view(&c, 1));
    }
    std::string out(32, '\0');
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 4; ++j)
        out[4 * i + j] = static_cast<char>((h_[i] >> (24 - 8 * j)) & 0xff);
    }
    return out;
  }

 private:
  static std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void compress() {
    static constexpr std::uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (std::uint32_t{block_[4 * i]} << 24) | (std::uint32_t{block_[4 * i + 1]} << 16) |
             (std::uint32_t{block_[4 * i + 2]} << 8) | std::uint32_t{block_[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6],
                  h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t t1 =
          h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const std::uint32_t t2 =
          (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  std::uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char block_[64] = {};
  std::size_t fill_ = 0;
  std::uint64_t bytes_ = 0;
};

// HMAC-SHA256 (RFC 2104) with its key's pads made once, for PBKDF2's many calls with one key.
class PortableHmac {
 public:
  explicit PortableHmac(std::string_view key) {
    std::string k = key.size() > 64 ? portable_sha256(key) : std::string(key);
    k.resize(64, '\0');
    inner_ = outer_ = k;
    for (int i = 0; i < 64; ++i) {
      inner_[i] = static_cast<char>(inner_[i] ^ 0x36);
      outer_[i] = static_cast<char>(outer_[i] ^ 0x5c);
    }
  }

  std::string mac(std::string_view a, std::string_view b = {}) const {
    Sha256 in;
    in.update(inner_);
    in.update(a);
    in.update(b);
    Sha256 out;
    out.update(outer_);
    out.update(in.finish());
    return out.finish();
  }

 private:
  std::string inner_;
  std::string outer_;
};

// PBKDF2-HMAC-SHA256 with one iteration (all scrypt asks of it): block i is
// HMAC(password, salt || INT(i)).
std::string pbkdf2_once(std::string_view password, std::string_view salt, std::size_t length) {
  const PortableHmac hmac(password);
  std::string out;
  for (std::uint32_t i = 1; out.size() < length; ++i) {
    const char be[4] = {static_cast<char>(i >> 24), static_cast<char>(i >> 16),
                        static_cast<char>(i >> 8), static_cast<char>(i)};
    const std::string part = hmac.mac(salt, std::string_view(be, 4));
    out += part.substr(0, length - out.size());
  }
  return out;
}

std::uint32_t rotl(std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

// Salsa20/8's core on a 64-byte block of 16 little-endian words, in place.
void salsa20_8(std::uint32_t b[16]) {
  std::uint32_t x[16];
  std::memcpy(x, b, sizeof x);
  for (int i = 0; i < 8; i += 2) {
    x[4] ^= rotl(x[0] + x[12], 7);
    x[8] ^= rotl(x[4] + x[0], 9);
    x[12] ^= rotl(x[8] + x[4], 13);
    x[0] ^= rotl(x[12] + x[8], 18);
    x[9] ^= rotl(x[5] + x[1], 7);
    x[13] ^= rotl(x[9] + x[5], 9);
    x[1] ^= rotl(x[13] + x[9], 13);
    x[5] ^= rotl(x[1] + x[13], 18);
    x[14] ^= rotl(x[10] + x[6], 7);
    x[2] ^= rotl(x[14] + x[10], 9);
    x[6] ^= rotl(x[2] + x[14], 13);
    x[10] ^= rotl(x[6] + x[2], 18);
    x[3] ^= rotl(x[15] + x[11], 7);
    x[7] ^= rotl(x[3] + x[15], 9);
    x[11] ^= rotl(x[7] + x[3], 13);
    x[15] ^= rotl(x[11] + x[7], 18);
    x[1] ^= rotl(x[0] + x[3], 7);
    x[2] ^= rotl(x[1] + x[0], 9);
    x[3] ^= rotl(x[2] + x[1], 13);
    x[0] ^= rotl(x[3] + x[2], 18);
    x[6] ^= rotl(x[5] + x[4], 7);
    x[7] ^= rotl(x[6] + x[5], 9);
    x[4] ^= rotl(x[7] + x[6], 13);
    x[5] ^= rotl(x[4] + x[7], 18);
    x[11] ^= rotl(x[10] + x[9], 7);
    x[8] ^= rotl(x[11] + x[10], 9);
    x[9] ^= rotl(x[8] + x[11], 13);
    x[10] ^= rotl(x[9] + x[8], 18);
    x[12] ^= rotl(x[15] + x[14], 7);
    x[13] ^= rotl(x[12] + x[15], 9);
    x[14] ^= rotl(x[13] + x[12], 13);
    x[15] ^= rotl(x[14] + x[13], 18);
  }
  for (int i = 0; i < 16; ++i) b[i] += x[i];
}

// scryptBlockMix: `in` is 2r blocks of 16 words; `out` gets the even blocks' results, then the
// odd ones'.
void block_mix(const std::uint32_t* in, std::uint32_t* out, std::uint32_t r) {
  std::uint32_t x[16];
  std::memcpy(x, in + (2 * r - 1) * 16, sizeof x);
  for (std::uint32_t i = 0; i < 2 * r; ++i) {
    for (int j = 0; j < 16; ++j) x[j] ^= in[i * 16 + j];
    salsa20_8(x);
    std::memcpy(out + ((i % 2) * r + i / 2) * 16, x, sizeof x);
  }
}

// scryptROMix on one 128r-byte block, in place.
void ro_mix(unsigned char* block, std::uint64_t n, std::uint32_t r, std::vector<std::uint32_t>& v) {
  const std::size_t words = 32 * std::size_t{r};
  std::vector<std::uint32_t> x(words);
  std::vector<std::uint32_t> y(words);
  for (std::size_t i = 0; i < words; ++i) {
    const unsigned char* p = block + 4 * i;
    x[i] = std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
           (std::uint32_t{p[3]} << 24);
  }
  for (std::uint64_t i = 0; i < n; ++i) {
    std::memcpy(v.data() + i * words, x.data(), words * 4);
    block_mix(x.data(), y.data(), r);
    x.swap(y);
  }
  for (std::uint64_t i = 0; i < n; ++i) {
    // Integerify: the last 64-byte block's first word (N is below 2^32).
    const std::uint64_t j = x[(2 * r - 1) * 16] & (n - 1);
    for (std::size_t k = 0; k < words; ++k) x[k] ^= v[j * words + k];
    block_mix(x.data(), y.data(), r);
    x.swap(y);
  }
  for (std::size_t i = 0; i < words; ++i) {
    for (int j = 0; j < 4; ++j) block[4 * i + j] = static_cast<unsigned char>(x[i] >> (8 * j));
  }
}

}  // namespace

std::string portable_sha256(std::string_view data) {
  Sha256 s;
  s.update(data);
  return s.finish();
}

std::string portable_hmac_sha256(std::string_view key, std::string_view data) {
  return PortableHmac(key).mac(data);
}

std::string portable_scrypt(std::string_view password, std::string_view salt, std::uint64_t n,
                            std::uint32_t r, std::uint32_t p, std::size_t length) {
  if (n < 2 || (n & (n - 1)) != 0 || n > (std::uint64_t{1} << 24) || r == 0 || p == 0) return {};
  const std::size_t block = 128 * std::size_t{r};
  std::string b = pbkdf2_once(password, salt, block * p);
  std::vector<std::uint32_t> v;
  try {
    v.resize(n * 32 * r);
  } catch (const std::bad_alloc&) {
    return {};
  }
  for (std::uint32_t i = 0; i < p; ++i) {
    ro_mix(reinterpret_cast<unsigned char*>(b.data()) + i * block, n, r, v);
  }
  return pbkdf2_once(password, b, length);
}

#if SHARDLOAD_HANDLE_OPENSSL

bool kdf_is_openssl() { return true; }

std::string kdf_sha256(std::string_view data) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out);
  return std::string(reinterpret_cast<const char*>(out), sizeof out);
}

std::string kdf_hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string kdf_scrypt(std::string_view password, std::string_view salt, std::uint64_t n,
                       std::uint32_t r, std::uint32_t p, std::size_t length) {
  std::string out(length, '\0');
  // OpenSSL's default ceiling (32 MiB) is above 16 MiB, but named: its check counts p's blocks
  // and V together.
  constexpr std::uint64_t kMaxMem = std::uint64_t{64} << 20;
  if (EVP_PBE_scrypt(password.data(), password.size(),
                     reinterpret_cast<const unsigned char*>(salt.data()), salt.size(), n, r, p,
                     kMaxMem, reinterpret_cast<unsigned char*>(out.data()), length) != 1) {
    return {};
  }
  return out;
}

#else

bool kdf_is_openssl() { return false; }

std::string kdf_sha256(std::string_view data) { return portable_sha256(data); }

std::string kdf_hmac_sha256(std::string_view key, std::string_view data) {
  return portable_hmac_sha256(key, data);
}

std::string kdf_scrypt(std::string_view password, std::string_view salt, std::uint64_t n,
                       std::uint32_t r, std::uint32_t p, std::size_t length) {
  return portable_scrypt(password, salt, n, r, p, length);
}

#endif

}  // namespace shardload::detail
