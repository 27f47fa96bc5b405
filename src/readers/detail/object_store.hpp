// Writing to object storage ("s3://"), for save: whole objects uploaded through a stream,
// deletes, and a listing that tells objects from prefixes. A store has no rename and no
// positional write into an object, so a saved shard is one object uploaded from start to end
// by one writer, visible only once its upload completes. The s3:// backend (s3_io.cc, built
// with Arrow) registers itself; a build without it has none (object_store_for answers null).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardload/formats.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

// One object being uploaded. append() may upload parts in the background (a multipart upload
// of the parts as they fill); commit() waits for them and completes the upload, which is when
// the object appears (or replaces the one of that name). An upload that is not committed is
// aborted (the destructor aborts too): the store never completes it with part of the data.
class ObjectWriter {
 public:
  virtual ~ObjectWriter() = default;
  virtual Status append(const void* data, std::size_t n) = 0;
  virtual Status commit() = 0;
  virtual void abort() noexcept = 0;
};

// What a listing found directly under a prefix.
struct ObjectEntry {
  std::string name;     // relative to the prefix, no '/'
  bool prefix = false;  // a "directory" (objects below it), not an object
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // Starts the upload of `url` (kIo naming the URL when the store refuses it: a missing
  // bucket, no permission).
  virtual Result<std::unique_ptr<ObjectWriter>> open_writer(const std::string& url) = 0;
  // Deletes the object `url`; an object that is not there is no error.
  virtual Status remove(const std::string& url) = 0;
  // The objects and prefixes directly under the prefix `dir_url` (ending in '/'), in name
  // order, an object and a prefix of one name both listed; empty when nothing is there.
  // kIo naming the URL when the bucket is missing or the listing is refused.
  virtual Result<std::vector<ObjectEntry>> list_entries(const std::string& dir_url) = 0;
};

void set_object_store(ObjectStore* store);
// The store that writes `url` (s3:// only), or nullptr.
ObjectStore* object_store_for(std::string_view url);
// The same, or the one error for a URL that no store of this build writes (kIo, ENOTSUP),
// naming the URL.
Result<ObjectStore*> writable_object_store(const std::string& url);

// A format's shard as one object, for a save to object storage, where each shard is uploaded
// whole by one writer: the bytes before its rows, and the metadata objects beside the shards
// (name, contents). The ShardWriter's create/write/finish write files in place; this is the
// same layout as bytes. Null for a format whose shards are stores (Zarr) or that save cannot
// write.
struct ObjectShardLayout {
  std::string (*head)(const WriteSpec& spec, std::int64_t rows);
  std::vector<std::pair<std::string, std::string>> (*metadata)(
      const WriteSpec& spec, const std::vector<WrittenShard>& shards);
};
const ObjectShardLayout* object_shard_layout(Format format);

// The formats' halves of the table (npy_reader.cc, raw_reader.cc).
std::string npy_object_head(const WriteSpec& spec, std::int64_t rows);
std::vector<std::pair<std::string, std::string>> raw_object_metadata(
    const WriteSpec& spec, const std::vector<WrittenShard>& shards);

}  // namespace shardload::detail
