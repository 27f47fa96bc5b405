// Demo data check under Legate: counts the elements of a loaded `shardload write` dataset that
// differ from the values synth_fill(seed) gives, one verify task per tile of the load, so the
// array is checked in parallel and never gathered into one process. Not part of the product:
// the command line's `read --verify` uses it.
//
// The Legate runtime must be started; the array must be the one load(layout, ..., &info)
// returned (its tiling is info's). Its row 0 is the written dataset's row `first_row` (a part
// of the dataset: a shard, some consecutive shards), whose values it is compared with. Throws
// what Legate throws; a dtype mismatch counts every element.
#pragma once

#include <legate.h>

#include <cstdint>

#include "shardload/legate.hpp"

namespace shardload {

std::int64_t count_synth_mismatches(const legate::LogicalArray& array, const Layout& layout,
                                    const LoadInfo& info, std::uint64_t seed,
                                    std::int64_t first_row = 0);

}  // namespace shardload
