// The remote drivers this build has, registered with posix_io() at load time, so that a source
// parsed before any reader exists can name "s3://" and "http(s)://" URLs; the adapter that
// reads the stores of registered schemes; and the router that tells posix_io() which paths
// they serve (location.cc's table of schemes, and the registered ones).
#include "shardload/io.hpp"
#include "storage/detail/store_schemes.hpp"
#include "storage/detail/stores.hpp"
#if SHARDLOAD_WITH_ARROW
#include "storage/detail/s3_io.hpp"
#endif
#if SHARDLOAD_WITH_HTTP
#include "storage/detail/http_io.hpp"
#endif

namespace shardload::detail {
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
