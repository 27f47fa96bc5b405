// The object-storage side of a save (src/engine/save_remote.cc): a destination "s3://B/P/",
// reached through SaveJob (save_job.hpp), whose in-place begin, units, publish and abandon
// these are. A store has no rename and no positional write into an object, so each shard is
// one object (or, for Zarr, a store of chunk objects) that one writer uploads whole, in order;
// the job's begin uploads the empty shards, its publish the metadata objects, then the
// manifest last: the commit point. Free of any runtime; returns Status.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/detail/save_files.hpp"
#include "readers/detail/object_layout.hpp"
#include "shardload/save_options.hpp"
#include "shardload/status.hpp"
#include "shardload/storage.hpp"

namespace shardload::detail {

// Under a pending Ctrl-C a failed save's clean-up runs through the interrupt for a bounded
// time: one bound for all of it (the metadata's at a failed commit, then the shards'), so its
// phases share when it began.
struct CleanUpClock {
  std::mutex mu;
  std::optional<std::chrono::steady_clock::time_point> began;
};

// Where a save to object storage writes, and what was there before it.
struct RemoteDest {
  std::string dest;   // as given, for messages
  std::string dir;    // "s3://B/P/": the prefix, ending in '/', without the query
  std::string query;  // "?endpoint_override=...", or ""
  // The store at the prefix (dir_url()): every listing, write and delete of the save goes
  // through it. Null until the destination was checked (prepare_remote_save).
  std::shared_ptr<Store> store;
  // The objects there before, which an overwrite replaces: "shard_0000.npy", a store's
  // "shard_0000.zarr/0.0", and the store itself, "shard_0000.zarr/", after its objects.
  std::vector<std::string> old_names;
  bool overwrite = false;
  // What the preparation wrote itself (the shards without bytes, header only), as their
  // uploads were answered: part of the save's own keys (finish_remote_save).
  std::vector<WrittenKey> written;
  // Shared by the copies of this destination, as the clean-up's phases are.
  std::shared_ptr<CleanUpClock> clean_up = std::make_shared<CleanUpClock>();

  [[nodiscard]] std::string url(const std::string& name) const { return dir + name + query; }
  [[nodiscard]] std::string dir_url() const { return dir + query; }
};

// Checks the options and the destination and gets it ready, before any shard is uploaded:
// kInvalidArgument for what object storage cannot take (a format without a writer, an
// http(s):// destination); kIo with EEXIST for a prefix that holds
// objects and !overwrite, or (overwrite) one holding anything a save does not write (in a
// store: anything but its metadata and chunk names). With overwrite, the old
// manifest is deleted first, so that no reader takes it for the new objects. Then uploads
// the shards that have no rows (header only), which no point task writes.
Result<RemoteDest> prepare_remote_save(const std::string& dest, const SaveOptions& options,
                                       const SaveSpec& spec);

// Whether every shard has the rows of the first but a shorter last one with rows and empty ones
// after it (what num_shards makes): then the shards with rows are units of `spec.offsets[1]`
// rows, one launch whose tile i is shard i (SaveJob::units). Shards of chosen rows
// (SaveOptions:: shard_rows) get a one-point launch each instead.
bool uniform_shards(const SaveSpec& spec);

// Whether a point task uploads shard `s`: it has bytes. The others (no rows, or rows of no
// bytes) are uploaded header only by prepare_remote_save.
bool task_uploads_shard(const SaveSpec& spec, std::int64_t s);

// One shard's upload by one point task: the save's one writer (ShardPlan's keys through the
// store's sinks, save_files.hpp) where a key cannot be written after it is made. Its rows come
// in order; each key is opened on its first rows and finished as it fills (a Zarr chunk of
// chunk_rows rows), the last at commit; a key not finished is aborted with the upload.
class ShardUpload {
 public:
  // `store`: the store at the dataset's prefix ("s3://B/P/" and its query), written in place.
  ShardUpload(std::shared_ptr<Store> store, ShardPlan plan, std::string name);
  // The shard's next `rows` rows, dense C-order.
  Status append(const std::byte* src, std::int64_t rows);
  // After every row: the last key (a Zarr chunk padded with zeros to its full size by the
  // sink's finish, as Zarr v2 stores an edge chunk; a header-only object for a shard without
  // rows).
  Status commit();
  // The keys finished so far (all of the shard's after commit), each with its size and the
  // ETag its upload was answered with: what the save's commit checks and its clean-up deletes.
  [[nodiscard]] const std::vector<WrittenKey>& written() const { return written_keys_; }
  // The key whose upload sent every byte and then failed (its answer never came: a Ctrl-C, a
  // lost answer, a timeout; or a refusal), with its size and the MD5 of the bytes sent in place
  // of an ETag (KeySink::sent_md5): the store may have made the object all the same, and a
  // clean-up deletes it where it is provably those bytes (abandon_remote_save). At most one
  // failed: an upload stops at its first failure. A key finished whose completion told no ETag
  // (Arrow's multipart stream, its look after the completion ended by a Ctrl-C) is here too.
  [[nodiscard]] const std::vector<WrittenKey>& begun() const { return begun_keys_; }

 private:
  Status finish_key();
  Status open_key(std::size_t k);
  [[nodiscard]] std::string shown() const;

  std::shared_ptr<Store> store_;
  Staging staging_;  // in place, at the store's location
  ShardPlan plan_;
  std::string name_;
  std::unique_ptr<KeySink> sink_;
  std::size_t key_ = 0;  // the key sink_ writes
  std::int64_t written_ = 0;
  std::vector<WrittenKey> written_keys_;
  std::vector<WrittenKey> begun_keys_;
};

// The keys one point task's upload finished (ShardUpload::written), and the one it began and
// got no answer for (ShardUpload::begun), as bytes of a fixed size, which a Legate save carries
// from each point to its commit and clean-up: written_record_bytes(spec) holds the keys of any
// one shard of `spec` and one begun key (an ETag longer than kWrittenEtagMax is kept as "": not
// known, so neither checked nor deleted). decode_written appends what `in` holds to *keys and
// *begun (where given); false where the bytes are malformed.
inline constexpr std::size_t kWrittenEtagMax = 256;
std::size_t written_record_bytes(const SaveSpec& spec);
void encode_written(const std::vector<WrittenKey>& keys, std::byte* out, std::size_t size,
                    const std::vector<WrittenKey>& begun = {});
bool decode_written(const std::byte* in, std::size_t size, std::vector<WrittenKey>* keys,
                    std::vector<WrittenKey>* begun = nullptr);

// The store a save to `dir_url` ("s3://B/P/" and the query) writes through, or the store's
// refusal (Store::check_writable: kIo, ENOTSUP for a store this build cannot write), naming it.
Result<std::shared_ptr<Store>> open_save_store(const std::string& dir_url);

// In a point task: the upload of shard `shard` of the dataset at `dir_url` ("s3://B/P/" and
// the query).
Result<std::unique_ptr<ShardUpload>> open_shard_upload(const std::string& dir_url,
                                                       const SaveSpec& spec, std::int64_t shard);

// After every shard: the metadata objects, the extra files, then (overwrite) the deletion of
// the old objects the new dataset did not replace, then the manifest: the commit point. The
// caller runs options.before_commit before it, on every rank.
//
// `own`: the keys the shards' uploads finished (ShardUpload::written), where known. Then,
// right before the manifest, every key the save wrote (these, d.written and the metadata
// objects) is looked at once more (Store::version: a HEAD each) and the save fails, naming the
// first that is not as its upload was answered ("changed during the save (another
// writer?): ETag was X, now Y", kIo, ESTALE), with no manifest written; and the manifest's
// index of the prefix is held to them too: a shard there that the save did not write, or
// whose size or ETag is not the one written, fails it the same way (ETags compared as
// same_etag, store_options.hpp). With or without `own`, the index must hold every shard of
// `spec`: a listing that leaves one out (one that lags the writes) is asked again twice, then
// fails the save naming the shard (kIo, ESTALE), with no manifest written. A manifest whose
// PUT got no answer is looked at (RemoteStore::write): this save's own there is a published
// dataset, and success. Null: no check of the keys (a caller that cannot know them). On a
// failure that published nothing, a save to an empty prefix deletes the metadata objects it
// wrote, each while it is still the one written (as abandon_remote_save does the shards).
Status finish_remote_save(const RemoteDest& d, const SaveSpec& spec, const SaveOptions& options,
                          const std::vector<WrittenKey>* own = nullptr);

// After a failure before the manifest: a save to an empty prefix (an overwrite too, where the
// prefix was empty) deletes what it uploaded (best effort); an overwrite of a dataset leaves the
// objects as they are (see docs/save.md). Nothing is deleted where a manifest is under the
// prefix (one HEAD first): another writer published there. Nor where `failure` (the save's
// error, where known) is the manifest's PUT that the store did not refuse and whose look found
// nothing (RemoteStore::write: "whether it was stored cannot be told"): a store whose reads lag
// its writes may show that manifest later, and it names the shards. With `own` (the keys the
// uploads finished, as for finish_remote_save), only those keys are deleted, each only while a
// HEAD still shows the size and ETag its upload was answered with; the returned text names the
// keys left because another writer's object is there now, or says what kept everything (""
// where neither), for the caller to add to the save's error. Without it, the save's key names
// are deleted. `begun` (with `own`): the keys whose uploads sent every byte and got no answer
// (ShardUpload::begun, the MD5 of the bytes sent as the ETag), which the store may have made
// all the same (left, a first shard alone loads as a dataset of its rows): each is deleted
// where a HEAD shows an object of that size whose ETag is that MD5 (a plain PUT's), or, for
// another ETag (a multipart upload's, whose parts the store cut), whose bytes read back have
// that MD5; anything else there is left and named. (The metadata objects, which the commit
// writes, finish_remote_save deletes itself on its failure, by the same rules.) Shard by shard
// from the first, a store's metadata looked at first: a store whose metadata is still there
// keeps its chunks, and where the first shard stays (a DELETE that fails, a key that cannot be
// looked at), every later one stays too, for a first shard alone loads as the whole dataset;
// the returned text names what the save's own was left. Under a Ctrl-C, this and
// finish_remote_save's clean-up share one bound (RemoteDest::clean_up).
std::string abandon_remote_save(const RemoteDest& d, const SaveSpec& spec,
                                const SaveOptions& options,
                                const std::vector<WrittenKey>* own = nullptr,
                                const Status* failure = nullptr,
                                const std::vector<WrittenKey>* begun = nullptr) noexcept;

}  // namespace shardload::detail
