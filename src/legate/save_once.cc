// The steps of a save that must happen once per job, not once per rank: under control
// replication every rank runs the program and calls save(), but one staging directory must be
// made and filled, by every rank's tiles alike, and renamed into place once. Each step runs in
// a one-point task (the rank that runs it does the file work) whose outcome, error included,
// every rank reads back from the task's output and acts on alike. A save to object storage
// takes the same two steps: its listing, the empty shards, then the metadata objects and the
// manifest are made once, by the rank that runs the step.
#include <cerrno>
#include <cstring>
#include <span>

#include "base/detail/bytes.hpp"
#include "engine/detail/save_files.hpp"
#include "engine/detail/save_remote.hpp"
#include "legate/detail/load_body.hpp"
#include "legate/detail/point_task.hpp"
#include "legate/detail/tasks.hpp"
#include "shardload/legate.hpp"

namespace shardload::detail {

namespace {

void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) { put_le(out, v, 8); }

void put_str(std::vector<std::uint8_t>& out, const std::string& s) {
  put_u64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void put_keys(std::vector<std::uint8_t>& out, const std::vector<WrittenKey>& keys) {
  put_u64(out, keys.size());
  for (const WrittenKey& w : keys) {
    put_str(out, w.key);
    put_u64(out, w.size);
    put_str(out, w.etag);
  }
}

void put_ints(std::vector<std::uint8_t>& out, const std::vector<std::int64_t>& v) {
  put_u64(out, v.size());
  for (const auto x : v) put_u64(out, static_cast<std::uint64_t>(x));
}

// Reads what the put_ functions wrote, in order; every read fails once the bytes run out.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> b) : b_(b) {}
  bool u64(std::uint64_t* v) {
    if (b_.size() - pos_ < 8) return false;
    *v = get_le(b_.data() + pos_, 8);
    pos_ += 8;
    return true;
  }
  bool str(std::string* s) {
    std::uint64_t n = 0;
    if (!u64(&n) || n > b_.size() - pos_) return false;
    s->assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool keys(std::vector<WrittenKey>* v) {
    std::uint64_t n = 0;
    if (!u64(&n)) return false;
    for (std::uint64_t i = 0; i < n; ++i) {
      WrittenKey w;
      if (!str(&w.key) || !u64(&w.size) || !str(&w.etag)) return false;
      v->push_back(std::move(w));
    }
    return true;
  }
  bool ints(std::vector<std::int64_t>* v) {
    std::uint64_t n = 0;
    if (!u64(&n) || n > (b_.size() - pos_) / 8) return false;
    v->resize(n);
    for (auto& x : *v) {
      std::uint64_t u = 0;
      (void)u64(&u);
      x = static_cast<std::int64_t>(u);
    }
    return true;
  }

 private:
  std::span<const std::uint8_t> b_;
  std::size_t pos_ = 0;
};

Status malformed(const char* what) {
  return {ErrorCode::kInvalidArgument, std::string("save: malformed ") + what};
}

// The outcome of a step: the Status whole (code, errno, path and whether a write's outcome
// cannot be told as data, so every rank throws the same typed exception the rank that did the
// work would have), then the step's result. The code's word carries the last in bit 32.
constexpr std::uint64_t kStoredUntoldBit = std::uint64_t{1} << 32;

std::vector<std::uint8_t> encode_outcome(const Status& st,
                                         const std::vector<std::uint8_t>& result) {
  std::vector<std::uint8_t> out;
  put_u64(out, static_cast<std::uint64_t>(st.code()) | (st.stored_untold() ? kStoredUntoldBit : 0));
  put_u64(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(st.sys_errno())));
  put_str(out, st.path());
  put_str(out, st.message());
  out.insert(out.end(), result.begin(), result.end());
  return out;
}

std::vector<std::uint8_t> scalar_bytes(legate::TaskContext& context, std::uint32_t i) {
  const auto v = context.scalar(i).values<std::uint8_t>();
  return {v.begin(), v.end()};
}

// Runs the one-point task `id` with `request` and returns its outcome's Status, the step's
// result bytes in *result.
Status run_once(legate::LocalTaskID id, const std::vector<std::uint8_t>& request,
                std::vector<std::uint8_t>* result) {
  std::vector<std::uint8_t> bytes;
  try {
    bytes = run_point_task(id, request);
  } catch (const legate::TaskException& e) {
    return status_from_task_error(e);
  }
  Reader r(bytes);
  std::uint64_t code = 0;
  std::uint64_t err = 0;
  std::string path;
  std::string message;
  const bool ok = r.u64(&code) && r.u64(&err) && r.str(&path) && r.str(&message);
  const bool untold = (code & kStoredUntoldBit) != 0;
  code &= ~kStoredUntoldBit;
  if (!ok || code > static_cast<std::uint64_t>(ErrorCode::kNoMemory)) {
    return malformed("result of a save step");
  }
  result->assign(bytes.begin() + static_cast<std::ptrdiff_t>(32 + path.size() + message.size()),
                 bytes.end());
  if (code == static_cast<std::uint64_t>(ErrorCode::kOk)) return Status::ok();
  return Status{static_cast<ErrorCode>(code), message}
      .with_path(path)
      .with_errno(static_cast<int>(static_cast<std::int64_t>(err)))
      .with_stored_untold(untold);
}

}  // namespace

// Request: dest, the spec, overwrite. Result: to a local dest, the staging directory and the
// spec with its files' offsets; to object storage, the prefix, its query and the objects
// there before (the RemoteDest every rank rebuilds).
void SavePrepareTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const auto request = scalar_bytes(context, 0);
    Reader r(request);
    std::string dest;
    std::vector<std::int64_t> ints;
    std::uint64_t overwrite = 0;
    std::vector<std::uint8_t> result;
    Status st = r.str(&dest) && r.ints(&ints) && r.u64(&overwrite) ? Status::ok()
                                                                   : malformed("save request");
    Result<SaveSpec> spec = st ? SaveSpec::decode(ints) : Result<SaveSpec>(st);
    if (!spec) st = spec.status();
    if (st && is_object_dest(dest)) {
      SaveOptions options;
      options.overwrite = overwrite != 0;
      Result<RemoteDest> d = prepare_remote_save(dest, options, *spec);
      if (d) {
        put_str(result, d->dir);
        put_str(result, d->query);
        put_u64(result, d->old_names.size());
        for (const std::string& name : d->old_names) put_str(result, name);
        put_keys(result, d->written);
      } else {
        st = d.status();
      }
    } else if (st) {
      Result<std::string> staging = prepare_staging(dest, &*spec);
      if (staging) {
        put_str(result, *staging);
        put_ints(result, spec->encode());
      } else {
        st = staging.status();
      }
    }
    write_point_result(context, encode_outcome(st, result));
  });
}

// Request: staging, dest, overwrite, manifest, checksum, the spec, the extra files; to
// object storage "staging" is the prefix, and the query, the old objects' names, the keys the
// preparation wrote and those the points' uploads finished follow.
void SaveCommitTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const auto request = scalar_bytes(context, 0);
    Reader r(request);
    std::string staging;
    std::string dest;
    std::uint64_t overwrite = 0;
    std::uint64_t manifest = 0;
    std::uint64_t checksum = 0;
    std::vector<std::int64_t> ints;
    std::uint64_t extras = 0;
    bool ok = r.str(&staging) && r.str(&dest) && r.u64(&overwrite) && r.u64(&manifest) &&
              r.u64(&checksum) && r.ints(&ints) && r.u64(&extras);
    SaveOptions options;
    options.overwrite = overwrite != 0;
    options.manifest = manifest != 0;
    options.checksum = static_cast<Checksum>(checksum);
    for (std::uint64_t i = 0; ok && i < extras; ++i) {
      std::pair<std::string, std::string> f;
      ok = r.str(&f.first) && r.str(&f.second);
      options.extra_files.push_back(std::move(f));
    }
    RemoteDest remote;
    std::vector<WrittenKey> own;
    if (ok && is_object_dest(dest)) {
      remote.dest = dest;
      remote.dir = staging;
      remote.overwrite = options.overwrite;
      std::uint64_t olds = 0;
      ok = r.str(&remote.query) && r.u64(&olds);
      for (std::uint64_t i = 0; ok && i < olds; ++i) {
        ok = r.str(&remote.old_names.emplace_back());
      }
      ok = ok && r.keys(&remote.written) && r.keys(&own);
    }
    Status st = ok ? Status::ok() : malformed("save commit request");
    Result<SaveSpec> spec = st ? SaveSpec::decode(ints) : Result<SaveSpec>(st);
    if (!spec) st = spec.status();
    bool published = false;
    if (st && is_object_dest(dest)) {
      Result<std::shared_ptr<Store>> store = open_save_store(remote.dir_url());
      if (store) remote.store = *store;
      st = store ? finish_remote_save(remote, *spec, options, &own) : store.status();
      published = st.is_ok();
    } else if (st) {
      st = publish_staging(staging, dest, *spec, options, &published);
    }
    std::vector<std::uint8_t> result;
    put_u64(result, published ? 1 : 0);
    write_point_result(context, encode_outcome(st, result));
  });
}

namespace {

std::vector<std::uint8_t> prepare_request(const std::string& dest, bool overwrite, SaveSpec* spec) {
  // The spec's encoding carries every per-shard field; create_shard_files fills them in.
  const auto n = static_cast<std::size_t>(spec->shards());
  spec->data_offset.assign(n, 0);
  spec->chunk_rows.assign(n, 1);
  std::vector<std::uint8_t> request;
  put_str(request, dest);
  put_ints(request, spec->encode());
  put_u64(request, overwrite ? 1 : 0);
  return request;
}

std::vector<std::uint8_t> commit_request(const std::string& staging, const std::string& dest,
                                         const SaveSpec& spec, const SaveOptions& options) {
  std::vector<std::uint8_t> request;
  put_str(request, staging);
  put_str(request, dest);
  put_u64(request, options.overwrite ? 1 : 0);
  put_u64(request, options.manifest ? 1 : 0);
  put_u64(request, static_cast<std::uint64_t>(options.checksum));
  put_ints(request, spec.encode());
  put_u64(request, options.extra_files.size());
  for (const auto& [name, text] : options.extra_files) {
    put_str(request, name);
    put_str(request, text);
  }
  return request;
}

}  // namespace

Result<std::string> prepare_save_once(const std::string& dest, SaveSpec* spec) {
  const std::vector<std::uint8_t> request = prepare_request(dest, false, spec);
  std::vector<std::uint8_t> result;
  SHARDLOAD_RETURN_IF_ERROR(run_once(SavePrepareTask::TASK_CONFIG.task_id(), request, &result));
  Reader r(result);
  std::string staging;
  std::vector<std::int64_t> ints;
  if (!r.str(&staging) || !r.ints(&ints)) return malformed("result of the save's preparation");
  SHARDLOAD_ASSIGN_OR_RETURN(*spec, SaveSpec::decode(ints));
  return staging;
}

Status commit_save_once(const std::string& staging, const std::string& dest, const SaveSpec& spec,
                        const SaveOptions& options, bool* published) {
  const std::vector<std::uint8_t> request = commit_request(staging, dest, spec, options);
  std::vector<std::uint8_t> result;
  const Status st = run_once(SaveCommitTask::TASK_CONFIG.task_id(), request, &result);
  // A step that failed before its body ran (a task error) carries no result: not published.
  Reader r(result);
  std::uint64_t flag = 0;
  *published = r.u64(&flag) && flag != 0;
  return st;
}

Result<RemoteDest> prepare_remote_save_once(const std::string& dest, const SaveOptions& options,
                                            SaveSpec* spec) {
  const std::vector<std::uint8_t> request = prepare_request(dest, options.overwrite, spec);
  std::vector<std::uint8_t> result;
  SHARDLOAD_RETURN_IF_ERROR(run_once(SavePrepareTask::TASK_CONFIG.task_id(), request, &result));
  RemoteDest d;
  d.dest = dest;
  d.overwrite = options.overwrite;
  std::uint64_t olds = 0;
  Reader r(result);
  bool ok = r.str(&d.dir) && r.str(&d.query) && r.u64(&olds);
  for (std::uint64_t i = 0; ok && i < olds; ++i) ok = r.str(&d.old_names.emplace_back());
  ok = ok && r.keys(&d.written);
  if (!ok) return malformed("result of the save's preparation");
  SHARDLOAD_ASSIGN_OR_RETURN(d.store, open_save_store(d.dir_url()));
  return d;
}

Status finish_remote_save_once(const RemoteDest& d, const SaveSpec& spec,
                               const SaveOptions& options, const std::vector<WrittenKey>& own) {
  std::vector<std::uint8_t> request = commit_request(d.dir, d.dest, spec, options);
  put_str(request, d.query);
  put_u64(request, d.old_names.size());
  for (const std::string& name : d.old_names) put_str(request, name);
  put_keys(request, d.written);
  put_keys(request, own);
  std::vector<std::uint8_t> result;
  return run_once(SaveCommitTask::TASK_CONFIG.task_id(), request, &result);
}

}  // namespace shardload::detail
