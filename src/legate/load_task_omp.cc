// The OpenMP variant: the tile's rows split evenly over the OMP processor's
// threads, each reading its share straight into the store. Compiled only
// where Legate was built with OpenMP.
#include "legate/detail/load_body.hpp"
#include "legate/detail/tasks.hpp"

#if LEGATE_DEFINED(LEGATE_USE_OPENMP)
#include <omp.h>

#include <algorithm>
#include <vector>

#include "shardload/plan.hpp"

namespace shardload::detail {

namespace {

Status fill_omp_tile(const Tile& tile) {
  const std::int64_t rows = tile.hi - tile.lo;
  if (!tile.dense || rows < 2) return fill_host_tile(tile);
  const std::int64_t n = std::min<std::int64_t>(omp_get_max_threads(), rows);
  // On an aligned unit grid the threads' shares end on unit boundaries, so that no unit
  // is decoded by two threads (a share may be empty when units are large). The grid is the
  // tile's own: its rows count from the tile's first row.
  const UnitGrid grid = unit_grid(tile.layout.offsets, tile.layout.shards);
  const auto split = [&](std::int64_t i) {
    std::int64_t r = rows * i / n;
    if (grid.aligned && grid.rows > 0 && i > 0 && i < n) {
      r = std::clamp<std::int64_t>(r - r % grid.rows, 0, rows);
    }
    return r;
  };
  std::vector<Status> results(static_cast<std::size_t>(n));
#pragma omp parallel for schedule(static, 1)
  for (std::int64_t i = 0; i < n; ++i) {
    // Nothing may leave an OpenMP region: a throw there ends the process.
    try {
      results[static_cast<std::size_t>(i)] = fill_tile_rows(tile, split(i), split(i + 1));
    } catch (const std::exception& e) {
      results[static_cast<std::size_t>(i)] = {ErrorCode::kIo,
                                              std::string("load task: ") + e.what()};
    } catch (...) {
      results[static_cast<std::size_t>(i)] = {ErrorCode::kIo, "load task: unknown exception"};
    }
  }
  for (const auto& st : results) {
    if (!st) return st;
  }
  return Status::ok();
}

}  // namespace

void LoadReportTask::omp_variant(legate::TaskContext context) {
  const Status st = run_report_body(context, [](const Tile& tile) { return fill_omp_tile(tile); });
  write_host_record(context, st);
}

}  // namespace shardload::detail
#endif
