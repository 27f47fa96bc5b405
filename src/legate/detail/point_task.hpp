// A one-point task whose result is bytes: the point writes them into an unbound 1-D uint8 store
// that every rank then maps, so work done once (on the rank that runs the point) gives every
// rank the same answer. Used by discover_once and by the save's once-per-job steps.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <legate.h>

#include "shardload/legate.hpp"

namespace shardload::detail {

// In the point: `bytes` become the task's output 0.
inline void write_point_result(legate::TaskContext& context, std::span<const std::uint8_t> bytes) {
  const legate::PhysicalStore store = context.output(0).data();
  auto buf = store.create_output_buffer<std::uint8_t, 1>(
      legate::Point<1>(static_cast<legate::coord_t>(bytes.size())), true);
  if (!bytes.empty()) std::memcpy(buf.ptr(legate::Point<1>(0)), bytes.data(), bytes.size());
}

// On every rank: runs task `id` of the library on one point with `request` as its scalar 0 and
// returns the bytes it wrote. A legate::TaskException the point threw propagates.
inline std::vector<std::uint8_t> run_point_task(legate::LocalTaskID id,
                                                const std::vector<std::uint8_t>& request) {
  auto* runtime = legate::Runtime::get_runtime();
  auto out = runtime->create_store(legate::uint8(), 1);  // unbound: the point sizes it
  auto task = runtime->create_task(library(), id, legate::tuple<std::uint64_t>{1});
  task.add_output(out);
  task.add_scalar_arg(legate::Scalar{request});
  runtime->submit(std::move(task));
  const auto phys = out.get_physical_store();
  const legate::Rect<1> rect = phys.shape<1>();
  const auto size = static_cast<std::size_t>(rect.hi[0] - rect.lo[0] + 1);
  const legate::InlineAllocation a = phys.get_inline_allocation();
  std::vector<std::uint8_t> bytes(size);
  if (size > 0 && a.strides[0] == 1) {
    std::memcpy(bytes.data(), a.ptr, size);
  } else {
    for (std::size_t i = 0; i < size; ++i) {
      bytes[i] = *(static_cast<const std::uint8_t*>(a.ptr) + i * a.strides[0]);
    }
  }
  return bytes;
}

}  // namespace shardload::detail
