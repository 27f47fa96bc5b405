// One save, whatever its destination and whoever drives it (src/engine/save_job.cc): the host
// save, the staged save of several processes (shardload/staged_save.hpp, the Dask save) and the
// Legate save all begin a SaveJob, write its units and publish or abandon it. Where the keys are
// staged and how they become a dataset is the store's (Store::stage / publish / discard,
// shardload/storage.hpp), and the job is the one place that asks which:
//  - a directory (keys that reopen): a hidden staging directory whose shard files are made at
//    begin at their final sizes, any rank writing any rows into them, then the metadata, the
//    manifest and one rename (save_files.hpp);
//  - object storage (keys written once, whole): in place, one upload per shard, then the
//    metadata, the manifest last as the commit, and a clean-up of the save's own keys where it
//    fails (save_remote.hpp).
// Front ends keep only how they spread the units over their writers. Free of any runtime; its
// state is plain values (encode / decode) that any process can take.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/detail/bytes.hpp"
#include "engine/detail/save_files.hpp"
#include "engine/detail/save_remote.hpp"
#include "shardload/save_options.hpp"
#include "shardload/status.hpp"
#include "shardload/storage.hpp"

namespace shardload::detail {

// What one writer writes, independently of every other: global rows [lo, hi). `shard` >= 0
// where the unit is that whole shard (a store whose keys are uploaded whole by one writer);
// -1 for a tile of rows in keys made at begin, which any writer may fill.
struct SaveUnit {
  std::int64_t lo = 0, hi = 0;
  std::int64_t shard = -1;
};

// The units of a job. Where `tile_rows` > 0, unit i is rows [i * tile_rows, min(rows, (i + 1) *
// tile_rows)) (one tiled launch covers them: tile i is unit i); 0 where the units are not of
// one size (shards of chosen rows uploaded whole), each then driven on its own.
struct SaveUnits {
  std::int64_t tile_rows = 0;
  std::vector<SaveUnit> list;
};

// One unit's writer: its rows in order, then finish. The keys it finished and began are what
// the job's publish checks and its abandon deletes (a store that keeps no ETags has none).
class SaveUnitWriter {
 public:
  virtual ~SaveUnitWriter() = default;
  // The unit's next `rows` rows, dense C-order.
  virtual Status append(const std::byte* src, std::int64_t rows) = 0;
  // After every row.
  virtual Status finish() = 0;
  // The keys finished (ShardUpload::written) and the one whose upload sent every byte and got
  // no answer (ShardUpload::begun); none for keys made at begin.
  [[nodiscard]] virtual std::vector<WrittenKey> written() const { return {}; }
  [[nodiscard]] virtual std::vector<WrittenKey> begun() const { return {}; }
};

// A list of keys as words (base/detail/bytes.hpp): the job's own and those a Legate task
// message carries. get_keys appends to *keys; false where the bytes run out.
void put_keys(std::vector<std::uint8_t>& out, const std::vector<WrittenKey>& keys);
[[nodiscard]] bool get_keys(WordReader& r, std::vector<WrittenKey>* keys);

// What a save is asked (its destination, spec and the options a job keeps: overwrite,
// manifest, checksum, the extra files) as words: a job's encoding carries it, and so does the
// Legate save's prepare task, whose rank begins the job. get_save_request fills `options`'
// format from the spec; kInvalidArgument where the bytes run out or the spec is malformed.
void put_save_request(std::vector<std::uint8_t>& out, const std::string& dest, const SaveSpec& spec,
                      const SaveOptions& options);
Status get_save_request(WordReader& r, std::string* dest, SaveSpec* spec, SaveOptions* options);

class SaveJob {
 public:
  // Checks `dest` and stages the save: errors name it ("saving to DEST"; argument errors say
  // "save: ..." themselves). `spec` as the front end checked it (its offsets); the per-shard
  // placement is filled in here. options.before_commit is not kept: every front end runs it
  // itself, on every rank, before publish(). `several_processes`: a save whose rows several
  // processes write at their own offsets (the staged save): refused (kInvalidArgument) before
  // anything is made where the store's keys cannot be reopened.
  static Result<SaveJob> begin(const std::string& dest, const SaveOptions& options, SaveSpec spec,
                               bool several_processes = false);

  // A job begun elsewhere whose staging directory is `staging` ((dev, ino) as made), to be
  // published at `physical`: what a StagedSave carries.
  static SaveJob staged(std::string dest, std::string physical, std::string staging,
                        std::pair<std::uint64_t, std::uint64_t> identity, SaveSpec spec,
                        const SaveOptions& options);

  // The job as bytes, for the processes that write its units and publish it.
  [[nodiscard]] std::vector<std::uint8_t> encode() const;
  static Result<SaveJob> decode(std::span<const std::uint8_t> bytes);

  [[nodiscard]] const SaveSpec& spec() const { return spec_; }
  [[nodiscard]] const std::string& dest() const { return dest_; }
  [[nodiscard]] const SaveOptions& options() const { return options_; }
  // A staging directory's path, dest resolved and the directory's identity; "" in place.
  [[nodiscard]] const std::string& staging() const { return staging_; }
  [[nodiscard]] const std::string& physical() const { return physical_; }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> identity() const { return identity_; }

  // The units for `writers` writers: in place, each shard with bytes whole; in keys made at
  // begin, row tiles of about rows / (writers * per_writer) rows (make_plan's tiling).
  [[nodiscard]] Result<SaveUnits> units(std::int64_t writers, std::int64_t per_writer) const;

  // Unit `t` of a launch tiled by units().tile_rows (tile i is unit i), as units() gives it.
  [[nodiscard]] SaveUnit tile_unit(std::int64_t tile_rows, std::int64_t t) const;

  // The bytes that hold what one unit's writer finished and began (encode_written), which a
  // distributed front end carries from each writer to the publish and any clean-up.
  [[nodiscard]] std::size_t written_record_bytes() const;

  // A writer of `unit` (a unit of units(), or, in keys made at begin, any rows).
  [[nodiscard]] Result<std::unique_ptr<SaveUnitWriter>> open(const SaveUnit& unit) const;

  // open(unit), its rows from `src`, finish; the keys it finished and began appended to
  // *written and *begun (where given) whatever its outcome.
  Status write(const SaveUnit& unit, const std::byte* src, std::vector<WrittenKey>* written,
               std::vector<WrittenKey>* begun) const;

  // Once every unit is written: the metadata, the extra files, the manifest and the store's
  // publish. `own`: the keys the units' writers finished (null: not known, not checked).
  // *published: whether the new dataset is at dest, also on an error.
  Status publish(const std::vector<WrittenKey>* own, bool* published) const;

  // After a failure (`failure`, where known) with nothing published: removes what the save
  // made (best effort, never what is not its own). Returns what it left that the caller should
  // name, or "".
  std::string abandon(const std::vector<WrittenKey>* own, const Status* failure,
                      const std::vector<WrittenKey>* begun) const noexcept;

  // abandon(own, &failure, begun), and `failure` with what it left added.
  [[nodiscard]] Status failed(const Status& failure, const std::vector<WrittenKey>* own,
                              const std::vector<WrittenKey>* begun) const;

 private:
  std::string dest_;
  SaveSpec spec_;
  SaveOptions options_;
  // Keys written under their final names (object storage); else a staging directory.
  bool in_place_ = false;
  std::string physical_;
  std::string staging_;
  std::pair<std::uint64_t, std::uint64_t> identity_{0, 0};
  RemoteDest remote_;
};

// Abandons `job` when it goes out of scope unfinished (an error returned or thrown before the
// publish decided): its own keys, as the writers told them, where known.
struct SaveJobGuard {
  const SaveJob& job;
  const std::vector<WrittenKey>* own = nullptr;
  const std::vector<WrittenKey>* begun = nullptr;
  bool done = false;
  ~SaveJobGuard() {
    if (!done) (void)job.abandon(own, nullptr, begun);
  }
};

}  // namespace shardload::detail
