#include "shardload/dtype.hpp"

#include <array>
#include <charconv>

namespace shardload {

namespace {

struct Named {
  std::string_view name;
  DType dtype;
};

constexpr std::array<Named, 14> kNames{{
    {"bool", {DTypeKind::kBool, 1}},
    {"int8", {DTypeKind::kInt, 1}},
    {"int16", {DTypeKind::kInt, 2}},
    {"int32", {DTypeKind::kInt, 4}},
    {"int64", {DTypeKind::kInt, 8}},
    {"uint8", {DTypeKind::kUInt, 1}},
    {"uint16", {DTypeKind::kUInt, 2}},
    {"uint32", {DTypeKind::kUInt, 4}},
    {"uint64", {DTypeKind::kUInt, 8}},
    {"float16", {DTypeKind::kFloat, 2}},
    {"float32", {DTypeKind::kFloat, 4}},
    {"float64", {DTypeKind::kFloat, 8}},
    {"complex64", {DTypeKind::kComplex, 8}},
    {"complex128", {DTypeKind::kComplex, 16}},
}};

bool valid(DType d) {
  for (const auto& n : kNames) {
    if (n.dtype == d) return true;
  }
  return false;
}

}  // namespace

std::string DType::name() const {
  for (const auto& n : kNames) {
    if (n.dtype == *this) return std::string(n.name);
  }
  return "invalid";
}

std::string DType::code() const {
  char c = '?';
  switch (kind) {
    case DTypeKind::kBool:
      c = 'b';
      break;
    case DTypeKind::kInt:
      c = 'i';
      break;
    case DTypeKind::kUInt:
      c = 'u';
      break;
    case DTypeKind::kFloat:
      c = 'f';
      break;
    case DTypeKind::kComplex:
      c = 'c';
      break;
  }
  return std::string(1, c) + std::to_string(size);
}

Result<DType> parse_dtype(std::string_view text, bool* big_endian) {
  for (const auto& n : kNames) {
    if (n.name == text) {
      if (big_endian != nullptr) *big_endian = !host_is_little_endian();
      return n.dtype;
    }
  }
  std::string_view s = text;
  bool big = !host_is_little_endian();
  bool explicit_order = false;
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) {
    explicit_order = s[0] != '=';
    if (s[0] == '>') big = true;
    if (s[0] == '<') big = false;
    s.remove_prefix(1);
  }
  auto bad = [&] {
    return Status(ErrorCode::kInvalidArgument,
                  "unsupported dtype '" + std::string(text) +
                      "' (expected bool, int8-64, uint8-64, float16/32/64 or complex64/128)");
  };
  if (s.size() < 2) return bad();
  DType d;
  switch (s[0]) {
    case 'b':
      d.kind = DTypeKind::kBool;
      break;
    case '?':
      d.kind = DTypeKind::kBool;
      break;
    case 'i':
      d.kind = DTypeKind::kInt;
      break;
    case 'u':
      d.kind = DTypeKind::kUInt;
      break;
    case 'f':
      d.kind = DTypeKind::kFloat;
      break;
    case 'c':
      d.kind = DTypeKind::kComplex;
      break;
    default:
      return bad();
  }
  unsigned size = 0;
  const char* first = s.data() + 1;
  const char* last = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(first, last, size);
  if (ec != std::errc() || ptr != last || size > 16) return bad();
  d.size = static_cast<std::uint8_t>(size);
  if (!valid(d)) return bad();
  // '|' means "not applicable"; numpy writes it only for one-byte types.
  if (explicit_order && text[0] == '|' && d.size != 1) return bad();
  if (big_endian != nullptr) *big_endian = d.size == 1 ? false : big;
  return d;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += std::to_string(shape[i]);
    if (i + 1 < shape.size() || shape.size() == 1) s += ",";
    if (i + 1 < shape.size()) s += " ";
  }
  return s + ")";
}

}  // namespace shardload
