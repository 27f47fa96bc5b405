// A save to a directory that several processes fill: the Dask front end's
// (shardload.dask.save), where each chunk of the array is computed, and written, on whichever
// worker holds it. One process begins the save (the destination checked as host_save checks
// it, the hidden staging directory made beside it and every shard file created there with its
// header), hands the small StagedSave to the writers, each of which writes its global rows
// with positional writes into the shard files (any process that sees the same file system),
// and once every row is written the first process commits (metadata, the manifest, the one
// rename or exchange of shardload/save.hpp) or aborts (the staging directory removed, nothing
// published). What is written and how it becomes visible is host_save's.
//
// Only a local (or shared) directory: an object-storage destination is refused
// (kInvalidArgument), naming host_save (shardload.numpy.save of the computed array) as the
// way there.
//
// The commit trusts its caller that every row was written: rows never written read as zeros.
// Every call checks the StagedSave it is given (the spec decodes, the staging path is a
// staging directory's), so that a damaged one fails instead of writing elsewhere. Never
// throws; returns kInvalidArgument ("save: ...") for bad arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/manifest.hpp"
#include "shardload/save_options.hpp"
#include "shardload/status.hpp"

namespace shardload {

// What the writers and the commit need; plain values, so that a front end can ship it to
// other processes (the Python binding turns it into a tuple).
struct StagedSave {
  std::string dest;      // as given: the errors name it
  std::string physical;  // where it is committed (detail::physical_destination)
  std::string staging;   // the hidden staging directory
  // Its (device, inode) when made: abort removes that very directory, nothing else.
  std::uint64_t staging_dev = 0;
  std::uint64_t staging_ino = 0;
  std::vector<std::int64_t> spec;  // detail::SaveSpec::encode()
  bool overwrite = false;
  bool manifest = true;
  Checksum checksum = Checksum::kNone;
};

// Checks the arguments and `dest` as host_save does (options.shard_rows or num_shards split
// shape[0]; before_commit and extra_files are not used), makes the staging directory and
// creates the shard files in it. On an error nothing is left.
Result<StagedSave> staged_save_begin(std::span<const std::int64_t> shape, DType dtype,
                                     const std::string& dest, const SaveOptions& options);

// Writes global rows [lo, hi) from `data` (C-order native-endian rows of `dtype` elements of
// shape `trailing`, `bytes` in all) into the staging directory's shard files: dtype, trailing
// shape and bytes must be the save's (kInvalidArgument naming what was expected and found).
// Rows may be written by several processes at once, each row once.
Status staged_save_write(const StagedSave& save, std::int64_t lo, std::int64_t hi, DType dtype,
                         std::span<const std::int64_t> trailing, const std::byte* data,
                         std::size_t bytes);

// The metadata, the manifest (with its checksums) and the one rename or exchange into
// place; on an error the staging directory is removed and nothing is published.
Status staged_save_commit(const StagedSave& save);

// Removes the staging directory (the one begin made, while its path leads to it); a second
// call, or one after a commit, does nothing.
void staged_save_abort(const StagedSave& save) noexcept;

}  // namespace shardload
