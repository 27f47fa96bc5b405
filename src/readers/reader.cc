#include "shardload/reader.hpp"

#include <exception>
#include <new>

#include "readers/detail/readers.hpp"

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

Result<File> open_checked(IoBackend& io, const Shard& shard, bool check) {
  if (!check) return File::open(io, shard.path);
  FileInfo now;
  SHARDLOAD_ASSIGN_OR_RETURN(File f, File::open_stat(io, shard.path, &now));
  if (now == shard.snapshot) return f;
  return Status(ErrorCode::kChanged, f.path() + ": changed since discovery: " +
                                         snapshot_difference(shard.snapshot, now));
}

Status check_unchanged(const File& f, const FileInfo& snapshot, Status read) {
  auto now = f.stat();
  if (!now) return read.is_ok() ? now.status() : read;
  if (*now == snapshot) return read;
  return {ErrorCode::kChanged,
          f.path() + ": changed while reading: " + snapshot_difference(snapshot, *now)};
}

namespace {

// The readers are written not to throw, but they size buffers from what files declare
// (a Zarr chunk, an HDF5 chunk, a Parquet page) and lean on libraries that can throw. Inside a
// Legate task, a reader thread or an OpenMP region an escaping exception ends the process, so
// every reader is wrapped here, at the one place readers are made, and anything thrown becomes
// a status naming the file and rows.
class GuardedReader final : public ShardReader {
 public:
  explicit GuardedReader(std::unique_ptr<ShardReader> inner) : inner_(std::move(inner)) {}

  Result<ShardProbe> probe(const std::string& path) override {
    try {
      Result<ShardProbe> r = inner_->probe(path);
      if (!r) return r.status().with_path(path);
      return r;
    } catch (const std::bad_alloc&) {
      return Status(ErrorCode::kLayout, path + ": out of memory while reading the metadata");
    } catch (const std::exception& e) {
      return Status(ErrorCode::kLayout, path + ": " + e.what());
    } catch (...) {
      return Status(ErrorCode::kLayout, path + ": unknown error while reading the metadata");
    }
  }

  Status read_rows(const ReadSpec& spec, const Shard& shard, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override {
    // The caller puts the rows in front; the file is the shard's.
    const auto where = [&] { return shard.path; };
    try {
      return inner_->read_rows(spec, shard, lo, hi, dst).with_path(shard.path);
    } catch (const std::bad_alloc&) {
      return {ErrorCode::kIo, where() +
                                  ": out of memory (a buffer the data needs could not be "
                                  "allocated)"};
    } catch (const std::exception& e) {
      return {ErrorCode::kIo, where() + ": " + e.what()};
    } catch (...) {
      return {ErrorCode::kIo, where() + ": unknown error"};
    }
  }

 private:
  std::unique_ptr<ShardReader> inner_;
};

Result<std::unique_ptr<ShardReader>> make_unguarded_reader(Format format,
                                                           const FormatOptions& options,
                                                           const ReaderContext& ctx) {
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

}  // namespace

Result<std::unique_ptr<ShardReader>> make_reader(Format format, const FormatOptions& options,
                                                 const ReaderContext& context) {
  ReaderContext ctx = context;
  if (ctx.io == nullptr) ctx.io = &posix_io();
  Result<std::unique_ptr<ShardReader>> reader = [&]() -> Result<std::unique_ptr<ShardReader>> {
    try {
      return make_unguarded_reader(format, options, ctx);
    } catch (const std::bad_alloc&) {
      return Status(ErrorCode::kIo, "out of memory while creating the reader");
    } catch (const std::exception& e) {
      return Status(ErrorCode::kIo, std::string("creating the reader: ") + e.what());
    }
  }();
  if (!reader) return reader.status();
  return std::unique_ptr<ShardReader>(new GuardedReader(std::move(reader).value()));
}

}  // namespace shardload
