// Byte order and bool normalisation of the elements a reader lands: the
// in-place fix-ups every reader (and the device fill, on its staging
// buffers) applies after the bytes are read. Pure functions over a caller's
// buffer; thread-safe; never fail.
#pragma once

#include <cstddef>

namespace shardload {

// Swaps the byte order of count elements of `unit` bytes in place.
void byte_swap(std::byte* data, std::size_t count, std::size_t unit);

// Rewrites `count` bool bytes in place as 0 or 1 by numpy's rule (nonzero is
// True). A file may hold any byte in a bool element, and numpy, Legate and
// CUDA all assume 0 or 1 (a bool of 2 is neither True nor False to `==`), so
// every fill, host or device, normalises what it lands, whatever the format.
void normalize_bools(std::byte* data, std::size_t count);

}  // namespace shardload
