#include "engine/detail/save_remote.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <thread>

#include "base/detail/interrupt_aside.hpp"
#include "engine/detail/lanes.hpp"
#include "shardload/formats.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/md5.hpp"
#include "storage/detail/store_options.hpp"

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
    if (full && w.key + 1 < plan_.keys.size()) SHARDLOAD_RETURN_IF_ERROR(finish_key());
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
  return finish_key();
}

Status ShardUpload::finish_key() {
  const Status st = sink_->finish();
  if (st) {
    written_keys_.push_back({plan_.keys[key_].key, sink_->size(), sink_->etag()});
    // A completion without an ETag told (Arrow's multipart stream, whose look after it a
    // Ctrl-C ends: the stream completes an upload after the interrupt, once its last part is
    // answered) is told by the MD5 of the bytes sent, as an unanswered upload is: else the
    // clean-up cannot tell it from another writer's, and a first shard left alone loads as the
    // whole dataset.
    if (written_keys_.back().etag.empty()) {
      if (std::string md5 = sink_->sent_md5(); !md5.empty()) {
        begun_keys_.push_back({plan_.keys[key_].key, sink_->size(), std::move(md5)});
      }
    }
  } else if (std::string md5 = sink_->sent_md5(); !md5.empty()) {
    begun_keys_.push_back({plan_.keys[key_].key, sink_->size(), std::move(md5)});
  }
  sink_.reset();
  return st;
}

namespace {

constexpr std::size_t kU32 = 4, kU64 = 8;

void put_n(std::byte*& p, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) *p++ = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

bool get_n(const std::byte*& p, const std::byte* end, std::uint64_t* v, std::size_t n) {
  if (static_cast<std::size_t>(end - p) < n) return false;
  *v = 0;
  for (std::size_t i = 0; i < n; ++i)
    *v |= std::uint64_t{std::to_integer<std::uint8_t>(*p++)} << (8 * i);
  return true;
}

}  // namespace

std::size_t written_record_bytes(const SaveSpec& spec) {
  std::size_t most = 0;
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    std::size_t bytes = 0;
    std::size_t longest = 0;
    for (const std::string& key : shard_objects(spec, s)) {
      bytes += kU32 + key.size() + kU64 + kU32 + kWrittenEtagMax;
      longest = std::max(longest, key.size());
    }
    // And room for the one begun key (its MD5 is 32 hex digits).
    most = std::max(most, bytes + kU32 + longest + kU64 + kU32 + kWrittenEtagMax);
  }
  return 2 * kU32 + most;
}

namespace {

// A count, then the keys that fit in [*p, end); *p is moved past them.
void encode_keys(const std::vector<WrittenKey>& keys, std::byte** p, const std::byte* end) {
  if (static_cast<std::size_t>(end - *p) < kU32) return;
  std::byte* head = *p;
  *p += kU32;
  std::uint64_t n = 0;
  for (const WrittenKey& w : keys) {
    const std::string etag = w.etag.size() <= kWrittenEtagMax ? w.etag : std::string();
    // Room is kept for the count after these.
    if (static_cast<std::size_t>(end - *p) <
        kU32 + w.key.size() + kU64 + kU32 + etag.size() + kU32) {
      break;  // not sized for it: the keys after it are not carried
    }
    put_n(*p, w.key.size(), kU32);
    std::memcpy(*p, w.key.data(), w.key.size());
    *p += w.key.size();
    put_n(*p, w.size, kU64);
    put_n(*p, etag.size(), kU32);
    std::memcpy(*p, etag.data(), etag.size());
    *p += etag.size();
    ++n;
  }
  put_n(head, n, kU32);
}

bool decode_keys(const std::byte** p, const std::byte* end, std::vector<WrittenKey>* keys) {
  std::uint64_t n = 0;
  if (!get_n(*p, end, &n, kU32)) return false;
  for (std::uint64_t i = 0; i < n; ++i) {
    WrittenKey w;
    std::uint64_t len = 0;
    if (!get_n(*p, end, &len, kU32) || static_cast<std::uint64_t>(end - *p) < len) return false;
    w.key.assign(reinterpret_cast<const char*>(*p), static_cast<std::size_t>(len));
    *p += len;
    if (!get_n(*p, end, &w.size, kU64) || !get_n(*p, end, &len, kU32) ||
        static_cast<std::uint64_t>(end - *p) < len) {
      return false;
    }
    w.etag.assign(reinterpret_cast<const char*>(*p), static_cast<std::size_t>(len));
    *p += len;
    if (keys != nullptr) keys->push_back(std::move(w));
  }
  return true;
}

}  // namespace

void encode_written(const std::vector<WrittenKey>& keys, std::byte* out, std::size_t size,
                    const std::vector<WrittenKey>& begun) {
  std::byte* p = out;
  const std::byte* const end = out + size;
  encode_keys(keys, &p, end);
  encode_keys(begun, &p, end);
}

bool decode_written(const std::byte* in, std::size_t size, std::vector<WrittenKey>* keys,
                    std::vector<WrittenKey>* begun) {
  const std::byte* p = in;
  const std::byte* const end = in + size;
  if (!decode_keys(&p, end, keys)) return false;
  // A slot without room for the begun keys' count carries none.
  if (static_cast<std::size_t>(end - p) < kU32) return true;
  return decode_keys(&p, end, begun);
}

Result<std::shared_ptr<Store>> open_save_store(const std::string& dir_url) {
  SHARDLOAD_ASSIGN_OR_RETURN(auto store, open_store(dir_url));
  // The one refusal of a URL no store of this build writes, before any request.
  SHARDLOAD_RETURN_IF_ERROR(store->check_writable());
  return std::shared_ptr<Store>(std::move(store));
}

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
    auto empty = open_shard_upload(d.dir_url(), spec, s);
    Status st = empty.status();
    if (st) st = (*empty)->commit();
    if (!st) {
      // The caller's clean-up is not set up yet: what the preparation uploaded, and the one
      // whose upload got no answer (which the store may have made: a shard alone would load as
      // a dataset of its own), are deleted here as a failed save's are.
      const std::vector<WrittenKey> none;
      const std::vector<WrittenKey> begun = empty ? (*empty)->begun() : none;
      const std::string left = abandon_remote_save(d, spec, options, &none, &st, &begun);
      if (left.empty()) return st;
      return Status(st.code(), st.message() + "; " + left)
          .with_path(st.path())
          .with_errno(st.sys_errno());
    }
    d.written.insert(d.written.end(), (*empty)->written().begin(), (*empty)->written().end());
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

namespace {

// The keys of the save: the uploads' (`own`), the preparation's and the metadata's, by key.
using OwnKeys = std::map<std::string, WrittenKey>;

OwnKeys own_keys(const RemoteDest& d, const std::vector<WrittenKey>& own,
                 const std::vector<WrittenKey>& metadata) {
  OwnKeys out;
  for (const auto* list : {&d.written, &own, &metadata}) {
    for (const WrittenKey& w : *list) out[w.key] = w;
  }
  return out;
}

Status changed_during_the_save(const Store& store, const std::string& key, const std::string& how) {
  return file_error(ErrorCode::kIo, store.describe(key),
                    "changed during the save (another writer?): " + how +
                        "; no manifest was written, so the dataset is not published",
                    ESTALE);
}

// One key as its upload was answered, looked at once more (a HEAD).
Status check_own_key(Store& store, const WrittenKey& w) {
  const std::string& key = w.key;
  auto now = store.version(key);
  if (!now) {
    if (now.status().sys_errno() == ENOENT) {
      return changed_during_the_save(store, key,
                                     "it was written with ETag " + w.etag + ", and is gone now");
    }
    return now.status().with_context("cannot check what the save wrote");
  }
  if (now->size != w.size) {
    return changed_during_the_save(
        store, key,
        "it was written with " + std::to_string(w.size) + " bytes (ETag " + w.etag + "), and is " +
            std::to_string(now->size) + " bytes (ETag " + now->etag + ") now");
  }
  if (!w.etag.empty() && !same_etag(now->etag, w.etag)) {
    return changed_during_the_save(store, key, "ETag was " + w.etag + ", now " + now->etag);
  }
  return Status::ok();
}

// Every key of the save, its HEADs on a few threads (a Zarr save has a key per chunk): the
// first in key order that is missing or of another size or ETag fails the save, named.
Status check_own_keys(Store& store, const OwnKeys& own) {
  std::vector<const WrittenKey*> keys;
  for (const auto& [key, w] : own) keys.push_back(&w);
  if (keys.empty()) return Status::ok();
  constexpr std::size_t kLanes = 16;
  return first_failure_in_lanes(
      keys.size(), std::min(kLanes, keys.size()),
      [&](std::size_t, std::size_t i) { return check_own_key(store, *keys[i]); });
}

// A shard's name below the prefix as given ("shard_0000.npy", "shard_0000.zarr"), or "" where
// its path is spelled otherwise.
std::string name_below(const RemoteDest& d, const Shard& shard) {
  std::string path = shard.path.substr(0, shard.path.find('?'));
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (!path.starts_with(d.dir) || path.size() == d.dir.size()) return {};
  return path.substr(d.dir.size());
}

// The manifest's index of the prefix holds every shard the save wrote. The index is made from
// a listing, and a store whose listings lag its writes (asynchronous container listings, a
// caching proxy) can leave out the last shards: a manifest of the others, which a trusting
// reader takes for the whole dataset, would be short without an error (no gap shows a missing
// trailing shard). *lagging is set where that is why it fails.
Status check_complete(const Store& store, const RemoteDest& d, const SaveSpec& spec,
                      const Layout& layout, bool* lagging) {
  std::set<std::string> found;
  bool untold = false;
  for (const Shard& shard : layout.shards) {
    const std::string name = name_below(d, shard);
    if (name.empty()) untold = true;
    found.insert(name);
  }
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    const std::string name = save_shard_name(spec.format, s);
    if (found.count(name) != 0) continue;
    // Shards named otherwise than below the prefix as given: counted instead.
    if (untold && layout.shards.size() >= static_cast<std::size_t>(spec.shards())) continue;
    *lagging = true;
    return file_error(ErrorCode::kIo, store.describe(name),
                      "written by this save, but the listing of the dataset's prefix does not "
                      "show it (a listing that lags the writes?): the index found " +
                          std::to_string(layout.shards.size()) + " of the save's " +
                          std::to_string(spec.shards()) +
                          " shards; no manifest was written, so the dataset is not published",
                      ESTALE);
  }
  return Status::ok();
}

// The manifest's index of the prefix held to the save's keys: every shard it found is one the
// save wrote, an object shard with the size and ETag its upload was answered with (a store of
// chunks was checked key by key already). What another writer put there since the check is
// never recorded as the save's.
Status check_index(Store& store, const RemoteDest& d, const OwnKeys& own, const Layout& layout) {
  for (const Shard& shard : layout.shards) {
    // A shard named otherwise than below the prefix as given cannot be told: its keys were
    // looked at one by one already.
    const std::string name = name_below(d, shard);
    if (name.empty()) continue;
    if (const auto it = own.find(name); it != own.end()) {
      const WrittenKey& w = it->second;
      if (shard.snapshot.size != w.size ||
          (!w.etag.empty() && shard.snapshot.inode != etag_hash(w.etag))) {
        return changed_during_the_save(store, name,
                                       "the manifest's index found another object there than "
                                       "the one written (ETag " +
                                           w.etag + ")");
      }
      continue;
    }
    const auto below = own.lower_bound(name + "/");
    if (below != own.end() && below->first.starts_with(name + "/")) continue;
    return file_error(ErrorCode::kIo, store.describe(name),
                      "is in the dataset's prefix, but this save did not write it (another "
                      "writer?); no manifest was written, so the dataset is not published",
                      ESTALE);
  }
  return Status::ok();
}

// A Ctrl-C ends every request made while it is pending, a clean-up's too, which would then
// leave all the save failed on; a clean-up is a HEAD and a DELETE a key, so it runs through it,
// for this long at most: on a store gone quiet each request would hold the interrupt for its
// attempts x request_timeout, and a clean-up makes two a key. What it has not done by then is
// left and said so.
constexpr std::chrono::seconds kInterruptedCleanUp{10};
using detail::InterruptSetAside;

// Whether `failure` is the failed write of d's manifest that the store did not refuse (no
// answer, a 5xx, a timeout, a Ctrl-C), whose look (RemoteStore::write) found neither the bytes
// sent nor another object: that manifest may still appear, a store whose reads lag its writes
// showing it later. It is told by its URL and its errno (EACCES, ENOENT: refused).
bool manifest_may_appear(const RemoteDest& d, const Status& failure) {
  const auto bare = [](const std::string& url) { return url.substr(0, url.find('?')); };
  if (failure.is_ok() ||
      bare(failure.path()) != bare(redact_secrets(d.url(std::string(kManifestName))))) {
    return false;
  }
  return failure.sys_errno() != EACCES && failure.sys_errno() != ENOENT;
}

// Why a failed save's clean-up deletes nothing at all, or "". A manifest under the prefix is
// another writer's (this save fails before its own is written, or where a look found another
// object than its own there: RemoteStore::write), or its own that the store took after all:
// either way a published dataset, whose objects those may be. And where this save's manifest
// may still appear, deleting its shards would publish a manifest of deleted shards: everything
// stays, a dataset whole where the manifest appears.
std::string kept_whole(const RemoteDest& d, Store& store, const Status* failure) {
  const std::string manifest(kManifestName);
  const bool may_appear = failure != nullptr && manifest_may_appear(d, *failure);
  // Where the manifest may appear, nothing is deleted whatever a look finds; after a Ctrl-C
  // that look (its attempts on a store gone quiet: 150 s with the defaults) is not made.
  if (may_appear && InterruptSetAside::active()) {
    return "nothing deleted: this save's manifest may still appear at " + store.describe(manifest) +
           ", and it names these objects (there, the dataset is published; if it does not "
           "appear, the prefix holds this save's objects without a manifest: save again with "
           "overwrite)";
  }
  if (const auto there = store.version(manifest); there) {
    return "the clean-up found " + store.describe(manifest) +
           (may_appear ? ": a manifest is there (another writer's, or this save's, stored "
                         "after all): nothing deleted"
                       : ": another writer's manifest is there: nothing deleted");
  } else if (there.status().sys_errno() != ENOENT) {
    return "the clean-up cannot look at " + store.describe(manifest) + " (" +
           there.status().message() +
           "), and another writer's manifest may be there: nothing deleted";
  }
  if (may_appear) {
    return "nothing deleted: this save's manifest may still appear at " + store.describe(manifest) +
           ", and it names these objects (there, the dataset is published; if it does not "
           "appear, the prefix holds this save's objects without a manifest: save again with "
           "overwrite)";
  }
  return {};
}

// The keys of metadata objects whose upload was begun (with the bytes sent), as
// write_metadata records them before each PUT.
using BegunKeys = std::vector<std::pair<std::string, std::string>>;

// The time the clean-up phase now beginning may hold a pending Ctrl-C: what is left of
// kInterruptedCleanUp since the save's clean-up first ran under it. The phases (the metadata's
// at a failed commit, then the shards') each had the whole bound, twice the documented time.
std::chrono::milliseconds clean_up_time(const RemoteDest& d) {
  using std::chrono::milliseconds;
  if (!interrupt_requested() || d.clean_up == nullptr) return kInterruptedCleanUp;
  const std::lock_guard lock(d.clean_up->mu);
  const auto now = std::chrono::steady_clock::now();
  if (!d.clean_up->began) d.clean_up->began = now;
  const auto left =
      std::chrono::duration_cast<milliseconds>(*d.clean_up->began + kInterruptedCleanUp - now);
  return std::max(left, milliseconds(0));
}

// What a clean-up left, for the save's error: objects at the save's names that are not (or may
// not be) its own, and the save's own objects it could not delete, with what it kept with them.
struct Left {
  std::string another;
  std::string own;
  void add_another(const std::string& shown, const std::string& why) {
    another += (another.empty() ? "" : "; ") + shown + " " + why;
  }
  void add_own(const std::string& what) { own += (own.empty() ? "" : "; ") + what; }
  [[nodiscard]] std::string text() const {
    std::string out;
    if (!another.empty()) out = "the clean-up left what is not this save's: " + another;
    if (!own.empty()) {
      out += (out.empty() ? "" : "; ") +
             std::string("the clean-up could not delete all that this save wrote, and left: ") +
             own + " (delete what is left, or save there again with overwrite)";
    }
    return out;
  }
};

// Deletes the save's own `key`; false (named in `left`) where its DELETE failed.
bool removed(Store& store, const std::string& key, Left& left) {
  const Status st = store.remove(key);
  if (st) return true;
  left.add_own(store.describe(key) + " (its DELETE failed: " + st.message() + ")");
  return false;
}

// A key of the save as its upload was answered (`w`, with the ETag of that answer), deleted
// while a HEAD still shows it so; another object there is left and named. Returns whether the
// save's own object is still there: its DELETE failed, or it cannot be looked at.
bool drop_answered(Store& store, const WrittenKey& w, Left& left) {
  auto now = store.version(w.key);
  if (!now) {
    if (now.status().sys_errno() == ENOENT) return false;
    left.add_own(store.describe(w.key) + " (cannot be looked at: " + now.status().message() + ")");
    return true;
  }
  if (now->size != w.size || !same_etag(now->etag, w.etag)) {
    left.add_another(store.describe(w.key),
                     "changed since this save wrote it (another writer?): "
                     "ETag " +
                         w.etag + " written, " + now->etag + " found; it is left");
    return false;
  }
  return !removed(store, w.key, left);
}

// A metadata object whose upload failed unanswered (a Ctrl-C, a connection cut after the
// body, a timeout) may have been stored all the same, and a Zarr store of its .zarray alone
// reads as its fill value: a HEAD looks, and a GET of that version; exactly the bytes sent
// there is deleted (an object of those very bytes is what this upload leaves, as a plain PUT's
// MD5 ETag says of the keys answered), nothing there is nothing to do, anything else is left
// and named. Returns whether what may be the save's object is still there.
bool drop_unanswered(Store& store, const std::string& key, const std::string& sent, Left& left) {
  const std::string was = "was being uploaded when the save failed, and ";
  auto there = store.stat(key);
  if (!there) {
    if (there.status().sys_errno() == ENOENT) return false;
    left.add_own(store.describe(key) + " (" + was +
                 "cannot be looked at: " + there.status().message() + ")");
    return true;
  }
  std::string why;
  if (there->size != sent.size()) {
    why = std::to_string(there->size) + " bytes, not the " + std::to_string(sent.size()) + " sent";
  } else {
    std::vector<std::byte> back(sent.size());
    const auto got = store.read(key, 0, back, there->generation);
    if (!got) {
      left.add_own(store.describe(key) + " (" + was + "cannot be read: " + got.status().message() +
                   ")");
      return true;
    }
    const auto bytes = std::as_bytes(std::span(sent.data(), sent.size()));
    if (*got == sent.size() && std::equal(back.begin(), back.end(), bytes.begin())) {
      return !removed(store, key, left);
    }
    why = "of " + std::to_string(sent.size()) + " bytes, but not the bytes sent";
  }
  left.add_another(store.describe(key),
                   was + "holds another object (" + why + "; another writer?); it is left");
  return false;
}

// A key whose upload sent every byte and got no answer, or an answer without an ETag
// (ShardUpload::begun: `w`, the MD5 of the bytes sent as its ETag), may be the save's object:
// left, a first shard alone loads as a dataset of its own rows. A HEAD looks: nothing there is
// nothing to do; an object of that size whose ETag is that MD5 (a plain PUT's ETag is the MD5
// of its bytes) is deleted; one whose ETag is no plain MD5 (a multipart upload's, a digest of
// its parts' digests, cut where the store's client chose) or none is read back and deleted
// where its bytes have that MD5. Anything else is another writer's, left and named. Returns
// whether what may be the save's object is still there (not looked at, not read, not deleted).
bool drop_begun(Store& store, const WrittenKey& w, Left& left) {
  const std::string was = "was being uploaded when the save failed, and ";
  const auto another = [&](const std::string& why) {
    left.add_another(store.describe(w.key),
                     was + "holds another object (" + why + "; another writer?); it is left");
    return false;
  };
  const auto unknown = [&](const std::string& why) {
    left.add_own(store.describe(w.key) + " (" + was + why + ")");
    return true;
  };
  auto now = store.version(w.key);
  if (!now) {
    if (now.status().sys_errno() == ENOENT) return false;
    return unknown("cannot be looked at: " + now.status().message());
  }
  if (now->size != w.size) {
    return another(std::to_string(now->size) + " bytes, not the " + std::to_string(w.size) +
                   " sent");
  }
  const std::string etag = normalized_etag(now->etag);
  if (same_etag(etag, w.etag)) return !removed(store, w.key, left);
  if (!etag.empty() && etag.find('-') == std::string::npos) {
    return another("ETag " + now->etag + ", where the bytes sent have the MD5 " + w.etag);
  }
  const auto there = store.stat(w.key);
  if (!there) return unknown("cannot be looked at: " + there.status().message());
  constexpr std::size_t kPiece = std::size_t{8} << 20;
  std::vector<std::byte> piece(static_cast<std::size_t>(std::min<std::uint64_t>(w.size, kPiece)));
  Md5 md5;
  for (std::uint64_t at = 0; at < w.size;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(w.size - at, kPiece));
    const auto got = store.read(w.key, at, std::span(piece.data(), n), there->generation);
    if (!got || *got != n) {
      return unknown("cannot be read back to compare with the bytes sent: " +
                     (got ? std::string("short read") : got.status().message()));
    }
    md5.update(std::span(piece.data(), n));
    at += n;
  }
  if (md5.hex() == w.etag) return !removed(store, w.key, left);
  return another("of " + std::to_string(w.size) + " bytes, but not the bytes sent");
}

// The metadata object of shard `s`'s store (Zarr's "shard_0000.zarr/.zarray"), or "" for a
// format whose shards are single objects.
std::string store_metadata(const SaveSpec& spec, std::int64_t s) {
  if (!chunked(spec)) return {};
  const std::string below = save_shard_name(spec.format, s) + "/";
  for (const std::string& name : metadata_names_of(spec)) {
    if (name.starts_with(below)) return name;
  }
  return {};
}

// The object a load of the prefix starts from, among the metadata: the first store's metadata
// (Zarr), raw's sidecar; "" for npy.
std::string first_metadata(const SaveSpec& spec) {
  if (chunked(spec)) return store_metadata(spec, 0);
  const std::vector<std::string> names = metadata_names_of(spec);
  return names.empty() ? std::string() : names.front();
}

constexpr const char* kRanOut =
    "the clean-up ran out of its time under the Ctrl-C before it was done, and left the save's "
    "objects it had not deleted";

// After a failed commit of a save to an empty prefix: the metadata objects it wrote (each Zarr
// store's .zarray, raw's sidecar, the extra files), deleted as abandon_remote_save deletes the
// shards, each only while a HEAD shows what was written. They are written here, at the commit
// (a Legate save's in a task of its own), so abandon_remote_save does not know them; left, a
// Zarr store of its .zarray alone reads as its fill value, and the prefix refuses a new save as
// not empty. The one whose upload got no answer (`begun`, not in `metadata`) is looked at
// (drop_unanswered). The first store's .zarray (raw: the sidecar) goes first, and where it
// stays (its DELETE failing) every other is kept: abandon_remote_save then keeps the chunks
// of each store whose .zarray is left, and everything after a first one left, so the prefix
// holds whole stores, never a .zarray without its chunks. Returns `failed`, with what was
// left added.
Status drop_metadata(const RemoteDest& d, Store& store, const SaveSpec& spec,
                     const SaveOptions& /*options*/, const std::vector<WrittenKey>& metadata,
                     const BegunKeys& begun, const Status& failed) noexcept {
  if ((d.overwrite && !d.old_names.empty()) || (metadata.empty() && begun.empty())) {
    return failed;
  }
  const std::chrono::milliseconds time = clean_up_time(d);
  const InterruptSetAside set_aside(time);
  Left left;
  try {
    // What keeps everything is said once, by abandon_remote_save.
    if (time.count() == 0) {
      left.add_own(kRanOut);
    } else if (kept_whole(d, store, &failed).empty()) {
      // Each key once, in key order, the first metadata first.
      std::map<std::string, std::function<bool()>> drops;
      for (const auto& [key, sent] : begun) {
        drops[key] = [&, key = key, sent = sent] {
          return drop_unanswered(store, key, sent, left);
        };
      }
      for (const WrittenKey& w : metadata) {
        drops[w.key] = [&, w = w] { return drop_answered(store, w, left); };
      }
      const std::string first = first_metadata(spec);
      bool go_on = true;
      if (const auto it = drops.find(first); it != drops.end()) {
        if (it->second()) {
          go_on = false;
          if (drops.size() > 1) {
            left.add_own("the save's other metadata objects, kept with " + store.describe(first) +
                         " so that no store is left as its metadata without its chunks (which "
                         "loads as its fill value)");
          }
        }
        drops.erase(it);
      }
      for (auto& [key, drop] : drops) {
        if (!go_on) break;
        (void)drop();
      }
    }
  } catch (...) {  // best effort on a failure path
  }
  const std::string text = left.text();
  if (text.empty()) return failed;
  return Status(failed.code(), failed.message() + "; " + text)
      .with_path(failed.path())
      .with_errno(failed.sys_errno())
      .with_stored_untold(failed.stored_untold());
}

}  // namespace

Status finish_remote_save(const RemoteDest& d, const SaveSpec& spec, const SaveOptions& options,
                          const std::vector<WrittenKey>* own) {
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
  std::vector<WrittenKey> metadata;
  BegunKeys begun;
  if (Status st = write_metadata(*store, in_place, planned, options.extra_files, &metadata, &begun);
      !st) {
    return drop_metadata(d, *store, spec, options, metadata, begun, st);
  }
  for (auto& name : metadata_names_of(spec)) names.insert(std::move(name));
  for (const auto& [name, text] : options.extra_files) names.insert(name);
  const OwnKeys mine = own != nullptr ? own_keys(d, *own, metadata) : OwnKeys();
  // The store's publish: the old dataset's objects that no new one replaced deleted, then the
  // check of the save's own keys and the manifest, the commit point (the protocol of
  // docs/save.md).
  PublishSteps steps = publish_steps(d, spec, options);
  steps.keys.assign(names.begin(), names.end());
  steps.seal = [&](const std::string& location) {
    if (own != nullptr) SHARDLOAD_RETURN_IF_ERROR(check_own_keys(*store, mine));
    if (!options.manifest) return Status::ok();
    bool lagging = false;
    const std::function<Status(const Layout&)> held = [&](const Layout& layout) {
      SHARDLOAD_RETURN_IF_ERROR(check_complete(*store, d, spec, layout, &lagging));
      return own != nullptr ? check_index(*store, d, mine, layout) : Status::ok();
    };
    // A listing that lags is asked again after a pause (2 more times, 0.5 s and 1 s), then
    // the save fails naming the shard missing.
    for (int attempt = 0;; ++attempt) {
      lagging = false;
      const Status st = write_save_manifest(location, options.checksum, held);
      if (st || !lagging || attempt == 2) return st;
      std::this_thread::sleep_for(std::chrono::milliseconds(500 << attempt));
    }
  };
  if (!options.manifest) steps.commit_key.clear();
  bool published = false;
  const Status st = store->publish(staging_of(d), steps, &published);
  if (st || published) return st;
  return drop_metadata(d, *store, spec, options, metadata, begun, st);
}

std::string abandon_remote_save(const RemoteDest& d, const SaveSpec& spec,
                                const SaveOptions& options, const std::vector<WrittenKey>* own,
                                const Status* failure,
                                const std::vector<WrittenKey>* begun) noexcept {
  // An overwrite that replaced nothing (the prefix was empty at its check) wrote only keys of
  // its own, as a save to an empty prefix does; one that replaced a dataset may have put a new
  // key where an old one was, which the clean-up cannot give back.
  if ((d.overwrite && !d.old_names.empty()) || d.store == nullptr) return {};
  const std::chrono::milliseconds time = clean_up_time(d);
  const InterruptSetAside set_aside(time);
  Store& store = *d.store;
  Left left;
  try {
    // A key is deleted while it shows the size and ETag its upload was answered with, and a
    // plain PUT's ETag is the MD5 of its bytes: another writer's object of the same bytes
    // looks like this save's.
    if (time.count() == 0) return Left{"", kRanOut}.text();
    if (std::string why = kept_whole(d, store, failure); !why.empty()) return why;
    // The save's keys as their uploads were answered, and those that sent every byte and got
    // no answer, or none with an ETag (which the store may have made all the same).
    std::map<std::string, WrittenKey> answered, unanswered;
    if (own != nullptr) {
      for (const auto* list : {&d.written, own}) {
        for (const WrittenKey& w : *list) answered[w.key] = w;
      }
      if (begun != nullptr) {
        for (const WrittenKey& w : *begun) {
          const auto it = answered.find(w.key);
          if (it == answered.end() || it->second.etag.empty()) unanswered[w.key] = w;
        }
      }
    }
    // Whether the save's own object at `key` is still there once the clean-up is done with it.
    const auto drop = [&](const std::string& key) {
      if (own == nullptr) return !removed(store, key, left);
      if (const auto it = unanswered.find(key); it != unanswered.end()) {
        return drop_begun(store, it->second, left);
      }
      const auto it = answered.find(key);
      if (it == answered.end()) return false;  // never finished by this save: not its own
      if (it->second.etag.empty()) {
        left.add_another(store.describe(key),
                         "was not answered with an ETag, so whose it is now is unknown; it is "
                         "left");
        return false;
      }
      return drop_answered(store, it->second, left);
    };
    // Shard by shard from the first, which a load of the prefix starts from: where the first
    // shard stays (its DELETE failing, or its store's metadata left), everything after it is
    // kept too, for a first shard left alone loads as the whole dataset. Where a store's
    // metadata is there, its chunks are kept with it (the metadata alone loads as its fill
    // value). Without the save's keys known, its names are deleted.
    std::vector<std::string> markers;
    std::set<std::string> stores;  // the stores' metadata names
    bool blocked = false;
    for (std::int64_t s = 0; s < spec.shards(); ++s) {
      bool stays = false;
      if (const std::string meta = store_metadata(spec, s); !meta.empty()) {
        stores.insert(meta);
        if (own == nullptr) (void)removed(store, meta, left);
        const auto there = store.version(meta);
        if (there || there.status().sys_errno() != ENOENT) {
          stays = true;
          left.add_own("the chunks of " + store.describe(save_shard_name(spec.format, s) + "/") +
                       ", kept with its " + store.describe(meta) +
                       (there ? ", which is there"
                              : ", which cannot be looked at (" + there.status().message() + ")") +
                       ", so that the store loads as written, not as its fill value");
        } else {
          markers.push_back(save_shard_name(spec.format, s) + "/");
        }
      }
      if (!stays) {
        for (const std::string& key : shard_objects(spec, s)) {
          if (drop(key)) stays = true;
        }
      }
      if (stays && s == 0) {
        blocked = true;
        if (spec.shards() == 1) continue;
        left.add_own(
            "every other object of the save, kept with its first shard so that the "
            "first shard is not left alone (it would load as the whole dataset)");
        break;
      }
    }
    // What is not a shard's: raw's sidecar and the extra files (without the save's keys known:
    // with them, drop_metadata deleted those at the failed commit).
    if (own == nullptr && !blocked) {
      for (const std::string& name : metadata_names_of(spec)) {
        if (!stores.contains(name)) (void)removed(store, name, left);
      }
      for (const auto& [name, text] : options.extra_files) (void)removed(store, name, left);
    }
    // The stores' prefixes emptied (a marker a store's client may have made).
    if (!markers.empty()) {
      PublishSteps steps = publish_steps(d, spec, options);
      steps.overwrite = false;
      steps.keys = markers;
      store.discard(staging_of(d), steps);
    }
  } catch (...) {  // best effort on a failure path
  }
  return left.text();
}

}  // namespace shardload::detail
