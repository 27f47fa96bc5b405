// The steps of a save that must happen once per job, not once per rank: under control
// replication every rank runs the program and calls save(), but one staging directory must be
// made and filled, by every rank's tiles alike, and renamed into place once. Each step runs in
// a one-point task (the rank that runs it does the file work) whose outcome, error included,
// every rank reads back from the task's output and acts on alike: the job's begin and its
// publish (engine/detail/save_job.hpp), whatever the store.
#include <cerrno>
#include <cstring>
#include <span>

#include "base/detail/bytes.hpp"
#include "engine/detail/save_job.hpp"
#include "legate/detail/load_body.hpp"
#include "legate/detail/point_task.hpp"
#include "legate/detail/tasks.hpp"
#include "shardload/legate.hpp"

namespace shardload::detail {

namespace {

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
  put_word(out,
           static_cast<std::uint64_t>(st.code()) | (st.stored_untold() ? kStoredUntoldBit : 0));
  put_word(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(st.sys_errno())));
  put_word_str(out, st.path());
  put_word_str(out, st.message());
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
  WordReader r(bytes);
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

// Request: dest, the spec, the options a job keeps (overwrite, manifest, checksum, the extra
// files). Result: the job (SaveJob::encode), which every rank decodes.
void SavePrepareTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const auto request = scalar_bytes(context, 0);
    WordReader r(request);
    std::string dest;
    SaveSpec spec;
    SaveOptions options;
    Status st = get_save_request(r, &dest, &spec, &options);
    std::vector<std::uint8_t> result;
    if (st) {
      Result<SaveJob> job = SaveJob::begin(dest, options, std::move(spec));
      if (job) {
        result = job->encode();
      } else {
        st = job.status();
      }
    }
    write_point_result(context, encode_outcome(st, result));
  });
}

// Request: the job (SaveJob::encode), then the keys the units' writers finished. Result:
// whether the dataset was published.
void SaveCommitTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const auto request = scalar_bytes(context, 0);
    WordReader r(request);
    std::string bytes;
    std::vector<WrittenKey> own;
    Status st =
        r.str(&bytes) && get_keys(r, &own) ? Status::ok() : malformed("save commit request");
    const std::span<const std::uint8_t> job_bytes(
        reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    Result<SaveJob> job = st ? SaveJob::decode(job_bytes) : Result<SaveJob>(st);
    if (!job) st = job.status();
    bool published = false;
    if (st) st = job->publish(&own, &published);
    std::vector<std::uint8_t> result;
    put_word(result, published ? 1 : 0);
    write_point_result(context, encode_outcome(st, result));
  });
}

Result<SaveJob> begin_save_once(const std::string& dest, const SaveOptions& options,
                                SaveSpec spec) {
  // The spec's encoding carries every per-shard field; the job's begin fills them in.
  const auto n = static_cast<std::size_t>(spec.shards());
  spec.data_offset.assign(n, 0);
  spec.chunk_rows.assign(n, 1);
  std::vector<std::uint8_t> request;
  put_save_request(request, dest, spec, options);
  std::vector<std::uint8_t> result;
  SHARDLOAD_RETURN_IF_ERROR(run_once(SavePrepareTask::TASK_CONFIG.task_id(), request, &result));
  return SaveJob::decode(result);
}

Status publish_save_once(const SaveJob& job, const std::vector<WrittenKey>& own, bool* published) {
  const std::vector<std::uint8_t> bytes = job.encode();
  std::vector<std::uint8_t> request;
  put_word(request, bytes.size());
  request.insert(request.end(), bytes.begin(), bytes.end());
  put_keys(request, own);
  std::vector<std::uint8_t> result;
  const Status st = run_once(SaveCommitTask::TASK_CONFIG.task_id(), request, &result);
  // A step that failed before its body ran (a task error) carries no result: not published.
  WordReader r(result);
  std::uint64_t flag = 0;
  *published = r.u64(&flag) && flag != 0;
  return st;
}

}  // namespace shardload::detail
