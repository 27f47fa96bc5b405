// The verify task: each point compares its tile of a loaded array with the
// values synth_fill computes for the same global elements, so a demo dataset
// is checked in parallel and slice by slice, never whole in one process.
#include <legate.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/detail/strided.hpp"
#include "legate/detail/launch.hpp"
#include "legate/detail/task_ids.hpp"
#include "shardload/synth.hpp"
#include "shardload/verify.hpp"

namespace shardload {

namespace {

// Input 0: a loaded array tiled along axis 0; output 0: one int64 per tile,
// the count of elements that differ from synth_fill(seed). Scalars: 0 dtype
// kind, 1 dtype size, 2 seed, 3 the written dataset's row that is the array's
// row 0. Each point finds its rows from its piece.
class VerifyTask : public legate::LegateTask<VerifyTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{detail::kDemoVerifyTask}}.with_signature(
          legate::TaskSignature{}.inputs(1).outputs(1).scalars(4));

  static void cpu_variant(legate::TaskContext context);
};

}  // namespace

void VerifyTask::cpu_variant(legate::TaskContext context) {
  legate::PhysicalStore in = context.input(0).data();
  DType dtype;
  dtype.kind = static_cast<DTypeKind>(context.scalar(0).value<std::int32_t>());
  dtype.size = static_cast<std::uint8_t>(context.scalar(1).value<std::int32_t>());
  const auto seed = context.scalar(2).value<std::uint64_t>();
  const auto first_row = context.scalar(3).value<std::int64_t>();
  std::int64_t mismatches = 0;

  const legate::Domain dom = in.domain();
  if (!dom.empty()) {
    const int dim = dom.get_dim();
    std::vector<std::int64_t> extents;
    std::uint64_t row_elements = 1;
    for (int d = 0; d < dim; ++d) {
      extents.push_back(dom.hi()[d] - dom.lo()[d] + 1);
      if (d > 0) row_elements *= static_cast<std::uint64_t>(extents.back());
    }
    const legate::InlineAllocation alloc = in.get_inline_allocation();
    const auto* base = static_cast<const std::byte*>(alloc.ptr);
    const std::size_t item = dtype.size;
    // Expected values in bounded chunks of rows; actual ones read through the
    // strides, so any local layout is compared correctly.
    const std::int64_t rows = extents[0];
    const std::int64_t chunk = std::max<std::int64_t>(
        1, static_cast<std::int64_t>((std::size_t{1} << 20) /
                                     std::max<std::uint64_t>(row_elements, 1)));
    std::vector<std::byte> want(static_cast<std::size_t>(chunk * row_elements) * item);
    std::vector<std::byte> got(want.size());
    const bool dense = detail::is_dense_c_order(extents, alloc.strides, item);
    for (std::int64_t a = 0; a < rows; a += chunk) {
      const std::int64_t n = std::min(chunk, rows - a);
      const std::size_t count = static_cast<std::size_t>(n) * row_elements;
      const std::uint64_t first =
          static_cast<std::uint64_t>(first_row + dom.lo()[0] + a) * row_elements;
      synth_fill(dtype, seed, first, count, want.data());
      const std::byte* actual = base + static_cast<std::size_t>(a) * alloc.strides[0];
      if (!dense) {
        // Gather into a dense buffer: walk the same strides scatter_rows uses.
        std::vector<std::int64_t> idx(extents.size(), 0);
        for (std::size_t e = 0; e < count; ++e) {
          std::size_t rem = e;
          std::size_t off = 0;
          for (std::size_t d = extents.size(); d-- > 0;) {
            const auto ext = static_cast<std::size_t>(d == 0 ? n : extents[d]);
            off += (rem % ext) * alloc.strides[d];
            rem /= ext;
          }
          std::memcpy(got.data() + e * item, actual + off, item);
        }
        actual = got.data();
      }
      for (std::size_t e = 0; e < count; ++e) {
        mismatches += std::memcmp(actual + e * item, want.data() + e * item, item) != 0 ? 1 : 0;
      }
    }
  }
  // The counts store has the launch's shape; this point owns one element.
  const legate::InlineAllocation out = context.output(0).data().get_inline_allocation();
  *static_cast<std::int64_t*>(out.ptr) = mismatches;
}

namespace {

legate::Library demo_library() {
  // The verify task joins the library's tasks once per process (on every rank).
  static std::once_flag once;
  legate::Library lib = library();
  std::call_once(once, [&] { VerifyTask::register_variants(lib); });
  return lib;
}

}  // namespace

// Counts elements that differ from synth_fill(seed), one verify task per tile.
std::int64_t count_synth_mismatches(const legate::LogicalArray& array, const Layout& layout,
                                    const LoadInfo& info, std::uint64_t seed,
                                    std::int64_t first_row) {
  auto* runtime = legate::Runtime::get_runtime();
  if (info.tiles == 0 || layout.row_bytes == 0) return 0;
  std::vector<std::uint64_t> extents;
  for (const auto d : layout.shape()) extents.push_back(static_cast<std::uint64_t>(d));
  const detail::Tiling tiling = detail::tile_axis0(extents, info.tile_rows, info.tiles);
  // One count per point, in a store with the launch's shape (tiles, 1, ...).
  const std::vector<std::uint64_t>& launch = tiling.launch;
  auto counts = runtime->create_store(legate::Shape{launch}, legate::int64());
  auto task = detail::tiled_task(demo_library(), VerifyTask::TASK_CONFIG.task_id(), tiling);
  task.add_input(array.data().partition_by_tiling(tiling.tile_shape));
  task.add_output(counts.partition_by_tiling(std::vector<std::uint64_t>(launch.size(), 1)));
  task.add_scalar_arg(legate::Scalar{static_cast<std::int32_t>(layout.dtype.kind)});
  task.add_scalar_arg(legate::Scalar{static_cast<std::int32_t>(layout.dtype.size)});
  task.add_scalar_arg(legate::Scalar{seed});
  task.add_scalar_arg(legate::Scalar{first_row});
  runtime->submit(std::move(task));
  const auto phys = counts.get_physical_store();
  const legate::InlineAllocation alloc = phys.get_inline_allocation();
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < info.tiles; ++i) {
    total += *reinterpret_cast<const std::int64_t*>(static_cast<const std::byte*>(alloc.ptr) +
                                                    static_cast<std::size_t>(i) * alloc.strides[0]);
  }
  return total;
}

}  // namespace shardload
