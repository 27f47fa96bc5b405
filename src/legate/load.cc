// The launcher and the public C++ API: validate everything, then one manual
// launch whose domain equals the plan's tile count.
#include <realm.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>

#include "base/detail/bytes.hpp"
#include "legate/detail/launch.hpp"
#include "legate/detail/tasks.hpp"
#include "shardload/codec.hpp"
#include "shardload/legate.hpp"
#include "shardload/plan.hpp"

namespace shardload {

namespace {

template <typename T>
T value_or_throw(Result<T> r, const std::string& context) {
  if (!r) throw_status(r.status().with_context(context));
  return std::move(r).value();
}

}  // namespace

Layout discover(const std::string& source, const std::string& pattern,
                const FormatOptions& format) {
  const Source src = value_or_throw(Source::parse(source, pattern), "loading " + source);
  DiscoverOptions opts;
  opts.format = format;
  return value_or_throw(shardload::try_discover(src, opts), "loading " + src.describe());
}

Layout discover(const Source& source, const DiscoverOptions& options) {
  return value_or_throw(shardload::try_discover(source, options), "loading " + source.describe());
}

Layout discover(const std::string& source, const DiscoverOptions& options) {
  return discover(value_or_throw(Source::parse(source), "loading " + source), options);
}

Layout discover(const std::vector<std::string>& paths, const FormatOptions& format) {
  DiscoverOptions opts;
  opts.format = format;
  return value_or_throw(shardload::try_discover(Source::list(paths), opts),
                        "loading " + Source::list(paths).describe());
}

std::optional<DType> detail::find_dtype(const legate::Type& type) {
  using Code = legate::Type::Code;
  switch (type.code()) {
    case Code::BOOL:
      return DType{DTypeKind::kBool, 1};
    case Code::INT8:
      return DType{DTypeKind::kInt, 1};
    case Code::INT16:
      return DType{DTypeKind::kInt, 2};
    case Code::INT32:
      return DType{DTypeKind::kInt, 4};
    case Code::INT64:
      return DType{DTypeKind::kInt, 8};
    case Code::UINT8:
      return DType{DTypeKind::kUInt, 1};
    case Code::UINT16:
      return DType{DTypeKind::kUInt, 2};
    case Code::UINT32:
      return DType{DTypeKind::kUInt, 4};
    case Code::UINT64:
      return DType{DTypeKind::kUInt, 8};
    case Code::FLOAT16:
      return DType{DTypeKind::kFloat, 2};
    case Code::FLOAT32:
      return DType{DTypeKind::kFloat, 4};
    case Code::FLOAT64:
      return DType{DTypeKind::kFloat, 8};
    case Code::COMPLEX64:
      return DType{DTypeKind::kComplex, 8};
    case Code::COMPLEX128:
      return DType{DTypeKind::kComplex, 16};
    default:
      return std::nullopt;
  }
}

DType dtype_of(const legate::Type& type) {
  if (auto d = detail::find_dtype(type)) return *d;
  throw_status({ErrorCode::kInvalidArgument,
                "Legate type " + type.to_string() +
                    " has no shardload dtype (expected bool, integers, float16/32/64 or "
                    "complex64/128)"});
}

legate::Type legate_type(DType d) {
  switch (d.kind) {
    case DTypeKind::kBool:
      return legate::bool_();
    case DTypeKind::kInt:
      switch (d.size) {
        case 1:
          return legate::int8();
        case 2:
          return legate::int16();
        case 4:
          return legate::int32();
        default:
          return legate::int64();
      }
    case DTypeKind::kUInt:
      switch (d.size) {
        case 1:
          return legate::uint8();
        case 2:
          return legate::uint16();
        case 4:
          return legate::uint32();
        default:
          return legate::uint64();
      }
    case DTypeKind::kFloat:
      switch (d.size) {
        case 2:
          return legate::float16();
        case 4:
          return legate::float32();
        default:
          return legate::float64();
      }
    case DTypeKind::kComplex:
      return d.size == 8 ? legate::complex64() : legate::complex128();
  }
  throw LayoutError("unsupported dtype " + d.name());
}

void check_legate_dims(std::span<const std::int64_t> shape, const std::string& what,
                       ErrorSite site) {
  if (shape.size() <= kMaxLegateDims) return;
  const bool write = site == ErrorSite::kWrite;
  std::string message =
      what + " has " + std::to_string(shape.size()) + " dimensions, shape " +
      shape_string({shape.begin(), shape.end()}) + ", and a Legate array has at most " +
      std::to_string(kMaxLegateDims) + " (LEGATE_MAX_DIM of this Legate build); " +
      (write ? "reshape it to fewer dimensions to save it"
             : "it cannot be loaded through Legate, but it can be read on the host (Python "
               "Layout.read, C++ fill_rows)");
  throw_status({write ? ErrorCode::kInvalidArgument : ErrorCode::kLayout, std::move(message)},
               site);
}

void check_legate_dims(const legate::LogicalArray& array, const std::string& what) {
  const auto extents = array.extents();
  const std::vector<std::int64_t> shape(extents.begin(), extents.end());
  check_legate_dims(shape, what, ErrorSite::kWrite);
}

void check_legate_dims(const Layout& layout) {
  std::string what = "the dataset";
  if (!layout.shards.empty()) {
    what += " of " + path_for_message(layout.shards[0].path);
    if (layout.shards.size() > 1)
      what += " and " + std::to_string(layout.shards.size() - 1) + " more shard" +
              (layout.shards.size() > 2 ? "s" : "");
  }
  check_legate_dims(layout.shape(), what);
}

legate::Library library() {
  auto* runtime = legate::Runtime::get_runtime();
  // Registration must happen once per process (on every rank); the first
  // caller creates the library and registers the variants.
  static std::mutex mu;
  const std::lock_guard<std::mutex> lock(mu);
  bool created = false;
  auto lib = runtime->find_or_create_library(detail::kLibraryName, legate::ResourceConfig{},
                                             nullptr, {}, &created);
  if (created) {
    detail::LoadTask::register_variants(lib);
    detail::LoadReportTask::register_variants(lib);
    detail::VerifyManifestTask::register_variants(lib);
    detail::DiscoverTask::register_variants(lib);
    detail::SaveTask::register_variants(lib);
    detail::SavePrepareTask::register_variants(lib);
    detail::SaveCommitTask::register_variants(lib);
  }
  return lib;
}

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

}  // namespace detail

legate::LogicalArray load(const Layout& layout, const LoadOptions& options, LoadInfo* info) {
  using legate::mapping::TaskTarget;
  if (options.overdecompose < 1) {
    throw LayoutError("overdecompose (K) must be at least 1, found " +
                      std::to_string(options.overdecompose));
  }
  check_legate_dims(layout);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  auto* runtime = legate::Runtime::get_runtime();
  const legate::Library lib = library();
  const auto machine = runtime->get_machine();
  LoadInfo li;
  TaskTarget chosen = TaskTarget::CPU;
  for (const auto& [target, name] :
       {std::pair{TaskTarget::GPU, "GPU"}, std::pair{TaskTarget::OMP, "OMP"},
        std::pair{TaskTarget::CPU, "CPU"}}) {
    if (machine.count(target) > 0) {
      li.target = name;
      li.processors = machine.count(target);
      chosen = target;
      break;
    }
  }
  if (li.processors == 0) throw LayoutError("the machine has no processors to load on");
  const ReadPlan plan =
      value_or_throw(plan_layout(layout, li.processors, options.overdecompose), "planning");
  li.tile_rows = plan.tile_rows;
  li.tiles = plan.tiles;
  if (info != nullptr) *info = li;
  detail::check_memory(layout, plan, chosen, li.processors, 1);

  std::vector<std::uint64_t> extents;
  for (const auto d : layout.shape()) extents.push_back(static_cast<std::uint64_t>(d));
  legate::LogicalArray array =
      runtime->create_array(legate::Shape{extents}, legate_type(layout.dtype));
  if (plan.tiles == 0 || layout.row_bytes == 0) {  // nothing to read
    if (info != nullptr) info->launch_seconds = seconds(t0, Clock::now());
    return array;
  }

  std::vector<std::uint64_t> tile_shape = extents;
  tile_shape[0] = static_cast<std::uint64_t>(plan.tile_rows);
  std::vector<std::uint64_t> launch(extents.size(), 1);
  launch[0] = static_cast<std::uint64_t>(plan.tiles);
  auto partition = array.data().partition_by_tiling(tile_shape);

  auto task = runtime->create_task(lib, detail::LoadTask::TASK_CONFIG.task_id(),
                                   legate::tuple<std::uint64_t>{launch});
  task.add_output(partition);
  task.add_scalar_arg(legate::Scalar{encode_layout(layout)});
  task.add_scalar_arg(legate::Scalar{li.processors});
  task.add_scalar_arg(legate::Scalar{options.overdecompose});
  task.add_scalar_arg(legate::Scalar{plan.tile_rows});
  const auto t1 = Clock::now();
  if (info != nullptr) info->launch_seconds = seconds(t0, t1);
  try {
    runtime->submit(std::move(task));
    if (info != nullptr) info->fill_seconds = seconds(t1, Clock::now());
  } catch (const legate::TaskException& e) {
    // Whatever a point finds while reading (I/O failure, changed file,
    // damaged chunk, a null) is a read error; only bad task arguments are not.
    throw_status(detail::status_from_task_error(e), ErrorSite::kRead);
  }
  return array;
}

void check_load_memory(std::int64_t rows, std::uint64_t row_bytes, const std::string& target,
                       std::int64_t processors, std::int64_t overdecompose) {
  using legate::mapping::TaskTarget;
  Layout shape;  // only what the check reads: the rows and their size
  shape.row_bytes = row_bytes;
  shape.offsets = {0, rows};
  const ReadPlan plan =
      value_or_throw(make_plan(shape.offsets, processors, overdecompose), "planning");
  detail::check_memory(shape, plan, target == "GPU" ? TaskTarget::GPU : TaskTarget::CPU, processors,
                       1);
}

}  // namespace shardload
