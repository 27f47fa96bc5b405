// The CPU variants of the load task and of the reporting load task.
#include "legate/detail/load_body.hpp"
#include "legate/detail/tasks.hpp"

namespace shardload::detail {

void LoadTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const Tile tile = prepare_or_throw(context);
    finish_load(tile, fill_host_tile(tile));
  });
}

void LoadReportTask::cpu_variant(legate::TaskContext context) {
  const Status st = run_report_body(context, [](const Tile& tile) { return fill_host_tile(tile); });
  write_host_record(context, st);
}

}  // namespace shardload::detail
