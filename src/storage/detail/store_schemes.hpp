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

// One row of the table of schemes a path can name (location.cc's built-in rows, and one per
// registered scheme).
struct SchemeRow {
  std::string_view prefix;  // "s3://"
  PathTraits traits;
  RemoteIo* (*backend)();  // the registered backend that serves it (io.hpp)
  const char* missing;     // why a build without that backend cannot serve it
};

// The row of the registered scheme `path` is a URL of (a built-in driver's or a store
// driver's), or nullptr: a prefix compared per scheme, with no lock.
const SchemeRow* registered_row(std::string_view path);

// Whether `path` is a URL of a store driver's scheme (register_store_scheme), read through the
// adapter.
bool is_store_scheme(std::string_view path);

// Registers a built-in driver's scheme: its traits, the RemoteIo that serves it (`backend`
// returns nullptr in a build without the driver) and why such a build cannot serve it.
// traits.scheme_label "" is "SCHEME://".
void register_remote_scheme(std::string_view scheme, const PathTraits& traits,
                            RemoteIo* (*backend)(), const char* missing);

// The built-in drivers' schemes (register.cc), registered before the first look-up.
void register_built_in_schemes();

// Registers the adapter that reads every registered store (set_store_io).
void register_store_io();

// The store at `location` (a URL of a registered scheme: "SCHEME://AUTHORITY/PREFIX/?QUERY"),
// its keys below PREFIX; kInvalidArgument where no scheme of it is registered.
Result<std::unique_ptr<Store>> open_registered_store(std::string_view location);

}  // namespace shardload::detail
