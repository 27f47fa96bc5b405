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
    detail::LoadReportTask::register_variants(lib);
    detail::VerifyManifestTask::register_variants(lib);
    detail::DiscoverTask::register_variants(lib);
    detail::WriteManifestTask::register_variants(lib);
    detail::SaveTask::register_variants(lib);
    detail::SavePrepareTask::register_variants(lib);
    detail::SaveCommitTask::register_variants(lib);
  }
  return lib;
}

legate::LogicalArray load(const Layout& layout, const LoadOptions& options, LoadInfo* info) {
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
  const detail::Target target = detail::choose_target();
  LoadInfo li;
  li.target = target.name;
  li.processors = target.processors;
  const ReadPlan plan =
      value_or_throw(plan_layout(layout, li.processors, options.overdecompose), "planning");
  li.tile_rows = plan.tile_rows;
  li.tiles = plan.tiles;
  if (info != nullptr) *info = li;
  detail::check_memory(layout, plan, target.kind, li.processors, 1);

  std::vector<std::uint64_t> extents;
  for (const auto d : layout.shape()) extents.push_back(static_cast<std::uint64_t>(d));
  legate::LogicalArray array =
      runtime->create_array(legate::Shape{extents}, legate_type(layout.dtype));
  if (plan.tiles == 0 || layout.row_bytes == 0) {  // nothing to read
    if (info != nullptr) info->launch_seconds = seconds(t0, Clock::now());
    return array;
  }

  const TileEncoding tiles = value_or_throw(encode_tiles(layout, plan), "planning");
  const auto t1 = Clock::now();
  if (info != nullptr) info->launch_seconds = seconds(t0, t1);
  const std::uint64_t retries_before = remote_retries();
  const detail::LoadLaunch launch = detail::submit_load(lib, array, layout, plan, tiles);
  // Reading the records waits for every tile, as a launch that throws would at submission; the
  // lowest failing tile is reported, the same on every rank. Whatever a point finds while
  // reading (I/O failure, changed file, damaged chunk, a null) is a read error; only bad task
  // arguments are not.
  const Status failure = detail::load_failure(launch.records, launch.record_bytes);
  if (!failure) throw_status(failure, ErrorSite::kRead);
  if (info != nullptr) {
    info->fill_seconds = seconds(t1, Clock::now());
    info->remote_retries = remote_retries() - retries_before;
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
