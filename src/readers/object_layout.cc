#include "readers/detail/object_layout.hpp"

#include <string>
#include <vector>

namespace shardload::detail {

const ObjectShardLayout* object_shard_layout(Format format) {
  static const ObjectShardLayout npy{npy_object_head,
                                     [](const WriteSpec&, const std::vector<WrittenShard>&) {
                                       return Result<ObjectFiles>(ObjectFiles{});
                                     }};
  static const ObjectShardLayout raw{[](const WriteSpec&, std::int64_t) { return std::string(); },
                                     raw_object_metadata};
  static const ObjectShardLayout zarr{[](const WriteSpec&, std::int64_t) { return std::string(); },
                                      zarr_object_metadata, zarr_save_chunk_rows,
                                      zarr_save_chunk_name};
  switch (format) {
    case Format::kNpy:
      return &npy;
    case Format::kRaw:
      return &raw;
    case Format::kZarr:
      return &zarr;
    default:
      return nullptr;
  }
}

}  // namespace shardload::detail
