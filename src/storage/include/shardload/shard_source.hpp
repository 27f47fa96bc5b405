// What the format readers read their shards from: keys of a source, never paths of a backend.
//
// A reader is given a ShardSource (ReaderContext::source) and opens each shard, sidecar or
// metadata file as a key of it. Which store a key is in, whether a read is a system call or a
// request, and how its state is asked are the source's business (this layer's), never the
// reader's:
//  - files(): the keys are the paths and URLs discovery resolved (Shard::path). A local path is
//    read by the kernel's calls (posix_io()); a URL of a registered scheme by its store (the
//    s3:// and http(s):// drivers' transports, a store driver's Store through the adapter).
//  - over(io): the same keys with every call made through `io`: the fault-injection seam the
//    engine's options and the tests hand in (a backend that fails or counts its calls).
//  - of_store(store): the keys of one Store: opened by Store::stat (its generation is the
//    snapshot) and read by Store::read under that generation, so that a key written again
//    between two reads is kChanged. A test hands a reader a failing store this way (the
//    in-memory store's fail_step, or a wrapper around any store).
//
// What an open returns is base's File: a descriptor and the backend its reads go through, read
// by positional reads (File::read_exact) and asked its state again by File::stat (the check
// after the reads). Locally that is the kernel's descriptor, opened and asked by one open and
// one fstat as before, so a local read costs what it did. A File's path() names the key for
// messages (a store's keys as Store::describe names them, secrets redacted).
//
// Contract: a ShardSource is safe from any thread; the Files it opens borrow it (and what it
// was made over), which must outlive them. Errors are Status naming the key's path or URL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/status.hpp"

namespace shardload {

class Store;

class ShardSource {
 public:
  // The paths and URLs as discovery names them, read by the kernel's calls or their store.
  static std::shared_ptr<ShardSource> files();
  // The same keys, every call made through `io` (which must outlive the source).
  static std::shared_ptr<ShardSource> over(IoBackend& io);
  // The keys of `store` (its keys as Store's contract takes them: "a.npy", "dir/b.npy").
  static std::shared_ptr<ShardSource> of_store(std::shared_ptr<Store> store);

  ShardSource(const ShardSource&) = delete;
  ShardSource& operator=(const ShardSource&) = delete;
  ~ShardSource();

  // Opens `key` for positional reads.
  Result<File> open(const std::string& key);
  // open() of `key`, the File named `shown` in messages: a file opened below a held directory
  // under its descriptor's name ("/proc/self/fd/N/c/0"), named by its path.
  Result<File> open_as(const std::string& key, std::string shown);
  // Opens `key` and sets `*info` to its snapshot at the open (locally one fstat, which also
  // refuses what is not a regular file).
  Result<File> open_stat(const std::string& key, FileInfo* info);
  // open_stat() of a key read whole next, about `expected` bytes (a Zarr chunk): an object whose
  // open fetches its first bytes fetches that many, so a small key costs one request.
  Result<File> open_whole(const std::string& key, FileInfo* info, std::size_t expected);
  // open_stat() of a key whose last `tail` bytes are read first (a Parquet footer).
  Result<File> open_tail(const std::string& key, FileInfo* info, std::size_t tail);
  // Opens `key` whose snapshot the caller knows (discovery's), without asking its state where
  // asking is a request of its own; the caller compares File::stat with it after its reads.
  Result<File> open_known(const std::string& key, const FileInfo& snapshot);
  // The snapshot of `key` without opening it.
  Result<FileInfo> stat(const std::string& key);
  // A metadata key (a sidecar, a Zarr array's JSON) read whole, at most `max_bytes`; `info`
  // (when not null) receives its snapshot. kFormat naming the key when it is larger or not a
  // regular file.
  Result<std::string> read_small(const std::string& key, std::uint64_t max_bytes, FileInfo* info);

  // Whether each open, stat and read of `key` is a request (object storage): ask its state
  // once, keep no file open between reads.
  [[nodiscard]] bool round_trips(const std::string& key) const;
  // What a reader may take of `key` and the keys it names from it (a Zarr array's chunks, an
  // HDF5 file's external storage): files() and over(io) answer path_traits(key); of_store keys
  // are a flat name space that only the store's calls reach (no kernel_files, no query), each
  // open asking the key's state (no round_trips).
  [[nodiscard]] PathTraits traits(const std::string& key) const;
  // Whether `file`'s descriptor is the kernel's own, for a library that opens the file itself
  // (HDF5 by descriptor_path, Arrow's file reader) or a transfer that needs one (GPU direct).
  [[nodiscard]] bool kernel_descriptor(const File& file) const;

 private:
  struct Keys;  // of_store's backend over one store
  ShardSource(IoBackend* io, std::unique_ptr<Keys> keys);
  // The name a File of `key` carries (the key itself, or its store's description).
  [[nodiscard]] std::string shown(const std::string& key) const;

  IoBackend* io_;
  std::unique_ptr<Keys> keys_;
};

}  // namespace shardload
