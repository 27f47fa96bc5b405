// The CPU variant of the load task.
#include "legate/detail/load_body.hpp"
#include "legate/detail/tasks.hpp"

namespace shardload::detail {

void LoadReportTask::cpu_variant(legate::TaskContext context) {
  const Status st = run_report_body(context, [](const Tile& tile) { return fill_host_tile(tile); });
  write_host_record(context, st);
}

}  // namespace shardload::detail
