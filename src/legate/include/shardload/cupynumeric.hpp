// The cuPyNumeric flavour of shardload::load, for programs that use
// cuPyNumeric's C++ API (link cupynumeric::cupynumeric and call
// cupynumeric::initialize after legate::start).
//
// Contract: as shardload::load (shardload/legate.hpp): the caller owns the returned ndarray;
// errors are the exceptions of shardload/errors.hpp.
#pragma once

#include <cupynumeric.h>

#include "shardload/legate.hpp"

namespace shardload {

// Loads like load() and wraps the result as a cupynumeric::NDArray (no copy).
inline cupynumeric::NDArray load_ndarray(const Layout& layout, const LoadOptions& options = {},
                                         LoadInfo* info = nullptr) {
  return cupynumeric::as_array(load(layout, options, info).data());
}

}  // namespace shardload
