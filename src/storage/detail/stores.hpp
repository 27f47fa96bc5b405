// The store drivers behind shardload/storage.hpp, and the in-memory store the tests inject
// faults with. Internal to the storage layer and its tests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/io.hpp"
#include "shardload/status.hpp"
#include "shardload/storage.hpp"

struct stat;

namespace shardload::detail {

// The generation of a key from its snapshot: equal snapshots, equal generations (io.hpp's
// FileInfo says which changes each field catches; remotely its inode is a hash of the ETag).
std::string generation_of(const FileInfo& info);

// generation_of() of a file as lstat(2) found it (what a local publish compares a replaced key
// with).
std::string generation_of_stat(const struct ::stat& st);

// Deletes `keys` (relative to the directory `dir`; a prefix, ending in '/', as an empty
// directory), each file only while it is the generation that was checked, then `dir`; false
// where anything is left (then `dir` is too). A local publish's removal of the dataset it
// replaced.
bool remove_checked_keys(const std::string& dir, const std::vector<ReplacedKey>& keys);

// A sink's check of a write of `n` bytes at `offset` into a key of `size` bytes (Store's
// open_sink / reopen_sink contract): kInvalidArgument (EINVAL) naming `shown` where the write
// passes the key's size, a caller's mistake refused without failing the sink; ok where it fits.
Status check_within_key(const std::string& shown, std::uint64_t offset, std::size_t n,
                        std::uint64_t size);

// Why `prefix` is not one a store's list() takes ("" for the location itself, else a key
// followed by '/'); ok when it is.
Status check_store_prefix(std::string_view prefix);

// The path router posix_io() asks (set_path_router): nullptr for a local path, the registered
// backend of a URL's scheme, or the error of a scheme this build has no driver for.
Result<RemoteIo*> route_path(std::string_view path);

// The local POSIX driver over posix_io(), rooted at the directory `dir`.
std::unique_ptr<Store> make_local_store(std::string dir);

// The file (`device`, `inode`) made at `path`, a key of a local staging written other than
// through a sink (the manifest a save writes last; its identity from the descriptor it was
// written through), kept with the staged keys' identities: the publish refuses another file in
// its place as it refuses one in a key's.
void note_staged_file(const std::string& path, std::uint64_t device, std::uint64_t inode);
// The s3:// and http(s):// drivers over the registered RemoteIo (io.hpp): `location` is the
// URL of the prefix, its query (the store's options) kept apart and put back on each key's URL.
Result<std::unique_ptr<Store>> make_remote_store(std::string_view location, RemoteIo* io);

// What the in-memory store does wrong for one key, so that a test can see how a caller copes.
struct MemoryFault {
  Status fail;  // returned by the next `fail_times` reads
  int fail_times = 0;
  std::size_t short_by = 0;            // each read returns this many bytes fewer (lies)
  bool change_after_stat = false;      // the key is rewritten right after each stat
  std::chrono::milliseconds delay{0};  // each read sleeps this long first (slow)
  // Each read, after the delay, waits until the key's fault is replaced by one without `hang`
  // (a store that does not answer until the test lets it).
  bool hang = false;
};

// A store in memory ("memory"): the reference the drivers' contract tests compare with, and the
// store a test injects faults with. Every write gives the key a new generation.
class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::string name = "memory://");
  [[nodiscard]] std::string_view scheme() const override { return "memory"; }
  [[nodiscard]] const std::string& location() const override { return location_; }
  [[nodiscard]] std::string describe(std::string_view key) const override;
  Result<KeyInfo> stat(std::string_view key) override;
  Result<std::size_t> read(std::string_view key, std::uint64_t offset, std::span<std::byte> dst,
                           std::string_view if_generation) override;
  Result<std::vector<std::string>> list(std::string_view prefix) override;
  Status write(std::string_view key, std::span<const std::byte> data) override;
  Status remove(std::string_view key) override;
  // A hidden prefix beside `name` (".NAME.shardload-tmp-memory-N/"); publish swaps its keys in
  // for the destination's in one step under the store's lock, the replaced keys only while
  // they are the checked generations and nothing else is there (else kIo, nothing changed).
  Result<Staging> stage(std::string_view name, const PublishSteps& steps) override;
  Status publish(const Staging& staging, const PublishSteps& steps, bool* published) override;
  void discard(const Staging& staging, const PublishSteps& steps) noexcept override;

  // What a MemorySink asks of its store: a write's step, and the finish's step and put.
  Status sink_step();
  Status sink_finish(const std::string& key, std::string bytes);
  // What a reopened sink asks: a write's step, then `data` copied into the key at `offset`
  // under the store's lock (a new generation); kIo naming the key when it is gone,
  // kInvalidArgument when the bytes pass its size.
  Status sink_write_into(const std::string& key, std::uint64_t offset,
                         std::span<const std::byte> data);

 protected:
  Result<std::unique_ptr<KeySink>> open_key_sink(std::string_view key, std::uint64_t size) override;
  Result<std::unique_ptr<KeySink>> reopen_key_sink(std::string_view key) override;

 public:
  void inject(std::string key, MemoryFault fault);
  // The steps that change the store are counted from 0 (each write, remove and stage; each
  // write and the finish of a sink; in a publish, the check and the swap): step `n` fails with
  // `status` instead (once). A failed sink write fails the sink; a failed finish puts nothing.
  //
  // A sink (open_sink) fills a buffer of the key's size and puts it in at finish(), under the
  // store's lock; the store must outlive its sinks.
  void fail_step(std::uint64_t n, Status status);
  // The steps counted so far.
  [[nodiscard]] std::uint64_t steps() const;
  // Reads served so far (the failed and short ones included).
  [[nodiscard]] std::uint64_t reads() const;

 private:
  struct Entry {
    std::string bytes;
    std::uint64_t generation = 0;
  };
  Status put_locked(const std::string& key, std::string bytes);
  Status step_locked();

  std::string location_;
  mutable std::mutex mu_;
  std::condition_variable unhung_;  // a fault replaced (reads held by `hang` look again)
  std::map<std::string, Entry, std::less<>> entries_;
  std::map<std::string, MemoryFault, std::less<>> faults_;
  std::uint64_t next_generation_ = 1;
  std::uint64_t reads_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t staged_ = 0;
  std::map<std::uint64_t, Status> step_faults_;
};

}  // namespace shardload::detail
