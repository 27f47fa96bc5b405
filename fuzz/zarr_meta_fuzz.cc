// libFuzzer target: Zarr metadata (.zarray for v2, zarr.json for v3) as read
// from a store. The first byte picks the version; whatever parses must
// survive the trip through Shard::extra unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "readers/detail/zarr.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int version = (data[0] & 1) != 0 ? 3 : 2;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto meta = shardload::detail::parse_zarr_metadata("store/.zarray", text, version);
  if (!meta) return 0;
  const std::string extra = shardload::detail::encode_zarr_meta(*meta);
  auto back = shardload::detail::decode_zarr_meta(extra, "store");
  if (!back || !(*back == *meta)) std::abort();
  return 0;
}
