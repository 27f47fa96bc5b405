// What the launchers of the Legate adapter share (load.cc, batches.cc, save.cc). Internal.
#pragma once

#include <legate.h>

#include <cstdint>
#include <optional>

#include "shardload/layout.hpp"
#include "shardload/plan.hpp"

namespace shardload::detail {

// Throws OutOfMemoryError unless `copies` arrays of the layout's size, tiled by `plan`, fit
// the memory Legate has for `processors` processors of `target`.
void check_memory(const Layout& layout, const ReadPlan& plan, legate::mapping::TaskTarget target,
                  std::int64_t processors, std::uint64_t copies);

// The dtype of a Legate type, or nothing for a type shardload does not hold (strings,
// structs, ...): dtype_of throws for those, save() says the array cannot be saved.
std::optional<DType> find_dtype(const legate::Type& type);

}  // namespace shardload::detail
