// How a format's shard is laid out as objects, for a save to object storage: the format
// side of src/storage/detail/object_store.hpp, which knows stores and nothing of formats.
// The table lives here, beside the readers and writers that fill it (npy_reader.cc,
// raw_reader.cc, zarr_writer.cc); the engine's object save (save_remote.cc) reads it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardload/formats.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

// A format's shard in object storage, for a save, where each object is uploaded whole by one
// writer: one object (npy, raw: the bytes before its rows, then the rows), or a store of
// chunk objects (Zarr: each chunk_rows rows, the last padded with zeros to full size, named
// "SHARD/" + chunk_name(k)); and the metadata objects beside them (name below the dataset,
// contents). The ShardWriter's create/write/finish write files in place; this is the same
// layout as objects. Null for a format that save cannot write.
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
// The rows of each chunk of a saved Zarr store of `rows` rows (what ZarrWriter::create
// chooses too), a chunk's key, and each store's ".zarray" from its placement's chunk_rows
// (which ZarrWriter::finish writes too).
std::int64_t zarr_save_chunk_rows(const WriteSpec& spec, std::int64_t rows);
std::string zarr_save_chunk_name(const WriteSpec& spec, std::int64_t k);
Result<ObjectFiles> zarr_object_metadata(const WriteSpec& spec,
                                         const std::vector<WrittenShard>& shards);

}  // namespace shardload::detail
