// libFuzzer target: decoding a layout from arbitrary bytes (what a load
// task receives). Anything decoded must re-encode to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "shardload/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto layout = shardload::decode_layout(std::span(data, size));
  if (!layout) return 0;
  // Offsets and sizes were re-derived and checked.
  if (layout->offsets.size() != layout->shards.size() + 1) std::abort();
  for (std::size_t i = 0; i < layout->shards.size(); ++i) {
    if (layout->offsets[i + 1] - layout->offsets[i] != layout->shards[i].rows) std::abort();
    // A row view lies inside its file.
    const auto& s = layout->shards[i];
    if (s.first_row < 0 || s.first_row + s.rows > s.stored_rows()) std::abort();
  }
  const auto again = shardload::encode_layout(*layout);
  auto back = shardload::decode_layout(again);
  if (!back || shardload::encode_layout(*back) != again) std::abort();
  return 0;
}
