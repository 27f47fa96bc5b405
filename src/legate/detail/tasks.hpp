// The tasks of the shardload library. Each variant is a thin call into one shared body; the
// bodies never let anything but a legate::TaskException escape (anything else aborts the
// process), and the load task lets nothing escape at all.
#pragma once

#include <legate.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "legate/detail/compat.hpp"
#include "legate/detail/task_ids.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

inline constexpr const char* kLibraryName = "shardload";

// The load task, serving load and batches alike. Output 0: the array, tiled along axis 0
// (tile t is rows [t x tile rows, ...) with full trailing extents). Output 1: the error
// records, uint8 of shape (tiles x record bytes, 1, ...) tiled so that each point holds one
// record (see kRecordHeader). Scalars: 0 the layout cut at the plan's tiles (encode_tiles'
// bytes, uint8 array), 1 their offsets (int64 array, tiles + 1), 2 tile rows. Point t decodes
// only tile t's shards. detail::submit_load (launch.hpp) builds this launch.
// It never throws: a failure is written to the point's record, which the launcher reads back
// (load at once, batches when the batch is handed out). A task that may throw would make
// Legate wait for it at submission, which batches must not, and a record names its tile, so
// the failure reported is the lowest tile's whatever order the points ran in.
class LoadReportTask : public legate::LegateTask<LoadReportTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{kLoadReportTask}}.with_signature(
          legate::TaskSignature{}.outputs(2).scalars(3));

  static void cpu_variant(legate::TaskContext context);
#if LEGATE_DEFINED(LEGATE_USE_OPENMP)
  static void omp_variant(legate::TaskContext context);
#endif
#if SHARDLOAD_GPU_VARIANTS
  static void gpu_variant(legate::TaskContext context);
#endif
};

// An error record: int32 code (0 = ok), int32 text length, then the text: the message in the
// frame of task_error_message (file and errno as data), its end cut to fit the record.
inline constexpr std::size_t kRecordHeader = 8;

// Encodes a Status into a record of `size` bytes (size >= kRecordHeader).
void encode_record(const Status& status, std::byte* record, std::size_t size);
// Decodes a record; ok for code 0.
Status decode_record(const std::byte* record, std::size_t size);
// The manifest's checksums, one point per group of shards (src/legate/manifest_tasks.cc).
// Outputs 0 (uint8: 0 ok, 1 mismatch, 2 unreadable) and 1 (uint64: the checksum found, or
// the errno of an unreadable file), both 1-D over the shards and tiled by group. Scalars:
// 0 the manifest's path (bytes), 1 its container checksum (the points check they read the
// manifest the caller read).
class VerifyManifestTask : public legate::LegateTask<VerifyManifestTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{kVerifyManifestTask}}
          .with_signature(legate::TaskSignature{}.outputs(2).scalars(2))
          .with_variant_options(legate::VariantOptions{}.with_may_throw_exception(true));

  static void cpu_variant(legate::TaskContext context);
};

// Discovery in one point, for the whole job: output 0 an unbound 1-D uint8 store that the
// point binds to the encoded result (see discover_once). Scalar 0: the encoded request.
// has_allocations: binding the output allocates from the task's pool, which is a few KiB
// without it (the layout of 10,000 shards is 400 KB: Legion aborted the process).
class DiscoverTask : public legate::LegateTask<DiscoverTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{kDiscoverTask}}
          .with_signature(legate::TaskSignature{}.outputs(1).scalars(1))
          .with_variant_options(
              legate::VariantOptions{}.with_may_throw_exception(true).with_has_allocations(true));

  static void cpu_variant(legate::TaskContext context);
};

// A manifest written in one point, for the whole job (write_manifest_once): as DiscoverTask,
// output 0 is bound to the result (the manifest's path). Scalar 0: the encoded request.
class WriteManifestTask : public legate::LegateTask<WriteManifestTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{kWriteManifestTask}}
          .with_signature(legate::TaskSignature{}.outputs(1).scalars(1))
          .with_variant_options(
              legate::VariantOptions{}.with_may_throw_exception(true).with_has_allocations(true));

  static void cpu_variant(legate::TaskContext context);
};

// Input 0: the array, tiled along axis 0 (tile t is rows [t x tile rows, ...)). Scalars:
// 0 the save's job (SaveJob::encode, save_job.hpp; uint8 array), 1 tile rows. Each point
// writes its tile, the job's unit t (SaveJob::tile_unit). With a third scalar (int64), a
// one-point launch whose input is the slice of that shard's rows, which it writes whole
// (shards of chosen rows to object storage). Output 0: uint8, one slot per point along axis 0
// (every other extent 1), where the point puts the keys its writer finished and began
// (encode_written, save_remote.hpp), before it returns or throws: the publish checks them and
// a failed save's clean-up deletes them alone.
class SaveTask : public legate::LegateTask<SaveTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{kSaveTask}}
          .with_signature(legate::TaskSignature{}.inputs(1).outputs(1).scalars(2, 3))
          .with_variant_options(legate::VariantOptions{}.with_may_throw_exception(true));

  static void cpu_variant(legate::TaskContext context);
};

// The once-per-job steps of a save (src/legate/detail/save_once.hpp), one point each.
// Output 0: an unbound 1-D uint8 store the point binds to the step's outcome (its Status
// whole, then its result). Scalar 0: the encoded request. A failed step is no exception but
// its outcome: every rank rebuilds the Status, path and errno included, and throws the same
// typed exception. (They may throw nonetheless, as run_task_body does on a failed
// allocation.)
class SavePrepareTask : public legate::LegateTask<SavePrepareTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{kSavePrepareTask}}
          .with_signature(legate::TaskSignature{}.outputs(1).scalars(1))
          .with_variant_options(
              legate::VariantOptions{}.with_may_throw_exception(true).with_has_allocations(true));

  static void cpu_variant(legate::TaskContext context);
};

class SaveCommitTask : public legate::LegateTask<SaveCommitTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{kSaveCommitTask}}
          .with_signature(legate::TaskSignature{}.outputs(1).scalars(1))
          .with_variant_options(
              legate::VariantOptions{}.with_may_throw_exception(true).with_has_allocations(true));

  static void cpu_variant(legate::TaskContext context);
};

// How a Status crosses the task boundary: its code travels as the TaskException's index, and
// its file, errno and message as the exception's message in a frame (task_error_message) that
// the launcher strips (status_from_task_error), so that the Status it rebuilds has the file
// and errno as data and throw_status picks the matching exception. Nothing else may build or
// read a task's error.
[[noreturn]] void throw_task_error(const Status& status);
Status status_from_task_error(const legate::TaskException& error);

// The two halves, without Legate: the frame is kTaskErrorMark, the errno and the path's byte
// count in decimal, each closed by ';', the path's bytes, then the message (paths hold any
// byte but NUL, messages any byte). task_error_status takes a message without a valid frame
// whole, with no file: a runtime's own error, or a task not built by this library.
inline constexpr std::string_view kTaskErrorMark = "\x1eshardload-status;";
std::string task_error_message(const Status& status);
Status task_error_status(std::int32_t code, std::string_view message);

}  // namespace shardload::detail
