// A compact byte encoding of a Layout, so that the layout can travel to
// wherever the data is read (as one task argument of a Legate launch, the
// same bytes for every point, on every rank). Its size grows with the shard
// count only: shard paths share their common prefix, and numbers are
// variable-length.
//
// Contract: encode_layout returns owned bytes; decode_layout copies what it needs out of the
// caller's span and returns kInvalidArgument for bytes that are not an encoding (never reads
// past the span). Safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shardload/layout.hpp"
#include "shardload/plan.hpp"
#include "shardload/status.hpp"

namespace shardload {

// With `credentials` false, the credential entries its paths name are left out: the bytes of
// the layout's identity alone (its paths name their credentials by handle), for a token or a
// hash that is shown (a Dask array's name) and must hold no secret; it decodes only where the
// handles are held.
std::vector<std::uint8_t> encode_layout(const Layout& layout, bool credentials = true);

// Rebuilds and re-validates the layout; malformed bytes are kInvalidArgument.
Result<Layout> decode_layout(std::span<const std::uint8_t> bytes);

// A layout cut at its plan's tiles, for the load task: tile t's rows as a layout of their own
// (slice_rows: row 0 is the tile's first row), each encoded by encode_layout, one after the
// other. A point task then decodes only the shards its tile covers, so that what a point
// spends before reading does not grow with the whole layout's shards (decoding all of it and
// replanning it in every point cost O(tiles x shards) per load).
struct TileEncoding {
  std::vector<std::uint8_t> bytes;
  std::vector<std::int64_t> offsets;  // tiles + 1: tile t is bytes [offsets[t], offsets[t + 1])
};
Result<TileEncoding> encode_tiles(const Layout& layout, const ReadPlan& plan);

// Tile t's layout from encode_tiles' bytes and offsets; kInvalidArgument when t is no tile of
// the table, the table does not fit the bytes, or the tile's bytes are no encoding.
Result<Layout> decode_tile(std::span<const std::uint8_t> bytes,
                           std::span<const std::int64_t> offsets, std::int64_t tile);

// Format options alone (the format, kAuto included, and every option), encoded as a layout's
// encoding holds them: for a request that names what to discover before any layout exists
// (discover_once). decode_format_options gives back an equal FormatOptions; malformed bytes,
// a layout's encoding included, are kInvalidArgument.
std::vector<std::uint8_t> encode_format_options(const FormatOptions& options);
Result<FormatOptions> decode_format_options(std::span<const std::uint8_t> bytes);

}  // namespace shardload
