// `shardload write` under Legate: the demo dataset is made in a distributed array by a synth
// task per tile and written by shardload::save, the same parallel path, temporary directory
// and final rename as any save; _meta.json goes in after the shards, and the manifest last,
// before the rename.
#include <legate.h>
#include <realm.h>

#include <iostream>
#include <set>

#include "cli/commands.hpp"
#include "cli/legate_start.hpp"
#include "cli/progress.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/legate.hpp"
#include "shardload/save.hpp"
#include "shardload/synth_array.hpp"

namespace shardload::cli {

static_assert(kMaxWriteDims == kMaxLegateDims,
              "write --shape takes the dimensions of a Legate array: update kMaxWriteDims");

namespace {

// The whole dataset lives in Legate's system memory while it is written (a store larger than
// that memory makes Legate end the process, where nothing can be caught), so it is refused
// first, as load refuses a dataset that does not fit. Same reserve as load's check.
Status check_fits(const WriteArgs& a) {
  std::uint64_t bytes = a.dtype.size;
  for (const auto d : a.shape) {
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes)) {
      return {ErrorCode::kNoMemory, "the dataset's size overflows 64 bits"};
    }
  }
  std::set<Realm::Memory> memories;
  Realm::Machine::get_machine().get_all_memories(memories);
  std::uint64_t capacity = 0;
  for (const auto& m : memories) {
    if (m.kind() == Realm::Memory::SYSTEM_MEM) capacity += m.capacity();
  }
  if (capacity == 0) return Status::ok();  // nothing to compare with; Legate decides
  const std::uint64_t reserve = (std::uint64_t{16} << 20) + capacity / 100;
  const std::uint64_t usable = capacity > reserve ? capacity - reserve : 0;
  if (bytes <= usable) return Status::ok();
  return {ErrorCode::kNoMemory,
          "the dataset needs " + std::to_string(bytes) + " bytes, but Legate has " +
              std::to_string(usable) +
              " bytes of system memory for it (write makes it in memory, then saves it); give "
              "Legate more (--sysmem, in LEGATE_CONFIG or to the legate launcher), or write "
              "fewer rows"};
}

}  // namespace

int cmd_write_legate(const WriteArgs& a) {
  start_legate("write");
  // Again: the runtime installs a handler of its own, which ends the process with a backtrace
  // and leaves the uploaded objects without their clean-up.
  interrupt_on_sigint();
  RankStreams io;
  int rc = 1;
  try {
    if (Status fits = check_fits(a); !fits) throw_status(fits, ErrorSite::kWrite);
    const auto rows = write_rows_per_shard(a);
    const std::vector<std::int64_t> shape(a.shape.begin(), a.shape.end());
    const legate::LogicalArray array =
        make_synth_array(a.dtype, shape, static_cast<std::uint64_t>(a.seed));
    SaveOptions opts;
    opts.shard_rows = rows;
    opts.format = SaveFormat::kNpy;
    // An earlier write's (or save's) dataset is replaced; a directory with other files is
    // refused rather than emptied.
    opts.overwrite = true;
    opts.extra_files = {{"_meta.json", write_meta_json(a, rows)}};
    // A Ctrl-C that came while the uploads ran (one that no request it ended turned into their
    // failure) fails the save before its manifest: nothing is published, and the save's
    // clean-up runs.
    opts.before_commit = [] {
      if (interrupt_requested()) {
        throw_status(Status(ErrorCode::kIo, "interrupted before the manifest was written"),
                     ErrorSite::kWrite);
      }
    };
    // check_fits has sized it. The tasks report nothing as they end: the bar counts this
    // process's bytes written.
    std::uint64_t bytes = a.dtype.size;
    for (const auto d : a.shape) bytes *= static_cast<std::uint64_t>(d);
    TerminalBar bar("write", bytes);
    {
      IoTicker ticker(&bar, true);
      save(array, a.dir, opts);
    }
    bar.finish();
    io.out << write_summary(a);
    rc = 0;
  } catch (const Error& e) {
    // What an interrupt made fail is reported by main as the interrupt (status 130).
    if (!interrupt_requested()) {
      io.err << "shardload write: error: " << e.message(OptionSpelling::kCli) << "\n";
    }
  }
  const int finish = legate::finish();
  return rc != 0 ? rc : finish;
}

}  // namespace shardload::cli
