// The save launcher: check everything, build the dataset in a hidden staging directory with
// one manual launch of the save task, write the metadata, then rename it into place.
#include <chrono>
#include <cstring>

#include "engine/detail/save_job.hpp"
#include "legate/detail/launch.hpp"
#include "legate/detail/save_once.hpp"
#include "legate/detail/tasks.hpp"
#include "shardload/formats.hpp"
#include "shardload/legate.hpp"
#include "shardload/plan.hpp"
#include "shardload/save.hpp"

namespace shardload {

namespace {

[[noreturn]] void argument_error(const std::string& message) {
  throw_status({ErrorCode::kInvalidArgument, "save: " + message}, ErrorSite::kWrite);
}

DType saved_dtype(const legate::Type& type) {
  if (auto d = detail::find_dtype(type)) return *d;
  argument_error("arrays of type " + type.to_string() +
                 " cannot be saved (expected bool, integers, float16/32/64 or complex)");
}

// The array the save task can take. A store whose storage is one value (a 0-d result such as
// x.sum(), then promoted, broadcast or reshaped into a larger view: cn.atleast_1d(x.sum()),
// cn.broadcast_to(s, shape)) has no region for Legate to tile ("unsupported number of
// dimensions: 0"); every element of such a view is that value, so a new array of the view's
// shape is filled with it (one array of the view's size in Legate's memory, made by a fill).
legate::LogicalArray tileable(const legate::LogicalArray& array) {
  const legate::LogicalStore store = array.data();
  if (!store.has_scalar_storage()) return array;
  auto* runtime = legate::Runtime::get_runtime();
  legate::LogicalArray out = runtime->create_array(legate::Shape{store.extents()}, array.type());
  if (store.volume() == 0) return out;
  const legate::PhysicalStore value = store.get_physical_store();
  const legate::InlineAllocation alloc = value.get_inline_allocation();
  runtime->issue_fill(out, legate::Scalar{array.type(), alloc.ptr, /*copy=*/true});
  return out;
}

// The save task's output 0 (tasks.hpp): one slot of `slot` bytes per point along axis 0, every
// other of the `dims` extents 1.
legate::LogicalStore written_store(std::size_t dims, std::int64_t points, std::size_t slot) {
  std::vector<std::uint64_t> extents(dims, 1);
  extents[0] = static_cast<std::uint64_t>(points) * slot;
  return legate::Runtime::get_runtime()->create_store(legate::Shape{extents}, legate::uint8());
}

std::vector<std::uint64_t> written_tile(std::size_t dims, std::size_t slot) {
  std::vector<std::uint64_t> tile(dims, 1);
  tile[0] = slot;
  return tile;
}

// The keys the points of a launch put in their slots of `store` (waits for the launch): those
// their uploads finished, and those begun without an answer.
void read_written(const legate::LogicalStore& store, std::size_t slot,
                  std::vector<WrittenKey>* keys, std::vector<WrittenKey>* begun) {
  const legate::PhysicalStore phys = store.get_physical_store(legate::mapping::StoreTarget::SYSMEM);
  const legate::InlineAllocation alloc = phys.get_inline_allocation();
  if (!alloc.strides.empty() && alloc.strides[0] != 1) return;
  const auto* bytes = static_cast<const std::byte*>(alloc.ptr);
  const auto n = static_cast<std::size_t>(phys.domain().get_volume()) / slot;
  for (std::size_t i = 0; i < n; ++i) {
    (void)detail::decode_written(bytes + i * slot, slot, keys, begun);
  }
}

// Units of their own sizes (shards of chosen rows to object storage, each uploaded whole by one
// writer): one one-point launch per unit over that unit's slice of the array, on the processor
// whose share of the rows (as an even tiling would give it) holds the unit's first row, so
// that an array tiled evenly is mostly written where it lies. The launches run at once: their
// errors are collected, and the first is thrown once every launch is over, so that nothing is
// still writing when the caller cleans up. Returns the number of launches, or the first
// error; the keys every launch's writer finished go into *own either way, those begun without
// an answer into *begun.
Result<std::int64_t> launch_per_unit(const legate::LogicalArray& array, const detail::SaveJob& job,
                                     const std::vector<std::uint8_t>& job_bytes,
                                     const detail::SaveUnits& units,
                                     const legate::mapping::Machine& machine,
                                     std::vector<WrittenKey>* own, std::vector<WrittenKey>* begun) {
  auto* runtime = legate::Runtime::get_runtime();
  const legate::LogicalStore store = tileable(array).data();
  const auto processors = static_cast<std::uint32_t>(machine.count());
  // An even tiling's rows per processor.
  const std::int64_t share = std::max<std::int64_t>(
      1, (job.spec().offsets.back() + processors - 1) / static_cast<std::int64_t>(processors));
  std::int64_t launches = 0;
  const std::size_t slot = job.written_record_bytes();
  std::vector<legate::LogicalStore> written;  // each launch's keys
  const auto read_all = [&] {
    for (const auto& w : written) read_written(w, slot, own, begun);
  };
  try {
    {
      legate::Scope deferred{legate::ExceptionMode::DEFERRED};
      for (const detail::SaveUnit& u : units.list) {
        const auto p =
            static_cast<std::uint32_t>(std::min<std::int64_t>(processors - 1, u.lo / share));
        const legate::Scope on{machine.slice(p, p + 1)};
        auto task = runtime->create_task(library(), detail::SaveTask::TASK_CONFIG.task_id(),
                                         legate::tuple<std::uint64_t>{1});
        task.add_input(store.slice(0, legate::Slice{u.lo, u.hi}));
        written.push_back(written_store(1, 1, slot));
        task.add_output(written.back());
        task.add_scalar_arg(legate::Scalar{job_bytes});
        task.add_scalar_arg(legate::Scalar{u.hi - u.lo});
        task.add_scalar_arg(legate::Scalar{u.shard});
        runtime->submit(std::move(task));
        ++launches;
      }
    }
    runtime->issue_execution_fence(/*block=*/true);
    runtime->raise_pending_exception();
  } catch (const legate::TaskException& e) {
    // The first error may come before the other launches end: wait for them, and drop the
    // rest of their errors (the first is the one reported).
    runtime->issue_execution_fence(/*block=*/true);
    try {
      runtime->raise_pending_exception();
    } catch (const legate::TaskException&) {
    }
    read_all();
    return detail::status_from_task_error(e);
  }
  read_all();
  return launches;
}

}  // namespace

SaveFormat parse_save_format(const std::string& name) {
  for (const auto& d : formats()) {
    if (d.writer && d.name == name) return d.format;
  }
  argument_error("format: expected " + writable_format_names_text() + ", found '" + name + "'");
}

void save(const legate::LogicalArray& array, const std::string& dest, const SaveOptions& options,
          SaveInfo* info) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const auto t0 = Clock::now();
  // The argument checks in this order, the engine's (shardload/save_options.hpp) among them.
  const auto check_argument = [](const Status& st) {
    if (!st) throw_status(st, ErrorSite::kWrite);
  };
  check_argument(check_save_dest(dest));
  if (array.nullable())
    argument_error("nullable arrays cannot be saved (the formats hold no mask)");
  if (array.nested()) argument_error("nested (struct, list or string) arrays cannot be saved");
  // The upper bound is Legate's, checked below with the other launchers' check.
  if (array.dim() < 1) {
    argument_error("expected an array of 1 or more dimensions, found " +
                   std::to_string(array.dim()));
  }
  check_argument(check_save_options(options));
  check_legate_dims(array, "save: the array");

  detail::SaveSpec spec;
  spec.format = options.format;
  spec.dtype = saved_dtype(array.type());
  const auto extents = array.extents();
  const auto rows = static_cast<std::int64_t>(extents[0]);
  for (std::uint32_t d = 1; d < extents.size(); ++d) {
    spec.trailing.push_back(static_cast<std::int64_t>(extents[d]));
  }
  const Result<std::size_t> row_bytes = save_row_bytes(spec.dtype, spec.trailing);
  check_argument(row_bytes.status());
  spec.row_bytes = *row_bytes;

  auto* runtime = legate::Runtime::get_runtime();
  const legate::Library lib = library();
  // The save task has a CPU variant only: a store elsewhere is brought to system memory by
  // Legate for it (see docs/save.md).
  const auto machine = runtime->get_machine().only(legate::mapping::TaskTarget::CPU);
  const auto processors = static_cast<std::int64_t>(machine.count());
  if (processors < 1) argument_error("the machine has no CPU processors to save on");

  Result<std::vector<std::int64_t>> offsets = save_shard_offsets(options, rows, processors);
  check_argument(offsets.status());
  spec.offsets = std::move(offsets).value();

  SaveInfo si;
  si.target = "CPU";
  si.processors = processors;
  si.shards = spec.shards();
  si.bytes = static_cast<std::uint64_t>(rows) * spec.row_bytes;

  // One rank begins the job (checks the destination, stages it), whose state every rank then
  // uses (save_once.hpp). Errors name dest themselves.
  const Result<detail::SaveJob> begun_job = detail::begin_save_once(dest, options, spec);
  if (!begun_job) throw_status(begun_job.status(), ErrorSite::kWrite);
  const detail::SaveJob& job = *begun_job;
  const std::vector<std::uint8_t> job_bytes = job.encode();
  // The keys the points' writers finished, each as its upload was answered (their slots of the
  // task's output 0): the publish checks them, and a failed save's clean-up deletes them alone,
  // each while it is still the save's. And the keys whose uploads sent every byte and got no
  // answer: the clean-up deletes each where it is provably those bytes.
  std::vector<WrittenKey> own;
  std::vector<WrittenKey> begun;
  detail::SaveJobGuard guard{job, &own, &begun};
  // A failure's clean-up, once, and what it left that is not the save's added to the error.
  const auto failed = [&](const Status& st) {
    guard.done = true;
    throw_status(job.failed(st.with_context("saving to " + dest), &own, &begun), ErrorSite::kWrite);
  };
  const auto t1 = Clock::now();
  si.prepare_seconds = seconds(t0, t1);

  const Result<detail::SaveUnits> units = job.units(processors, 1);
  if (!units) failed(units.status());
  si.tiles = static_cast<std::int64_t>(units->list.size());
  if (!units->list.empty() && units->tile_rows == 0) {
    const Result<std::int64_t> launches =
        launch_per_unit(array, job, job_bytes, *units, machine, &own, &begun);
    if (!launches) failed(launches.status());
    si.tiles = *launches;
  } else if (!units->list.empty()) {
    const auto tiles = static_cast<std::int64_t>(units->list.size());
    const detail::Tiling tiling = detail::tile_axis0(extents, units->tile_rows, tiles);
    const legate::Scope scope{machine};
    auto task = detail::tiled_task(lib, detail::SaveTask::TASK_CONFIG.task_id(), tiling);
    task.add_input(tileable(array).data().partition_by_tiling(tiling.tile_shape));
    const std::size_t slot = job.written_record_bytes();
    const legate::LogicalStore written = written_store(extents.size(), tiles, slot);
    task.add_output(written.partition_by_tiling(written_tile(extents.size(), slot)));
    task.add_scalar_arg(legate::Scalar{job_bytes});
    task.add_scalar_arg(legate::Scalar{units->tile_rows});
    Status st = Status::ok();
    try {
      runtime->submit(std::move(task));
    } catch (const legate::TaskException& e) {
      st = detail::status_from_task_error(e);
    }
    read_written(written, slot, &own, &begun);
    if (!st) failed(st);
  }
  const auto t2 = Clock::now();
  si.write_seconds = seconds(t1, t2);

  // Every rank runs the hook (a pending Ctrl-C aborts before anything is published), then one
  // rank publishes; every rank reads back whether it was published.
  if (options.before_commit) options.before_commit();
  bool published = false;
  const Status committed = detail::publish_save_once(job, own, &published);
  if (!committed) {
    // What is at dest once published is the new dataset, not the save's to remove.
    if (!published) failed(committed);
    guard.done = true;
    throw_status(committed.with_context("saving to " + dest), ErrorSite::kWrite);
  }
  guard.done = true;
  si.commit_seconds = seconds(t2, Clock::now());
  if (info != nullptr) *info = si;
}

}  // namespace shardload
