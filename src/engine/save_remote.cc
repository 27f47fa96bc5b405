#include "engine/detail/save_remote.hpp"

#include <algorithm>
#include <cerrno>
#include <set>
#include <span>

#include "shardload/formats.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest.hpp"
#include "shardload/storage.hpp"

namespace shardload::detail {

namespace {

WriteSpec write_spec(const SaveSpec& spec) { return {spec.dtype, spec.trailing, spec.row_bytes}; }

// Rows of shard `s`.
std::int64_t shard_rows(const SaveSpec& spec, std::int64_t s) {
  const auto i = static_cast<std::size_t>(s);
  return spec.offsets[i + 1] - spec.offsets[i];
}

const ObjectShardLayout* layout_of(const SaveSpec& spec) {
  return object_shard_layout(spec.format);
}

// Whether each shard is a store of chunk objects (Zarr) rather than one object.
bool chunked(const SaveSpec& spec) { return layout_of(spec)->chunk_rows != nullptr; }

// The refusal of a format that no object layout writes.
std::string not_for_object_storage(const SaveSpec& spec) {
  return "the " + std::string(format_name(spec.format)) +
         " format cannot be saved to object storage (npy, raw and zarr can)";
}

// The objects that hold shard `s`'s rows, below the dataset: the shard itself, or its chunk
// objects ("shard_0000.zarr/0.0", ...), none for a store without bytes.
std::vector<std::string> shard_objects(const SaveSpec& spec, std::int64_t s) {
  std::vector<std::string> out;
  if (auto plan = plan_shard(spec, s)) {
    for (ShardKey& k : plan->keys) out.push_back(std::move(k.key));
  }
  return out;
}

// The names of the metadata objects of the finished dataset (raw's shardload.json, each Zarr
// store's .zarray).
std::vector<std::string> metadata_names_of(const SaveSpec& spec) {
  const ObjectShardLayout* layout = layout_of(spec);
  const WriteSpec ws = write_spec(spec);
  std::vector<WrittenShard> shards;
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    const std::int64_t rows = shard_rows(spec, s);
    ShardPlacement placement;
    if (chunked(spec)) placement.chunk_rows = layout->chunk_rows(ws, rows);
    shards.push_back({save_shard_name(spec.format, s), rows, placement});
  }
  std::vector<std::string> out;
  if (auto files = layout->metadata(ws, shards)) {
    for (auto& [name, text] : *files) out.push_back(std::move(name));
  }
  return out;
}

// What the store's stage, publish and discard are told of a save to object storage.
PublishSteps publish_steps(const RemoteDest& d, const SaveSpec& /*spec*/,
                           const SaveOptions& options) {
  PublishSteps steps;
  steps.commit_key = std::string(kManifestName);
  steps.overwrite = options.overwrite || d.overwrite;
  return steps;
}

// The store's staging of `d`: in place, at the prefix itself, what was there replaced.
Staging staging_of(const RemoteDest& d) {
  Staging s;
  s.location = d.dir_url();
  s.in_place = true;
  for (const std::string& name : d.old_names) s.replaced.push_back({name, ""});
  return s;
}

}  // namespace

ShardUpload::ShardUpload(std::shared_ptr<Store> store, ShardPlan plan, std::string name)
    : store_(std::move(store)), plan_(std::move(plan)), name_(std::move(name)) {
  staging_.in_place = true;
}

std::string ShardUpload::shown() const { return store_->describe(name_); }

Status ShardUpload::open_key(std::size_t k) {
  // Its size is known before its first byte (a chunk's is chunk_rows rows).
  SHARDLOAD_ASSIGN_OR_RETURN(sink_,
                             store_->open_sink(staging_, plan_.keys[k].key, plan_.keys[k].size));
  key_ = k;
  if (k != 0 || plan_.head.empty()) return Status::ok();
  return sink_->write(0, std::as_bytes(std::span(plan_.head.data(), plan_.head.size())));
}

Status ShardUpload::append(const std::byte* src, std::int64_t rows) {
  const auto rb = static_cast<std::int64_t>(plan_.row_bytes);
  if (rows < 0 || rows > plan_.rows - written_) {
    return file_error(
        ErrorCode::kInvalidArgument, shown(),
        "the upload was given more rows than the shard's " + std::to_string(plan_.rows), EINVAL);
  }
  for (const KeyWrite& w : plan_.writes(written_, written_ + rows)) {
    if (!sink_) SHARDLOAD_RETURN_IF_ERROR(open_key(w.key));
    SHARDLOAD_RETURN_IF_ERROR(sink_->write(
        w.offset,
        std::span(src + (w.lo - written_) * rb, static_cast<std::size_t>((w.hi - w.lo) * rb))));
    // A chunk is finished as it fills, the shard's last key at commit.
    const bool full =
        plan_.chunk_rows > 0 && w.hi == (static_cast<std::int64_t>(w.key) + 1) * plan_.chunk_rows;
    if (full && w.key + 1 < plan_.keys.size()) {
      const Status st = sink_->finish();
      sink_.reset();
      SHARDLOAD_RETURN_IF_ERROR(st);
    }
  }
  written_ += rows;
  return Status::ok();
}

Status ShardUpload::commit() {
  if (written_ != plan_.rows && plan_.row_bytes != 0) {
    return file_error(ErrorCode::kInvalidArgument, shown(),
                      "the upload got " + std::to_string(written_) + " of the shard's " +
                          std::to_string(plan_.rows) + " rows",
                      EINVAL);
  }
  if (!sink_ && plan_.chunk_rows == 0) SHARDLOAD_RETURN_IF_ERROR(open_key(0));  // header only
  if (!sink_) return Status::ok();  // a store without bytes
  // The rows a Zarr edge chunk lacks are zeros (the fill): the sink's finish writes them.
  const Status st = sink_->finish();
  sink_.reset();
  return st;
}

Result<std::shared_ptr<Store>> open_save_store(const std::string& dir_url) {
  SHARDLOAD_ASSIGN_OR_RETURN(auto store, open_store(dir_url));
  // The one refusal of a URL no store of this build writes, before any request.
  SHARDLOAD_RETURN_IF_ERROR(store->check_writable());
  return std::shared_ptr<Store>(std::move(store));
}

// What the kernel's file calls cannot reach goes through the object pipeline, which refuses a
// store that cannot be written (prepare_remote_save).
bool is_object_dest(const std::string& dest) { return !path_traits(dest).kernel_files; }

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

bool task_uploads_shard(const SaveSpec& spec, std::int64_t s) {
  return spec.row_bytes > 0 && shard_rows(spec, s) > 0;
}

std::int64_t remote_tiles(const SaveSpec& spec) {
  const std::int64_t rows = spec.offsets.back();
  if (rows == 0 || spec.row_bytes == 0 || !uniform_shards(spec)) return 0;
  const std::int64_t per = spec.offsets[1];
  return (rows + per - 1) / per;
}

Result<RemoteDest> prepare_remote_save(const std::string& dest, const SaveOptions& options,
                                       const SaveSpec& spec) {
  if (const PathTraits traits = path_traits(dest); !traits.writable) {
    return Status(ErrorCode::kInvalidArgument,
                  "save: " + dest + ": " + std::string(traits.scheme_label) +
                      " destinations cannot be written (save writes local paths and s3:// "
                      "URLs)");
  }
  if (layout_of(spec) == nullptr) {
    return Status(ErrorCode::kInvalidArgument,
                  "save: " + dest + ": " + not_for_object_storage(spec));
  }
  // Before any request, the store at `dest` as given: it refuses a prefix that a request
  // would not reach as named (an s3:// key's "." or ".." segments), so the prefix checked below
  // is the one every write and delete uses; and a store that no save can write.
  SHARDLOAD_RETURN_IF_ERROR(open_save_store(dest).status());
  // The prefix, its query, and the store one prefix up that holds its name, as storage names
  // them (whatever the scheme): "s3://B/P/D/" is "D" in "s3://B/P/"; a bucket is no name.
  const Result<StorePlace> place = store_place(dest);
  if (!place) return Status(ErrorCode::kInvalidArgument, "save: " + place.status().message());
  RemoteDest d;
  d.dest = dest;
  d.overwrite = options.overwrite;
  d.query = place->query;
  d.dir = place->location;
  SHARDLOAD_ASSIGN_OR_RETURN(d.store, open_save_store(d.dir_url()));
  // An object of the prefix's own name is no dataset to write into (a local save refuses a
  // destination that is a file). The bucket itself is never an object.
  // Asked of the parent prefix's Store: a stat of the prefix's own name there.
  if (!place->name.empty()) {
    const auto parent = open_store(place->parent);
    if (parent && (*parent)->stat(place->name)) {
      return file_error(ErrorCode::kIo, dest,
                        "the destination is an object (expected a prefix of shards, or "
                        "nothing); name a prefix",
                        options.overwrite ? ENOTDIR : EEXIST);
    }
  }

  // The check (stage() runs it before it makes anything): what is there, which an overwrite
  // replaces, as the store lists it (a prefix with its '/', an object and a prefix of one
  // name both). The store then deletes an old manifest first.
  Store& store = *d.store;
  PublishSteps steps = publish_steps(d, spec, options);
  steps.check = [&](std::vector<ReplacedKey>* replaced) {
    SHARDLOAD_ASSIGN_OR_RETURN(const auto keys, store.list(""));
    for (const std::string& key : keys) {
      const bool is_prefix = key.back() == '/';
      const std::string name = is_prefix ? key.substr(0, key.size() - 1) : key;
      if (!options.overwrite) {
        return file_error(ErrorCode::kIo, dest,
                          "the destination exists and is not empty (it holds '" + key +
                              "'); pass overwrite to replace a dataset saved there",
                          EEXIST);
      }
      // Only what a save writes is replaced: never a user's objects, nor anything below a
      // prefix but a saved store's metadata and chunks.
      const auto foreign = [&](const std::string& rel, bool prefix) {
        return file_error(ErrorCode::kIo, dest,
                          "overwrite replaces only a prefix of saved shards, and it holds '" + rel +
                              (prefix ? "/" : "") +
                              "', which a save does not write; remove it or save elsewhere",
                          EEXIST);
      };
      const ShardWriter* store_writer = is_prefix ? saved_store_writer(name) : nullptr;
      if (is_prefix ? store_writer == nullptr : !is_saved_file_name(name)) {
        return foreign(name, is_prefix);
      }
      if (!is_prefix) {
        replaced->push_back({name, ""});
        continue;
      }
      SHARDLOAD_ASSIGN_OR_RETURN(const auto inside, store.list(key));
      for (const std::string& below : inside) {
        // list() gives the keys below with the prefix in front.
        const std::string f = below.starts_with(key) ? below.substr(key.size()) : below;
        const bool f_prefix = !f.empty() && f.back() == '/';
        const std::string f_name = f_prefix ? f.substr(0, f.size() - 1) : f;
        if (f_prefix || (f_name != store_writer->store_metadata_name() &&
                         !store_writer->is_chunk_entry(f_name, 0, -1))) {
          return foreign(key + f_name, f_prefix);
        }
        replaced->push_back({key + f_name, ""});
      }
      replaced->push_back({key, ""});
    }
    return Status::ok();
  };
  SHARDLOAD_ASSIGN_OR_RETURN(const Staging staging, store.stage("", steps));
  for (const ReplacedKey& r : staging.replaced) d.old_names.push_back(r.key);
  // The shards no task uploads: those without rows (or without bytes), header only (a store
  // without chunks is its metadata, written at the end).
  if (chunked(spec)) return d;
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    if (task_uploads_shard(spec, s)) continue;
    SHARDLOAD_ASSIGN_OR_RETURN(auto empty, open_shard_upload(d.dir_url(), spec, s));
    SHARDLOAD_RETURN_IF_ERROR(empty->commit());
  }
  return d;
}

Result<std::unique_ptr<ShardUpload>> open_shard_upload(const std::string& dir_url,
                                                       const SaveSpec& spec, std::int64_t shard) {
  const std::string url = join_key(dir_url, save_shard_name(spec.format, shard));
  SHARDLOAD_ASSIGN_OR_RETURN(auto store, open_save_store(dir_url));
  if (layout_of(spec) == nullptr) {
    // Refused before any upload (prepare_remote_save); here for a spec that skipped it.
    return file_error(ErrorCode::kIo, url, not_for_object_storage(spec), ENOTSUP);
  }
  SHARDLOAD_ASSIGN_OR_RETURN(ShardPlan plan, plan_shard(spec, shard, store->describe("")));
  return std::make_unique<ShardUpload>(std::move(store), std::move(plan),
                                       save_shard_name(spec.format, shard));
}

Status finish_remote_save(const RemoteDest& d, const SaveSpec& spec, const SaveOptions& options) {
  std::set<std::string> names;
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    for (auto& o : shard_objects(spec, s)) names.insert(std::move(o));
    if (chunked(spec)) names.insert(save_shard_name(spec.format, s) + "/");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const auto store, d.store != nullptr
                                                   ? Result<std::shared_ptr<Store>>(d.store)
                                                   : open_save_store(d.dir_url()));
  // The metadata and extra files through the one writer, with the placement it plans.
  SaveSpec planned = spec;
  SHARDLOAD_RETURN_IF_ERROR(plan_shard_keys(store->describe(""), &planned));
  Staging in_place;
  in_place.in_place = true;
  SHARDLOAD_RETURN_IF_ERROR(write_metadata(*store, in_place, planned, options.extra_files));
  for (auto& name : metadata_names_of(spec)) names.insert(std::move(name));
  for (const auto& [name, text] : options.extra_files) names.insert(name);
  // The store's publish: the old dataset's objects that no new one replaced deleted, then the
  // manifest, the commit point (the protocol of docs/save.md).
  PublishSteps steps = publish_steps(d, spec, options);
  steps.keys.assign(names.begin(), names.end());
  if (options.manifest) {
    steps.seal = [&](const std::string& location) {
      return write_save_manifest(location, options.checksum);
    };
  } else {
    steps.commit_key.clear();
  }
  bool published = false;
  return store->publish(staging_of(d), steps, &published);
}

void abandon_remote_save(const RemoteDest& d, const SaveSpec& spec,
                         const SaveOptions& options) noexcept {
  if (d.overwrite || d.store == nullptr) return;
  try {
    PublishSteps steps = publish_steps(d, spec, options);
    std::set<std::string> names;
    for (std::int64_t s = 0; s < spec.shards(); ++s) {
      for (auto& o : shard_objects(spec, s)) names.insert(std::move(o));
      if (chunked(spec)) names.insert(save_shard_name(spec.format, s) + "/");
    }
    for (auto& name : metadata_names_of(spec)) names.insert(std::move(name));
    for (const auto& [name, text] : options.extra_files) names.insert(name);
    steps.keys.assign(names.begin(), names.end());
    d.store->discard(staging_of(d), steps);
  } catch (...) {  // best effort on a failure path
  }
}

}  // namespace shardload::detail
