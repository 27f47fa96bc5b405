#include "shardload/reader.hpp"

#include "shardload/detail/readers.hpp"

namespace shardload {

std::string snapshot_difference(const FileInfo& then, const FileInfo& now) {
  if (then == now) return {};
  // Size and mtime always, so that every message reads alike; the rest when
  // they are what differs.
  std::string d = "size " + std::to_string(then.size) + " -> " + std::to_string(now.size) +
                  " bytes, mtime " + std::to_string(then.mtime_ns) + " -> " +
                  std::to_string(now.mtime_ns) + " ns";
  if (then.ctime_ns != now.ctime_ns) {
    d += ", ctime " + std::to_string(then.ctime_ns) + " -> " + std::to_string(now.ctime_ns) + " ns";
  }
  if (then.inode != now.inode) {
    d += ", replaced by another file (inode " + std::to_string(then.inode) + " -> " +
         std::to_string(now.inode) + ")";
  }
  if (then.regular != now.regular)
    d += now.regular ? ", now a regular file" : ", no longer a regular file";
  return d;
}

Status check_snapshot(const File& f, const FileInfo& snapshot) {
  SHARDLOAD_ASSIGN_OR_RETURN(FileInfo now, f.stat());
  if (now == snapshot) return Status::ok();
  return {ErrorCode::kChanged,
          f.path() + ": changed since discovery: " + snapshot_difference(snapshot, now)};
}

Status check_unchanged(const File& f, const FileInfo& snapshot, Status read) {
  auto now = f.stat();
  if (!now) return read.is_ok() ? now.status() : read;
  if (*now == snapshot) return read;
  return {ErrorCode::kChanged,
          f.path() + ": changed while reading: " + snapshot_difference(snapshot, *now)};
}

Result<std::unique_ptr<ShardReader>> make_reader(Format format, const FormatOptions& options,
                                                 const ReaderContext& context) {
  ReaderContext ctx = context;
  if (ctx.io == nullptr) ctx.io = &posix_io();
  switch (format) {
    case Format::kNpy:
      return detail::make_npy_reader(options, ctx);
    case Format::kRaw:
      return detail::make_raw_reader(options, ctx);
    case Format::kZarr:
      return detail::make_zarr_reader(options, ctx);
#ifdef SHARDLOAD_WITH_HDF5
    case Format::kHdf5:
      return detail::make_hdf5_reader(options, ctx);
#endif
#ifdef SHARDLOAD_WITH_ARROW
    case Format::kParquet:
    case Format::kArrow:
      return detail::make_arrow_reader(format, options, ctx);
#endif
    default:
      break;
  }
  return Status(ErrorCode::kInvalidArgument, std::string("the ") + format_name(format) +
                                                 " format is not supported by this build");
}

}  // namespace shardload
