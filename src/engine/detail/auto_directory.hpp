// What discover() makes of a directory named without a pattern (defined in layout.cc).
//
// Contract: a free function, safe from any thread; one listing of the directory (and a few
// bytes of a group's first file where its extension does not tell the format). Errors are
// kLayout naming the directory and what it holds; nothing throws.
#pragma once

#include "shardload/layout.hpp"

namespace shardload::detail {

// The source a directory without a pattern stands for: the directory itself when it is a
// Zarr store (a list of one), else the directory under the pattern of its one numbered group
// of a known format (the format's default naming wins among groups of one format);
// `options->format` receives the format found. The manifest compares this with the pattern
// it was indexed with, so that a manifest never answers for other files than probing would.
Result<Source> auto_directory(const Source& source, DiscoverOptions* options);

}  // namespace shardload::detail
