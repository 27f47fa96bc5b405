// What the launchers of the Legate adapter share (load.cc, batches.cc). Internal.
#pragma once

#include <legate.h>

#include <cstdint>

#include "shardload/layout.hpp"
#include "shardload/plan.hpp"

namespace shardload::detail {

// Throws OutOfMemoryError unless `copies` arrays of the layout's size, tiled by `plan`, fit
// the memory Legate has for `processors` processors of `target`.
void check_memory(const Layout& layout, const ReadPlan& plan, legate::mapping::TaskTarget target,
                  std::int64_t processors, std::uint64_t copies);

}  // namespace shardload::detail
