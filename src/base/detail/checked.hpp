// Overflow-checked arithmetic for sizes read from disk.
#pragma once

#include <cstdint>

namespace shardload::detail {

template <typename T>
[[nodiscard]] bool checked_mul(T a, T b, T* out) {
  return !__builtin_mul_overflow(a, b, out);
}

template <typename T>
[[nodiscard]] bool checked_add(T a, T b, T* out) {
  return !__builtin_add_overflow(a, b, out);
}

}  // namespace shardload::detail
