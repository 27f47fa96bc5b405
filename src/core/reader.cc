#include "shardload/reader.hpp"

#include "shardload/detail/readers.hpp"

namespace shardload {

Status check_snapshot(const File& f, const Shard& s) {
  SHARDLOAD_ASSIGN_OR_RETURN(FileInfo now, f.stat());
  if (now.size != s.snapshot.size || now.mtime_ns != s.snapshot.mtime_ns) {
    return {ErrorCode::kChanged,
            s.path + ": changed since discovery: size " + std::to_string(s.snapshot.size) + " -> " +
                std::to_string(now.size) + " bytes, mtime " + std::to_string(s.snapshot.mtime_ns) +
                " -> " + std::to_string(now.mtime_ns) + " ns"};
  }
  return Status::ok();
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
