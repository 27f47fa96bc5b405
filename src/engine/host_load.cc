#include "shardload/host_load.hpp"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "engine/detail/lanes.hpp"
#include "shardload/interrupt.hpp"

namespace shardload {

std::int64_t default_host_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) {
    return CPU_COUNT(&set);
  }
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

namespace {

Status stopped(const char* why) {
  return Status(ErrorCode::kIo, std::string("load stopped: ") + why).with_errno(ECANCELED);
}

}  // namespace

Result<HostLoadStats> host_load(const Layout& layout, std::byte* dst,
                                const HostLoadOptions& options) {
  if (options.threads < 0 || options.threads > 4096) {
    return Status(
        ErrorCode::kInvalidArgument,
        "threads: expected 0 (one per core) to 4096, found " + std::to_string(options.threads));
  }
  HostLoadStats stats;
  const std::int64_t threads = options.threads == 0 ? default_host_threads() : options.threads;
  SHARDLOAD_ASSIGN_OR_RETURN(stats.plan, plan_layout(layout, threads, options.overdecompose));
  const ReadPlan& plan = stats.plan;
  stats.threads = std::max<std::int64_t>(1, std::min(threads, plan.tiles));
  const auto start = std::chrono::steady_clock::now();

  std::mutex report;  // on_tile is called one at a time, with counts that only grow
  std::int64_t tiles_done = 0;
  std::int64_t rows_done = 0;
  std::atomic<bool> refused{false};
  SHARDLOAD_RETURN_IF_ERROR(detail::first_failure_in_lanes(
      static_cast<std::size_t>(plan.tiles), static_cast<std::size_t>(stats.threads),
      [&](std::size_t, std::size_t i) -> Status {
        const auto t = static_cast<std::int64_t>(i);
        if (interrupt_requested()) return stopped("interrupted");
        if (refused.load()) return stopped("the progress callback asked to stop");
        const std::int64_t lo = plan.tile_begin(t);
        const std::int64_t hi = plan.tile_end(t);
        const Status st =
            fill_pieces(layout, tile_pieces(plan, layout.offsets, t),
                        dst + static_cast<std::size_t>(lo) * layout.row_bytes, options.fill);
        if (!st.is_ok()) {
          return st.with_context("tile " + std::to_string(t) + " (rows [" + std::to_string(lo) +
                                 ", " + std::to_string(hi) + "))");
        }
        if (options.on_tile) {
          const std::lock_guard<std::mutex> hold(report);
          ++tiles_done;
          rows_done += hi - lo;
          if (!options.on_tile(tiles_done, plan.tiles, rows_done)) {
            refused.store(true);
            return stopped("the progress callback asked to stop");
          }
        }
        return Status::ok();
      }));
  stats.fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace shardload
