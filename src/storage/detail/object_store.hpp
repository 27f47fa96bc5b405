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
#include <vector>

#include "shardload/status.hpp"

namespace shardload::detail {

// One object being uploaded. append() may upload parts in the background (a multipart upload
// of the parts as they fill) or hold the bytes for one PUT; commit() waits for the parts and
// completes the upload, or sends the PUT, which is when the object appears (or replaces the
// one of that name). An upload that is not committed is
// aborted (the destructor aborts too): the store never completes it with part of the data.
class ObjectWriter {
 public:
  virtual ~ObjectWriter() = default;
  virtual Status append(const void* data, std::size_t n) = 0;
  virtual Status commit() = 0;
  virtual void abort() noexcept = 0;
  // After commit(): the ETag the store answered the upload with, or "" where the writer was
  // not told it (Arrow's stream keeps its answer to itself).
  [[nodiscard]] virtual std::string etag() const { return {}; }
};

// An object as a HEAD finds it: its size and ETag ("" where the store sent none).
struct ObjectHead {
  std::uint64_t size = 0;
  std::string etag;
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
  // bucket, no permission). `size`: the object's size, which its appends must give exactly
  // (-1 when the caller cannot know it), so that the store can choose between one PUT and a
  // multipart upload before the first byte.
  virtual Result<std::unique_ptr<ObjectWriter>> open_writer(const std::string& url,
                                                            std::int64_t size) = 0;
  // Deletes the object `url`; an object that is not there is no error.
  virtual Status remove(const std::string& url) = 0;
  // The objects and prefixes directly under the prefix `dir_url` (ending in '/'), in name
  // order, an object and a prefix of one name both listed; empty when nothing is there.
  // kIo naming the URL when the bucket is missing or the listing is refused.
  virtual Result<std::vector<ObjectEntry>> list_entries(const std::string& dir_url) = 0;
  // After the objects under the prefix `dir_url` (ending in '/') were deleted: removes the
  // empty "directory" marker object a client's deletes may have left in their place (which
  // a listing shows as an empty prefix); nothing where objects remain under it, or where the
  // client's deletes leave no marker.
  virtual Status remove_empty_prefix(const std::string& /*dir_url*/) { return Status::ok(); }
  // One HEAD of the object `url`: kIo naming the URL, with ENOENT when it is not there.
  // Default: refused (ENOTSUP), a store that cannot say.
  virtual Result<ObjectHead> head(const std::string& url) {
    return file_error(ErrorCode::kIo, url, "cannot look at the object (no HEAD here)", ENOTSUP);
  }
};

// Refuses an s3:// URL whose key holds a "." or ".." segment ("s3://B/new/../keep/"): an HTTP
// client or a server that resolves dot segments would send the request for another key (or
// bucket) than the one named and checked, so a write or a delete could land outside the
// prefix a save checked. Likewise an empty segment ("s3://B/a//x", "s3://B/a//"): a listing of
// "a//" answers for "a/" while reads name "a//x". kInvalidArgument naming the URL; ok for any
// other URL.
Status check_object_key(const std::string& url);

void set_object_store(ObjectStore* store);
// The store that writes `url` (s3:// only), or nullptr.
ObjectStore* object_store_for(std::string_view url);
// The same, or the one error for a URL that no store of this build writes (kIo, ENOTSUP),
// naming the URL.
Result<ObjectStore*> writable_object_store(const std::string& url);

}  // namespace shardload::detail
