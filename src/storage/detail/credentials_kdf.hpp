// The hashes a credentials handle is made with (store_options.cc, handle_of; the contract is in
// shardload/store_options.hpp above seal_credentials): SHA-256, HMAC-SHA256 and scrypt
// (RFC 7914). OpenSSL's libcrypto where the build links it; else the portable code below, which
// gives the same bytes, so that a build without OpenSSL makes the same handles as one with it
// and its handles are no faster to guess from.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shardload::detail {

// scrypt's cost: 128 * r * N = 16 MiB of memory and tens of milliseconds a call, which every
// guess of a secret from a handle pays too.
inline constexpr std::uint64_t kHandleScryptN = std::uint64_t{1} << 14;
inline constexpr std::uint32_t kHandleScryptR = 8;
inline constexpr std::uint32_t kHandleScryptP = 1;

// Raw digests (32 bytes) and keys (`length` bytes); scrypt's result is "" where its memory could
// not be had.
std::string kdf_sha256(std::string_view data);
std::string kdf_hmac_sha256(std::string_view key, std::string_view data);
std::string kdf_scrypt(std::string_view password, std::string_view salt, std::uint64_t n,
                       std::uint32_t r, std::uint32_t p, std::size_t length);

// The portable code, compiled in every build so that the tests compare it with OpenSSL's and
// with RFC 7914's vectors.
std::string portable_sha256(std::string_view data);
std::string portable_hmac_sha256(std::string_view key, std::string_view data);
std::string portable_scrypt(std::string_view password, std::string_view salt, std::uint64_t n,
                            std::uint32_t r, std::uint32_t p, std::size_t length);

// Whether kdf_* are OpenSSL's.
bool kdf_is_openssl();

}  // namespace shardload::detail
