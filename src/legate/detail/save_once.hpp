// The once-per-job steps of a save (src/legate/save_once.cc): each runs in a one-point task
// and every rank gets its outcome, so that a save called on every rank of a job makes one
// staging directory, which every rank's tiles fill, and renames it into place once.
#pragma once

#include <string>

#include "engine/detail/save_files.hpp"
#include "engine/detail/save_remote.hpp"
#include "shardload/save.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

// Makes the staging directory beside `dest` and its shard files (create_shard_files, which
// fills the spec's offsets); returns the directory, the same on every rank.
Result<std::string> prepare_save_once(const std::string& dest, SaveSpec* spec);

// Writes the metadata (and the manifest when options.manifest), then renames `staging` to
// `dest` (commit_staging); the same Status on every rank.
// *published: whether the new dataset is at dest (commit_staging's), also on an error.
Status commit_save_once(const std::string& staging, const std::string& dest, const SaveSpec& spec,
                        const SaveOptions& options, bool* published);

// To object storage: prepare_remote_save in one point (the listing, the old manifest's
// deletion, the empty shards); every rank gets the same RemoteDest or the same Status.
Result<RemoteDest> prepare_remote_save_once(const std::string& dest, const SaveOptions& options,
                                            SaveSpec* spec);

// finish_remote_save in one point (the metadata objects, the old objects' deletion, the
// check of `own` and the keys d.written, the manifest last); the same Status on every rank.
// options.before_commit is not called: every rank calls it before this.
Status finish_remote_save_once(const RemoteDest& d, const SaveSpec& spec,
                               const SaveOptions& options, const std::vector<WrittenKey>& own);

}  // namespace shardload::detail
