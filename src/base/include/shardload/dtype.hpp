// Element types shardload understands: bool, signed and unsigned integers of
// 1-8 bytes, IEEE floats of 2, 4 and 8 bytes and complex of 8 and 16 bytes.
//
// Contract: DType is a value; parse_dtype returns kInvalidArgument naming the text; pure
// functions, safe from any thread.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/status.hpp"

namespace shardload {

enum class DTypeKind : std::uint8_t { kBool, kInt, kUInt, kFloat, kComplex };

struct DType {
  DTypeKind kind = DTypeKind::kUInt;
  std::uint8_t size = 1;  // bytes per element

  // numpy's name: "bool", "int32", "float16", "complex128", ...
  [[nodiscard]] std::string name() const;
  // The numpy type character and size without byte order: "f4", "b1", "c16".
  [[nodiscard]] std::string code() const;
  // Bytes of the unit that byte order applies to (complex swaps each half).
  [[nodiscard]] std::uint8_t swap_unit() const {
    return kind == DTypeKind::kComplex ? static_cast<std::uint8_t>(size / 2) : size;
  }

  friend bool operator==(const DType&, const DType&) = default;
};

// Parses a numpy name ("float32") or a type code with optional byte order
// ("f4", "<f4", ">i2", "|b1"). Byte order, when present, is reported through
// `big_endian` (nullptr: not wanted). Unknown names are kInvalidArgument.
Result<DType> parse_dtype(std::string_view text, bool* big_endian = nullptr);

// True when this machine stores multi-byte numbers little-endian.
constexpr bool host_is_little_endian() { return std::endian::native == std::endian::little; }

// "(3,)", "(2, 4)", "()": a shape the way numpy prints it.
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace shardload
