// What the remote backends (s3_io.cc, http_io.cc) share: shardload's own keys in a URL's query
// (retries, timeouts, request size), the ETag hash of a snapshot and the split of one large read
// into ranged requests in flight at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "shardload/status.hpp"

namespace shardload::detail {

// A URL's query value decoded ("%2F" -> '/'); '+' is kept (a secret key holds it more often
// than a space).
std::string percent_decode(const std::string& s);

// FNV-1a: the same hash of an ETag in every process of a run (discovery and the tasks may
// be different processes), which std::hash does not promise.
std::uint64_t fnv1a(std::string_view s);

// The largest object S3 takes in one PUT (5 GiB).
inline constexpr std::int64_t kMaxSinglePut = std::int64_t{5} << 30;

// Defaults: see docs/object_storage.md.
struct StoreOptions {
  std::int64_t max_attempts = 5;       // the first try included
  std::int64_t backoff_ms = 50;        // the first retry's delay; doubled for each further one
  std::int64_t max_backoff_ms = 5000;  // the longest single delay
  double connect_timeout = 5;          // seconds to set up a connection
  double request_timeout = 30;         // seconds a request may go without receiving data
  // A read larger than request_bytes is split into ranged GETs of that size, up to
  // requests_in_flight of them at once (the calling thread and helpers it joins before it
  // returns), so that one GET's latency and one connection's bandwidth need not bound a large
  // piece. One by default: on the only store measured (bench/bench_s3.py, one server process
  // on the same small machine) more in flight was slower, the server being the bottleneck.
  std::int64_t request_bytes = std::int64_t{8} << 20;
  std::int64_t requests_in_flight = 1;
  // How many chunk objects (or a shard's inner chunks) one Zarr read fetches at once, beside
  // the calling thread that decodes them; see docs/object_storage.md for the measured default.
  std::int64_t chunks_in_flight = 8;
  // s3:// writes on the signed path: an object of up to this many bytes is uploaded in one
  // PUT (held in memory until then), a larger one in a multipart upload of parts sent as they
  // fill; 0 uploads every object in parts. See docs/object_storage.md for the measured default.
  std::int64_t multipart_threshold = std::int64_t{64} << 20;
  // s3:// credentials given as options (Arrow's URI has no keys for them): a key pair (and a
  // session token), or anonymous (unsigned requests). Empty and false: the environment's.
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  bool anonymous = false;
};

// Splits shardload's keys out of `query` ("?a=b&c=d" or ""): returns the query left for the
// store (kInvalidArgument naming `url` for a bad value). `credentials`: an s3:// URL's query
// (an http(s) URL's is the server's): the credential keys too, and every item must be
// KEY=VALUE.
Result<std::string> take_store_options(const std::string& url, const std::string& query,
                                       StoreOptions* out, bool credentials = false);

// The options of `url`'s query, the defaults for keys it does not name.
Result<StoreOptions> store_options_of(const std::string& url);

// The chunks_in_flight of `url`'s query (its default where the query has none): how many
// items (Zarr chunk objects, IPC record batches) one read fetches at once.
Result<std::size_t> chunks_in_flight_of(const std::string& url);

// The delay before retry number `attempted_retries` + 1: "equal jitter", half the exponential
// delay plus a random part of the other half, so that many tasks refused at once do not come
// back at once.
std::int64_t backoff_delay_ms(const StoreOptions& o, std::int64_t attempted_retries);

// One ranged request into `dst`: its byte count or -errno, and then the store's words in `why`.
using RangeRead =
    std::function<std::int64_t(void* dst, std::size_t n, std::uint64_t offset, std::string* why)>;

// pread's answer for `n` bytes at `offset`, read in parts of `part` bytes with up to
// `in_flight` of them at once: the bytes read contiguously from `offset` up to the first part
// that came back short or failed (the caller asks again from there), or that part's error
// (its words in `why`).
std::int64_t read_in_parts(const RangeRead& read, void* buf, std::size_t n, std::uint64_t offset,
                           std::size_t part, std::size_t in_flight, std::string* why);

}  // namespace shardload::detail
