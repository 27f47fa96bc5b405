// The host save: an array in one caller buffer written as a sharded dataset by several
// threads at once, with no runtime. The NumPy front end (shardload.numpy.save) goes through
// it; what is written, where, and how it becomes visible is the Legate save's
// (shardload/save.hpp): the same shard names and formats, the same hidden staging directory
// renamed into place (or exchanged with an old dataset) once, the metadata and the manifest
// last, the same overwrite rules, and to object storage the same commit protocol (each shard
// one object uploaded whole, the manifest last).
//
// Axis 0 is split into shards as SaveOptions says (num_shards, shard_rows; neither: one shard
// per core this process may run on). To a directory, the rows are cut into tiles of equal
// rows (the read plan's, P = threads) that the threads write with positional writes straight
// from `data` into the shard files; to object storage each shard with bytes is one upload,
// the threads taking the next shard in turn. A failure stops further tiles (or shards) from
// starting; the error of the first failing one in order is the save's, named with its tile
// (or shard) and rows, and then nothing is published: the staging directory is removed (an
// object-storage save removes what it uploaded, as the Legate save does). A SIGINT that
// shardload::InterruptibleWait turned into an interrupt request stops further tiles (kIo with
// errno ECANCELED).
//
// Contract: the caller owns `data` (the array's C-order native-endian bytes, shape[0] rows
// of the trailing shape's elements) and keeps it alive and unchanged for the call; any
// thread may call. Returns kInvalidArgument ("save: ...") for bad arguments, before
// anything is written; kIo with EEXIST / ENOTEMPTY for a destination refused as taken;
// otherwise the failing file's Status, with "saving to DEST" as context. Never throws,
// except what options.save.before_commit throws, which passes on after the staging
// directory is removed (nothing published).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "shardload/dtype.hpp"
#include "shardload/save_options.hpp"
#include "shardload/status.hpp"

namespace shardload {

struct HostSaveOptions {
  SaveOptions save;
  // Threads that write (the calling thread is one of them); 0: the machine's cores.
  std::int64_t threads = 0;
};

struct HostSaveStats {
  std::int64_t threads = 1;  // the threads that ran
  std::int64_t shards = 0;
  std::int64_t tiles = 0;   // tiles written (to object storage: shards uploaded by a thread)
  std::uint64_t bytes = 0;  // of array data written
  double prepare_s = 0;     // checks, the staging directory, creating the files
  double write_s = 0;       // the threads, until every row is written
  double commit_s = 0;      // metadata, the manifest and the rename (or the commit objects)
};

Result<HostSaveStats> host_save(const std::byte* data, std::span<const std::int64_t> shape,
                                DType dtype, const std::string& dest,
                                const HostSaveOptions& options = {});

}  // namespace shardload
