#include "storage/detail/object_store.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <string>
#include <string_view>

namespace shardload::detail {

namespace {
std::atomic<ObjectStore*> g_s3_store{nullptr};
}  // namespace

void set_object_store(ObjectStore* store) { g_s3_store.store(store); }

ObjectStore* object_store_for(std::string_view url) {
  return url.substr(0, 5) == "s3://" ? g_s3_store.load() : nullptr;
}

Result<ObjectStore*> writable_object_store(const std::string& url) {
  ObjectStore* store = object_store_for(url);
  if (store == nullptr) {
    return file_error(ErrorCode::kIo, url,
                      "object storage is not supported by this build (it needs Arrow)", ENOTSUP);
  }
  return store;
}

Status check_object_key(const std::string& url) {
  if (url.substr(0, 5) != "s3://") return Status::ok();
  const std::string_view path = std::string_view(url).substr(5, url.find('?') - 5);
  for (std::size_t at = 0; at <= path.size();) {
    const std::size_t slash = std::min(path.find('/', at), path.size());
    const std::string_view segment = path.substr(at, slash - at);
    if (segment == "." || segment == "..") {
      return file_error(ErrorCode::kInvalidArgument, url,
                        "the key holds a '" + std::string(segment) +
                            "' segment; object keys with '.' or '..' segments are refused (a "
                            "client or server that resolves them would reach another key than "
                            "the one named); name the key without them",
                        EINVAL);
    }
    // An empty segment ("a//x", a prefix "a//"): a LIST of the prefix "a//" answers for "a/"
    // (Arrow's client drops the empty segment at its end, and refuses one inside), while GETs
    // name "a//x" as spelled, so a directory, glob or pattern would read other objects than it
    // listed, or index them. A trailing one is refused in the words a save destination's is
    // (store_place). The bucket's own (empty: "s3:///P") is refused where it is parsed.
    if (segment.empty() && at != 0 && slash != path.size()) {
      if (path.find_first_not_of('/', slash) == std::string_view::npos) {
        return file_error(ErrorCode::kInvalidArgument, url,
                          "the URL ends in an empty segment ('//'); name the prefix with one '/'",
                          EINVAL);
      }
      return file_error(ErrorCode::kInvalidArgument, url,
                        "the key holds an empty segment ('//'); object keys with empty segments "
                        "are refused (a listing of a prefix 'P//' answers for 'P/', so the "
                        "objects listed would not be the ones read); name the key with one '/' "
                        "between its parts",
                        EINVAL);
    }
    at = slash + 1;
  }
  return Status::ok();
}

}  // namespace shardload::detail
