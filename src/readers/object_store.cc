#include "readers/detail/object_store.hpp"

#include <atomic>

namespace shardload::detail {

namespace {
std::atomic<ObjectStore*> g_s3_store{nullptr};
}  // namespace

void set_object_store(ObjectStore* store) { g_s3_store.store(store); }

ObjectStore* object_store_for(std::string_view url) {
  return url.substr(0, 5) == "s3://" ? g_s3_store.load() : nullptr;
}

const ObjectShardLayout* object_shard_layout(Format format) {
  static const ObjectShardLayout npy{npy_object_head,
                                     [](const WriteSpec&, const std::vector<WrittenShard>&) {
                                       return std::vector<std::pair<std::string, std::string>>{};
                                     }};
  static const ObjectShardLayout raw{[](const WriteSpec&, std::int64_t) { return std::string(); },
                                     raw_object_metadata};
  switch (format) {
    case Format::kNpy:
      return &npy;
    case Format::kRaw:
      return &raw;
    default:
      return nullptr;
  }
}

}  // namespace shardload::detail
