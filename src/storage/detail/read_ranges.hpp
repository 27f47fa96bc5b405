// Byte ranges of one object, declared by a reader and fetched by the storage layer: ranges
// close to each other are merged into one request, a large one is split, and the requests go
// out several at once (each holding a slot of the store's limit on requests in flight,
// StorageContext), while the calling thread consumes the ranges as their requests arrive.
//
// The rule (docs/object_storage.md, "Range coalescing"): ranges are taken by offset (ties in
// the order given); a range joins the request before it where it begins at most `hole_bytes`
// past that request's end and the request then spans at most `request_bytes` (the bytes of
// the holes are fetched and dropped; overlapping ranges share theirs). A single range longer than
// `request_bytes` is its own request, fetched as parts of `request_bytes`. The defaults are Arrow's
// read-range cache's (8 KiB holes, 32 MiB requests): a hole costs less to fetch than a request's
// latency on any store measured, and 32 MiB keeps a request's memory and retry bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "shardload/io.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  // Where the range's bytes go when its request holds it alone (read straight there, no
  // copy); null: into a buffer of the request's.
  std::byte* dst = nullptr;
};

struct CoalesceLimits {
  std::uint64_t hole_bytes = std::uint64_t{8} << 10;
  std::uint64_t request_bytes = std::uint64_t{32} << 20;
};

// One request: the object's bytes [offset, offset + length), holding the ranges `members`
// (indices into the list given, by offset).
struct CoalescedRead {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::vector<std::size_t> members;
};

// The requests for `ranges` by the rule above, by offset; no I/O. Every range is in exactly
// one request; an empty range joins the request before it (or makes one of 0 bytes).
std::vector<CoalescedRead> coalesce_ranges(std::span<const ByteRange> ranges,
                                           const CoalesceLimits& limits = {});

// consume(i, bytes): range i's `ranges[i].length` bytes (valid for the call only), on the
// calling thread, once for each range, request by request in the order of their offsets.
using ConsumeRange = std::function<Status(std::size_t i, const std::byte* bytes)>;

// Fetches `ranges` of `file` as coalesce_ranges() merges them, up to `in_flight` requests at
// once on helper threads (fetch_ahead: fetched and unconsumed bytes below `window_bytes`), and
// hands each range to `consume`. Returns the first failure in that order (a read's, naming the
// file, or a consume's; nothing is consumed after it); every helper has been joined when it
// returns.
Status fetch_ranges(const File& file, std::span<const ByteRange> ranges,
                    const CoalesceLimits& limits, std::size_t in_flight, std::uint64_t window_bytes,
                    const ConsumeRange& consume);

}  // namespace shardload::detail
