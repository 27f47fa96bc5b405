// The load task of the shardload library. Each variant is a thin call
// into one shared body; the bodies never let anything but a
// legate::TaskException escape (anything else aborts the process).
#pragma once

#include <legate.h>

#include <cstdint>
#include <string>

#include "shardload/status.hpp"

namespace shardload::detail {

inline constexpr const char* kLibraryName = "shardload";

// Task ids of the library; 2 and 4 are the demo verify and synth tasks' (src/testing).
enum TaskId : std::int64_t { kLoadTask = 1, kSaveTask = 3 };

// Output 0: the array, tiled along axis 0. Scalars: 0 encoded layout
// (uint8 array), 1 processors, 2 overdecompose, 3 tile rows (checked).
class LoadTask : public legate::LegateTask<LoadTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{kLoadTask}}
          .with_signature(legate::TaskSignature{}.outputs(1).scalars(4))
          .with_variant_options(legate::VariantOptions{}.with_may_throw_exception(true));

  static void cpu_variant(legate::TaskContext context);
#if LEGATE_DEFINED(LEGATE_USE_OPENMP)
  static void omp_variant(legate::TaskContext context);
#endif
#if LEGATE_DEFINED(LEGATE_USE_CUDA)
  static void gpu_variant(legate::TaskContext context);
#endif
};

// Input 0: the array, tiled along axis 0 (tile t is rows [t x tile rows, ...)). Scalars:
// 0 the staging directory's bytes (uint8 array), 1 the SaveSpec (int64 array), 2 tile rows.
// Each point writes its tile's rows into the shard files the launcher created.
class SaveTask : public legate::LegateTask<SaveTask> {
 public:
  static inline const auto TASK_CONFIG =  // NOLINT(cert-err58-cpp)
      legate::TaskConfig{legate::LocalTaskID{kSaveTask}}
          .with_signature(legate::TaskSignature{}.inputs(1).scalars(3))
          .with_variant_options(legate::VariantOptions{}.with_may_throw_exception(true));

  static void cpu_variant(legate::TaskContext context);
};

// How a Status crosses the task boundary: its code travels as the TaskException's index and
// its message as the exception's message, so that the launcher rebuilds the Status and
// throw_status picks the matching exception.
[[noreturn]] void throw_task_error(const Status& status);
Status status_from_task_error(const legate::TaskException& error);

}  // namespace shardload::detail
