// Strict reading of .npy headers (format versions 1.0, 2.0 and 3.0).
//
// The header is a Python dict literal; it is tokenized, not searched for
// substrings, so keys may come in any order with any spacing and a trailing
// comma, and anything else is rejected with the field that is wrong.
//
// Contract: pure functions over the caller's bytes (nothing kept); kFormat errors name the
// field; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/status.hpp"

namespace shardload {

struct NpyHeader {
  int major = 1;
  int minor = 0;
  DType dtype;
  bool big_endian = false;  // the file's byte order (false for 1-byte types)
  bool fortran_order = false;
  std::vector<std::int64_t> shape;  // at least one dimension
  std::uint64_t data_offset = 0;    // bytes before the data
  std::uint64_t data_bytes = 0;     // product(shape) * itemsize, overflow-checked
};

// Headers larger than this are rejected as corrupt before anything is read.
inline constexpr std::uint64_t kMaxNpyHeaderBytes = std::uint64_t{1} << 20;

// From the first bytes of a file (at least 12, or fewer if the file is that
// short), the total size of the header including magic and length fields.
Result<std::uint64_t> npy_header_size(std::span<const std::byte> prefix);

// Parses a complete header (magic through the terminating newline). Errors
// name the field; the caller adds the file name.
Result<NpyHeader> parse_npy_header(std::span<const std::byte> header);

// A version 1.0 header for C-order data of `dtype` in this host's byte order with `shape`,
// padded as numpy pads it (the data starts on a 64-byte boundary): what every .npy shardload
// writes starts with.
std::string encode_npy_header(const DType& dtype, const std::vector<std::int64_t>& shape);

// Reads and validates the header of the .npy key `key` of `source`, including that
// the key's size is exactly header + data. `info` receives its snapshot. Errors name the key
// as the source shows it.
class ShardSource;
struct FileInfo;
Result<NpyHeader> probe_npy(ShardSource& source, const std::string& key, FileInfo* info);

}  // namespace shardload
