// Copies between dense C-order rows and a destination with arbitrary byte
// strides, for stores whose local piece is not dense C-order. The copy of
// each contiguous run goes through a caller's function, so the same walk
// serves host memory (memcpy) and device memory (an async copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

namespace shardload::detail {

// True when a piece with these extents (in elements) and byte strides is
// dense C-order for elements of `item` bytes. Dimensions of extent 0 or 1
// place no constraint on their stride.
bool is_dense_c_order(std::span<const std::int64_t> extents, std::span<const std::size_t> strides,
                      std::size_t item);

using RunCopy = std::function<bool(std::byte* dst, const std::byte* src, std::size_t bytes)>;

// Scatters `rows` dense C-order rows from src into dst, row r of src going
// to dst + r * strides[0], trailing index i to + sum(i_k * strides[k]).
// Returns false as soon as `copy` does.
bool scatter_rows(const std::byte* src, std::int64_t rows, std::span<const std::int64_t> extents,
                  std::span<const std::size_t> strides, std::size_t item, std::byte* dst,
                  const RunCopy& copy);

}  // namespace shardload::detail
