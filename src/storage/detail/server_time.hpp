// An object of a remote store judged by its server's clock against a discovery: what a Zarr
// chunk or shard object's GET (or HEAD) answered, its Last-Modified, against the Date of the
// answer discovery read its store's metadata with. Both are the server's times in whole
// seconds (FileInfo::modified_s, answered_s; Shard::server_snapshot_s): discovery returns only
// once that second is over (probe_shards), so an object written after discover() returned has
// a later Last-Modified, and one written before the metadata was read has none later.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

#include "shardload/io.hpp"

namespace shardload::detail {

// `s` seconds since the epoch as HTTP writes a date ("Mon, 07 Dec 2026 08:40:01 GMT").
inline std::string http_date(std::int64_t s) {
  const auto t = static_cast<std::time_t>(s);
  std::tm tm{};
  if (::gmtime_r(&t, &tm) == nullptr) return std::to_string(s) + " s";
  char buf[64];
  if (std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm) == 0) {
    return std::to_string(s) + " s";
  }
  return buf;
}

// Why the object whose answer is `object` was written after `snapshot_s` (the server's Date
// when discovery read the store's metadata), or "" where it was not or it cannot be told: no
// snapshot time (0), no Last-Modified, or a Last-Modified later than the answer's own Date. That
// last one was stamped by another clock than the server's (a writer's ahead of it, a file time
// set by hand), which says nothing of when the object was written by the server's clock: it is
// read, not refused.
inline std::string written_after(std::int64_t snapshot_s, const FileInfo& object) {
  if (snapshot_s <= 0 || object.modified_s <= 0 || object.modified_s <= snapshot_s) return {};
  if (object.answered_s > 0 && object.modified_s > object.answered_s) return {};
  return "its Last-Modified (" + http_date(object.modified_s) +
         ") is later than the server's Date when discovery read the store's metadata (" +
         http_date(snapshot_s) + "): the object was written since";
}

}  // namespace shardload::detail
