// The remote drivers this build has, registered with posix_io() at load time, so that a source
// parsed before any reader exists can name "s3://" and "http(s)://" URLs.
#if SHARDLOAD_WITH_ARROW
#include "storage/detail/s3_io.hpp"
#endif
#if SHARDLOAD_WITH_HTTP
#include "storage/detail/http_io.hpp"
#endif

namespace shardload::detail {
namespace {

#if SHARDLOAD_WITH_ARROW
const bool kS3Registered = (register_s3_io(), true);
#endif
#if SHARDLOAD_WITH_HTTP
const bool kHttpRegistered = (register_http_io(), true);
#endif

}  // namespace
}  // namespace shardload::detail
