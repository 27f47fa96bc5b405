#include "shardload/host_save.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/detail/lanes.hpp"
#include "engine/detail/save_job.hpp"
#include "shardload/host_load.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/plan.hpp"
#include "shardload/staged_save.hpp"

namespace shardload {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Status argument_error(const std::string& message) {
  return {ErrorCode::kInvalidArgument, "save: " + message};
}

Status stopped() {
  return Status(ErrorCode::kIo, "save stopped: interrupted").with_errno(ECANCELED);
}

std::string range_text(std::int64_t lo, std::int64_t hi) {
  return "rows [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

std::string rows_text(std::int64_t lo, std::int64_t hi) {
  std::string t = "(";
  t += range_text(lo, hi);
  t += ')';
  return t;
}

// The checks of a save's arguments that host_save and staged_save_begin share, and the spec
// they give, every per-shard field as create_shard_files (or the object layout) expects it.
Result<detail::SaveSpec> save_spec(std::span<const std::int64_t> shape, DType dtype,
                                   const std::string& dest, const SaveOptions& save,
                                   std::int64_t default_shards, std::int64_t* total_bytes) {
  SHARDLOAD_RETURN_IF_ERROR(check_save_dest(dest));
  if (shape.empty()) return argument_error("expected an array of 1 or more dimensions, found 0");
  if (shape[0] < 0) {
    return argument_error("the array's rows are negative: " + std::to_string(shape[0]));
  }
  SHARDLOAD_RETURN_IF_ERROR(check_save_options(save));
  // A dtype the formats write: the one the name parses back to.
  const Result<DType> known = parse_dtype(dtype.name());
  if (!known || *known != dtype) {
    return argument_error("arrays of type " + dtype.name() +
                          " cannot be saved (expected bool, integers, float16/32/64 or complex)");
  }
  detail::SaveSpec spec;
  spec.format = save.format;
  spec.dtype = dtype;
  spec.trailing.assign(shape.begin() + 1, shape.end());
  SHARDLOAD_ASSIGN_OR_RETURN(spec.row_bytes, save_row_bytes(dtype, spec.trailing));
  if (__builtin_mul_overflow(shape[0], static_cast<std::int64_t>(spec.row_bytes), total_bytes)) {
    return argument_error("the array's bytes overflow a byte count");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(spec.offsets, save_shard_offsets(save, shape[0], default_shards));
  const auto n = static_cast<std::size_t>(spec.shards());
  spec.data_offset.assign(n, 0);
  spec.chunk_rows.assign(n, 1);
  return spec;
}

// Items 0 .. n-1 on `threads` threads; the Status of the lowest failing one, or ok.
Status run_items(std::int64_t n, std::int64_t threads,
                 const std::function<Status(std::int64_t)>& item) {
  return detail::first_failure_in_lanes(
      static_cast<std::size_t>(n), static_cast<std::size_t>(threads),
      [&](std::size_t, std::size_t i) {
        return interrupt_requested() ? stopped() : item(static_cast<std::int64_t>(i));
      });
}

}  // namespace

Result<HostSaveStats> host_save(const std::byte* data, std::span<const std::int64_t> shape,
                                DType dtype, const std::string& dest,
                                const HostSaveOptions& options) {
  const auto t0 = Clock::now();
  const SaveOptions& save = options.save;
  if (options.threads < 0 || options.threads > 4096) {
    return argument_error("threads: expected 0 (one per core) to 4096, found " +
                          std::to_string(options.threads));
  }
  const std::int64_t cores = default_host_threads();
  const std::int64_t threads = options.threads == 0 ? cores : options.threads;
  std::int64_t total_bytes = 0;
  SHARDLOAD_ASSIGN_OR_RETURN(detail::SaveSpec spec,
                             save_spec(shape, dtype, dest, save, cores, &total_bytes));
  if (data == nullptr && total_bytes > 0) return argument_error("the array's data is null");

  HostSaveStats stats;
  stats.shards = spec.shards();
  stats.bytes = static_cast<std::uint64_t>(total_bytes);
  SHARDLOAD_ASSIGN_OR_RETURN(const detail::SaveJob job,
                             detail::SaveJob::begin(dest, save, std::move(spec)));
  // The keys the units' writers finished, each as its upload was answered: the publish checks
  // them, and a failed save's clean-up deletes them alone, each while it is still the save's.
  // And the keys whose uploads sent every byte and got no answer, which the store may have
  // made all the same: the clean-up deletes them where they are provably those bytes.
  std::mutex own_mu;
  std::vector<WrittenKey> own;
  std::vector<WrittenKey> begun;
  detail::SaveJobGuard guard{job, &own, &begun};
  const auto t1 = Clock::now();
  stats.prepare_s = seconds(t0, t1);

  // Several tiles per thread where any thread may write any rows, so that an interrupt is seen
  // between tiles soon.
  SHARDLOAD_ASSIGN_OR_RETURN(const detail::SaveUnits units, job.units(threads, 4));
  const auto n = static_cast<std::int64_t>(units.list.size());
  stats.tiles = n;
  stats.threads = std::max<std::int64_t>(1, std::min(threads, n));
  const Status written = run_items(n, stats.threads, [&](std::int64_t i) {
    const detail::SaveUnit& u = units.list[static_cast<std::size_t>(i)];
    std::vector<WrittenKey> keys;
    std::vector<WrittenKey> sent;
    const Status st =
        job.write(u, data + static_cast<std::size_t>(u.lo) * job.spec().row_bytes, &keys, &sent);
    {
      const std::lock_guard lock(own_mu);
      own.insert(own.end(), keys.begin(), keys.end());
      begun.insert(begun.end(), sent.begin(), sent.end());
    }
    if (st) return st;
    const std::string what =
        u.shard >= 0 ? "save shard " + std::to_string(u.shard) : "save tile " + std::to_string(i);
    return st.with_context(what + " " + rows_text(u.lo, u.hi));
  });
  if (!written) {
    guard.done = true;
    return job.failed(written.with_context("saving to " + dest), &own, &begun);
  }
  const auto t2 = Clock::now();
  stats.write_s = seconds(t1, t2);

  if (save.before_commit) save.before_commit();
  bool published = false;
  const Status committed = job.publish(&own, &published);
  guard.done = true;
  if (!committed) {
    const Status st = committed.with_context("saving to " + dest);
    // What is at dest once published is the new dataset, not the save's to remove.
    return published ? st : job.failed(st, &own, &begun);
  }
  stats.commit_s = seconds(t2, Clock::now());
  return stats;
}

namespace {

// The staging path of a StagedSave names a staging directory (make_staging_dir's marker in
// its last segment), so that a damaged one cannot make write or abort touch another tree.
Result<detail::SaveJob> staged_job(const StagedSave& save) {
  const std::size_t slash = save.staging.rfind('/');
  const std::string name =
      slash == std::string::npos ? save.staging : save.staging.substr(slash + 1);
  if (name.find(".shardload-tmp-") == std::string::npos) {
    return argument_error("expected the staging directory of a staged save, found '" +
                          save.staging + "'");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(detail::SaveSpec spec, detail::SaveSpec::decode(save.spec));
  SaveOptions o;
  o.format = spec.format;
  o.overwrite = save.overwrite;
  o.manifest = save.manifest;
  o.checksum = save.checksum;
  return detail::SaveJob::staged(save.dest, save.physical, save.staging,
                                 {save.staging_dev, save.staging_ino}, std::move(spec), o);
}

}  // namespace

Result<StagedSave> staged_save_begin(std::span<const std::int64_t> shape, DType dtype,
                                     const std::string& dest, const SaveOptions& options) {
  std::int64_t total_bytes = 0;
  SHARDLOAD_ASSIGN_OR_RETURN(
      detail::SaveSpec spec,
      save_spec(shape, dtype, dest, options, default_host_threads(), &total_bytes));
  SHARDLOAD_ASSIGN_OR_RETURN(
      const detail::SaveJob job,
      detail::SaveJob::begin(dest, options, std::move(spec), /*several_processes=*/true));
  StagedSave s;
  s.dest = dest;
  s.physical = job.physical();
  s.staging = job.staging();
  std::tie(s.staging_dev, s.staging_ino) = job.identity();
  s.spec = job.spec().encode();
  s.overwrite = options.overwrite;
  s.manifest = options.manifest;
  s.checksum = options.checksum;
  return s;
}

Status staged_save_write(const StagedSave& save, std::int64_t lo, std::int64_t hi, DType dtype,
                         std::span<const std::int64_t> trailing, const std::byte* data,
                         std::size_t bytes) {
  SHARDLOAD_ASSIGN_OR_RETURN(const detail::SaveJob job, staged_job(save));
  const detail::SaveSpec& spec = job.spec();
  const std::int64_t rows = spec.offsets.back();
  if (lo < 0 || hi < lo || hi > rows) {
    return argument_error(range_text(lo, hi) + ": expected a range within the save's " +
                          std::to_string(rows) + " rows");
  }
  if (dtype != spec.dtype) {
    return argument_error(range_text(lo, hi) + ": expected " + spec.dtype.name() + ", found " +
                          dtype.name());
  }
  if (!std::equal(trailing.begin(), trailing.end(), spec.trailing.begin(), spec.trailing.end())) {
    return argument_error(range_text(lo, hi) + ": expected rows of shape " +
                          shape_string(spec.trailing) + ", found " +
                          shape_string({trailing.begin(), trailing.end()}));
  }
  const auto want = static_cast<std::size_t>(hi - lo) * spec.row_bytes;
  if (bytes != want || (data == nullptr && want > 0)) {
    return argument_error(range_text(lo, hi) + ": expected " + std::to_string(want) +
                          " bytes, found " + std::to_string(bytes));
  }
  if (want == 0) return Status::ok();
  const Status st = job.write({lo, hi, -1}, data, nullptr, nullptr);
  return st ? st : st.with_context("saving to " + save.dest + " " + rows_text(lo, hi));
}

Status staged_save_commit(const StagedSave& save) {
  SHARDLOAD_ASSIGN_OR_RETURN(const detail::SaveJob job, staged_job(save));
  bool published = false;
  const Status st = job.publish(nullptr, &published);
  if (!published) (void)job.abandon(nullptr, &st, nullptr);
  return st ? st : st.with_context("saving to " + save.dest);
}

void staged_save_abort(const StagedSave& save) noexcept {
  const Result<detail::SaveJob> job = staged_job(save);
  if (job) (void)job->abandon(nullptr, nullptr, nullptr);
}

}  // namespace shardload
