// Stores: where a dataset's bytes live, reached by key. A store is opened from a location (a
// local directory, "s3://bucket/prefix/", "http(s)://host/prefix/", each with its options in
// the URL's query as today); a key is a '/'-separated name below it ("shard_0003.npy",
// "a.zarr/0.0"). The model is TensorStore's kvstore and Arrow's FileSystem: a store can stat
// a key (its size and a generation), read a byte range of it under a generation condition,
// list the keys under a prefix, write a key whole and delete one.
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

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/status.hpp"

namespace shardload {

// What stat() knows of a key.
struct KeyInfo {
  std::uint64_t size = 0;
  std::string generation;  // never "" for a key that exists
  friend bool operator==(const KeyInfo&, const KeyInfo&) = default;
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

  virtual Result<KeyInfo> stat(std::string_view key) = 0;
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
};

// Opens the store at `location`: a local directory (a path, or "file://PATH"), "s3://B/P",
// "http(s)://H/P". Nothing is asked of the store yet (a missing directory or bucket fails at
// the first call). kInvalidArgument for an empty location or a scheme this build has no
// driver for (s3:// needs Arrow, http(s):// libcurl).
Result<std::unique_ptr<Store>> open_store(std::string_view location);

// Whether `key` is a key a store accepts (see the contract above); kInvalidArgument naming it
// and saying why when it is not.
Status check_store_key(std::string_view key);

}  // namespace shardload
