// The synth task: each point fills its tile of a new array with synth_fill's values for the
// same global elements (C-order element index = row x row elements + ...).
#include <legate.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "engine/detail/strided.hpp"
#include "legate/detail/task_ids.hpp"
#include "shardload/legate.hpp"
#include "shardload/synth.hpp"
#include "shardload/synth_array.hpp"

namespace shardload {

namespace {

// Output 0: the array tiled along axis 0. Scalars: 0 dtype kind, 1 dtype size, 2 seed.
class SynthTask : public legate::LegateTask<SynthTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{detail::kDemoSynthTask}}.with_signature(
          legate::TaskSignature{}.outputs(1).scalars(3));

  static void cpu_variant(legate::TaskContext context);
};

}  // namespace

void SynthTask::cpu_variant(legate::TaskContext context) {
  legate::PhysicalStore out = context.output(0).data();
  DType dtype;
  dtype.kind = static_cast<DTypeKind>(context.scalar(0).value<std::int32_t>());
  dtype.size = static_cast<std::uint8_t>(context.scalar(1).value<std::int32_t>());
  const auto seed = context.scalar(2).value<std::uint64_t>();
  const legate::Domain dom = out.domain();
  if (dom.empty()) return;
  std::vector<std::int64_t> extents;
  std::uint64_t row_elements = 1;
  for (int d = 0; d < dom.get_dim(); ++d) {
    extents.push_back(dom.hi()[d] - dom.lo()[d] + 1);
    if (d > 0) row_elements *= static_cast<std::uint64_t>(extents.back());
  }
  const legate::InlineAllocation alloc = out.get_inline_allocation();
  auto* base = static_cast<std::byte*>(alloc.ptr);
  const std::size_t item = dtype.size;
  const auto first_row = static_cast<std::uint64_t>(dom.lo()[0]);
  const auto rows = static_cast<std::uint64_t>(extents[0]);
  if (detail::is_dense_c_order(extents, alloc.strides, item)) {
    synth_fill(dtype, seed, first_row * row_elements, rows * row_elements, base);
    return;
  }
  // Not dense: one row at a time through a buffer, scattered by the strides.
  std::vector<std::byte> row(row_elements * item);
  const detail::RunCopy copy = [](std::byte* d, const std::byte* s, std::size_t n) {
    std::memcpy(d, s, n);
    return true;
  };
  for (std::uint64_t r = 0; r < rows; ++r) {
    synth_fill(dtype, seed, (first_row + r) * row_elements, row_elements, row.data());
    detail::scatter_rows(row.data(), 1, extents, alloc.strides, item,
                         base + static_cast<std::size_t>(r) * alloc.strides[0], copy);
  }
}

legate::LogicalArray make_synth_array(DType dtype, const std::vector<std::int64_t>& shape,
                                      std::uint64_t seed) {
  auto* runtime = legate::Runtime::get_runtime();
  legate::Library lib = library();
  static std::once_flag once;
  std::call_once(once, [&] { SynthTask::register_variants(lib); });
  std::vector<std::uint64_t> extents(shape.begin(), shape.end());
  auto array = runtime->create_array(legate::Shape{extents}, legate_type(dtype));
  std::uint64_t row_elements = 1;
  for (std::size_t d = 1; d < extents.size(); ++d) row_elements *= extents[d];
  if (extents[0] == 0 || row_elements == 0) return array;
  const auto machine = runtime->get_machine().only(legate::mapping::TaskTarget::CPU);
  const std::uint64_t parts = std::max<std::uint64_t>(1, machine.count());
  std::vector<std::uint64_t> tile = extents;
  tile[0] = std::max<std::uint64_t>(1, (extents[0] + parts - 1) / parts);
  std::vector<std::uint64_t> launch(extents.size(), 1);
  launch[0] = (extents[0] + tile[0] - 1) / tile[0];
  const legate::Scope scope{machine};
  auto task = runtime->create_task(lib, SynthTask::TASK_CONFIG.task_id(),
                                   legate::tuple<std::uint64_t>{launch});
  task.add_output(array.data().partition_by_tiling(tile));
  task.add_scalar_arg(legate::Scalar{static_cast<std::int32_t>(dtype.kind)});
  task.add_scalar_arg(legate::Scalar{static_cast<std::int32_t>(dtype.size)});
  task.add_scalar_arg(legate::Scalar{seed});
  runtime->submit(std::move(task));
  return array;
}

}  // namespace shardload
