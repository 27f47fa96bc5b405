// What a save writes and how, for every front end that saves (shardload/save.hpp's Legate
// save, shardload/host_save.hpp's host save), and the checks of those options that need no
// array. What a save writes and how it becomes visible is described in shardload/save.hpp.
// The checks return kInvalidArgument whose message starts with "save: " (the front ends
// raise it as their argument error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/format.hpp"
#include "shardload/manifest.hpp"
#include "shardload/status.hpp"

namespace shardload {

// The one format enum (shardload/format.hpp): save writes kNpy, kZarr (v2) or kRaw.
using SaveFormat = Format;

// The most shards one save writes.
inline constexpr std::int64_t kMaxSaveShards = 1000000;

struct SaveOptions {
  // Shards to write; 0: one per processor of the launch (host_save: one per core this
  // process may run on). May exceed the rows (the extra shards have 0 rows). Rows are split
  // as evenly as tiles: ceil(rows / N) each, the last ones shorter.
  std::int64_t num_shards = 0;
  // Explicit rows per shard (each >= 0, at most 1000000 shards, summing to the array's rows);
  // overrides num_shards. To object storage each shard with rows is a launch of its own.
  std::vector<std::int64_t> shard_rows;
  SaveFormat format = SaveFormat::kNpy;
  bool overwrite = false;
  // Small files (name, contents) written into the dataset after everything else, before it
  // becomes visible: `shardload write`'s _meta.json. A name is one plain file name; only
  // "_meta.json" and "shardload.json" are names a later overwrite accepts.
  std::vector<std::pair<std::string, std::string>> extra_files;
  // DEST/shardload.manifest, written after every other file (extra files included) and
  // before the rename, so that discovering DEST reads it instead of probing the shards.
  bool manifest = true;
  // Per-file checksums kept in the manifest for `shardload verify` (kXxh3 reads every shard
  // once more). Needs manifest; not for Zarr (its shards are directories).
  Checksum checksum = Checksum::kNone;
  // Called once when the dataset is complete in the staging directory, just before it is
  // renamed into place: whatever it throws ends the save with the staging directory removed
  // and nothing published. The Python binding raises a pending KeyboardInterrupt there, so
  // that Ctrl-C during a save publishes nothing.
  std::function<void()> before_commit;
};

// The destination as a string: not empty, no NUL byte.
Status check_save_dest(const std::string& dest);

// The options that need no array: the extra files' names, a format with a writer, the
// checksum (known, with a manifest, not for a format whose shards are directories).
Status check_save_options(const SaveOptions& options);

// The bytes of one row of `dtype` elements of shape `trailing`; refused where they overflow.
Result<std::size_t> save_row_bytes(DType dtype, std::span<const std::int64_t> trailing);

// The shards' cumulative rows (shards + 1 entries, from 0 to `rows`): options.shard_rows
// when given (checked against `rows`), else num_shards (0: `default_shards`) shards of
// ceil(rows / N) rows, the last ones shorter or empty.
Result<std::vector<std::int64_t>> save_shard_offsets(const SaveOptions& options, std::int64_t rows,
                                                     std::int64_t default_shards);

}  // namespace shardload
