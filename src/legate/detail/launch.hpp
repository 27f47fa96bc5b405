// What the launchers of the Legate adapter share (load, batches, save, the manifest's
// verification, the demo tasks): the target choice, the tiled launch along axis 0, submitting
// with the task's error mapped to the typed exception, and the memory check. Internal.
#pragma once

#include <legate.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shardload/codec.hpp"
#include "shardload/errors.hpp"
#include "shardload/layout.hpp"
#include "shardload/plan.hpp"

namespace shardload::detail {

// Where a load runs: the GPUs where there are any, else the OpenMP processors, else the CPUs.
struct Target {
  legate::mapping::TaskTarget kind = legate::mapping::TaskTarget::CPU;
  const char* name = "CPU";
  std::int64_t processors = 0;
};
// Throws LayoutError when the machine has no processor of any kind.
Target choose_target();

// A launch of `tiles` points over an array of shape `extents`, point t holding rows
// [t x tile_rows, ...) with full trailing extents: partition the array by tile_shape.
struct Tiling {
  std::vector<std::uint64_t> tile_shape;
  std::vector<std::uint64_t> launch;  // (tiles, 1, ...): the launch domain's shape
};
Tiling tile_axis0(std::span<const std::uint64_t> extents, std::int64_t tile_rows,
                  std::int64_t tiles);
legate::ManualTask tiled_task(const legate::Library& lib, legate::LocalTaskID id,
                              const Tiling& tiling);

// Submits the task; a legate::TaskException that a point threw becomes the typed exception of
// its Status (throw_status at `site`), with `context` in front when it is not empty. A task
// that may throw makes the submission wait for it. For the tasks that throw: save's and the
// manifest's verification; the load task reports through records instead (submit_load).
void submit_or_throw(legate::ManualTask task, ErrorSite site, const std::string& context = {});

// The load task's launch (LoadReportTask, tasks.hpp) over `array`, whose rows `plan` cuts
// into tiles of `layout` (`tiles` is encode_tiles(layout, plan)): submitted without waiting,
// since the task never throws. The plan must have tiles and the layout bytes per row.
struct LoadLaunch {
  legate::LogicalStore records;  // one error record per point, in tile order
  std::uint64_t record_bytes = 0;
};
LoadLaunch submit_load(const legate::Library& lib, const legate::LogicalArray& array,
                       const Layout& layout, const ReadPlan& plan, const TileEncoding& tiles);

// Waits for the launch (maps all of its records on this rank, so that every rank returns the
// same) and returns the failure of its lowest failing tile, or ok.
Status load_failure(const legate::LogicalStore& records, std::uint64_t record_bytes);

// Throws OutOfMemoryError unless `copies` arrays of the layout's size, tiled by `plan`, fit
// the memory Legate has for `processors` processors of `target`. Legate keeps a little of each
// memory for itself: 16 MiB and 1% of each memory count as taken.
void check_memory(const Layout& layout, const ReadPlan& plan, legate::mapping::TaskTarget target,
                  std::int64_t processors, std::uint64_t copies);

// The dtype of a Legate type, or nothing for a type shardload does not hold (strings,
// structs, ...): dtype_of throws for those, save() says the array cannot be saved.
std::optional<DType> find_dtype(const legate::Type& type);

}  // namespace shardload::detail
