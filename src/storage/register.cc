// The built-in drivers' schemes (s3://, http(s)://), registered as a store driver's scheme is
// (their rows: what the store is like, the transport their Store reads through; the adapter
// reads their keys as it reads every registered store's); the transports this build has
// (transports.hpp), registered at load time, so that a source parsed before any reader exists
// can name their URLs; the adapter that reads the stores of registered schemes, registered
// with posix_io(); and the router that tells posix_io() which paths they serve (the registry's
// rows).
#include <atomic>

#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/store_options.hpp"
#include "storage/detail/store_schemes.hpp"
#include "storage/detail/stores.hpp"
#include "storage/detail/transports.hpp"
#if SHARDLOAD_WITH_ARROW
#include "storage/detail/s3_io.hpp"
#endif
#if SHARDLOAD_WITH_HTTP
#include "storage/detail/http_io.hpp"
#endif

namespace shardload::detail {
namespace {

constexpr const char* kNoS3 = "object storage is not supported by this build (it needs Arrow)";
constexpr const char* kNoHttp =
    "http:// and https:// are not supported by this build (not built with http support: it "
    "needs libcurl)";

// Object storage and HTTP(S): keys reached by requests, each with its options in the URL's
// query. An HTTP server can neither list nor be written to.
constexpr PathTraits kS3{.kernel_files = false,
                         .round_trips = true,
                         .flat_keys = true,
                         .listable = true,
                         .writable = true,
                         .uploads = true,
                         .inode_is_identity = false,
                         .options_in_query = true,
                         .key_delimiters = "?",
                         .scheme_label = "s3://",
                         .option_rows = kStoreS3};
constexpr PathTraits kHttp{.kernel_files = false,
                           .round_trips = true,
                           .flat_keys = true,
                           .listable = false,
                           .writable = false,
                           .uploads = false,
                           .inode_is_identity = false,
                           .options_in_query = true,
                           .key_delimiters = "",
                           .encoded_keys = true,
                           .fragment_cut = true,
                           .scheme_label = "http(s)://",
                           .option_rows = kStoreHttp,
                           .query_sent = true};

}  // namespace

// Registered as any scheme is, also in a build without the driver, whose paths then fail with
// `missing` rather than be taken for local paths.
void register_built_in_schemes() {
  register_remote_scheme("s3", kS3, built_in_reads<s3_transport>, s3_transport, kNoS3);
  register_remote_scheme("http", kHttp, built_in_reads<http_transport>, http_transport, kNoHttp);
  register_remote_scheme("https", kHttp, built_in_reads<http_transport>, http_transport, kNoHttp);
}

namespace {

// Constant-initialized: set by the drivers' registration at load time, in any order.
std::atomic<RemoteIo*> g_s3{nullptr};
std::atomic<RemoteIo*> g_http{nullptr};

}  // namespace

RemoteIo* s3_transport() { return g_s3.load(std::memory_order_acquire); }

RemoteIo* http_transport() { return g_http.load(std::memory_order_acquire); }

RemoteIo* set_s3_transport(RemoteIo* io) { return g_s3.exchange(io, std::memory_order_acq_rel); }

RemoteIo* set_http_transport(RemoteIo* io) {
  return g_http.exchange(io, std::memory_order_acq_rel);
}

std::uint64_t transport_retries() {
  std::uint64_t n = 0;
  for (const RemoteIo* t : {s3_transport(), http_transport()}) {
    if (t != nullptr) n += t->retries();
  }
  return n;
}

namespace {

const bool kRouterRegistered = (set_path_router(&route_path), true);
// Every store whose scheme a driver registers (shardload/store_schemes.hpp), read through one
// adapter.
const bool kStoresRegistered = (register_store_io(), true);
#if SHARDLOAD_WITH_ARROW
const bool kS3Registered = (register_s3_io(), true);
#endif
#if SHARDLOAD_WITH_HTTP
const bool kHttpRegistered = (register_http_io(), true);
#endif

}  // namespace
}  // namespace shardload::detail
