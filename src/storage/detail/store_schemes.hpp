// The registry of schemes (shardload/store_schemes.hpp) as the rest of the storage layer asks
// it: it is location.cc's table of schemes (the built-in drivers' rows, which register.cc
// registers, and the store drivers'), register.cc registers its adapter with posix_io(),
// open_store opens its stores.
#pragma once

#include <memory>
#include <string_view>

#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/status.hpp"
#include "shardload/storage.hpp"

namespace shardload::detail {

// The FileInfo the readers snapshot and compare for a key: its size, and a hash of its
// generation as the inode (FNV-1a, the same in every process), so that another generation reads
// as another file. The adapter of registered schemes and ShardSource::of_store both give it.
FileInfo generation_info(const KeyInfo& k);

// One row of the table of schemes a path can name (location.cc's built-in rows, and one per
// registered scheme).
struct SchemeRow {
  std::string_view prefix;  // "s3://"
  PathTraits traits;
  // What posix_io() routes the scheme's paths to (io.hpp): the one adapter, which reads every
  // scheme's keys through the Store made for the URL; nullptr where this build cannot serve it.
  RemoteIo* (*backend)();
  const char* missing;  // why a build without its driver cannot serve it
  // A built-in driver's transport (the RemoteIo its Store reads and writes through), or
  // nullptr: a store driver's scheme, read through its Store's own calls.
  RemoteIo* (*transport)() = nullptr;
};

// A store whose driver reads its keys through a RemoteIo of its own, made for what the readers
// ask (the built-in s3:// and http(s):// drivers): an open that fetches an object's first or
// last bytes with its snapshot, an open of a known snapshot without a request, ranged reads
// checked against the snapshot's ETag in parts in flight, the store's limit on requests,
// retries, deadlines and redacted messages. The adapter reads such a store's keys through it,
// handing it the URL as the reader named it, so every one of those stays the driver's.
class TransportStore {
 public:
  virtual ~TransportStore() = default;
  [[nodiscard]] virtual RemoteIo* transport() const = 0;
};

// The row of the registered scheme `path` is a URL of (a built-in driver's or a store
// driver's), or nullptr: a prefix compared per scheme, with no lock.
const SchemeRow* registered_row(std::string_view path);

// Whether `path` is a URL of a store driver's scheme (register_store_scheme), read through the
// adapter.
bool is_store_scheme(std::string_view path);

// Registers a built-in driver's scheme: its traits, its transport (`transport` returns nullptr
// in a build without the driver), which its Store (make_remote_store) reads and writes through,
// and why a build without it cannot serve it. Its paths are routed to `reads`: the adapter
// (built_in_reads), which reads their keys through that Store, where the transport is there.
// traits.scheme_label "" is "SCHEME://".
void register_remote_scheme(std::string_view scheme, const PathTraits& traits, RemoteIo* (*reads)(),
                            RemoteIo* (*transport)(), const char* missing);

// The router's answer for a built-in scheme whose transport is `Transport`: the adapter, or
// nullptr in a build without the driver.
template <RemoteIo* (*Transport)()>
RemoteIo* built_in_reads() {
  return Transport() != nullptr ? store_io() : nullptr;
}

// The built-in drivers' schemes (register.cc), registered before the first look-up.
void register_built_in_schemes();

// Registers the adapter that reads every registered store (set_store_io).
void register_store_io();

// The store at `location` (a URL of a registered scheme: "SCHEME://AUTHORITY/PREFIX/?QUERY"),
// its keys below PREFIX; kInvalidArgument where no scheme of it is registered.
Result<std::unique_ptr<Store>> open_registered_store(std::string_view location);

}  // namespace shardload::detail
