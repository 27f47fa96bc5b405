#include "engine/detail/strided.hpp"

#include <algorithm>
#include <vector>

namespace shardload::detail {

bool is_dense_c_order(std::span<const std::int64_t> extents, std::span<const std::size_t> strides,
                      std::size_t item) {
  if (extents.size() != strides.size()) return false;
  std::size_t expected = item;
  for (std::size_t k = extents.size(); k-- > 0;) {
    if (extents[k] > 1 && strides[k] != expected) return false;
    expected *= static_cast<std::size_t>(extents[k] < 1 ? 1 : extents[k]);
  }
  return true;
}

bool scatter_rows(const std::byte* src, std::int64_t rows, std::span<const std::int64_t> extents,
                  std::span<const std::size_t> strides, std::size_t item, std::byte* dst,
                  const RunCopy& copy) {
  const std::size_t nd = extents.size();
  if (nd == 0 || rows <= 0) return true;
  for (std::size_t k = 1; k < nd; ++k) {
    if (extents[k] <= 0) return true;  // rows without elements
  }
  // The innermost dimension is one run when its elements are adjacent.
  const std::size_t inner = nd == 1 ? 1 : static_cast<std::size_t>(extents[nd - 1]);
  const bool inner_run = nd == 1 || strides[nd - 1] == item;
  // Odometer over the trailing dimensions except the innermost.
  std::vector<std::int64_t> idx(nd, 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::byte* row_dst = dst + static_cast<std::size_t>(r) * strides[0];
    if (nd == 1) {
      if (!copy(row_dst, src, item)) return false;
      src += item;
      continue;
    }
    std::fill(idx.begin(), idx.end(), 0);
    while (true) {
      std::byte* base = row_dst;
      for (std::size_t k = 1; k + 1 < nd; ++k)
        base += static_cast<std::size_t>(idx[k]) * strides[k];
      if (inner_run) {
        if (inner > 0 && !copy(base, src, inner * item)) return false;
        src += inner * item;
      } else {
        for (std::size_t j = 0; j < inner; ++j) {
          if (!copy(base + j * strides[nd - 1], src, item)) return false;
          src += item;
        }
      }
      std::size_t k = nd - 1;
      while (k-- > 1) {
        if (++idx[k] < extents[k]) break;
        idx[k] = 0;
      }
      if (k == 0) break;  // every outer index wrapped: the row is done
    }
  }
  return true;
}

}  // namespace shardload::detail
