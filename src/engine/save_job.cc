#include "engine/detail/save_job.hpp"

#include <algorithm>
#include <utility>

#include "base/detail/bytes.hpp"
#include "shardload/location.hpp"
#include "shardload/plan.hpp"

namespace shardload::detail {

namespace {

Status context(const Status& st, const std::string& dest) {
  return st ? st : st.with_context("saving to " + dest);
}

// Keys made at begin, filled at their offsets through sinks reopened on them.
class ReopenedWriter final : public SaveUnitWriter {
 public:
  ReopenedWriter(const SaveJob& job, SaveUnit unit) : job_(job), unit_(unit) {}
  Status append(const std::byte* src, std::int64_t rows) override {
    const std::int64_t lo = unit_.lo + done_;
    if (rows < 0 || rows > unit_.hi - lo) {
      return {ErrorCode::kInvalidArgument, "save: " + std::to_string(rows) +
                                               " rows past the unit's end at row " +
                                               std::to_string(lo)};
    }
    done_ += rows;
    if (rows == 0 || job_.spec().row_bytes == 0) return Status::ok();
    return write_rows(job_.staging(), job_.spec(), lo, lo + rows, src);
  }
  Status finish() override { return Status::ok(); }

 private:
  const SaveJob& job_;
  SaveUnit unit_;
  std::int64_t done_ = 0;
};

// One shard uploaded whole, in order.
class UploadWriter final : public SaveUnitWriter {
 public:
  explicit UploadWriter(std::unique_ptr<ShardUpload> upload) : upload_(std::move(upload)) {}
  Status append(const std::byte* src, std::int64_t rows) override {
    return upload_->append(src, rows);
  }
  Status finish() override { return upload_->commit(); }
  [[nodiscard]] std::vector<WrittenKey> written() const override { return upload_->written(); }
  [[nodiscard]] std::vector<WrittenKey> begun() const override { return upload_->begun(); }

 private:
  std::unique_ptr<ShardUpload> upload_;
};

}  // namespace

void put_keys(std::vector<std::uint8_t>& out, const std::vector<WrittenKey>& keys) {
  put_word(out, keys.size());
  for (const WrittenKey& w : keys) {
    put_word_str(out, w.key);
    put_word(out, w.size);
    put_word_str(out, w.etag);
  }
}

bool get_keys(WordReader& r, std::vector<WrittenKey>* keys) {
  std::uint64_t n = 0;
  if (!r.u64(&n)) return false;
  for (std::uint64_t i = 0; i < n; ++i) {
    WrittenKey w;
    if (!r.str(&w.key) || !r.u64(&w.size) || !r.str(&w.etag)) return false;
    keys->push_back(std::move(w));
  }
  return true;
}

void put_save_request(std::vector<std::uint8_t>& out, const std::string& dest, const SaveSpec& spec,
                      const SaveOptions& options) {
  put_word_str(out, dest);
  put_word_ints(out, spec.encode());
  put_word(out, options.overwrite ? 1 : 0);
  put_word(out, options.manifest ? 1 : 0);
  put_word(out, static_cast<std::uint64_t>(options.checksum));
  put_word(out, options.extra_files.size());
  for (const auto& [name, text] : options.extra_files) {
    put_word_str(out, name);
    put_word_str(out, text);
  }
}

Status get_save_request(WordReader& r, std::string* dest, SaveSpec* spec, SaveOptions* options) {
  const Status malformed(ErrorCode::kInvalidArgument, "save: malformed save request");
  std::vector<std::int64_t> ints;
  std::uint64_t overwrite = 0, manifest = 0, checksum = 0, extras = 0;
  if (!r.str(dest) || !r.ints(&ints) || !r.u64(&overwrite) || !r.u64(&manifest) ||
      !r.u64(&checksum) || !r.u64(&extras)) {
    return malformed;
  }
  SHARDLOAD_ASSIGN_OR_RETURN(*spec, SaveSpec::decode(ints));
  options->format = spec->format;
  options->overwrite = overwrite != 0;
  options->manifest = manifest != 0;
  options->checksum = static_cast<Checksum>(checksum);
  for (std::uint64_t i = 0; i < extras; ++i) {
    std::pair<std::string, std::string> f;
    if (!r.str(&f.first) || !r.str(&f.second)) return malformed;
    options->extra_files.push_back(std::move(f));
  }
  return Status::ok();
}

Result<SaveJob> SaveJob::begin(const std::string& dest, const SaveOptions& options, SaveSpec spec,
                               bool several_processes) {
  SaveJob job;
  job.dest_ = dest;
  job.options_ = options;
  job.options_.before_commit = nullptr;
  // Every per-shard field travels with the spec; the staging fills them in.
  const auto n = static_cast<std::size_t>(spec.shards());
  spec.data_offset.assign(n, 0);
  spec.chunk_rows.assign(n, 1);
  // The one choice of the two ways a save's keys become a dataset: what the kernel's file calls
  // reach is staged in a directory and renamed; anything else is written in place, through its
  // store, which refuses a store that cannot be written.
  job.in_place_ = !path_traits(dest).kernel_files;
  if (job.in_place_) {
    if (several_processes) {
      return Status(ErrorCode::kInvalidArgument,
                    "save: a save that several processes fill writes to a directory only, found '" +
                        dest +
                        "' (for object storage save the computed array with host_save: "
                        "shardload.numpy.save)");
    }
    Result<RemoteDest> prepared = prepare_remote_save(dest, job.options_, spec);
    if (!prepared) {
      if (prepared.status().code() == ErrorCode::kInvalidArgument) return prepared.status();
      return context(prepared.status(), dest);
    }
    job.remote_ = std::move(*prepared);
    job.spec_ = std::move(spec);
    return job;
  }
  // The checks, the commit and any clean-up in the directory `dest` was in when the save began.
  Result<std::string> physical = physical_destination(dest);
  if (!physical) return context(physical.status(), dest);
  job.physical_ = std::move(*physical);
  SHARDLOAD_RETURN_IF_ERROR(context(check_destination(job.physical_, options.overwrite), dest));
  Result<std::string> staging = prepare_staging(job.physical_, &spec);
  if (!staging) return context(staging.status(), dest);
  job.staging_ = std::move(*staging);
  job.identity_ = directory_identity(job.staging_);
  job.spec_ = std::move(spec);
  return job;
}

SaveJob SaveJob::staged(std::string dest, std::string physical, std::string staging,
                        std::pair<std::uint64_t, std::uint64_t> identity, SaveSpec spec,
                        const SaveOptions& options) {
  SaveJob job;
  job.dest_ = std::move(dest);
  job.physical_ = std::move(physical);
  job.staging_ = std::move(staging);
  job.identity_ = identity;
  job.spec_ = std::move(spec);
  job.options_ = options;
  job.options_.before_commit = nullptr;
  return job;
}

std::vector<std::uint8_t> SaveJob::encode() const {
  std::vector<std::uint8_t> out;
  put_word(out, in_place_ ? 1 : 0);
  put_save_request(out, dest_, spec_, options_);
  if (!in_place_) {
    put_word_str(out, physical_);
    put_word_str(out, staging_);
    put_word(out, identity_.first);
    put_word(out, identity_.second);
    return out;
  }
  put_word_str(out, remote_.dir);
  put_word_str(out, remote_.query);
  put_word(out, remote_.old_names.size());
  for (const std::string& name : remote_.old_names) put_word_str(out, name);
  put_keys(out, remote_.written);
  return out;
}

Result<SaveJob> SaveJob::decode(std::span<const std::uint8_t> bytes) {
  const Status malformed(ErrorCode::kInvalidArgument, "save: malformed save job");
  WordReader r(bytes);
  SaveJob job;
  std::uint64_t in_place = 0;
  if (!r.u64(&in_place) || in_place > 1) return malformed;
  job.in_place_ = in_place != 0;
  if (Status st = get_save_request(r, &job.dest_, &job.spec_, &job.options_); !st) {
    return st.code() == ErrorCode::kInvalidArgument ? malformed : st;
  }
  if (!job.in_place_) {
    if (!r.str(&job.physical_) || !r.str(&job.staging_) || !r.u64(&job.identity_.first) ||
        !r.u64(&job.identity_.second) || !r.at_end()) {
      return malformed;
    }
    return job;
  }
  RemoteDest& d = job.remote_;
  d.dest = job.dest_;
  d.overwrite = job.options_.overwrite;
  std::uint64_t olds = 0;
  if (!r.str(&d.dir) || !r.str(&d.query) || !r.u64(&olds)) return malformed;
  for (std::uint64_t i = 0; i < olds; ++i) {
    if (!r.str(&d.old_names.emplace_back())) return malformed;
  }
  if (!get_keys(r, &d.written) || !r.at_end()) return malformed;
  SHARDLOAD_ASSIGN_OR_RETURN(d.store, open_save_store(d.dir_url()));
  return job;
}

Result<SaveUnits> SaveJob::units(std::int64_t writers, std::int64_t per_writer) const {
  SaveUnits u;
  const std::int64_t rows = spec_.offsets.back();
  if (rows == 0 || spec_.row_bytes == 0) return u;
  if (in_place_) {
    // Each shard with bytes whole, by one writer; those without were uploaded at begin.
    u.tile_rows = uniform_shards(spec_) ? spec_.offsets[1] : 0;
    for (std::int64_t s = 0; s < spec_.shards(); ++s) {
      if (!task_uploads_shard(spec_, s)) continue;
      const auto i = static_cast<std::size_t>(s);
      u.list.push_back({spec_.offsets[i], spec_.offsets[i + 1], s});
    }
    return u;
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const ReadPlan plan, make_plan(spec_.offsets, writers, per_writer));
  u.tile_rows = plan.tile_rows;
  for (std::int64_t t = 0; t < plan.tiles; ++t) {
    u.list.push_back({plan.tile_begin(t), plan.tile_end(t), -1});
  }
  return u;
}

SaveUnit SaveJob::tile_unit(std::int64_t tile_rows, std::int64_t t) const {
  const std::int64_t lo = std::min(spec_.offsets.back(), t * tile_rows);
  const std::int64_t hi = std::min(spec_.offsets.back(), lo + tile_rows);
  return {lo, hi, in_place_ ? t : -1};
}

std::size_t SaveJob::written_record_bytes() const {
  // Keys made at begin are no writer's: two empty lists.
  return in_place_ ? detail::written_record_bytes(spec_) : 8;
}

Result<std::unique_ptr<SaveUnitWriter>> SaveJob::open(const SaveUnit& unit) const {
  const std::int64_t rows = spec_.offsets.back();
  if (unit.lo < 0 || unit.hi < unit.lo || unit.hi > rows) {
    return Status(ErrorCode::kInvalidArgument,
                  "save: rows [" + std::to_string(unit.lo) + ", " + std::to_string(unit.hi) +
                      "): expected a range within the save's " + std::to_string(rows) + " rows");
  }
  if (!in_place_) return std::unique_ptr<SaveUnitWriter>(new ReopenedWriter(*this, unit));
  // In place, a unit is a shard uploaded whole.
  const auto s = static_cast<std::size_t>(unit.shard);
  if (unit.shard < 0 || unit.shard >= spec_.shards() || spec_.offsets[s] != unit.lo ||
      spec_.offsets[s + 1] != unit.hi) {
    return Status(ErrorCode::kInvalidArgument, "save: the unit is not one shard");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(auto upload, open_shard_upload(remote_.dir_url(), spec_, unit.shard));
  return std::unique_ptr<SaveUnitWriter>(new UploadWriter(std::move(upload)));
}

Status SaveJob::write(const SaveUnit& unit, const std::byte* src, std::vector<WrittenKey>* written,
                      std::vector<WrittenKey>* begun) const {
  SHARDLOAD_ASSIGN_OR_RETURN(const auto writer, open(unit));
  Status st = writer->append(src, unit.hi - unit.lo);
  if (st) st = writer->finish();
  if (written != nullptr) {
    const auto keys = writer->written();
    written->insert(written->end(), keys.begin(), keys.end());
  }
  if (begun != nullptr) {
    const auto keys = writer->begun();
    begun->insert(begun->end(), keys.begin(), keys.end());
  }
  return st;
}

Status SaveJob::publish(const std::vector<WrittenKey>* own, bool* published) const {
  *published = false;
  if (!in_place_) return publish_staging(staging_, physical_, spec_, options_, published);
  const Status st = finish_remote_save(remote_, spec_, options_, own);
  *published = st.is_ok();
  return st;
}

std::string SaveJob::abandon(const std::vector<WrittenKey>* own, const Status* failure,
                             const std::vector<WrittenKey>* begun) const noexcept {
  if (in_place_) return abandon_remote_save(remote_, spec_, options_, own, failure, begun);
  if (!staging_.empty() && identity_.second != 0) remove_tree_if_same(staging_, identity_);
  return {};
}

Status SaveJob::failed(const Status& failure, const std::vector<WrittenKey>* own,
                       const std::vector<WrittenKey>* begun) const {
  const std::string left = abandon(own, &failure, begun);
  if (left.empty()) return failure;
  return Status(failure.code(), failure.message() + "; " + left)
      .with_path(failure.path())
      .with_errno(failure.sys_errno())
      .with_stored_untold(failure.stored_untold());
}

}  // namespace shardload::detail
