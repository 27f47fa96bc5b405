#include "legate/detail/save_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"
#include "shardload/npy.hpp"
#include "shardload/plan.hpp"
#include "shardload/source.hpp"

namespace shardload::detail {

namespace {

constexpr std::size_t kZarrChunkBytes = std::size_t{64} << 20;

Status sys_error(const std::string& path, const std::string& what, int err) {
  return file_error(ErrorCode::kIo, path, what + ": " + std::strerror(err), err);
}

std::string byte_order_char(const DType& d) {
  if (d.size == 1) return "|";
  return host_is_little_endian() ? "<" : ">";
}

bool mul_ok(std::int64_t a, std::size_t b, std::int64_t* out) {
  return !__builtin_mul_overflow(a, static_cast<std::int64_t>(b), out);
}

Status write_all(int fd, const std::string& path, const void* data, std::size_t n,
                 std::int64_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, std::min<std::size_t>(n, std::size_t{1} << 30), offset);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0)
      return sys_error(path,
                       "write of " + std::to_string(n) + " bytes at offset " +
                           std::to_string(offset) + " failed",
                       errno);
    if (w == 0) {
      return file_error(ErrorCode::kIo, path,
                        "write at offset " + std::to_string(offset) + " wrote nothing", ENOSPC);
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    offset += w;
  }
  return Status::ok();
}

// A new regular file of `size` bytes starting with `head`. O_EXCL and O_NOFOLLOW: the
// staging directory is ours and new, so anything already there is an error, never a target.
Status create_file(const std::string& path, const std::string& head, std::int64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return sys_error(path, "cannot create", errno);
  Status st = head.empty() ? Status::ok() : write_all(fd, path, head.data(), head.size(), 0);
  if (st && ::ftruncate(fd, size) != 0) {
    st = sys_error(path, "cannot size to " + std::to_string(size) + " bytes", errno);
  }
  if (::close(fd) != 0 && st) st = sys_error(path, "close failed", errno);
  return st;
}

Status write_file_at(const std::string& path, std::int64_t offset, const std::byte* src,
                     std::size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return sys_error(path, "cannot open for writing", errno);
  Status st = write_all(fd, path, src, n, offset);
  if (::close(fd) != 0 && st) st = sys_error(path, "close failed", errno);
  return st;
}

std::string zarr_chunk_key(std::int64_t chunk, std::size_t dims) {
  std::string key = std::to_string(chunk);
  for (std::size_t d = 1; d < dims; ++d) key += ".0";
  return key;
}

Status write_text(const std::string& path, const std::string& text) {
  return create_file(path, text, static_cast<std::int64_t>(text.size()));
}

std::string json_list(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string zarr_fill_value(const DType& d) {
  switch (d.kind) {
    case DTypeKind::kBool:
      return "false";
    case DTypeKind::kFloat:
      return "0.0";
    case DTypeKind::kComplex:
      return "[0.0, 0.0]";
    default:
      return "0";
  }
}

std::pair<std::string, std::string> split_dest(std::string dest) {
  while (dest.size() > 1 && dest.back() == '/') dest.pop_back();
  const auto slash = dest.rfind('/');
  if (slash == std::string::npos) return {".", dest};
  return {slash == 0 ? "/" : dest.substr(0, slash), dest.substr(slash + 1)};
}

// The names a save writes, of the type it writes them; anything else in a directory makes
// overwrite refuse it.
bool saved_name(std::string_view name, bool is_dir) {
  if (name == "shardload.json" || name == "_meta.json" || name == kManifestName) return !is_dir;
  for (const auto& [suffix, dir] :
       {std::pair{".npy", false}, std::pair{".bin", false}, std::pair{".zarr", true}}) {
    if (NumberPattern{"shard_", 4, suffix}.match(name) >= 0) return is_dir == dir;
  }
  return false;
}

}  // namespace

std::vector<std::int64_t> SaveSpec::encode() const {
  std::vector<std::int64_t> v{
      static_cast<std::int64_t>(format), static_cast<std::int64_t>(dtype.kind),
      static_cast<std::int64_t>(dtype.size), static_cast<std::int64_t>(trailing.size())};
  v.insert(v.end(), trailing.begin(), trailing.end());
  v.push_back(shards());
  v.insert(v.end(), offsets.begin(), offsets.end());
  v.insert(v.end(), data_offset.begin(), data_offset.end());
  v.insert(v.end(), chunk_rows.begin(), chunk_rows.end());
  return v;
}

Result<SaveSpec> SaveSpec::decode(std::span<const std::int64_t> v) {
  const auto bad = [] { return Status{ErrorCode::kInvalidArgument, "save task: malformed spec"}; };
  std::size_t i = 0;
  const auto next = [&](std::int64_t* out) {
    if (i >= v.size()) return false;
    *out = v[i++];
    return true;
  };
  SaveSpec s;
  std::int64_t f = 0, kind = 0, size = 0, dims = 0, n = 0;
  if (!next(&f) || !next(&kind) || !next(&size) || !next(&dims) || f < 0 || f > 2 || kind < 0 ||
      kind > 4 || size < 1 || size > 16 || dims < 0 || dims > 32) {
    return bad();
  }
  s.format = static_cast<SaveFormat>(f);
  s.dtype = DType{static_cast<DTypeKind>(kind), static_cast<std::uint8_t>(size)};
  std::int64_t row_bytes = size;
  for (std::int64_t d = 0; d < dims; ++d) {
    std::int64_t e = 0;
    if (!next(&e) || e < 0 || __builtin_mul_overflow(row_bytes, e, &row_bytes)) return bad();
    s.trailing.push_back(e);
  }
  s.row_bytes = static_cast<std::size_t>(row_bytes);
  if (!next(&n) || n < 1 || static_cast<std::size_t>(n) * 3 + 1 != v.size() - i) return bad();
  s.offsets.assign(v.begin() + static_cast<std::ptrdiff_t>(i),
                   v.begin() + static_cast<std::ptrdiff_t>(i + n + 1));
  i += static_cast<std::size_t>(n) + 1;
  s.data_offset.assign(v.begin() + static_cast<std::ptrdiff_t>(i),
                       v.begin() + static_cast<std::ptrdiff_t>(i + n));
  i += static_cast<std::size_t>(n);
  s.chunk_rows.assign(v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  if (s.offsets.front() != 0 || !std::is_sorted(s.offsets.begin(), s.offsets.end())) return bad();
  return s;
}

std::string save_shard_name(SaveFormat format, std::int64_t shard) {
  const char* ext = format == SaveFormat::kNpy   ? ".npy"
                    : format == SaveFormat::kRaw ? ".bin"
                                                 : ".zarr";
  return NumberPattern{"shard_", 4, ext}.format(shard);
}

std::int64_t zarr_chunk_rows(std::int64_t rows, std::size_t row_bytes) {
  const auto cap = static_cast<std::int64_t>(kZarrChunkBytes / std::max<std::size_t>(row_bytes, 1));
  return std::max<std::int64_t>(1, std::min(rows, cap));
}

Status create_shard_files(const std::string& dir, SaveSpec* spec) {
  const auto n = static_cast<std::size_t>(spec->shards());
  spec->data_offset.assign(n, 0);
  spec->chunk_rows.assign(n, 1);
  for (std::size_t s = 0; s < n; ++s) {
    const std::int64_t rows = spec->offsets[s + 1] - spec->offsets[s];
    const std::string path =
        dir + "/" + save_shard_name(spec->format, static_cast<std::int64_t>(s));
    std::int64_t data = 0;
    if (!mul_ok(rows, spec->row_bytes, &data)) {
      return file_error(ErrorCode::kInvalidArgument, path,
                        std::to_string(rows) + " rows of " + std::to_string(spec->row_bytes) +
                            " bytes overflow a file size");
    }
    switch (spec->format) {
      case SaveFormat::kNpy: {
        std::vector<std::int64_t> shape{rows};
        shape.insert(shape.end(), spec->trailing.begin(), spec->trailing.end());
        const std::string head = encode_npy_header(spec->dtype, shape);
        spec->data_offset[s] = static_cast<std::int64_t>(head.size());
        SHARDLOAD_RETURN_IF_ERROR(
            create_file(path, head, static_cast<std::int64_t>(head.size()) + data));
        break;
      }
      case SaveFormat::kRaw:
        SHARDLOAD_RETURN_IF_ERROR(create_file(path, {}, data));
        break;
      case SaveFormat::kZarr: {
        if (::mkdir(path.c_str(), 0755) != 0) return sys_error(path, "cannot create", errno);
        const std::int64_t cr = zarr_chunk_rows(rows, spec->row_bytes);
        spec->chunk_rows[s] = cr;
        if (spec->row_bytes == 0) break;  // no bytes: every chunk is missing (fill value)
        const auto chunk_bytes = static_cast<std::int64_t>(cr * spec->row_bytes);
        for (std::int64_t k = 0; k * cr < rows; ++k) {
          // Zarr v2 stores an edge chunk at full size; the padding stays zeros.
          SHARDLOAD_RETURN_IF_ERROR(create_file(
              path + "/" + zarr_chunk_key(k, spec->trailing.size() + 1), {}, chunk_bytes));
        }
        break;
      }
    }
  }
  return Status::ok();
}

Status write_rows(const std::string& dir, const SaveSpec& spec, std::int64_t lo, std::int64_t hi,
                  const std::byte* src) {
  std::vector<Piece> pieces;
  pieces_for_rows(spec.offsets, lo, hi, &pieces);
  const auto rb = static_cast<std::int64_t>(spec.row_bytes);
  for (const Piece& p : pieces) {
    const auto s = static_cast<std::size_t>(p.shard);
    const std::string path = dir + "/" + save_shard_name(spec.format, p.shard);
    const std::byte* from = src + p.dst_row * rb;
    if (spec.format != SaveFormat::kZarr) {
      SHARDLOAD_RETURN_IF_ERROR(write_file_at(path, spec.data_offset[s] + p.lo * rb, from,
                                              static_cast<std::size_t>((p.hi - p.lo) * rb)));
      continue;
    }
    const std::int64_t cr = spec.chunk_rows[s];
    for (std::int64_t r = p.lo; r < p.hi;) {
      const std::int64_t k = r / cr;
      const std::int64_t end = std::min(p.hi, (k + 1) * cr);
      SHARDLOAD_RETURN_IF_ERROR(
          write_file_at(path + "/" + zarr_chunk_key(k, spec.trailing.size() + 1), (r - k * cr) * rb,
                        from + (r - p.lo) * rb, static_cast<std::size_t>((end - r) * rb)));
      r = end;
    }
  }
  return Status::ok();
}

Status write_metadata(const std::string& dir, const SaveSpec& spec,
                      const std::vector<std::pair<std::string, std::string>>& extra_files) {
  const std::string descr = byte_order_char(spec.dtype) + spec.dtype.code();
  std::vector<std::int64_t> rows;
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    rows.push_back(spec.offsets[static_cast<std::size_t>(s) + 1] -
                   spec.offsets[static_cast<std::size_t>(s)]);
  }
  if (spec.format == SaveFormat::kRaw) {
    SHARDLOAD_RETURN_IF_ERROR(
        write_text(dir + "/shardload.json",
                   "{\"dtype\": \"" + descr + "\", \"shape\": " + json_list(spec.trailing) +
                       ", \"header_bytes\": 0, \"rows\": " + json_list(rows) + "}\n"));
  } else if (spec.format == SaveFormat::kZarr) {
    for (std::int64_t s = 0; s < spec.shards(); ++s) {
      std::vector<std::int64_t> shape{rows[static_cast<std::size_t>(s)]};
      std::vector<std::int64_t> chunks{spec.chunk_rows[static_cast<std::size_t>(s)]};
      shape.insert(shape.end(), spec.trailing.begin(), spec.trailing.end());
      for (const auto d : spec.trailing) chunks.push_back(std::max<std::int64_t>(1, d));
      SHARDLOAD_RETURN_IF_ERROR(write_text(
          dir + "/" + save_shard_name(spec.format, s) + "/.zarray",
          "{\"zarr_format\": 2, \"shape\": " + json_list(shape) +
              ", \"chunks\": " + json_list(chunks) + ", \"dtype\": \"" + descr +
              "\", \"compressor\": null, \"fill_value\": " + zarr_fill_value(spec.dtype) +
              ", \"order\": \"C\", \"filters\": null, \"dimension_separator\": \".\"}\n"));
    }
  }
  for (const auto& [name, text] : extra_files) {
    SHARDLOAD_RETURN_IF_ERROR(write_text(dir + "/" + name, text));
  }
  return Status::ok();
}

Status write_save_manifest(const std::string& dir, Checksum checksum) {
  // The layout is the one discover() finds for the finished directory, so that discovering
  // the destination later takes the manifest and gets exactly what probing would give.
  // Renaming the directory changes neither the files' inodes nor their times, so the
  // snapshots stay valid at the destination.
  DiscoverOptions opts;
  opts.use_manifest = false;
  SHARDLOAD_ASSIGN_OR_RETURN(const Layout layout, discover(Source::dir(dir), opts));
  ManifestOptions mopts;
  mopts.checksum = checksum;
  SHARDLOAD_ASSIGN_OR_RETURN(const std::string written, write_manifest(layout, dir, mopts));
  (void)written;
  return Status::ok();
}

Status check_destination(const std::string& dest, bool overwrite) {
  struct ::stat st {};
  if (::lstat(dest.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::ok();
    return sys_error(dest, "cannot look at the destination", errno);
  }
  if (S_ISLNK(st.st_mode)) {
    return file_error(ErrorCode::kIo, dest,
                      "the destination is a symbolic link; name the directory itself", ENOTDIR);
  }
  if (!S_ISDIR(st.st_mode)) {
    return file_error(ErrorCode::kIo, dest,
                      "the destination exists and is not a directory (expected a directory of "
                      "shards, or nothing)",
                      overwrite ? ENOTDIR : EEXIST);
  }
  DIR* d = ::opendir(dest.c_str());
  if (d == nullptr) return sys_error(dest, "cannot list the destination", errno);
  Status result = Status::ok();
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    if (!overwrite) {
      result =
          file_error(ErrorCode::kIo, dest,
                     "the destination exists and is not empty (it holds '" + std::string(name) +
                         "'); pass overwrite to replace a dataset saved there",
                     EEXIST);
      break;
    }
    const std::string path = dest + "/" + std::string(name);
    struct ::stat es {};
    if (::lstat(path.c_str(), &es) != 0) {
      result = sys_error(path, "cannot look at", errno);
      break;
    }
    const bool is_dir = S_ISDIR(es.st_mode);
    if (!is_dir && !S_ISREG(es.st_mode) && saved_name(name, false)) {
      result = file_error(ErrorCode::kIo, path,
                          "not a regular file (a FIFO, device, socket or link is in the way of "
                          "the shard name); remove it first",
                          EINVAL);
      break;
    }
    if (!saved_name(name, is_dir)) {
      result = file_error(ErrorCode::kIo, dest,
                          "overwrite replaces only a directory of saved shards, and it holds '" +
                              std::string(name) +
                              "', which a save does not write; remove it or "
                              "save elsewhere",
                          EEXIST);
      break;
    }
  }
  ::closedir(d);
  return result;
}

Result<std::string> make_staging_dir(const std::string& dest) {
  const auto [parent, base] = split_dest(dest);
  if (base.empty() || base == "." || base == ".." || base == "/") {
    return Status{ErrorCode::kInvalidArgument,
                  "save: the destination '" + dest + "' must name a directory by its name"};
  }
  static std::int64_t counter = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string path = (parent == "/" ? std::string() : parent) + "/." + base +
                             ".shardload-tmp-" + std::to_string(::getpid()) + "-" +
                             std::to_string(counter++);
    if (::mkdir(path.c_str(), 0755) == 0) return path;
    if (errno != EEXIST) {
      return sys_error(dest, "cannot create the staging directory " + path + " beside it", errno);
    }
  }
  return file_error(ErrorCode::kIo, dest, "cannot find a free staging directory name", EEXIST);
}

Status commit_staging(const std::string& staging, const std::string& dest, bool overwrite) {
  // rename(2) replaces an absent destination or an empty directory in one step.
  if (::rename(staging.c_str(), dest.c_str()) == 0) return Status::ok();
  const int err = errno;
  if ((err != ENOTEMPTY && err != EEXIST) || !overwrite) {
    return sys_error(dest, "cannot move the new dataset into place", err);
  }
  // The destination changed since it was checked: check again just before replacing it.
  SHARDLOAD_RETURN_IF_ERROR(check_destination(dest, true));
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dest.c_str(), RENAME_EXCHANGE) == 0) {
    remove_tree(staging);  // now the old dataset
    return Status::ok();
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    return sys_error(dest, "cannot swap the new dataset into place", errno);
  }
  // No atomic exchange on this file system: move the old dataset aside, then the new one in.
  const std::string aside = staging + ".old";
  if (::rename(dest.c_str(), aside.c_str()) != 0) {
    return sys_error(dest, "cannot move the old dataset aside", errno);
  }
  if (::rename(staging.c_str(), dest.c_str()) != 0) {
    const int e = errno;
    (void)::rename(aside.c_str(), dest.c_str());
    return sys_error(dest, "cannot move the new dataset into place", e);
  }
  remove_tree(aside);
  return Status::ok();
}

void remove_tree(const std::string& path) noexcept {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace shardload::detail
