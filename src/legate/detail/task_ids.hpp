// Every task id of the "shardload" Legate library, in one table. The demo tasks of src/testing
// (verify, synth) join the same library, so their ids are here too: two tasks registered under
// one id would fail registration in whichever process registers both.
#pragma once

#include <cstdint>

namespace shardload::detail {

enum TaskId : std::int64_t {
  kDemoVerifyTask = 2,  // src/testing/verify_task.cc: a loaded demo dataset against synth
  kSaveTask = 3,        // one tile of a save
  kDemoSynthTask = 4,   // src/testing/synth_task.cc: fills an array with the synth values
  kVerifyManifestTask = 5,
  kDiscoverTask = 6,
  kWriteManifestTask = 7,
  kLoadReportTask = 10,  // the load task (load and batches), writing its error to a record
  kSavePrepareTask = 20,
  kSaveCommitTask = 21,
};

}  // namespace shardload::detail
