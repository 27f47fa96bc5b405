// libFuzzer target: the .npy header parser on arbitrary bytes. It must
// return a status for anything, and what it accepts must be consistent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "shardload/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto total = shardload::npy_header_size(bytes);
  if (!total || *total > size) return 0;
  auto h = shardload::parse_npy_header(bytes.first(static_cast<std::size_t>(*total)));
  if (!h) return 0;
  // Accepted headers describe an array the rest of the core can size safely.
  if (h->shape.empty() || h->data_offset != *total) std::abort();
  std::uint64_t elements = 1;
  for (const auto d : h->shape) {
    if (d < 0) std::abort();
    elements *= static_cast<std::uint64_t>(d);
  }
  if (elements * h->dtype.size != h->data_bytes) std::abort();
  return 0;
}
