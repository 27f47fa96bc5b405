// libFuzzer target: the strict JSON reading used for raw sidecars and Zarr
// metadata, including the field helpers the sidecar parser applies.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/detail/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto obj = shardload::detail::parse_json_object("dir/shardload.json", text);
  if (!obj) return 0;
  (void)shardload::detail::json_brief(*obj);
  for (const char* field : {"dtype", "shape", "header_bytes", "rows"}) {
    const auto it = obj->find(field);
    if (it == obj->end()) continue;
    (void)shardload::detail::json_string("f", field, *it);
    (void)shardload::detail::json_nonneg_int("f", field, *it);
    (void)shardload::detail::json_shape("f", field, *it);
  }
  return 0;
}
