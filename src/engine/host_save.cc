#include "shardload/host_save.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/detail/lanes.hpp"
#include "engine/detail/save_files.hpp"
#include "engine/detail/save_remote.hpp"
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

// Where a local save stages: `dest` resolved once to the directory it is in
// (physical_destination), checked for the overwrite rules, and its staging directory made with
// the shard files; errors with "saving to DEST" in front.
struct LocalStaging {
  std::string physical;
  std::string path;
};

Result<LocalStaging> begin_staging(const std::string& dest, bool overwrite,
                                   detail::SaveSpec* spec) {
  const auto check = [&](const Status& st) {
    return st ? st : st.with_context("saving to " + dest);
  };
  LocalStaging s;
  Result<std::string> physical = detail::physical_destination(dest);
  if (!physical) return check(physical.status());
  s.physical = std::move(*physical);
  SHARDLOAD_RETURN_IF_ERROR(check(detail::check_destination(s.physical, overwrite)));
  Result<std::string> staging = detail::prepare_staging(s.physical, spec);
  if (!staging) return check(staging.status());
  s.path = std::move(*staging);
  return s;
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

// To object storage (shardload/save.hpp): the listing and the shards without bytes, then one
// upload per shard with bytes, then the metadata objects and the manifest last.
Status save_to_object_store(const std::byte* data, const std::string& dest,
                            const HostSaveOptions& options, std::int64_t threads,
                            detail::SaveSpec* spec, HostSaveStats* stats) {
  const SaveOptions& save = options.save;
  const auto t0 = Clock::now();
  Result<detail::RemoteDest> prepared = detail::prepare_remote_save(dest, save, *spec);
  if (!prepared) {
    // Argument errors say "save: ..." themselves; the destination's get its name in front.
    if (prepared.status().code() == ErrorCode::kInvalidArgument) return prepared.status();
    return prepared.status().with_context("saving to " + dest);
  }
  const detail::RemoteDest& d = *prepared;
  const auto t1 = Clock::now();
  stats->prepare_s = seconds(t0, t1);
  // The keys the uploads finished, each as its upload was answered: the commit checks them,
  // and a failed save's clean-up deletes them alone, each while it is still the save's.
  // And the keys whose uploads sent every byte and got no answer, which the store may have
  // made all the same: the clean-up deletes them where they are provably those bytes.
  std::mutex own_mu;
  std::vector<WrittenKey> own;
  std::vector<WrittenKey> begun;
  struct Abandon {
    const detail::RemoteDest& d;
    const detail::SaveSpec& spec;
    const SaveOptions& options;
    const std::vector<WrittenKey>& own;
    const std::vector<WrittenKey>& begun;
    bool committed = false;
    // The clean-up now, once: what it left that is not the save's, added to `st`.
    Status failed(const Status& st) {
      committed = true;
      const std::string left = detail::abandon_remote_save(d, spec, options, &own, &st, &begun);
      if (left.empty()) return st;
      return Status(st.code(), st.message() + "; " + left)
          .with_path(st.path())
          .with_errno(st.sys_errno())
          .with_stored_untold(st.stored_untold());
    }
    ~Abandon() {
      if (!committed) (void)detail::abandon_remote_save(d, spec, options, &own, nullptr, &begun);
    }
  } abandon{d, *spec, save, own, begun};

  std::vector<std::int64_t> uploads;
  for (std::int64_t s = 0; s < spec->shards(); ++s) {
    if (detail::task_uploads_shard(*spec, s)) uploads.push_back(s);
  }
  stats->tiles = static_cast<std::int64_t>(uploads.size());
  stats->threads = std::max<std::int64_t>(
      1, std::min<std::int64_t>(threads, static_cast<std::int64_t>(uploads.size())));
  const Status written =
      run_items(static_cast<std::int64_t>(uploads.size()), stats->threads, [&](std::int64_t i) {
        const std::int64_t s = uploads[static_cast<std::size_t>(i)];
        const std::int64_t lo = spec->offsets[static_cast<std::size_t>(s)];
        const std::int64_t hi = spec->offsets[static_cast<std::size_t>(s) + 1];
        auto upload = detail::open_shard_upload(d.dir_url(), *spec, s);
        Status st = upload.status();
        if (st)
          st = (*upload)->append(data + static_cast<std::size_t>(lo) * spec->row_bytes, hi - lo);
        if (st) st = (*upload)->commit();
        if (upload) {
          const std::lock_guard lock(own_mu);
          own.insert(own.end(), (*upload)->written().begin(), (*upload)->written().end());
          begun.insert(begun.end(), (*upload)->begun().begin(), (*upload)->begun().end());
        }
        return st ? st
                  : st.with_context("save shard " + std::to_string(s) + " " + rows_text(lo, hi));
      });
  if (!written) return abandon.failed(written.with_context("saving to " + dest));
  const auto t2 = Clock::now();
  stats->write_s = seconds(t1, t2);
  if (save.before_commit) save.before_commit();
  const Status finished = detail::finish_remote_save(d, *spec, save, &own);
  if (!finished) return abandon.failed(finished.with_context("saving to " + dest));
  abandon.committed = true;
  stats->commit_s = seconds(t2, Clock::now());
  return Status::ok();
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
  const std::int64_t rows = shape[0];

  HostSaveStats stats;
  stats.shards = spec.shards();
  stats.bytes = static_cast<std::uint64_t>(total_bytes);
  if (detail::is_object_dest(dest)) {
    SHARDLOAD_RETURN_IF_ERROR(save_to_object_store(data, dest, options, threads, &spec, &stats));
    return stats;
  }

  // The checks, the commit and any clean-up in the directory `dest` was in when the save
  // began (physical_destination).
  const auto check = [&](const Status& st) {
    return st ? st : st.with_context("saving to " + dest);
  };
  SHARDLOAD_ASSIGN_OR_RETURN(const LocalStaging staged, begin_staging(dest, save.overwrite, &spec));
  const std::string& physical = staged.physical;
  const std::string& staging = staged.path;
  detail::StagingGuard guard{staging};
  const auto t1 = Clock::now();
  stats.prepare_s = seconds(t0, t1);

  if (rows > 0 && spec.row_bytes > 0) {
    // Several tiles per thread, so that an interrupt is seen between tiles soon.
    SHARDLOAD_ASSIGN_OR_RETURN(const ReadPlan plan, make_plan(spec.offsets, threads, 4));
    stats.tiles = plan.tiles;
    stats.threads = std::max<std::int64_t>(1, std::min(threads, plan.tiles));
    const Status written = run_items(plan.tiles, stats.threads, [&](std::int64_t t) {
      const std::int64_t lo = plan.tile_begin(t);
      const std::int64_t hi = plan.tile_end(t);
      const Status st = detail::write_rows(staging, spec, lo, hi,
                                           data + static_cast<std::size_t>(lo) * spec.row_bytes);
      return st ? st : st.with_context("save tile " + std::to_string(t) + " " + rows_text(lo, hi));
    });
    SHARDLOAD_RETURN_IF_ERROR(check(written));
  }
  const auto t2 = Clock::now();
  stats.write_s = seconds(t1, t2);

  if (save.before_commit) save.before_commit();
  bool published = false;
  const Status committed = detail::publish_staging(staging, physical, spec, save, &published);
  guard.keep = published;  // what is left at the staging path then is not ours to remove
  SHARDLOAD_RETURN_IF_ERROR(check(committed));
  stats.commit_s = seconds(t2, Clock::now());
  return stats;
}

namespace {

// The staging path of a StagedSave names a staging directory (make_staging_dir's marker in
// its last segment), so that a damaged one cannot make write or abort touch another tree.
Status check_staged(const StagedSave& save, detail::SaveSpec* spec) {
  const std::size_t slash = save.staging.rfind('/');
  const std::string name =
      slash == std::string::npos ? save.staging : save.staging.substr(slash + 1);
  if (name.find(".shardload-tmp-") == std::string::npos) {
    return argument_error("expected the staging directory of a staged save, found '" +
                          save.staging + "'");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(*spec, detail::SaveSpec::decode(save.spec));
  return Status::ok();
}

}  // namespace

Result<StagedSave> staged_save_begin(std::span<const std::int64_t> shape, DType dtype,
                                     const std::string& dest, const SaveOptions& options) {
  std::int64_t total_bytes = 0;
  SHARDLOAD_ASSIGN_OR_RETURN(
      detail::SaveSpec spec,
      save_spec(shape, dtype, dest, options, default_host_threads(), &total_bytes));
  if (detail::is_object_dest(dest)) {
    return argument_error("a save that several processes fill writes to a directory only, found '" +
                          dest +
                          "' (for object storage save the computed array with host_save: "
                          "shardload.numpy.save)");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(LocalStaging staged, begin_staging(dest, options.overwrite, &spec));
  StagedSave s;
  s.dest = dest;
  s.physical = std::move(staged.physical);
  s.staging = std::move(staged.path);
  std::tie(s.staging_dev, s.staging_ino) = detail::directory_identity(s.staging);
  s.spec = spec.encode();
  s.overwrite = options.overwrite;
  s.manifest = options.manifest;
  s.checksum = options.checksum;
  return s;
}

Status staged_save_write(const StagedSave& save, std::int64_t lo, std::int64_t hi, DType dtype,
                         std::span<const std::int64_t> trailing, const std::byte* data,
                         std::size_t bytes) {
  detail::SaveSpec spec;
  SHARDLOAD_RETURN_IF_ERROR(check_staged(save, &spec));
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
  const Status st = detail::write_rows(save.staging, spec, lo, hi, data);
  return st ? st : st.with_context("saving to " + save.dest + " " + rows_text(lo, hi));
}

Status staged_save_commit(const StagedSave& save) {
  detail::SaveSpec spec;
  SHARDLOAD_RETURN_IF_ERROR(check_staged(save, &spec));
  SaveOptions o;
  o.format = spec.format;
  o.overwrite = save.overwrite;
  o.manifest = save.manifest;
  o.checksum = save.checksum;
  bool published = false;
  const Status st = detail::publish_staging(save.staging, save.physical, spec, o, &published);
  if (!published) staged_save_abort(save);
  return st ? st : st.with_context("saving to " + save.dest);
}

void staged_save_abort(const StagedSave& save) noexcept {
  detail::SaveSpec spec;
  if (!check_staged(save, &spec) || save.staging_ino == 0) return;
  detail::remove_tree_if_same(save.staging, {save.staging_dev, save.staging_ino});
}

}  // namespace shardload
