#include "shardload/save_options.hpp"

#include <sys/stat.h>

#include <algorithm>

#include "shardload/formats.hpp"
#include "shardload/location.hpp"

namespace shardload {

namespace {

Status argument_error(const std::string& message) {
  return {ErrorCode::kInvalidArgument, "save: " + message};
}

}  // namespace

Status check_save_dest(const std::string& dest) {
  if (dest.empty()) return argument_error("the destination is empty");
  if (dest.find('\0') != std::string::npos) {
    return argument_error("the destination holds a NUL byte");
  }
  // Taken as a local path, "s3:/B/d/" (one '/') would be written to "./s3:/B/d/": unless a
  // directory "s3:" is here (then it is the local path it spells), it is a URL mistyped.
  if (const std::string url = mistyped_url(dest); !url.empty()) {
    struct ::stat st {};
    if (::stat(dest.substr(0, dest.find('/')).c_str(), &st) != 0) {
      const auto [shown, shown_url] = mistyped_url_shown(dest, url);
      return argument_error("the destination '" + shown +
                            "': a URL needs two slashes after the scheme: write '" + shown_url +
                            "' (a local path spelled so can be written './" + shown + "')");
    }
  }
  // Taken as a local path, "gs://b/k" would be written to "./gs:/b/k" (or fail to find it).
  if (const std::string scheme = unsupported_scheme(dest); !scheme.empty()) {
    const std::string lower = lower_case_scheme(dest);
    return argument_error("the destination '" + dest + "': the " + scheme +
                          ":// scheme is not supported (save writes local paths and s3:// "
                          "URLs; a local path spelled so can be written './" +
                          dest + "')" +
                          (!lower.empty() && path_traits(lower).writable
                               ? "; a scheme is read in lower case only: write '" + lower + "'"
                               : std::string()));
  }
  return Status::ok();
}

Status check_save_options(const SaveOptions& options) {
  for (const auto& [name, text] : options.extra_files) {
    if (name.empty() || name == "." || name == ".." ||
        name.find_first_of(std::string("/\0", 2)) != std::string::npos) {
      return argument_error("extra file name '" + name + "' is not a plain file name");
    }
  }
  const FormatDescriptor* format = find_format(options.format);
  if (format == nullptr) {
    return argument_error("unknown format " + std::to_string(static_cast<int>(options.format)));
  }
  if (!format->writer) {
    return argument_error("no writer for the " + format->name + " format (expected " +
                          writable_format_names_text() + ")");
  }
  if (options.checksum != Checksum::kNone && options.checksum != Checksum::kXxh3) {
    return argument_error("unknown checksum " + std::to_string(static_cast<int>(options.checksum)));
  }
  if (options.checksum != Checksum::kNone && !options.manifest) {
    return argument_error("checksum " + std::string(checksum_name(options.checksum)) +
                          " is kept in the manifest, and manifest is false");
  }
  // Refused before anything is written: a store is a directory, and checksums cover regular
  // files only.
  if (options.checksum != Checksum::kNone && format->writer->writes_directories()) {
    return argument_error("checksum " + std::string(checksum_name(options.checksum)) +
                          " covers regular files, and a " + format->name +
                          " shard is a directory; save " + format->name + " with checksum none");
  }
  return Status::ok();
}

Result<std::size_t> save_row_bytes(DType dtype, std::span<const std::int64_t> trailing) {
  std::int64_t row_bytes = dtype.size;
  for (const std::int64_t d : trailing) {
    if (d < 0) {
      return argument_error("a trailing dimension is negative: " + std::to_string(d));
    }
    if (__builtin_mul_overflow(row_bytes, d, &row_bytes)) {
      return argument_error("a row of the array overflows a byte count");
    }
  }
  return static_cast<std::size_t>(row_bytes);
}

Result<std::vector<std::int64_t>> save_shard_offsets(const SaveOptions& options, std::int64_t rows,
                                                     std::int64_t default_shards) {
  std::vector<std::int64_t> offsets(1, 0);
  if (!options.shard_rows.empty()) {
    if (options.shard_rows.size() > static_cast<std::size_t>(kMaxSaveShards)) {
      return argument_error("shard_rows must hold at most 1000000 shards, found " +
                            std::to_string(options.shard_rows.size()));
    }
    for (const auto r : options.shard_rows) {
      if (r < 0) return argument_error("shard rows must be >= 0, found " + std::to_string(r));
      std::int64_t end = 0;
      if (__builtin_add_overflow(offsets.back(), r, &end) || end > rows) {
        return argument_error("the shard rows add up to more than the array's " +
                              std::to_string(rows) + " rows");
      }
      offsets.push_back(end);
    }
    if (offsets.back() != rows) {
      return argument_error("the shard rows add up to " + std::to_string(offsets.back()) +
                            ", but the array has " + std::to_string(rows) + " rows");
    }
    return offsets;
  }
  if (options.num_shards < 0) {
    return argument_error("num_shards must be >= 1, found " + std::to_string(options.num_shards));
  }
  const std::int64_t n = options.num_shards == 0 ? default_shards : options.num_shards;
  if (n > kMaxSaveShards) {
    return argument_error("num_shards must be at most 1000000, found " + std::to_string(n));
  }
  if (n < 1) return argument_error("num_shards must be >= 1, found " + std::to_string(n));
  const std::int64_t per = std::max<std::int64_t>(1, (rows + n - 1) / n);
  for (std::int64_t i = 0; i < n; ++i) {
    offsets.push_back(std::min(rows, offsets.back() + per));
  }
  return offsets;
}

}  // namespace shardload
