// Saving a distributed legate::LogicalArray as shard files that shardload (and numpy, zarr)
// read back, written in parallel by one manual launch: every point task writes the rows of
// its own piece of the store straight into the shard files (no gather to one process).
//
//   shardload::SaveOptions opts;
//   opts.num_shards = 8;                               // 0: one shard per processor
//   opts.format = shardload::SaveFormat::kNpy;         // kNpy, kZarr (v2) or kRaw
//   shardload::save(array, "out/", opts);              // out/shard_0000.npy ...
//
// What is written (shard i holds rows [offsets[i], offsets[i+1]) of axis 0):
//   npy:  DEST/shard_{:04d}.npy, numpy format 1.0, C order, little-endian (bool and 1-byte
//         types '|');
//   raw:  DEST/shard_{:04d}.bin, bare C-order rows in this machine's byte order, and
//         DEST/shardload.json (dtype with byte order, trailing shape, header_bytes 0, rows);
//   zarr: DEST/shard_{:04d}.zarr, one Zarr v2 store per shard, uncompressed, chunked along
//         axis 0 only (at most 64 MiB per chunk, edge chunks padded as Zarr v2 requires),
//         '.' chunk keys, metadata .zarray.
//
// How it becomes visible: everything is written into a new hidden directory beside DEST
// (".NAME.shardload-tmp-HOST-PID-N", mode 0700 until the commit; NAME replaced by a hash where
// the name would be too long; no directory, pattern or glob source matches it), the format's
// metadata after the shards, then the extra files, then the manifest (DEST/shardload.manifest,
// see shardload/manifest.hpp) last; the directory takes DEST's mode, owner, group and
// extended attributes (a new DEST: 0777 less the umask; shard files are 0666 less the umask),
// and is then renamed to DEST in one rename(2):
//   - DEST absent or an empty directory: a reader sees either nothing or the whole dataset;
//   - DEST a dataset of an earlier save and overwrite = true: the two directories are swapped
//     with renameat2(RENAME_EXCHANGE), so DEST names the old or the new dataset, never a mix;
//     the old one is then deleted, entry by entry. A reader that discovered the old dataset
//     before the swap finds its files gone or changed when it reads them (shardload's
//     snapshot check reports that as an error; it never returns a mix). Where the file system
//     cannot exchange, DEST is renamed aside first, so for the moment between the two renames
//     DEST is absent.
//   - overwrite = false and DEST not empty: DestinationExistsError, nothing written;
//   - overwrite = true refuses (DestinationExistsError) a DEST holding anything that a save
//     did not write, down to the files inside its Zarr stores: with DEST's manifest, what it
//     lists by name and snapshot; without one, the names and types a save writes
//     (shard_NNNN.npy/.bin, shard_NNNN.zarr holding .zarray and chunk keys, shardload.json,
//     _meta.json, shardload.manifest): replacing a directory never deletes a user's files.
//   - a DEST this process cannot give its owner and group (not root, another user's): refused
//     before anything is written (ShardWriteError).
// DEST may be an object-storage prefix ("s3://bucket/prefix/", options in its query; npy and
// raw): each shard is one object uploaded whole by one point task (the launch tiled so that
// tile i is shard i), then the metadata objects, then the manifest last as the commit point;
// with overwrite the old manifest is deleted first. A store has no atomic multi-object
// commit: docs/save.md ("To s3://") says what a reader sees during and after a failed save.
// On any error the hidden directory is removed and DEST is untouched. A crash (the process
// killed) can leave the hidden directory behind, never a partial DEST; the next save to DEST
// on this host removes it once its process is gone. Files are not fsync'ed: a save survives
// the process, not a power loss.
//
// Contract: call from the thread that drives the Legate program, after legate::start(), one
// process (the hidden directory and the final rename are made by the calling process; the
// point tasks must see the same file system). Errors: ArgumentError (bad options, a dtype or
// array kind shardload cannot write), DestinationExistsError, ShardWriteError (naming the
// file and the errno); a failure inside a point task is reported as ShardWriteError too.
#pragma once

#include <legate.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "shardload/errors.hpp"
#include "shardload/manifest.hpp"
#include "shardload/save_options.hpp"

namespace shardload {

struct SaveInfo {
  std::string target;           // the processor kind the save task ran on ("CPU")
  std::int64_t processors = 0;  // P
  std::int64_t tiles = 0;       // the launch domain
  std::int64_t shards = 0;
  std::uint64_t bytes = 0;     // of array data written
  double prepare_seconds = 0;  // checks, the hidden directory, creating the files
  double write_seconds = 0;    // the launch, until every point has written
  double commit_seconds = 0;   // metadata and the rename (and removing an old dataset)
};

// The name of a format with a writer ("npy", "raw", "zarr") -> the format; ArgumentError for
// anything else.
SaveFormat parse_save_format(const std::string& name);

// Writes `array` (dense, not nullable, 1 to 6 dimensions, a dtype shardload reads) to the
// directory `dest` as described above. Returns once the dataset is in place.
void save(const legate::LogicalArray& array, const std::string& dest,
          const SaveOptions& options = {}, SaveInfo* info = nullptr);

}  // namespace shardload
