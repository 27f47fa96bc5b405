// How a format's shard is laid out as keys of a store, for a save to any store (a local
// directory, the memory store, object storage): the format side of the engine's one writer
// (engine/detail/save_files.hpp), which knows stores and sinks and nothing of formats. The
// table lives here, beside the readers that read what it describes (npy_reader.cc,
// raw_reader.cc, zarr_writer.cc).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardload/formats.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

// A format's shard as keys: one key (npy, raw: the bytes before its rows, then the rows), or a
// store of chunk keys (Zarr: each chunk_rows rows, the last padded with zeros to full size,
// named "SHARD/" + chunk_name(k)); and the metadata keys beside them (name below the dataset,
// contents). Null for a format that save cannot write.
using ObjectFiles = std::vector<std::pair<std::string, std::string>>;
struct ObjectShardLayout {
  std::string (*head)(const WriteSpec& spec, std::int64_t rows);
  Result<ObjectFiles> (*metadata)(const WriteSpec& spec, const std::vector<WrittenShard>& shards);
  // Null for one object per shard.
  std::int64_t (*chunk_rows)(const WriteSpec& spec, std::int64_t rows) = nullptr;
  std::string (*chunk_name)(const WriteSpec& spec, std::int64_t k) = nullptr;
};
const ObjectShardLayout* object_shard_layout(Format format);

// The formats' halves of the table (npy_reader.cc, raw_reader.cc, zarr_writer.cc).
std::string npy_object_head(const WriteSpec& spec, std::int64_t rows);
Result<ObjectFiles> raw_object_metadata(const WriteSpec& spec,
                                        const std::vector<WrittenShard>& shards);
// The rows of each chunk of a saved Zarr store of `rows` rows, a chunk's key, and each
// store's ".zarray" from its placement's chunk_rows.
std::int64_t zarr_save_chunk_rows(const WriteSpec& spec, std::int64_t rows);
std::string zarr_save_chunk_name(const WriteSpec& spec, std::int64_t k);
Result<ObjectFiles> zarr_object_metadata(const WriteSpec& spec,
                                         const std::vector<WrittenShard>& shards);

}  // namespace shardload::detail
