// Deterministic synthetic datasets for the demo, the tests and benchmarks.
//
// Every element's value is a function of (seed, global C-order element
// index) alone, so any row range can be verified without materializing the
// whole dataset. The same function is written in numpy in the tests.
//
//   key   = splitmix64(seed)
//   h(i)  = splitmix64(key + i)                       (mod 2^64)
//   bool: h >> 63;  ints: the low 8*size bits of h;
//   floats with b significant bits (11, 24, 53): ((h >> (64 - b)) - 2^(b-1)) * 2^-8
//   complex: real part from h, imaginary part from splitmix64(h), as floats.
//
// Not part of the product (src/testing): demo data and tests only. Pure functions over the
// caller's buffers; write_npy returns an error naming the file. Safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/status.hpp"

namespace shardload {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Writes `count` native-endian elements starting at global element `first`.
void synth_fill(DType dtype, std::uint64_t seed, std::uint64_t first, std::size_t count,
                std::byte* dst);

// Splits total rows over `shards` shards: shards-1 cut points drawn from the
// seed and sorted, so counts differ and any of them may be 0.
std::vector<std::int64_t> synth_split(std::uint64_t seed, std::int64_t total_rows,
                                      std::int64_t shards);

// Writes a version 1.0 .npy file (little-endian, C order) through a
// temporary file and a rename, so a failure never leaves a partial shard.
// The data are synth_fill(seed) values from global element `first_element`,
// generated in bounded blocks.
struct NpyWriteSpec {
  DType dtype;
  std::vector<std::int64_t> shape;
};
Status write_npy(const std::string& path, const NpyWriteSpec& spec, std::uint64_t seed,
                 std::uint64_t first_element);

// The header bytes write_npy uses (exposed for tests).
std::string npy_header_bytes(const NpyWriteSpec& spec);

}  // namespace shardload
