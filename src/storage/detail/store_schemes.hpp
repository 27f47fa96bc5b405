// The registry of store schemes (shardload/store_schemes.hpp) as the rest of the storage layer
// asks it: location.cc's table of schemes falls back to it, register.cc registers its adapter
// with posix_io(), open_store opens its stores.
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

// The row of the registered scheme `path` is a URL of, or nullptr: one atomic load where no
// scheme is registered (a local path pays nothing more).
const SchemeRow* registered_row(std::string_view path);

// Registers the adapter that reads every registered store (set_store_io).
void register_store_io();

// The store at `location` (a URL of a registered scheme: "SCHEME://AUTHORITY/PREFIX/?QUERY"),
// its keys below PREFIX; kInvalidArgument where no scheme of it is registered.
Result<std::unique_ptr<Store>> open_registered_store(std::string_view location);

}  // namespace shardload::detail
