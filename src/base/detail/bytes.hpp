// Byte-level helpers every layer's encodings and writers share: little-endian integers,
// LEB128 varints (zigzag for signed values), a full write that retries short writes, and a
// byte count for people. Internal; the encodings built on them (the layout codec, the
// manifest, the task messages) say which they use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/status.hpp"

namespace shardload::detail {

// Appends the low `bytes` bytes of v (1 to 8), least significant first.
void put_le(std::vector<std::uint8_t>& out, std::uint64_t v, int bytes);
// Overwrites out[at, at + bytes) with v as put_le writes it (a length filled in later).
void put_le_at(std::span<std::uint8_t> out, std::size_t at, std::uint64_t v, int bytes);
// The value put_le wrote at p (the caller checks that `bytes` bytes are there).
std::uint64_t get_le(const std::uint8_t* p, int bytes);

// Words of 8 bytes (put_le), and strings and lists of words after their counts: the encoding
// of a save job and of the Legate save's task messages.
void put_word(std::vector<std::uint8_t>& out, std::uint64_t v);
void put_word_str(std::vector<std::uint8_t>& out, std::string_view s);
void put_word_ints(std::vector<std::uint8_t>& out, std::span<const std::int64_t> v);

// Reads what put_word, put_word_str and put_word_ints wrote, in order; every read fails (false)
// once the bytes run out, so a count that promises more than the bytes hold allocates nothing.
class WordReader {
 public:
  explicit WordReader(std::span<const std::uint8_t> b) : b_(b) {}
  [[nodiscard]] bool u64(std::uint64_t* v);
  [[nodiscard]] bool str(std::string* s);
  [[nodiscard]] bool ints(std::vector<std::int64_t>* v);
  [[nodiscard]] bool at_end() const { return pos_ == b_.size(); }

 private:
  std::span<const std::uint8_t> b_;
  std::size_t pos_ = 0;
};

// Appends v in 7-bit groups, least significant first, the high bit marking "more follows".
void put_varint(std::vector<std::uint8_t>& out, std::uint64_t v);
// Reads a varint at b[*pos] and advances *pos past it; false when the bytes run out or the
// varint runs past ten bytes (64 bits).
[[nodiscard]] bool get_varint(std::span<const std::uint8_t> b, std::size_t* pos, std::uint64_t* v);
// Zigzag: small negative numbers become small unsigned ones (-1 -> 1, 1 -> 2).
inline std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
inline std::int64_t unzigzag(std::uint64_t z) {
  return static_cast<std::int64_t>((z >> 1) ^ (~(z & 1) + 1));
}

// Writes all n bytes of data to fd, retrying EINTR and short writes (in pieces of at most
// 1 GiB): at `offset` with pwrite, or at the file position when offset is negative. A failure
// is kIo naming `path`, with the errno as data: "write of N bytes at offset O failed: ..."
// (positional) or "cannot write: ..." (at the file position); a write that writes nothing is
// ENOSPC.
Status write_all(int fd, const std::string& path, const void* data, std::size_t n,
                 std::int64_t offset = -1);

// A byte count for people: "1.23 GB (1234567890 bytes)" (decimal units, two decimals, the
// unit that keeps the number under 1000), or "512 bytes" below 1 kB.
std::string size_string(std::uint64_t bytes);

}  // namespace shardload::detail
