// Store schemes: how a store driver becomes readable by every reader. A driver registers its
// scheme ("mem" for "mem://AUTHORITY/KEY") with a factory that opens its Store
// (shardload/storage.hpp) from a location; from then on a path of that scheme is routed like an
// s3:// URL: posix_io() sends its opens and reads to the storage layer's one adapter, which
// reads the Store, and discovery lists it (directories, numbered names and globs in the last
// part of a key, as s3:// sources are). No reader, engine or front-end file names the scheme.
//
// A URL of a registered scheme is "SCHEME://AUTHORITY/KEY?QUERY": the store is the one the
// factory opens for the location "SCHEME://AUTHORITY/" (with the URL's query, its options, if
// any: the factory is called once per location and query, and the store is kept), the key is
// what follows the authority's '/'. The adapter maps the Store's calls onto what the readers
// ask (io.hpp):
//  - open = stat: the key's size, and its generation as the FileInfo the readers snapshot and
//    compare (a hash of the generation as the inode; no times), so that a changed generation
//    reads as a changed file ("changed since discovery");
//  - pread = a ranged read under the generation the open found (none for an open that was
//    given the snapshot, whose reads the caller's check after them covers); a read that comes
//    back shorter than asked before the key's end is refused (EIO), never taken as data; with
//    a read deadline, a read that has not answered by then fails with ETIMEDOUT (also one that
//    no thread of the work pool could start by then: it is never sent), and while the store has
//    `max_late_reads` reads still unanswered past their deadline, a read is refused at once
//    (EBUSY, naming the store), so that a store that hangs holds that many threads at most;
//  - list and is_object for discovery.
// Its descriptors are at or above kRemoteFdBase. Every URL in its messages is redacted.
//
// Contract: safe from any thread. Registering is meant for a program's start (or a test's set
// up); a path is routed by the registration in force when it is opened.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "shardload/location.hpp"
#include "shardload/status.hpp"
#include "shardload/storage.hpp"

namespace shardload {

// The traits of a store reached by URL whose keys are flat (an object store's): a request per
// open and read, no kernel file calls, listable, read-only through the readers, options in the
// URL's query (so no key holds a '?').
inline constexpr PathTraits kObjectStoreTraits{.kernel_files = false,
                                               .round_trips = true,
                                               .flat_keys = true,
                                               .listable = true,
                                               .writable = false,
                                               .uploads = false,
                                               .inode_is_identity = false,
                                               .options_in_query = true,
                                               .key_delimiters = "?",
                                               .encoded_keys = false,
                                               .fragment_cut = false,
                                               .scheme_label = ""};

struct StoreScheme {
  // The URL scheme, lower case: a letter, then letters, digits, '+', '-' or '.'. Not one a
  // built-in driver serves (s3, http, https, file).
  std::string scheme;
  // Opens the store at `location` ("SCHEME://AUTHORITY/", followed by the URL's query where it
  // has one). An error is the open's (and a path's) error; called once per location.
  std::function<Result<std::shared_ptr<Store>>(std::string_view location)> open;
  // What the store is like (location.hpp); scheme_label is set to "SCHEME://".
  PathTraits traits = kObjectStoreTraits;
  // The most a read may take (0: no limit); a read that has not answered by then fails
  // (ETIMEDOUT, naming the key) and what it brings later is dropped.
  std::chrono::milliseconds read_deadline{0};
  // With a read deadline: how many reads past it a store (one location and query) may leave
  // waiting for its answer, each on a thread of the process's work pool; with that many, its
  // reads are refused at once (EBUSY) until one answers (0 is taken as 1).
  std::size_t max_late_reads = 16;
};

// Registers `scheme` (replacing an earlier registration of the same scheme, whose open stores
// stay readable until their files close). kInvalidArgument for a malformed or built-in
// scheme, or no factory.
Status register_store_scheme(StoreScheme scheme);

// Removes the registration of `scheme` (nothing where there is none): its paths are then
// refused as a scheme this build has no driver for.
void unregister_store_scheme(std::string_view scheme);

}  // namespace shardload
