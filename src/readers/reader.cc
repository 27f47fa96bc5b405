#include "shardload/reader.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>

#include "readers/detail/readers.hpp"
#include "shardload/formats.hpp"
#include "shardload/source.hpp"

namespace shardload {

Status check_snapshot(const File& f, const FileInfo& snapshot) {
  SHARDLOAD_ASSIGN_OR_RETURN(FileInfo now, f.stat());
  if (now == snapshot) return Status::ok();
  return {ErrorCode::kChanged,
          f.path() + ": changed since discovery: " + snapshot_difference(f.path(), snapshot, now)};
}

Result<File> open_checked(ShardSource& source, const Shard& shard, bool check) {
  if (!check) return source.open(shard.path);
  if (source.round_trips(shard.path)) {
    // Asking an object's state is a request (a HEAD) and the check after the reads asks
    // again; that later answer is the one that counts, so the open asks nothing.
    return source.open_known(shard.path, shard.snapshot);
  }
  FileInfo now;
  SHARDLOAD_ASSIGN_OR_RETURN(File f, source.open_stat(shard.path, &now));
  if (now == shard.snapshot) return f;
  return Status(ErrorCode::kChanged, f.path() + ": changed since discovery: " +
                                         snapshot_difference(f.path(), shard.snapshot, now));
}

Result<const File*> OpenShardFile::get(ShardSource& source, const Shard& shard, bool check) {
  if (file_.fd() >= 0 && path_ == shard.path && snapshot_ == shard.snapshot) return &file_;
  reset();
  SHARDLOAD_ASSIGN_OR_RETURN(file_, open_checked(source, shard, check));
  path_ = shard.path;
  snapshot_ = shard.snapshot;
  if (source.round_trips(shard.path)) {
    // Kept only for this read: the caller's read is one request, the next opens its own.
    path_.clear();
  }
  return &file_;
}

Status check_unchanged(const File& f, const FileInfo& snapshot, Status read) {
  auto now = f.stat();
  if (!now) return read.is_ok() ? now.status() : read;
  if (*now == snapshot) return read;
  // An object was not asked at its open (open_checked), so this cannot tell before from during.
  const char* when = path_traits(f.path()).round_trips ? ": changed since discovery: "
                                                       : ": changed while reading: ";
  return {ErrorCode::kChanged, f.path() + when + snapshot_difference(f.path(), snapshot, *now)};
}

DecodeUnit grid_unit(const Shard& shard, std::int64_t row) {
  const std::int64_t u = shard.decode_rows;
  if (u <= 0 || row < 0) return {};
  const std::int64_t lo = row - row % u;
  // A unit past the file's end (a stale or hostile layout) is the reader's to report.
  const std::int64_t end = std::max(shard.stored_rows(), row + 1);
  return {lo, std::min(end, lo > INT64_MAX - u ? INT64_MAX : lo + u)};
}

namespace {

// The readers are written not to throw, but they size buffers from what files declare
// (a Zarr chunk, an HDF5 chunk, a Parquet page) and lean on libraries that can throw. Inside a
// Legate task, a reader thread or an OpenMP region an escaping exception ends the process, so
// every reader is wrapped here, at the one place readers are made, and anything thrown becomes
// a status naming the file and rows.
class GuardedReader final : public ShardReader {
 public:
  GuardedReader(std::unique_ptr<ShardReader> inner, const ReaderContext& ctx)
      : GuardedReader(std::move(inner), ctx.unit_cache_bytes, ctx.stats) {}
  GuardedReader(std::unique_ptr<ShardReader> inner, std::size_t cache_bound, ReaderStats* stats)
      : inner_(std::move(inner)), cache_bound_(cache_bound), stats_(stats) {}

  std::unique_ptr<ShardReader> sibling() override {
    try {
      auto s = inner_->sibling();
      if (!s) return nullptr;
      return std::make_unique<GuardedReader>(std::move(s), cache_bound_, stats_);
    } catch (...) {
      return nullptr;  // the caller makes a reader of its own
    }
  }

  Result<ShardProbe> probe(const std::string& path) override {
    return guarded_probe(path, [&] { return inner_->probe(path); });
  }

  Result<ShardProbe> probe_at(const std::string& path, std::size_t position) override {
    return guarded_probe(path, [&] { return inner_->probe_at(path, position); });
  }

  template <typename Fn>
  static Result<ShardProbe> guarded_probe(const std::string& path, Fn&& fn) {
    try {
      Result<ShardProbe> r = fn();
      if (!r) return r.status().with_path(path);
      return r;
    } catch (const std::bad_alloc&) {
      return file_error(ErrorCode::kLayout, path, "out of memory while reading the metadata");
    } catch (const std::exception& e) {
      return file_error(ErrorCode::kLayout, path, e.what());
    } catch (...) {
      return file_error(ErrorCode::kLayout, path, "unknown error while reading the metadata");
    }
  }

  Status read_rows(const ReadSpec& spec, const Shard& shard, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override {
    // The caller puts the rows in front; the file is the shard's, as data too, whatever the
    // reader threw.
    try {
      return read_units(spec, shard, lo, hi, dst).with_path(shard.path);
    } catch (const std::bad_alloc&) {
      return file_error(ErrorCode::kIo, shard.path,
                        "out of memory (a buffer the data needs could not be allocated)");
    } catch (const std::exception& e) {
      return file_error(ErrorCode::kIo, shard.path, e.what());
    } catch (...) {
      return file_error(ErrorCode::kIo, shard.path, "unknown error");
    }
  }

  Result<std::vector<std::string>> other_files_read(const Shard& shard) override {
    try {
      return inner_->other_files_read(shard);
    } catch (const std::exception& e) {
      return file_error(ErrorCode::kLayout, shard.path, e.what());
    } catch (...) {
      return file_error(ErrorCode::kLayout, shard.path, "unknown error");
    }
  }

  DecodeUnit decode_unit(const Shard& shard, std::int64_t row) override {
    try {
      return inner_->decode_unit(shard, row);
    } catch (...) {
      return {};  // no unit known: read as asked
    }
  }

 private:
  // Rows [lo, hi) cut at decode units: runs of whole units go straight to the destination
  // (each unit decoded once by the inner read), and a unit of which only a part is asked
  // for is decoded whole into the one-unit cache, then served from there to this and later
  // calls. Without units, with the cache off, or for a unit over its bound, the inner
  // reader serves the rows as asked.
  Status read_units(const ReadSpec& spec, const Shard& shard, std::int64_t lo, std::int64_t hi,
                    std::byte* dst) {
    if (hi <= lo || cache_bound_ == 0 || spec.row_bytes == 0) {
      return inner_->read_rows(spec, shard, lo, hi, dst);
    }
    std::int64_t row = lo;
    while (row < hi) {
      const DecodeUnit u = inner_->decode_unit(shard, row);
      std::byte* out = dst + static_cast<std::size_t>(row - lo) * spec.row_bytes;
      if (u.none() || u.lo > row || u.hi <= row) {
        return inner_->read_rows(spec, shard, row, hi, out);
      }
      if (u.lo == row && u.hi <= hi) {
        // Whole units: the run goes on to the start of the unit holding row hi - 1, or to
        // hi when that unit ends there (two look-ups, however many units the run holds).
        const DecodeUnit last = inner_->decode_unit(shard, hi - 1);
        const std::int64_t end =
            std::max(u.hi, last.none() || last.hi <= hi || last.lo < row ? hi : last.lo);
        SHARDLOAD_RETURN_IF_ERROR(inner_->read_rows(spec, shard, row, end, out));
        row = end;
        continue;
      }
      const std::int64_t end = std::min(hi, u.hi);
      const auto unit_rows = static_cast<std::uint64_t>(u.hi - u.lo);
      const bool fits = unit_rows <= cache_bound_ / spec.row_bytes;
      if (!fits) {
        SHARDLOAD_RETURN_IF_ERROR(inner_->read_rows(spec, shard, row, end, out));
        row = end;
        continue;
      }
      if (!cached(spec, shard, u)) {
        const std::size_t bytes = static_cast<std::size_t>(unit_rows * spec.row_bytes);
        cache_key_.valid = false;
        if (cache_size_ < bytes) {
          cache_.reset();
          cache_size_ = 0;
          cache_.reset(new (std::nothrow) std::byte[bytes]);
          if (!cache_) {
            // No memory for the cache: the rows as asked, as without it.
            SHARDLOAD_RETURN_IF_ERROR(inner_->read_rows(spec, shard, row, end, out));
            row = end;
            continue;
          }
          cache_size_ = bytes;
        }
        if (!inner_->read_rows(spec, shard, u.lo, u.hi, cache_.get())) {
          // Rows of the unit outside the request may fail where the request would not (a
          // null the caller never asked for): the rows as asked decide, as without the cache.
          SHARDLOAD_RETURN_IF_ERROR(inner_->read_rows(spec, shard, row, end, out));
          row = end;
          continue;
        }
        cache_key_ = CacheKey{true, shard.path, shard.snapshot, shard.extra,
                              u.lo, u.hi,       spec.row_bytes, spec.dtype};
      } else if (stats_ != nullptr) {
        stats_->unit_cache_hits.fetch_add(1, std::memory_order_relaxed);
      }
      std::memcpy(out, cache_.get() + static_cast<std::size_t>(row - u.lo) * spec.row_bytes,
                  static_cast<std::size_t>(end - row) * spec.row_bytes);
      row = end;
    }
    return Status::ok();
  }

  // The cache holds the rows of one unit as the inner reader gave them for one file as
  // discovery saw it (its snapshot and format data), in one row layout.
  struct CacheKey {
    bool valid = false;
    std::string path;
    FileInfo snapshot;
    std::string extra;
    std::int64_t lo = 0, hi = 0;
    std::uint64_t row_bytes = 0;
    DType dtype;
  };
  bool cached(const ReadSpec& spec, const Shard& shard, const DecodeUnit& u) const {
    const CacheKey& k = cache_key_;
    return k.valid && k.lo == u.lo && k.hi == u.hi && k.row_bytes == spec.row_bytes &&
           k.dtype == spec.dtype && k.path == shard.path && k.snapshot == shard.snapshot &&
           k.extra == shard.extra;
  }

  std::unique_ptr<ShardReader> inner_;
  std::size_t cache_bound_ = 0;
  ReaderStats* stats_ = nullptr;
  std::unique_ptr<std::byte[]> cache_;
  std::size_t cache_size_ = 0;
  CacheKey cache_key_;
};

Result<std::unique_ptr<ShardReader>> make_unguarded_reader(Format format,
                                                           const FormatOptions& options,
                                                           const ReaderContext& ctx) {
  const FormatDescriptor* d = find_format(format);
  if (d == nullptr || !d->make_reader) {
    return Status(ErrorCode::kInvalidArgument, std::string("the ") + format_name(format) +
                                                   " format is not supported by this build");
  }
  // The option table's word on the options a built-in format does not take
  // (shardload/format.hpp), before its reader sees them: one refusal naming the option set.
  for (const auto& row : format_option_table()) {
    if (format != Format::kCustom && (row.formats & format_bit(format)) == 0 && row.get(options)) {
      std::string takers;
      for (const auto& f : formats()) {
        if ((row.formats & format_bit(f.format)) != 0)
          takers += (takers.empty() ? "" : ", ") + f.name;
      }
      return Status(ErrorCode::kInvalidArgument, d->name + ": " + option_mention(row.name) +
                                                     " does not apply (it is for " + takers + ")");
    }
  }
  // A text option is a name (a dataset, an array, a column): one holding a NUL would be cut
  // there by the C APIs it reaches (HDF5 opened the dataset named by the text before it).
  for (const auto& row : format_option_table()) {
    const std::optional<OptionValue> v = row.get(options);
    const auto holds_nul = [](const std::string& t) { return t.find('\0') != std::string::npos; };
    bool nul = false;
    if (v && std::holds_alternative<std::string>(*v)) nul = holds_nul(std::get<std::string>(*v));
    if (v && std::holds_alternative<std::vector<std::string>>(*v)) {
      for (const auto& t : std::get<std::vector<std::string>>(*v)) nul = nul || holds_nul(t);
    }
    if (nul) {
      return Status(ErrorCode::kInvalidArgument,
                    option_mention(row.name) + " holds a NUL character (a name never does)");
    }
  }
  return d->make_reader(options, ctx);
}

}  // namespace

Result<std::unique_ptr<ShardReader>> make_reader(Format format, const FormatOptions& options,
                                                 const ReaderContext& context) {
  ReaderContext ctx = context;
  if (ctx.source == nullptr) ctx.source = ShardSource::files();
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
  return std::unique_ptr<ShardReader>(new GuardedReader(std::move(reader).value(), ctx));
}

namespace detail {

std::string listed_names(std::vector<std::string> names, std::size_t shown) {
  if (names.empty()) return "none";
  const std::size_t n = std::min(shown, names.size());
  // Only the names shown need their order: no sort of all 100,000.
  std::partial_sort(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(n), names.end(),
                    [](const std::string& a, const std::string& b) { return natural_less(a, b); });
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += (i != 0 ? ", " : "") + names[i];
  if (names.size() > n) out += ", ... and " + std::to_string(names.size() - n) + " more";
  return out;
}

}  // namespace detail

}  // namespace shardload
