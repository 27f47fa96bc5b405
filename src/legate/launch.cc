// The launchers' shared steps (legate/detail/launch.hpp): target choice, the tiled launch,
// submit-or-throw, the load task's launch and its error records, and the memory check with
// its reserve rule.
#include "legate/detail/launch.hpp"

#include <realm.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/detail/bytes.hpp"
#include "legate/detail/tasks.hpp"
#include "shardload/legate.hpp"

namespace shardload {

namespace detail {

// Legate allocates a store in the memory of the processors its tasks run on: the system
// memory (all CPUs of a node share it), the socket memory of OpenMP processors where there is
// one, or each GPU's framebuffer. A store larger than that memory makes Legate end the process
// while mapping, after the launch, where nothing can be caught, so it is refused here, from the
// sizes alone, before the store exists. Realm's memory capacities are what --sysmem, --ompmem
// and --fbmem gave.
void check_memory(const Layout& layout, const ReadPlan& plan, legate::mapping::TaskTarget target,
                  std::int64_t processors, std::uint64_t copies) {
  using legate::mapping::TaskTarget;
  std::set<Realm::Memory> memories;
  Realm::Machine::get_machine().get_all_memories(memories);
  const auto capacity_of = [&](Realm::Memory::Kind kind, std::size_t* count,
                               std::uint64_t* smallest) {
    std::uint64_t total = 0;
    for (const auto& m : memories) {
      if (m.kind() != kind) continue;
      const auto c = static_cast<std::uint64_t>(m.capacity());
      total += c;
      *smallest = *count == 0 ? c : std::min(*smallest, c);
      ++*count;
    }
    return total;
  };
  std::size_t count = 0;
  std::uint64_t smallest = 0;
  std::uint64_t capacity = 0;
  const char* what = "system memory";
  const char* flag = "--sysmem";
  if (target == TaskTarget::GPU) {
    capacity = capacity_of(Realm::Memory::GPU_FB_MEM, &count, &smallest);
    what = "GPU framebuffer memory";
    flag = "--fbmem";
  } else if (target == TaskTarget::OMP) {
    capacity = capacity_of(Realm::Memory::SOCKET_MEM, &count, &smallest);
    what = "OpenMP socket memory";
    flag = "--ompmem";
  }
  if (count == 0) {
    capacity = capacity_of(Realm::Memory::SYSTEM_MEM, &count, &smallest);
    what = "system memory";
    flag = "--sysmem";
  }
  if (count == 0) return;  // nothing to compare with; Legate decides
  // Legate keeps a little of each memory for itself (a store filling all of it fails to map,
  // one a few MiB smaller loads): leave 16 MiB and 1% of a memory free.
  const auto usable = [](std::uint64_t c) {
    const std::uint64_t reserve = (std::uint64_t{16} << 20) + c / 100;
    return c > reserve ? c - reserve : 0;
  };
  const std::uint64_t total = layout.total_bytes() * copies;
  // Batches keep `copies` of a batch alive at once; a load keeps one.
  const std::string needs = copies == 1 ? "the dataset needs " + detail::size_string(total)
                                        : std::to_string(copies) + " batches (prefetch + 1) of " +
                                              detail::size_string(layout.total_bytes()) + " need " +
                                              detail::size_string(total);
  const std::string fewer =
      copies == 1 ? "load fewer rows" : "use fewer rows per batch or a smaller prefetch";
  if (target == TaskTarget::GPU) {
    // Each GPU holds its own tiles; with the tiles spread evenly, the busiest GPU holds
    // ceil(tiles / P) of them.
    const auto per_gpu_tiles = static_cast<std::uint64_t>((plan.tiles + processors - 1) /
                                                          std::max<std::int64_t>(processors, 1));
    const std::uint64_t per_gpu = std::min<std::uint64_t>(
        total,
        copies * per_gpu_tiles * static_cast<std::uint64_t>(plan.tile_rows) * layout.row_bytes);
    if (per_gpu > usable(smallest)) {
      throw OutOfMemoryError(needs + ", up to " + detail::size_string(per_gpu) + " on each of " +
                             std::to_string(processors) + " GPUs, but a GPU has " +
                             detail::size_string(usable(smallest)) + " of " + what +
                             " for Legate; give Legate more (" + flag +
                             ", in LEGATE_CONFIG or to the legate launcher), use more GPUs, or " +
                             fewer);
    }
    return;
  }
  if (total > usable(capacity)) {
    throw OutOfMemoryError(needs + ", but Legate has " + detail::size_string(usable(capacity)) +
                           " of " + what + " for it in all; give Legate more (" + flag +
                           ", in LEGATE_CONFIG or to the legate launcher), or " + fewer);
  }
}

Target choose_target() {
  using legate::mapping::TaskTarget;
  const auto machine = legate::Runtime::get_runtime()->get_machine();
  for (const auto& [kind, name] :
       {std::pair{TaskTarget::GPU, "GPU"}, std::pair{TaskTarget::OMP, "OMP"},
        std::pair{TaskTarget::CPU, "CPU"}}) {
    if (machine.count(kind) > 0) {
      return {kind, name, static_cast<std::int64_t>(machine.count(kind))};
    }
  }
  throw LayoutError("the machine has no processors to load on");
}

Tiling tile_axis0(std::span<const std::uint64_t> extents, std::int64_t tile_rows,
                  std::int64_t tiles) {
  Tiling t;
  t.tile_shape.assign(extents.begin(), extents.end());
  t.tile_shape[0] = static_cast<std::uint64_t>(tile_rows);
  t.launch.assign(extents.size(), 1);
  t.launch[0] = static_cast<std::uint64_t>(tiles);
  return t;
}

legate::ManualTask tiled_task(const legate::Library& lib, legate::LocalTaskID id,
                              const Tiling& tiling) {
  return legate::Runtime::get_runtime()->create_task(lib, id,
                                                     legate::tuple<std::uint64_t>{tiling.launch});
}

void submit_or_throw(legate::ManualTask task, ErrorSite site, const std::string& context) {
  try {
    legate::Runtime::get_runtime()->submit(std::move(task));
  } catch (const legate::TaskException& e) {
    const Status st = status_from_task_error(e);
    throw_status(context.empty() ? st : st.with_context(context), site);
  }
}

namespace {

// A record holds a message that names a path (or a file inside it, a Zarr chunk) and what was
// expected and found: room for the longest path three times (the frame's file and a message
// naming it twice at most) and the rest.
std::uint64_t record_bytes_for(const Layout& layout) {
  std::size_t longest = 0;
  for (const auto& s : layout.shards) longest = std::max(longest, s.path.size());
  const std::uint64_t bytes = kRecordHeader + 2048 + 3 * longest;
  return (bytes + 7) / 8 * 8;
}

}  // namespace

LoadLaunch submit_load(const legate::Library& lib, const legate::LogicalArray& array,
                       const Layout& layout, const ReadPlan& plan, const TileEncoding& tiles) {
  auto* runtime = legate::Runtime::get_runtime();
  const auto shape = array.extents();
  const std::vector<std::uint64_t> extents(shape.begin(), shape.end());
  const Tiling tiling = tile_axis0(extents, plan.tile_rows, plan.tiles);
  // One record per point: the records lie along axis 0 with every other extent 1, so their
  // tiling has the launch's color space whatever the array's dimension.
  const std::uint64_t record_bytes = record_bytes_for(layout);
  std::vector<std::uint64_t> record_extents(extents.size(), 1);
  record_extents[0] = static_cast<std::uint64_t>(plan.tiles) * record_bytes;
  std::vector<std::uint64_t> record_tile(extents.size(), 1);
  record_tile[0] = record_bytes;
  legate::LogicalStore records =
      runtime->create_store(legate::Shape{record_extents}, legate::uint8());

  auto task = tiled_task(lib, LoadReportTask::TASK_CONFIG.task_id(), tiling);
  task.add_output(array.data().partition_by_tiling(tiling.tile_shape));
  task.add_output(records.partition_by_tiling(record_tile));
  task.add_scalar_arg(legate::Scalar{tiles.bytes});
  task.add_scalar_arg(legate::Scalar{tiles.offsets});
  task.add_scalar_arg(legate::Scalar{plan.tile_rows});
  runtime->submit(std::move(task));  // does not wait: the task cannot throw
  return {std::move(records), record_bytes};
}

Status load_failure(const legate::LogicalStore& records, std::uint64_t record_bytes) {
  // Mapping the records waits for the launch that wrote them, and for nothing else.
  const legate::PhysicalStore store =
      records.get_physical_store(legate::mapping::StoreTarget::SYSMEM);
  const legate::InlineAllocation alloc = store.get_inline_allocation();
  const auto* bytes = static_cast<const std::byte*>(alloc.ptr);
  const auto n = static_cast<std::size_t>(store.domain().get_volume() / record_bytes);
  for (std::size_t i = 0; i < n; ++i) {
    Status st = decode_record(bytes + i * record_bytes, record_bytes);
    if (!st) return st;
  }
  return Status::ok();
}

}  // namespace detail

}  // namespace shardload
