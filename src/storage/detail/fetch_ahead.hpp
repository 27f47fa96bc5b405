// Fetching ahead: a reader's items (a Zarr tile's chunk objects, say) fetched by a few helpers
// (jobs of the context's work pool, storage/detail/context.hpp) while the calling thread consumes
// them in order, so that one request's latency is not paid once per item.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "shardload/status.hpp"

namespace shardload::detail {

// fetch(i): the bytes it now holds for consume(i), or an error. Runs on a helper (or on the
// calling thread, for the next item to consume when no helper has claimed it), up to
// `in_flight` of them at once for different i, so it must touch only what item i owns.
using FetchItem = std::function<Result<std::uint64_t>(std::size_t i)>;
// consume(i): on the calling thread, for i = 0 .. n-1 in order, each after fetch(i) returned.
using ConsumeItem = std::function<Status(std::size_t i)>;

// Fetches and consumes items 0 .. n-1. A fetch starts only while the bytes fetched and not yet
// consumed are below `window_bytes` (the next item to consume always starts), so at most that
// plus `in_flight` items wait. Returns the first failure in item order, a fetch's or a
// consume's; no fetch starts after a failure is known, and every helper has ended when this
// returns (the helpers live only for this call). With in_flight <= 1 or a single item, fetch
// and consume alternate on the calling thread; where the pool has no thread free, the calling
// thread fetches each item itself when it needs it, so a fetch_ahead inside a job of the same
// pool never waits on a helper that has not started.
Status fetch_ahead(std::size_t n, std::size_t in_flight, std::uint64_t window_bytes,
                   const FetchItem& fetch, const ConsumeItem& consume);

}  // namespace shardload::detail
