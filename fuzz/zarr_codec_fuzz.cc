// libFuzzer target: the chunk decoders (zlib, gzip, zstd, lz4, blosc,
// crc32c) on arbitrary bytes, as a corrupt chunk file would give them. The
// first byte picks the codec, the next two the size the chunk must decode
// to; a decoder must return an error or exactly that many bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "readers/detail/zarr.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using shardload::detail::ZarrCodec;
  if (size < 3) return 0;
  const auto codec = static_cast<ZarrCodec>(1 + data[0] % 6);
  const std::size_t expected = static_cast<std::size_t>(data[1]) << 8 | data[2];
  const auto* in = reinterpret_cast<const std::byte*>(data + 3);
  const std::size_t n = size - 3;
  std::vector<std::byte> out(expected + 1);
  (void)shardload::detail::zarr_decode_exact(codec, in, n, out.data(), expected);
  std::vector<std::byte> grow;
  (void)shardload::detail::zarr_decode_grow(codec, in, n, &grow, 1 << 20);
  if (grow.size() > (1 << 20)) __builtin_trap();
  return 0;
}
