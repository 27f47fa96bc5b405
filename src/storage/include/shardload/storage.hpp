// Stores: where a dataset's bytes live, reached by key. A store is opened from a location (a
// local directory, "s3://bucket/prefix/", "http(s)://host/prefix/", each with its options in
// the URL's query as today); a key is a '/'-separated name below it ("shard_0003.npy",
// "a.zarr/0.0"). The model is TensorStore's kvstore and Arrow's FileSystem: a store can stat
// a key (its size and a generation), read a byte range of it under a generation condition,
// list the keys under a prefix, write a key whole and delete one, and stage a set of keys (a
// saved dataset) to publish it at once.
//
// Generations. A generation is an opaque string that changes whenever the key's bytes may
// have: locally the file's mtime, ctime, size and inode (a write, a truncation, a file renamed
// over the path each change one); remotely the object's ETag (as a hash) with its size and
// last-modified time. Two generations of one key compare equal only if nothing changed in
// between; "" is no generation (no condition, when given to read).
//
// Contract: every call returns Status / Result (kInvalidArgument for a key that is empty, holds
// a NUL, starts with '/' or holds a "." or ".." segment, so no key reaches outside the store's
// location; kIo naming the key's path or URL when the store fails or the key is missing;
// kChanged when a read's generation condition fails). Nothing throws. A store is safe to use
// from several threads at once. The drivers (local POSIX, S3, HTTP(S)) are thin wrappers over
// the I/O the readers use (shardload/io.hpp), so they read what the readers read and fail as
// they fail.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardload/status.hpp"

namespace shardload {

// What stat() knows of a key.
struct KeyInfo {
  std::uint64_t size = 0;
  std::string generation;  // never "" for a key that exists
  friend bool operator==(const KeyInfo&, const KeyInfo&) = default;
};

// One key as a save wrote it, or as the store has it now (Store::version): the key (below the
// store's location), its size, and the ETag the store answered for it ("" where the store keeps
// none: local files, memory). What a save to object storage checks before its commit and before
// a clean-up deletes a key: a key whose size or ETag is another's is not the save's any more.
struct WrittenKey {
  std::string key;
  std::uint64_t size = 0;
  std::string etag;
  friend bool operator==(const WrittenKey&, const WrittenKey&) = default;
};

// One key that a publish replaces, as the check before it found it.
struct ReplacedKey {
  // Below the destination: "shard_0000.npy", "shard_0000.zarr/0.0"; a prefix (a directory
  // locally) ends in '/' and comes after the keys below it.
  std::string key;
  // Deleted only while it is this generation (a file put there since is not the save's); ""
  // whatever it is (object storage, where a save checks names only), and for a prefix.
  std::string generation;
  friend bool operator==(const ReplacedKey&, const ReplacedKey&) = default;
};

// What a save gives Store::stage, publish and discard.
struct PublishSteps {
  // Checks the destination as it is now and lists what the publish may replace; a refusal
  // fails the step with nothing replaced. stage() calls it before it makes anything; where the
  // store publishes by a swap (locally, in memory) publish() calls it again right before the
  // swap, and once more when the swap must be retried. Empty: nothing is checked or replaced.
  std::function<Status(std::vector<ReplacedKey>* replaced)> check;
  // Writes the commit key (the manifest: its presence means the dataset is complete) once every
  // other key is staged, as the last step before the dataset becomes visible: into the staging
  // place before the swap; in place after the old keys are deleted. Given Staging::location.
  // Empty: none.
  std::function<Status(const std::string& location)> seal;
  // In place (Staging::in_place): the keys of the new dataset (a store's prefix with its '/'),
  // which publish keeps and discard deletes.
  std::vector<std::string> keys;
  // The key seal writes; in place, an old one is deleted by stage(), before any key is written,
  // so that no reader takes the old commit key for the new keys.
  std::string commit_key;
  // In place, where `own_known`: the keys this save finished, each with the size and ETag its
  // upload was answered with (KeySink::etag). discard() then deletes a key of `keys` only while
  // Store::version still shows it so (never one the save did not finish, nor one another
  // writer put there since), and tells `kept` of each it leaves: its URL for messages and why.
  // Without it (!own_known) discard deletes `keys` by name.
  std::vector<WrittenKey> own;
  bool own_known = false;
  std::function<void(const std::string& shown, const std::string& why)> kept;
  // In place: the save replaces what was there. discard() then deletes nothing (what it wrote
  // may have replaced an old key of the same name).
  bool overwrite = false;
};

// A save staged in a store: plain values, so that a front end can hand it to other processes.
struct Staging {
  std::string name;    // the destination below the store's location ("" the location itself)
  std::string prefix;  // the key prefix the staged keys are written under ("" or ending in '/')
  // The staging place as a path (a directory) or a URL (a prefix, its options in the query):
  // what a writer that writes by path or URL writes under. Not for messages: its query may
  // hold secrets.
  std::string location;
  // The keys are written under their final names (object storage, which has no rename); the
  // commit key makes them a dataset.
  bool in_place = false;
  std::vector<ReplacedKey> replaced;  // in place: what stage()'s check found
  // Locally: the staging directory as made (device, inode), the only one discard removes.
  std::uint64_t dev = 0, ino = 0;
};

// One key of a staging being written at its final size (Store::open_sink): the one way a save's
// writers put bytes into any store. Bytes are written at their offsets, in any order and from
// several threads at once (each byte by one write); bytes no write gave read as zeros. The key
// becomes the staging's only at finish(), never part of it:
//  - local: a file created in the staging directory at its size (O_EXCL, ftruncate), each
//    write a pwrite(2); finish closes it; a failure or abort() deletes it.
//  - s3://: one upload (one PUT, or a multipart upload above the store's multipart_threshold)
//    that finish() completes. Bytes that continue what was sent are sent at once; bytes that
//    come ahead of that are held in memory until the gap before them is written (or, at
//    finish, filled with zeros): a writer that writes in order holds nothing. A byte written
//    again after it was sent is refused (kInvalidArgument).
//  - memory: a buffer of the key's size, put in under the store's lock by finish().
// A sink neither finished nor aborted is aborted when destroyed. After a failed write the sink
// is failed: later writes and finish return that error, and nothing of the key is left once
// it is aborted (or destroyed).
class KeySink {
 public:
  virtual ~KeySink() = default;
  // Writes `data` at `offset`; kInvalidArgument naming the key when it passes the key's size.
  virtual Status write(std::uint64_t offset, std::span<const std::byte> data) = 0;
  // After every write: the key is complete (in the staging). On an error nothing of it is left.
  virtual Status finish() = 0;
  // Drops the key: nothing of it is left. Best effort, never fails; a no-op after finish().
  virtual void abort() noexcept = 0;
  // The key's size, as opened.
  [[nodiscard]] virtual std::uint64_t size() const = 0;
  // After finish(): the ETag the store answered for the key (an object's upload), "" where the
  // store keeps none (files, memory). What a save records of the key it wrote (WrittenKey).
  [[nodiscard]] virtual std::string etag() const { return {}; }
  // Once finish() has sent every byte, answered or not: the MD5 of the key's bytes as 32 hex
  // digits (what S3 answers a plain PUT of them with), "" before that and for a store that
  // keeps no ETag. A finish whose answer never came (a Ctrl-C, a lost answer, a timeout) may
  // still have made the object; a save's clean-up tells it is this upload's by the digest.
  [[nodiscard]] virtual std::string sent_md5() const { return {}; }
  // The file the sink writes, as (device, inode), for a store of files; {0, 0} for any other.
  // A save carries the identities of the keys it made to the processes that fill them, which
  // refuse a key reopened on another file (a link renamed into the staging).
  [[nodiscard]] virtual std::pair<std::uint64_t, std::uint64_t> file_identity() const {
    return {0, 0};
  }
};

class Store {
 public:
  virtual ~Store() = default;

  // "file", "s3", "http", "https" or "memory".
  [[nodiscard]] virtual std::string_view scheme() const = 0;
  // The location the store was opened from (without its query, so no secret is in it).
  [[nodiscard]] virtual const std::string& location() const = 0;
  // The full path or URL of `key` for messages, its secrets redacted (redact_secrets: a
  // password in the location's user part too; the store's options are not in it).
  [[nodiscard]] virtual std::string describe(std::string_view key) const = 0;

  // Whether a save may write this store: ok, or the store's refusal naming its location, asked
  // before a save lists, writes or deletes anything. kIo with ENOTSUP where the store is
  // read-only (http(s)://) or this build has no writer for it (s3:// without Arrow). Default:
  // ok (a store that cannot write refuses each write too).
  [[nodiscard]] virtual Status check_writable() const { return Status::ok(); }

  virtual Result<KeyInfo> stat(std::string_view key) = 0;
  // `key` as the store has it now: its size and ETag (an object's: one HEAD), the ETag ""
  // where the store keeps none. kIo naming the key, with ENOENT when it is not there. Default:
  // stat()'s size.
  virtual Result<WrittenKey> version(std::string_view key) {
    SHARDLOAD_ASSIGN_OR_RETURN(const KeyInfo info, stat(key));
    return WrittenKey{std::string(key), info.size, {}};
  }
  // Reads up to dst.size() bytes of `key` at `offset` into dst: the bytes read, fewer only at
  // the end of the key (0 at or past it). With `if_generation` not "", kChanged naming the key
  // when the key's generation is another one (checked before the read and, where the store
  // can, after it, so the bytes returned are those of that generation).
  virtual Result<std::size_t> read(std::string_view key, std::uint64_t offset,
                                   std::span<std::byte> dst, std::string_view if_generation) = 0;
  // The keys directly under `prefix` ("" for the location itself, else a prefix ending in
  // '/'), relative to the location, in name order; a prefix with keys below it is listed with
  // its '/' ("a.zarr/"). kIo when the prefix is not there or cannot be listed (HTTP).
  virtual Result<std::vector<std::string>> list(std::string_view prefix) = 0;
  // Writes `data` as the whole of `key`, replacing it: a reader sees the old bytes or the new,
  // never part of them (locally a file written beside it and renamed over it; remotely one
  // upload). kIo where the store cannot write (HTTP).
  virtual Status write(std::string_view key, std::span<const std::byte> data) = 0;
  // Deletes `key`; a key that is not there is no error. kIo where the store cannot (HTTP).
  virtual Status remove(std::string_view key) = 0;

  // Publishing a set of keys at once: a reader sees the destination `name` (a key, or "" for the
  // store's location itself where the store writes in place) as it was or as the complete new
  // set, never part of it.
  //
  //  - local: a hidden directory beside the destination, ".NAME.shardload-tmp-HOST-PID-N"
  //    (mode 0700 until the publish; staging directories of this host whose process is gone
  //    are removed first); publish gives it the destination's mode, owner, group and extended
  //    attributes, renames it over an absent or empty destination, or exchanges it with the old
  //    dataset (renameat2 RENAME_EXCHANGE; without it the old one is moved aside for a moment)
  //    and deletes the replaced keys, each while it is the checked generation.
  //  - s3://: in place (no rename): stage() checks and deletes an old commit key; publish
  //    deletes the replaced keys that the new set did not overwrite, then seals.
  //  - memory: a hidden prefix; publish swaps the staged keys in under the store's lock.
  //  - http(s)://: refused (read-only).
  //
  // stage() runs steps.check, then makes the staging place; nothing is left on an error.
  virtual Result<Staging> stage(std::string_view name, const PublishSteps& steps);
  // Seals and publishes `staging`. *published: whether the new set is at the destination, also
  // on an error (one after the swap: a replaced key that could not be deleted).
  virtual Status publish(const Staging& staging, const PublishSteps& steps, bool* published);
  // Removes what an unpublished staging holds (best effort; never what is not the staging's).
  virtual void discard(const Staging& staging, const PublishSteps& steps) noexcept;
  // Writes `key` of a staging (Staging::prefix + key).
  Status write_staged(const Staging& staging, std::string_view key,
                      std::span<const std::byte> data) {
    return write(staging.prefix + std::string(key), data);
  }
  // A sink for `key` of a staging (Staging::prefix + key), the key `size` bytes long (its
  // directories, locally, made as they are needed). kIo where the store cannot write (HTTP),
  // or naming the key when it cannot be made (locally: "cannot size to N bytes: File too
  // large"); kInvalidArgument for a bad key.
  Result<std::unique_ptr<KeySink>> open_sink(const Staging& staging, std::string_view key,
                                             std::uint64_t size) {
    return open_key_sink(staging.prefix + std::string(key), size);
  }
  // A sink over `key` of a staging that an open_sink made and finished before, in this process
  // or in another one: positional writes into the key's bytes, within its size, which is the
  // key's as it is now; finish() ends the writes. The key stays the staging's whatever happens
  // (a failed write, abort()): discard() removes it with the staging. This is how several
  // processes fill one staged key at their own offsets (the ranks of a distributed save, the
  // workers of a Dask save), each with a sink of its own:
  //  - local: the file opened again (O_WRONLY, no link followed), each write a pwrite(2);
  //    finish closes it.
  //  - memory: each write copied into the key under the store's lock (a new generation).
  //  - s3:// and http(s)://: refused (kIo, ENOTSUP): an object is uploaded whole by the one sink
  //    that made it.
  // kIo naming the key when it is missing or not a regular file; kInvalidArgument for a bad key.
  Result<std::unique_ptr<KeySink>> reopen_sink(const Staging& staging, std::string_view key) {
    return reopen_key_sink(staging.prefix + std::string(key));
  }

 protected:
  // The driver's sink for the full key (below the store's location). Default: refused, as a
  // store that cannot write refuses write().
  virtual Result<std::unique_ptr<KeySink>> open_key_sink(std::string_view key,
                                                         std::uint64_t /*size*/) {
    return file_error(ErrorCode::kIo, describe(key),
                      "this store cannot write (" + std::string(scheme()) + " is read-only)",
                      ENOTSUP);
  }
  // The driver's sink over the existing full key. Default: refused, as by an object store,
  // whose keys are written whole once.
  virtual Result<std::unique_ptr<KeySink>> reopen_key_sink(std::string_view key) {
    return file_error(ErrorCode::kIo, describe(key),
                      "a key of this store cannot be written again once made (" +
                          std::string(scheme()) + " keys are written whole, by one sink)",
                      ENOTSUP);
  }
};

// Opens the store at `location`: a local directory (a path, or "file://PATH"), "s3://B/P",
// "http(s)://H/P". Nothing is asked of the store yet (a missing directory or bucket fails at
// the first call). kInvalidArgument for an empty location or a scheme this build has no
// driver for (s3:// needs Arrow, http(s):// libcurl).
Result<std::unique_ptr<Store>> open_store(std::string_view location);

// Where the store at a URL `location` ("SCHEME://AUTHORITY/P/NAME/?QUERY", a store reached by
// URL) sits in its store's name space: its own location ("SCHEME://AUTHORITY/P/NAME/", one '/'
// at the end, the query apart), the query ("?QUERY" or ""), and the store one prefix up that
// holds its name ("SCHEME://AUTHORITY/P/?QUERY") with that name ("NAME"), so that a caller can
// ask whether the name is a key there (a prefix that is an object). A root ("s3://B/") is the
// name of nothing: `parent` and `name` empty. A pure function of the text; nothing is asked of
// a store. kInvalidArgument naming `location` where it names no authority ("s3://",
// "s3:///P/": "the URL names no bucket"; another scheme's: "no authority"), ends in an empty
// segment ("s3://B/P//", "s3://B//": another prefix than "P/", never taken for it), or is no
// URL (a local path).
struct StorePlace {
  std::string location;
  std::string query;
  std::string parent;
  std::string name;
};
Result<StorePlace> store_place(std::string_view location);

// Whether `key` is a key a store accepts (see the contract above); kInvalidArgument naming it
// and saying why when it is not.
Status check_store_key(std::string_view key);

}  // namespace shardload
