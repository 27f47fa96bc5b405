#include "shardload/byte_order.hpp"

#include <cstdint>
#include <cstring>

namespace shardload {

namespace {

template <typename T, typename Swap>
void swap_all(std::byte* data, std::size_t count, Swap swap) {
  for (std::size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    v = swap(v);
    std::memcpy(data + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

void byte_swap(std::byte* data, std::size_t count, std::size_t unit) {
  switch (unit) {
    case 2:
      swap_all<std::uint16_t>(data, count, [](std::uint16_t v) { return __builtin_bswap16(v); });
      break;
    case 4:
      swap_all<std::uint32_t>(data, count, [](std::uint32_t v) { return __builtin_bswap32(v); });
      break;
    case 8:
      swap_all<std::uint64_t>(data, count, [](std::uint64_t v) { return __builtin_bswap64(v); });
      break;
    default:
      break;  // one-byte units have no order
  }
}

void normalize_bools(std::byte* data, std::size_t count) {
  // A plain byte loop the compiler vectorises.
  auto* b = reinterpret_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < count; ++i) b[i] = static_cast<unsigned char>(b[i] != 0);
}

}  // namespace shardload
