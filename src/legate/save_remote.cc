#include "legate/detail/save_remote.hpp"

#include <algorithm>
#include <cerrno>
#include <set>

#include "shardload/formats.hpp"
#include "shardload/io.hpp"
#include "shardload/manifest.hpp"

namespace shardload::detail {

namespace {

WriteSpec write_spec(const SaveSpec& spec) { return {spec.dtype, spec.trailing, spec.row_bytes}; }

// Rows of shard `s`.
std::int64_t shard_rows(const SaveSpec& spec, std::int64_t s) {
  const auto i = static_cast<std::size_t>(s);
  return spec.offsets[i + 1] - spec.offsets[i];
}

// Whether every shard has the rows of the first, but a shorter last one with rows and empty
// ones after it: what a launch whose tile i is shard i can write.
bool uniform_shards(const SaveSpec& spec) {
  const std::int64_t rows = spec.offsets.back();
  if (rows == 0) return true;
  const std::int64_t per = spec.offsets[1];
  if (per <= 0) return false;
  for (std::size_t s = 0; s < spec.offsets.size(); ++s) {
    if (spec.offsets[s] != std::min(rows, static_cast<std::int64_t>(s) * per)) return false;
  }
  return true;
}

Status upload_whole(ObjectStore& store, const std::string& url, const std::string& bytes) {
  SHARDLOAD_ASSIGN_OR_RETURN(auto w, store.open_writer(url));
  SHARDLOAD_RETURN_IF_ERROR(w->append(bytes.data(), bytes.size()));
  return w->commit();
}

const ObjectShardLayout* layout_of(const SaveSpec& spec) {
  return object_shard_layout(spec.format);
}

// The metadata objects of the finished dataset (raw's shardload.json), as (name, contents).
std::vector<std::pair<std::string, std::string>> metadata_of(const SaveSpec& spec) {
  const ObjectShardLayout* layout = layout_of(spec);
  std::vector<WrittenShard> shards;
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    shards.push_back({save_shard_name(spec.format, s), shard_rows(spec, s), ShardPlacement{}});
  }
  return layout->metadata(write_spec(spec), shards);
}

}  // namespace

bool is_object_dest(const std::string& dest) { return is_remote_url(dest); }

std::int64_t remote_tiles(const SaveSpec& spec) {
  const std::int64_t rows = spec.offsets.back();
  if (rows == 0 || spec.row_bytes == 0) return 0;
  const std::int64_t per = spec.offsets[1];
  return (rows + per - 1) / per;
}

Result<RemoteDest> prepare_remote_save(const std::string& dest, const SaveOptions& options,
                                       const SaveSpec& spec) {
  if (is_http_url(dest)) {
    return Status(ErrorCode::kInvalidArgument,
                  "save: " + dest +
                      ": http(s):// destinations cannot be written (save writes local paths "
                      "and s3:// URLs)");
  }
  if (layout_of(spec) == nullptr) {
    return Status(ErrorCode::kInvalidArgument,
                  "save: " + dest + ": the " + std::string(format_name(spec.format)) +
                      " format cannot be saved to object storage yet (npy and raw can)");
  }
  if (!uniform_shards(spec)) {
    return Status(ErrorCode::kInvalidArgument,
                  "save: " + dest +
                      ": shards of chosen rows cannot be saved to object storage, where each "
                      "shard is uploaded by one task: every shard but the last ones must have "
                      "the rows of the first (use num_shards)");
  }
  RemoteDest d;
  d.dest = dest;
  d.overwrite = options.overwrite;
  SHARDLOAD_ASSIGN_OR_RETURN(d.store, writable_object_store(dest));
  const auto q = dest.find('?');
  std::string base = dest.substr(0, q);
  d.query = q == std::string::npos ? std::string() : dest.substr(q);
  while (base.size() > 5 && base.back() == '/') base.pop_back();
  if (base.size() <= 5) {
    return Status(ErrorCode::kInvalidArgument, "save: " + dest + ": the URL names no bucket");
  }
  d.dir = base + "/";
  // An object of the prefix's own name is no dataset to write into (a local save refuses a
  // destination that is a file). The bucket itself is never an object.
  if (base.find('/', 5) != std::string::npos) {
    if (RemoteIo* io = remote_io(); io != nullptr) {
      const auto object = io->is_object(base + d.query);
      if (object && *object) {
        return file_error(ErrorCode::kIo, dest,
                          "the destination is an object (expected a prefix of shards, or "
                          "nothing); name a prefix",
                          options.overwrite ? ENOTDIR : EEXIST);
      }
    }
  }

  SHARDLOAD_ASSIGN_OR_RETURN(const auto entries, d.store->list_entries(d.dir_url()));
  for (const ObjectEntry& e : entries) {
    if (!options.overwrite) {
      return file_error(ErrorCode::kIo, dest,
                        "the destination exists and is not empty (it holds '" + e.name +
                            (e.prefix ? "/" : "") +
                            "'); pass overwrite to replace a dataset saved there",
                        EEXIST);
    }
    // Only what a save writes is replaced: never a user's objects, nor anything below
    // another prefix (this save writes no stores).
    if (e.prefix || !is_saved_file_name(e.name)) {
      return file_error(ErrorCode::kIo, dest,
                        "overwrite replaces only a prefix of saved shards, and it holds '" +
                            e.name + (e.prefix ? "/" : "") +
                            "', which a save does not write; remove it or save elsewhere",
                        EEXIST);
    }
    d.old_names.push_back(e.name);
  }
  // The old manifest goes first: a reader that trusts a manifest must not take the old one
  // for the new objects, which replace the old ones under the same names.
  if (std::find(d.old_names.begin(), d.old_names.end(), kManifestName) != d.old_names.end()) {
    SHARDLOAD_RETURN_IF_ERROR(d.store->remove(d.url(std::string(kManifestName))));
  }
  // The shards no tile uploads: those without rows (or without bytes), header only.
  const ObjectShardLayout* layout = layout_of(spec);
  const WriteSpec ws = write_spec(spec);
  for (std::int64_t s = remote_tiles(spec); s < spec.shards(); ++s) {
    const std::int64_t rows = shard_rows(spec, s);
    SHARDLOAD_RETURN_IF_ERROR(
        upload_whole(*d.store, d.url(save_shard_name(spec.format, s)), layout->head(ws, rows)));
  }
  return d;
}

Result<std::unique_ptr<ObjectWriter>> open_shard_upload(const std::string& dir_url,
                                                        const SaveSpec& spec, std::int64_t shard) {
  const auto q = dir_url.find('?');
  const std::string url = dir_url.substr(0, q) + save_shard_name(spec.format, shard) +
                          (q == std::string::npos ? std::string() : dir_url.substr(q));
  SHARDLOAD_ASSIGN_OR_RETURN(ObjectStore * store, writable_object_store(url));
  const ObjectShardLayout* layout = layout_of(spec);
  if (layout == nullptr) {
    // Refused before any upload (prepare_remote_save); here for a spec that skipped it.
    return file_error(ErrorCode::kIo, url,
                      "the " + std::string(format_name(spec.format)) +
                          " format cannot be saved to object storage yet (npy and raw can)",
                      ENOTSUP);
  }
  SHARDLOAD_ASSIGN_OR_RETURN(auto w, store->open_writer(url));
  const std::string head = layout->head(write_spec(spec), shard_rows(spec, shard));
  SHARDLOAD_RETURN_IF_ERROR(w->append(head.data(), head.size()));
  return w;
}

Status finish_remote_save(const RemoteDest& d, const SaveSpec& spec, const SaveOptions& options) {
  std::set<std::string> names;
  for (std::int64_t s = 0; s < spec.shards(); ++s) names.insert(save_shard_name(spec.format, s));
  for (const auto& [name, text] : metadata_of(spec)) {
    SHARDLOAD_RETURN_IF_ERROR(upload_whole(*d.store, d.url(name), text));
    names.insert(name);
  }
  for (const auto& [name, text] : options.extra_files) {
    SHARDLOAD_RETURN_IF_ERROR(upload_whole(*d.store, d.url(name), text));
    names.insert(name);
  }
  // The old dataset's objects that no new one replaced (shards beyond the new count, another
  // format's), before the manifest: the manifest is made from what the prefix then holds,
  // exactly the new dataset, and a reader without it sees that too from then on.
  if (options.manifest) names.insert(std::string(kManifestName));
  for (const std::string& old : d.old_names) {
    if (names.count(old) != 0) continue;
    const Status st = d.store->remove(d.url(old));
    if (!st) {
      return file_error(ErrorCode::kIo, d.dest,
                        "cannot delete the old dataset's object '" + old + "' (" + st.message() +
                            "); the new dataset's manifest was not written",
                        st.sys_errno());
    }
  }
  if (options.manifest) {
    SHARDLOAD_RETURN_IF_ERROR(write_save_manifest(d.dir_url(), options.checksum));
  }
  return Status::ok();
}

void abandon_remote_save(const RemoteDest& d, const SaveSpec& spec,
                         const SaveOptions& options) noexcept {
  if (d.overwrite || d.store == nullptr) return;
  try {
    // The prefix was empty when the save began: whatever has these names is this save's.
    for (std::int64_t s = 0; s < spec.shards(); ++s) {
      (void)d.store->remove(d.url(save_shard_name(spec.format, s)));
    }
    for (const auto& [name, text] : metadata_of(spec)) (void)d.store->remove(d.url(name));
    for (const auto& [name, text] : options.extra_files) (void)d.store->remove(d.url(name));
  } catch (...) {  // best effort on a failure path
  }
}

}  // namespace shardload::detail
