// Fortran-ordered .npy data (npy shards, npz members) stores element m of every row as one
// run, with m counting the trailing dimensions first index fastest; rows go to the destination
// in C order. FortranWalk steps through m and gives each element's C-order index in the row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardload::detail {

class FortranWalk {
 public:
  explicit FortranWalk(const std::vector<std::int64_t>& dims)
      : dims_(dims), cstride_(dims.size(), 1), idx_(dims.size(), 0) {
    for (std::size_t k = dims.size(); k-- > 1;) {
      cstride_[k - 1] = cstride_[k] * static_cast<std::uint64_t>(dims[k]);
    }
  }

  // The C-order index, within a row, of the current element.
  std::uint64_t c_index() const { return c_; }

  // On to the next element in Fortran order (an odometer, first index fastest).
  void next() {
    for (std::size_t k = 0; k < dims_.size(); ++k) {
      if (++idx_[k] < static_cast<std::uint64_t>(dims_[k])) {
        c_ += cstride_[k];
        return;
      }
      c_ -= (idx_[k] - 1) * cstride_[k];
      idx_[k] = 0;
    }
  }

 private:
  const std::vector<std::int64_t>& dims_;
  std::vector<std::uint64_t> cstride_;  // C-order strides, in elements
  std::vector<std::uint64_t> idx_;
  std::uint64_t c_ = 0;
};

}  // namespace shardload::detail
