// Demo data made in Legate: a distributed array holding synth_fill(seed)'s values (the values
// `shardload write` stores), filled by one launch of a synth task per tile, so the data is
// never built whole in one process. Not part of the product: the command line's `write`
// makes its dataset with it and saves it with shardload::save.
//
// The Legate runtime must be started. Throws what Legate throws.
#pragma once

#include <legate.h>

#include <cstdint>
#include <vector>

#include "shardload/dtype.hpp"

namespace shardload {

legate::LogicalArray make_synth_array(DType dtype, const std::vector<std::int64_t>& shape,
                                      std::uint64_t seed);

}  // namespace shardload
