// The object-storage side of a save (src/legate/save_remote.cc): a destination "s3://B/P/".
// A store has no rename and no positional write into an object, so each shard is one object
// that one point task uploads whole (header, then its rows), the launch tiled so that tile i
// is shard i; one rank (save_once.hpp) uploads the empty shards and the metadata objects, then
// the manifest last: the commit point. Free of Legate; returns Status.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "legate/detail/save_files.hpp"
#include "readers/detail/object_store.hpp"
#include "shardload/save.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

// Where a save to object storage writes, and what was there before it.
struct RemoteDest {
  std::string dest;   // as given, for messages
  std::string dir;    // "s3://B/P/": the prefix, ending in '/', without the query
  std::string query;  // "?endpoint_override=...", or ""
  ObjectStore* store = nullptr;
  std::vector<std::string> old_names;  // the objects there before (an overwrite replaces them)
  bool overwrite = false;

  [[nodiscard]] std::string url(const std::string& name) const { return dir + name + query; }
  [[nodiscard]] std::string dir_url() const { return dir + query; }
};

// Whether save(dest) writes to object storage (an "s3://", "http://" or "https://" URL).
bool is_object_dest(const std::string& dest);

// Checks the options and the destination and gets it ready, before any shard is uploaded:
// kInvalidArgument for what object storage cannot take (zarr, explicit ragged shard rows, an
// http(s):// destination); kIo with EEXIST for a prefix that holds objects and !overwrite,
// or (overwrite) one holding anything a save does not write. With overwrite, the old
// manifest is deleted first, so that no reader takes it for the new objects. Then uploads
// the shards that have no rows (header only), which no point task writes.
Result<RemoteDest> prepare_remote_save(const std::string& dest, const SaveOptions& options,
                                       const SaveSpec& spec);

// The shards the launch uploads, one per tile: those with rows (all but the trailing empty
// ones), each of `spec.offsets[1]` rows but the last.
std::int64_t remote_tiles(const SaveSpec& spec);

// In a point task: starts the upload of shard `shard` of the dataset at `dir_url` ("s3://B/P/"
// and the query) and writes its header; the caller appends the rows, then commits.
Result<std::unique_ptr<ObjectWriter>> open_shard_upload(const std::string& dir_url,
                                                        const SaveSpec& spec, std::int64_t shard);

// After every shard: the metadata objects, the extra files, then (overwrite) the deletion of
// the old objects the new dataset did not replace, then the manifest: the commit point. The
// caller runs options.before_commit before it, on every rank.
Status finish_remote_save(const RemoteDest& d, const SaveSpec& spec, const SaveOptions& options);

// After a failure before the manifest: a save to an empty prefix deletes what it may have
// uploaded (best effort); an overwrite leaves the objects as they are (see docs/save.md).
void abandon_remote_save(const RemoteDest& d, const SaveSpec& spec,
                         const SaveOptions& options) noexcept;

}  // namespace shardload::detail
