// Items run on a few threads ("lanes"), each taking the next index, with the first failure in
// index order the one that counts: discovery's probes and a tile's remote pieces.
#pragma once

#include <cstddef>
#include <functional>

#include "shardload/status.hpp"

namespace shardload::detail {

// item(lane, i) for the indices 0 .. n-1 on up to `lanes` threads of the process's work pool
// (storage/detail/context.hpp), the caller's the lane 0,
// each lane taking the next `chunk` indices in turn (one atomic per chunk). item returns
// false when index i failed: then no index past the lowest failure starts, and every index
// below it still runs, so the lowest failing index is the same whatever the timing. A lane
// that no thread takes leaves its share to the others. Returns when every lane is done; may be
// called from inside an item of another run_in_lanes (the waits never wait on a lane not
// started).
void run_in_lanes(std::size_t n, std::size_t lanes, std::size_t chunk,
                  const std::function<bool(std::size_t lane, std::size_t i)>& item);

// run_in_lanes, one index at a time, for items that return a Status: the Status of the lowest
// failing index (the same whatever the timing), or ok when every item succeeded.
Status first_failure_in_lanes(std::size_t n, std::size_t lanes,
                              const std::function<Status(std::size_t lane, std::size_t i)>& item);

}  // namespace shardload::detail
