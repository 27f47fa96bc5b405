// The hashes credentials handles are made with (storage/detail/credentials_kdf.hpp) against
// published vectors (FIPS 180-4's SHA-256 examples, RFC 4231's HMAC-SHA256 cases, RFC 7914's
// scrypt vectors), and the portable code against the build's own (OpenSSL's where linked), so
// that a build without OpenSSL makes the same handles.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "storage/detail/credentials_kdf.hpp"

namespace shardload::detail {
namespace {

std::string hex(const std::string& raw) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : raw) {
    const auto byte = static_cast<unsigned char>(c);
    out += kHex[byte >> 4];
    out += kHex[byte & 0xF];
  }
  return out;
}

TEST(CredentialsKdf, Sha256MatchesThePublishedExamples) {
  for (const auto sha : {&portable_sha256, &kdf_sha256}) {
    EXPECT_EQ(hex(sha("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex(sha("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(hex(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(hex(sha(std::string(1000000, 'a'))),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
}

TEST(CredentialsKdf, HmacSha256MatchesRfc4231) {
  for (const auto mac : {&portable_hmac_sha256, &kdf_hmac_sha256}) {
    EXPECT_EQ(hex(mac(std::string(20, '\x0b'), "Hi There")),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    EXPECT_EQ(hex(mac("Jefe", "what do ya want for nothing?")),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    // A key longer than a block, hashed first.
    EXPECT_EQ(hex(mac(std::string(131, '\xaa'),
                      "Test Using Larger Than Block-Size Key - Hash Key First")),
              "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  }
}

TEST(CredentialsKdf, ScryptMatchesRfc7914) {
  for (const auto scrypt : {&portable_scrypt, &kdf_scrypt}) {
    EXPECT_EQ(hex(scrypt("", "", 16, 1, 1, 64)),
              "77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442"
              "fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906");
    EXPECT_EQ(hex(scrypt("password", "NaCl", 1024, 8, 16, 64)),
              "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162"
              "2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640");
  }
}

// The handle's own parameters, on inputs of every length around SHA-256's block: the portable
// code and the build's give the same key.
TEST(CredentialsKdf, PortableScryptIsTheBuildsAtTheHandlesParameters) {
  std::mt19937 gen(7);
  for (const std::size_t n : {0, 1, 55, 56, 63, 64, 65, 200}) {
    std::string password(n, '\0');
    std::string salt(n / 2 + 1, '\0');
    for (char& c : password) c = static_cast<char>(gen());
    for (char& c : salt) c = static_cast<char>(gen());
    EXPECT_EQ(hex(portable_sha256(password)), hex(kdf_sha256(password)));
    EXPECT_EQ(hex(portable_hmac_sha256(salt, password)), hex(kdf_hmac_sha256(salt, password)));
    if (n == 0 || n == 64 || n == 200) {
      const std::string key =
          kdf_scrypt(password, salt, kHandleScryptN, kHandleScryptR, kHandleScryptP, 32);
      EXPECT_EQ(key.size(), 32u);
      EXPECT_EQ(
          hex(portable_scrypt(password, salt, kHandleScryptN, kHandleScryptR, kHandleScryptP, 32)),
          hex(key));
    }
  }
}

TEST(CredentialsKdf, ScryptRefusesParametersItCannotUse) {
  EXPECT_EQ(portable_scrypt("p", "s", 1000, 8, 1, 32), "");  // N not a power of 2
  EXPECT_EQ(portable_scrypt("p", "s", 1024, 0, 1, 32), "");
}

}  // namespace
}  // namespace shardload::detail
