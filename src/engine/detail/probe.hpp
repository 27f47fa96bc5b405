// Probing many shards at once for discovery.
//
// Contract: probe_shards returns, in path order, the probe of every path up to and including
// the lowest-numbered one whose probe failed (all of them when none failed); entries after
// that may be empty. Which failure comes first therefore does not depend on thread timing.
// Nothing throws: a thread that cannot start leaves its share to the others.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "shardload/format.hpp"
#include "shardload/formats.hpp"
#include "shardload/reader.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

// Threads for probing `count` shards of `format` (its descriptor; nullptr: none) through `ctx` (0
// or 1: the caller's thread alone). `requested` > 0 is taken as given; 0 picks: one thread for an
// injected IoBackend (whose calls tests count in order), for formats whose probes serialize anyway
// (HDF5) and for small counts, else enough threads to keep a few metadata operations in flight.
// `remote`: the shards are objects in object storage, where each probe is a request's round
// trip (milliseconds, not microseconds): then one thread per object, up to kRemoteProbeThreads.
unsigned probe_threads(const FormatDescriptor* format, const ReaderContext& ctx, std::size_t count,
                       unsigned requested, bool remote = false);

// Requests in flight at once while probing objects: enough to hide a store's latency behind
// one another, few enough not to be throttled (S3 takes thousands of GETs per second and
// prefix).
inline constexpr unsigned kRemoteProbeThreads = 16;

using ProbeResults = std::vector<std::optional<Result<ShardProbe>>>;

// kLayout only when a reader cannot be made (the options do not fit the format); kIo (ECANCELED)
// when an interrupt ends the wait for a remote Zarr store's server second (probe.cc).
Result<ProbeResults> probe_shards(const std::vector<std::string>& paths, Format format,
                                  const FormatOptions& options, const ReaderContext& ctx,
                                  unsigned threads);

// `path` as the kernel resolves it now: a local relative path with the working directory put
// before it ("/w/d/shard_0000.npy" of "d/shard_0000.npy"), anything else (an absolute path, a
// URL, a store's key) as it is, and so is a relative path where the working directory cannot
// be told. A layout names its files so (try_discover), so that it reads the files discovery
// found after a chdir, or unpickled in a worker started elsewhere. Purely textual ("./d/x" is
// "/w/./d/x"): two paths one prefixes keep that relation.
std::string anchored_path(const std::string& path);

}  // namespace shardload::detail
