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
#include "shardload/status.hpp"

namespace shardload {

std::vector<std::uint8_t> encode_layout(const Layout& layout);

// Rebuilds and re-validates the layout; malformed bytes are kInvalidArgument.
Result<Layout> decode_layout(std::span<const std::uint8_t> bytes);

// Format options alone (the format, kAuto included, and every option), encoded as a layout's
// encoding holds them: for a request that names what to discover before any layout exists
// (discover_once). decode_format_options gives back an equal FormatOptions; malformed bytes,
// a layout's encoding included, are kInvalidArgument.
std::vector<std::uint8_t> encode_format_options(const FormatOptions& options);
Result<FormatOptions> decode_format_options(std::span<const std::uint8_t> bytes);

}  // namespace shardload
