// The CPU variant of the load task and the task-side error encoding.
#include "legate/detail/load_body.hpp"
#include "legate/detail/tasks.hpp"

namespace shardload::detail {

void LoadTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const Tile tile = prepare_or_throw(context);
    finish_load(tile, fill_host_tile(tile));
  });
}

}  // namespace shardload::detail
