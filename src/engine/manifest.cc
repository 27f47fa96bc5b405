#include "shardload/manifest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <unordered_set>

#include "base/detail/bytes.hpp"
#include "base/detail/links.hpp"
#include "engine/detail/auto_directory.hpp"
#include "engine/detail/lanes.hpp"
#include "engine/detail/probe.hpp"
#include "shardload/codec.hpp"
#include "shardload/location.hpp"
#include "shardload/shard_source.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/context.hpp"

namespace shardload {

namespace {

constexpr char kMagic[8] = {'S', 'L', 'M', 'A', 'N', 'I', 'F', '\n'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 24;
constexpr std::size_t kTrailerBytes = 8;
// A million shards take about 30 MB; anything past this is not a manifest we wrote, and
// reading it whole would be the huge allocation a hostile file asks for.
constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{1} << 30;

// A shard `name` of directory `dir`, spelled as a listing of `dir` spells it (a source's
// directory in the working directory, ".", gives bare names): the manifest's shards are
// compared with that listing, and a "./" on one side only would call every manifest of the
// working directory stale.
std::string shard_in(const std::string& dir, const std::string& name) {
  return dir == "." ? name : join_key(dir, name);
}

using detail::get_le;
using detail::put_le;

// A bounded cursor over the body: every length is checked against what is left.
class Cursor {
 public:
  explicit Cursor(std::span<const std::uint8_t> b) : b_(b) {}
  bool varint(std::uint64_t* v) { return detail::get_varint(b_, &pos_, v); }
  bool bytes(std::uint64_t n, std::span<const std::uint8_t>* out) {
    if (n > b_.size() - pos_) return false;
    *out = b_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return true;
  }
  [[nodiscard]] std::size_t left() const { return b_.size() - pos_; }

 private:
  std::span<const std::uint8_t> b_;
  std::size_t pos_ = 0;
};

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

// A path relative to the manifest's directory that cannot leave it or end early.
bool safe_relative(const std::string& rel, std::string* why) {
  if (rel.empty()) {
    *why = "an empty path";
  } else if (rel.find('\0') != std::string::npos) {
    *why = "a path with a NUL character";
  } else if (rel.front() == '/') {
    *why = "an absolute path '" + rel + "'";
  } else {
    std::size_t start = 0;
    while (start <= rel.size()) {
      const std::size_t end = std::min(rel.find('/', start), rel.size());
      const std::string_view part(rel.data() + start, end - start);
      if (part.empty() || part == "." || part == "..") {
        *why = "the path '" + rel + "' (empty, '.' or '..' parts)";
        return false;
      }
      start = end + 1;
    }
    return true;
  }
  return false;
}

Status relative_to(const std::string& dir, std::string* path) {
  if (!path_traits(dir).kernel_files) {
    // Keys only. A manifest records keys relative to its directory and never a query (the
    // store's options, and any secret in them, belong to the reader): every URL made from it
    // gets the query of the URL the manifest was read from, so it must be every shard's.
    const auto [dir_key, dir_query] = split_options(dir);
    auto [key, query] = split_options(*path);
    if (query != dir_query) {
      return Status(ErrorCode::kInvalidArgument,
                    *path + ": its store options ('" + query + "') differ from those of " + dir +
                        ", where the manifest is written; index a directory that holds every "
                        "shard");
    }
    *path = std::move(key);
    std::string prefix = dir_key;
    if (prefix.back() != '/') prefix += '/';
    if (path->size() <= prefix.size() || path->compare(0, prefix.size(), prefix) != 0) {
      return Status(ErrorCode::kInvalidArgument,
                    *path + dir_query + ": not inside " + dir +
                        ", where the manifest is written; index a directory that holds every "
                        "shard");
    }
    path->erase(0, prefix.size());
    std::string why;
    if (!safe_relative(*path, &why)) {
      return Status(ErrorCode::kInvalidArgument,
                    prefix + *path + dir_query + ": cannot be written into a manifest: " + why);
    }
    return Status::ok();
  }
  std::string prefix = shard_in(dir, "");
  if (!path->empty() && path->front() == '/' && (prefix.empty() || prefix.front() != '/')) {
    // A discovered layout names its local files by absolute paths (detail::anchored_path),
    // the directory is as the caller spelled it: anchored as they were ("." too).
    prefix = detail::anchored_path(prefix + "x");
    prefix.pop_back();
  }
  if (path->size() <= prefix.size() || path->compare(0, prefix.size(), prefix) != 0) {
    return Status(ErrorCode::kInvalidArgument,
                  path_for_message(*path) + ": not inside " + path_for_message(dir) +
                      ", where the manifest is written; index a directory that holds every shard");
  }
  path->erase(0, prefix.size());
  std::string why;
  if (!safe_relative(*path, &why)) {
    return Status(ErrorCode::kInvalidArgument,
                  path_for_message(prefix + *path) + ": cannot be written into a manifest: " + why);
  }
  return Status::ok();
}

// The numbering under which the directory's one numbered group is exactly these shards.
std::string infer_pattern(const Layout& layout, const std::string& dir) {
  if (layout.shards.empty()) return {};
  auto scan = scan_directory(dir);
  if (!scan) return {};
  for (const auto& g : scan->groups) {
    if (static_cast<std::size_t>(g.count) == layout.shards.size() &&
        detail::anchored_path(shard_in(dir, g.first)) ==
            detail::anchored_path(layout.shards.front().path) &&
        detail::anchored_path(shard_in(dir, g.last)) ==
            detail::anchored_path(layout.shards.back().path)) {
      return g.pattern;
    }
  }
  return {};
}

// The shards `dir` holds now, relative to it ("shard_0003.npy"), with their full paths as
// discovery spells them: under `pattern`, or without one the directory's own numbered group
// (what discovery of the directory without a pattern lists). nullopt where nothing is listed: a
// directory without a listing (HTTP), or one that without a pattern stands for a store (a Zarr
// array) or holds no numbered group to tell.
struct Listed {
  std::vector<std::string> paths;
  std::vector<std::string> names;
};
Result<std::optional<Listed>> shards_listed(const std::string& dir, const std::string& pattern,
                                            const FormatOptions& format) {
  if (!path_traits(dir).listable) return std::optional<Listed>{};
  Source source = Source::directory(dir, pattern);
  if (pattern.empty()) {
    DiscoverOptions options;
    options.format = format;
    auto own = detail::auto_directory(source, &options);
    if (!own || own->kind != Source::Kind::kDirectory) return std::optional<Listed>{};
    source = std::move(own).value();
  }
  Listed listed;
  SHARDLOAD_ASSIGN_OR_RETURN(listed.paths, resolve(source));
  for (const auto& p : listed.paths) {
    std::string name = p;
    if (!relative_to(dir, &name)) name = p;
    listed.names.push_back(std::move(name));
  }
  return std::optional<Listed>(std::move(listed));
}

// Why the directory no longer holds the layout (`names`, its shards relative to `dir`) as it
// did when it was discovered, or "": the first shard listed now that the layout lacks or the
// other way round, then (local files) the first shard whose file is not its snapshot. The
// listing is compared under an explicit or inferred pattern always; without one only where the
// directory's own numbered group holds one of the layout's shards, since a C++ caller may write
// the manifest of any files under the directory (a layout that is part of that group is what a
// listing taken before an overwrite leaves).
std::string directory_difference(const Layout& layout, const std::vector<std::string>& names,
                                 const std::string& dir, const std::string& pattern) {
  auto listed = shards_listed(dir, pattern, layout.options);
  if (!listed) return listed.status().message();
  if (*listed) {
    const std::unordered_set<std::string> indexed(names.begin(), names.end());
    const std::unordered_set<std::string> now((*listed)->names.begin(), (*listed)->names.end());
    const bool overlap = std::any_of(names.begin(), names.end(),
                                     [&](const std::string& n) { return now.count(n) != 0; });
    if (!pattern.empty() || overlap) {
      const std::string counts = " (the listing indexed holds " + std::to_string(names.size()) +
                                 " shards, the directory " +
                                 std::to_string((*listed)->names.size()) + ")";
      for (std::size_t i = 0; i < (*listed)->names.size(); ++i) {
        if (indexed.count((*listed)->names[i]) == 0) {
          return path_for_message((*listed)->paths[i]) + " is not in the listing indexed" + counts;
        }
      }
      for (std::size_t i = 0; i < names.size(); ++i) {
        if (now.count(names[i]) == 0) {
          return path_for_message(layout.shards[i].path) + " is no longer in the directory" +
                 counts;
        }
      }
    }
  }
  // A store's snapshot is its metadata file's.
  const FormatDescriptor* d = find_format(layout.format, layout.options.reader);
  if (d != nullptr && d->capabilities.freshness == Freshness::kMetadataFile) return {};
  if (!path_traits(dir).kernel_files) {
    // An overwrite of a prefix that keeps the shards' names (as many shards) puts other
    // objects under them, which the names cannot tell: each object's size and ETag (a HEAD
    // each, on a few threads) against the snapshot its probe took, or a manifest of the old
    // objects' snapshots mixed with the new ones' goes up over the overwrite's own.
    constexpr std::size_t kLanes = 16;
    const std::size_t n = layout.shards.size();
    const Status first = detail::first_failure_in_lanes(
        n, std::min(kLanes, n), [&](std::size_t, std::size_t i) -> Status {
          const Shard& s = layout.shards[i];
          auto now = posix_io().stat_path(s.path);
          if (!now) return now.status();
          if (*now == s.snapshot) return Status::ok();
          return Status(ErrorCode::kChanged, path_for_message(s.path) + ": " +
                                                 snapshot_difference(s.path, s.snapshot, *now));
        });
    return first ? std::string() : first.message();
  }
  for (const auto& s : layout.shards) {
    auto now = posix_io().stat_path(s.path);
    if (!now) return now.status().message();
    if (*now != s.snapshot) {
      return path_for_message(s.path) + ": " + snapshot_difference(s.path, s.snapshot, *now);
    }
  }
  return {};
}

Status changed_while_indexing(const std::string& dir, const std::string& why,
                              const std::string& outcome) {
  return file_error(ErrorCode::kLayout, dir.empty() ? "." : dir,
                    "changed while indexing: " + why + "; " + outcome +
                        " (run shardload index again once the directory is settled)");
}

// An object store has no rename: the directory's store writes the key whole (Store::write:
// one upload, which the store makes visible only once complete), which gives what the
// temporary file and rename give locally.
Result<std::string> write_remote_manifest(const std::string& directory, const std::string& target,
                                          const std::vector<std::uint8_t>& bytes) {
  SHARDLOAD_ASSIGN_OR_RETURN(const std::unique_ptr<Store> store, open_store(directory));
  SHARDLOAD_RETURN_IF_ERROR(store->write(
      kManifestName,
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size())));
  return target;
}

// Opens a manifest object (one HEAD, for its size and ETag); errors as read_manifest's.
Result<File> open_remote_manifest(const std::string& path, FileInfo* info) {
  auto f = File::open_stat(posix_io(), path, info);
  if (f) return f;
  return file_error(ErrorCode::kLayout, path, "manifest: " + message_after_path(f.status(), path),
                    f.status().sys_errno());
}

}  // namespace

Result<Checksum> parse_checksum(std::string_view name) {
  if (name == "none" || name.empty()) return Checksum::kNone;
  if (name == "xxh3") return Checksum::kXxh3;
  if (name == "crc32c") {
    return Status(ErrorCode::kInvalidArgument,
                  "checksum 'crc32c' is not available in this build (no maintained CRC32C "
                  "library is packaged); use 'xxh3' or 'none'");
  }
  return Status(ErrorCode::kInvalidArgument,
                "checksum '" + std::string(name) + "': expected 'xxh3' or 'none'");
}

const char* checksum_name(Checksum c) { return c == Checksum::kXxh3 ? "xxh3" : "none"; }

std::string manifest_path(const std::string& directory) {
  return join_key(directory, kManifestName);
}

Result<std::uint64_t> file_checksum(const std::string& path, Checksum kind, IoBackend& io) {
  if (kind == Checksum::kNone) return std::uint64_t{0};
  SHARDLOAD_ASSIGN_OR_RETURN(File f, File::open(io, path));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state || XXH3_64bits_reset(state.get()) == XXH_ERROR) {
    return Status(ErrorCode::kNoMemory, path_for_message(path) + ": cannot start a checksum");
  }
  std::vector<std::uint8_t> buf(std::size_t{1} << 20);
  std::uint64_t offset = 0;
  for (;;) {
    const std::int64_t got = io.pread(f.fd(), buf.data(), buf.size(), offset);
    if (got == -EINTR) continue;
    if (got < 0) {
      const int err = static_cast<int>(-got);
      return file_error(ErrorCode::kIo, path,
                        "cannot read at byte " + std::to_string(offset) + ": " + std::strerror(err),
                        err);
    }
    if (got == 0) break;
    XXH3_64bits_update(state.get(), buf.data(), static_cast<std::size_t>(got));
    offset += static_cast<std::uint64_t>(got);
  }
  return static_cast<std::uint64_t>(XXH3_64bits_digest(state.get()));
}

Status check_manifest_writable(const std::string& directory) {
  if (path_traits(directory).writable) return Status::ok();
  return file_error(ErrorCode::kInvalidArgument, directory,
                    "a manifest cannot be written over HTTP (no upload, and no listing to "
                    "index); index a local or s3:// copy of the objects and serve its " +
                        std::string(kManifestName) + " beside them");
}

Result<std::string> write_manifest(const Layout& layout, const std::string& directory,
                                   const ManifestOptions& options) {
  SHARDLOAD_ASSIGN_OR_RETURN(detail::WrittenManifest written,
                             detail::write_manifest_file(layout, directory, options));
  return std::move(written.path);
}

Result<detail::WrittenManifest> detail::write_manifest_file(const Layout& layout,
                                                            const std::string& directory,
                                                            const ManifestOptions& options) {
  SHARDLOAD_RETURN_IF_ERROR(check_manifest_writable(directory));
  IoBackend& io = options.io != nullptr ? *options.io : posix_io();
  const std::string target = manifest_path(directory);
  // Relative paths: the directory may be moved or mounted elsewhere with its manifest.
  Layout rel = layout;
  rel.manifest_status.clear();
  rel.manifest_state = ManifestState::kNone;
  for (auto& s : rel.shards) {
    // A server's clock at discovery is that discovery's: a later one takes its own.
    s.server_snapshot_s = 0;
    SHARDLOAD_RETURN_IF_ERROR(relative_to(directory, &s.path));
    for (auto& f : s.linked) SHARDLOAD_RETURN_IF_ERROR(relative_to(directory, &f.path));
  }
  std::vector<std::uint64_t> sums;
  if (options.checksum != Checksum::kNone) {
    sums.reserve(layout.shards.size());
    for (const auto& s : layout.shards) {
      // A store's snapshot is its metadata file's, so only the format says that the shard
      // itself is a directory.
      const FormatDescriptor* d = find_format(layout.format, layout.options.reader);
      if ((d != nullptr && d->capabilities.freshness == Freshness::kMetadataFile) ||
          !s.snapshot.regular) {
        return Status(ErrorCode::kInvalidArgument,
                      path_for_message(s.path) +
                          ": checksums cover regular files only, and this shard is a "
                          "directory (a Zarr store); index it with checksum none");
      }
      SHARDLOAD_ASSIGN_OR_RETURN(const std::uint64_t h,
                                 file_checksum(s.path, options.checksum, io));
      // The checksum must be of the bytes the snapshot describes.
      auto now = io.stat_path(s.path);
      if (!now) return now.status();
      if (*now != s.snapshot) {
        return file_error(
            ErrorCode::kChanged, s.path,
            "changed since discovery: " + snapshot_difference(s.path, s.snapshot, *now));
      }
      sums.push_back(h);
    }
  }
  const std::string pattern =
      options.pattern.empty() ? infer_pattern(layout, directory) : options.pattern;

  std::vector<std::uint8_t> out(kMagic, kMagic + sizeof kMagic);
  put_le(out, kVersion, 4);
  put_le(out, static_cast<std::uint32_t>(options.checksum), 4);
  put_le(out, 0, 8);  // body length, set below
  detail::put_varint(out, pattern.size());
  out.insert(out.end(), pattern.begin(), pattern.end());
  const std::vector<std::uint8_t> encoded = encode_layout(rel);
  detail::put_varint(out, encoded.size());
  out.insert(out.end(), encoded.begin(), encoded.end());
  for (const auto h : sums) put_le(out, h, 8);
  detail::put_le_at(out, 16, out.size() - kHeaderBytes, 8);
  put_le(out, XXH3_64bits(out.data(), out.size()), 8);
  std::vector<std::string> names;
  names.reserve(rel.shards.size());
  for (const auto& s : rel.shards) names.push_back(s.path);
  if (!path_traits(directory).kernel_files) {
    // A store has no rename into a directory held open: listing the prefix again just before
    // the upload is what can be done (an overwrite between the two still goes unseen).
    if (std::string why = directory_difference(layout, names, directory, pattern); !why.empty()) {
      return changed_while_indexing(directory, why, "the manifest was not written");
    }
    SHARDLOAD_ASSIGN_OR_RETURN(std::string written, write_remote_manifest(directory, target, out));
    return WrittenManifest{std::move(written)};
  }

  // The temporary file, the rename and the checks go through one descriptor of the directory:
  // an overwrite of DIR (a save renaming another directory into its place) while this index ran
  // would otherwise have the manifest of the listing taken before it renamed, by path, into the
  // directory that replaced it. The order closes that race: (1) the temporary file is written
  // into the directory held; (2) the directory held is listed and its shards stat'ed again, and
  // only then is DIR's identity compared with the one held, so the listing and the stats were
  // of the held directory (it can be renamed away, not back: this descriptor keeps its inode);
  // (3) the rename lands in the held directory whatever DIR names by then; (4) DIR's identity
  // and listing once more: a directory swapped in or changed during (2)-(3) holds no manifest
  // of ours, or ours is taken back, and the caller is told instead of told it succeeded.
  const std::string dir_path = directory.empty() ? std::string(".") : directory;
  const int dfd = ::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct ::stat held {};
  if (dfd < 0 || ::fstat(dfd, &held) != 0) {
    const int err = errno;
    if (dfd >= 0) ::close(dfd);
    return file_error(ErrorCode::kIo, directory,
                      "cannot create the manifest's temporary file: cannot open the directory: " +
                          std::string(std::strerror(err)),
                      err);
  }
  std::string tmp_name;
  int fd = -1;
  {
    static constexpr char kLetters[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::random_device seed;
    std::mt19937_64 gen((static_cast<std::uint64_t>(seed()) << 32) ^ seed());
    std::uniform_int_distribution<std::size_t> pick(0, sizeof kLetters - 2);
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
      tmp_name = ".shardload.manifest.";
      for (int i = 0; i < 6; ++i) tmp_name += kLetters[pick(gen)];
      fd = ::openat(dfd, tmp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0 && errno != EEXIST) break;
    }
  }
  const std::string tmp = join_key(directory, tmp_name);
  if (fd < 0) {
    const int err = errno;
    ::close(dfd);
    return file_error(
        ErrorCode::kIo, directory,
        "cannot create the manifest's temporary file: " + std::string(std::strerror(err)), err);
  }
  // The manifest the rename replaces, linked aside until the checks after the rename pass:
  // a change they find takes the new one back and puts this one back in its place (cli.md:
  // "index fails, the old manifest kept"), where removing the new one alone left none.
  std::string aside;
  auto fail = [&](Status st) {
    if (fd >= 0) ::close(fd);
    ::unlinkat(dfd, tmp_name.c_str(), 0);
    if (!aside.empty()) ::unlinkat(dfd, aside.c_str(), 0);
    ::close(dfd);
    return st;
  };
  if (Status st = detail::write_all(fd, tmp, out.data(), out.size()); !st) return fail(st);
  // The file's mode as a plain create would give it; a manifest is for everyone who may read
  // the data.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  // The file this descriptor wrote, whatever the path names by the time the caller looks.
  struct ::stat made {};
  if (::fchmod(fd, 0644 & ~mask) != 0 || ::fsync(fd) != 0 || ::fstat(fd, &made) != 0) {
    const int err = errno;
    return fail(
        file_error(ErrorCode::kIo, tmp, std::string("cannot sync: ") + std::strerror(err), err));
  }
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) {
    const int err = errno;
    return fail(
        file_error(ErrorCode::kIo, tmp, std::string("cannot close: ") + std::strerror(err), err));
  }
  // Why DIR is no longer the directory held, or the held directory no longer the layout's.
  auto moved = [&]() -> std::string {
    std::string why = directory_difference(layout, names, directory, pattern);
    if (!why.empty()) return why;
    struct ::stat now {};
    if (::stat(dir_path.c_str(), &now) != 0) {
      return path_for_message(directory) + ": " + std::strerror(errno);
    }
    if (now.st_dev != held.st_dev || now.st_ino != held.st_ino) {
      return "another directory took its place (inode " + std::to_string(held.st_ino) + " -> " +
             std::to_string(now.st_ino) + "), as an overwrite of it does";
    }
    return {};
  };
  if (std::string why = moved(); !why.empty()) {
    return fail(changed_while_indexing(directory, why, "the manifest was not written"));
  }
  // The temporary file's name is this call's alone (O_EXCL): so is this one. A file system
  // without hard links keeps no old manifest, as before.
  if (::linkat(dfd, std::string(kManifestName).c_str(), dfd, (tmp_name + ".old").c_str(), 0) == 0) {
    aside = tmp_name + ".old";
  }
  if (::renameat(dfd, tmp_name.c_str(), dfd, std::string(kManifestName).c_str()) != 0) {
    const int err = errno;
    return fail(file_error(
        ErrorCode::kIo, target,
        std::string("cannot replace with the new manifest: ") + std::strerror(err), err));
  }
  // The rename is durable only once the directory is.
  ::fsync(dfd);
  if (std::string why = moved(); !why.empty()) {
    // Only the file written here: the name may hold another writer's manifest by now.
    struct ::stat there {};
    bool put_back = false;
    if (::fstatat(dfd, std::string(kManifestName).c_str(), &there, AT_SYMLINK_NOFOLLOW) == 0 &&
        there.st_dev == made.st_dev && there.st_ino == made.st_ino) {
      // One rename replaces the new manifest with the old: no moment without one.
      put_back = !aside.empty() &&
                 ::renameat(dfd, aside.c_str(), dfd, std::string(kManifestName).c_str()) == 0;
      if (put_back) aside.clear();
      if (!put_back) ::unlinkat(dfd, std::string(kManifestName).c_str(), 0);
      ::fsync(dfd);
    }
    if (!aside.empty()) ::unlinkat(dfd, aside.c_str(), 0);
    ::close(dfd);
    return changed_while_indexing(directory, why,
                                  put_back ? "the manifest written was removed and the old "
                                             "manifest was put back"
                                           : "the manifest written was removed");
  }
  if (!aside.empty()) ::unlinkat(dfd, aside.c_str(), 0);
  ::close(dfd);
  return WrittenManifest{target, static_cast<std::uint64_t>(made.st_dev),
                         static_cast<std::uint64_t>(made.st_ino)};
}

Result<Manifest> read_manifest(const std::string& path) {
  auto bad = [&](const std::string& what) {
    return file_error(ErrorCode::kLayout, path,
                      "manifest: " + what + "; run shardload index again, or delete it");
  };
  FileInfo info;
  File file;
  if (!path_traits(path).kernel_files) {
    SHARDLOAD_ASSIGN_OR_RETURN(file, open_remote_manifest(path, &info));
  } else {
    int open_err = 0;
    auto fd = open_regular(path, 0, &open_err);
    if (!fd) {
      return file_error(ErrorCode::kLayout, path,
                        "manifest: " + message_after_path(fd.status(), path), open_err);
    }
    file = File(&posix_io(), *fd, path);
    SHARDLOAD_ASSIGN_OR_RETURN(info, file.stat());
  }
  if (info.size < kHeaderBytes + kTrailerBytes) {
    return bad("truncated: " + std::to_string(info.size) + " bytes, expected at least " +
               std::to_string(kHeaderBytes + kTrailerBytes));
  }
  if (info.size > kMaxManifestBytes) {
    return bad(std::to_string(info.size) + " bytes, more than the " +
               std::to_string(kMaxManifestBytes) + " a manifest may have");
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(info.size));
  SHARDLOAD_RETURN_IF_ERROR(file.read_exact(bytes.data(), bytes.size(), 0));
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return bad("not a shardload manifest (wrong magic bytes)");
  }
  const auto version = static_cast<std::uint32_t>(get_le(bytes.data() + 8, 4));
  if (version != kVersion) {
    return bad("container version " + std::to_string(version) + ", this build reads version " +
               std::to_string(kVersion));
  }
  const std::uint64_t body = get_le(bytes.data() + 16, 8);
  if (body != info.size - kHeaderBytes - kTrailerBytes) {
    return bad(
        "truncated or extended: the header declares " + std::to_string(body) + " body bytes, so " +
        (body > kMaxManifestBytes ? std::string("more than ") + std::to_string(kMaxManifestBytes)
                                  : std::to_string(body + kHeaderBytes + kTrailerBytes)) +
        " bytes in all, and the file has " + std::to_string(info.size));
  }
  const std::size_t end = bytes.size() - kTrailerBytes;
  const std::uint64_t want = get_le(bytes.data() + end, 8);
  const std::uint64_t got = XXH3_64bits(bytes.data(), end);
  if (want != got) {
    return bad("corrupt: container checksum " + hex(got) + ", the manifest records " + hex(want));
  }
  Manifest m;
  m.path = path;
  {
    const auto [key, query] = split_options(path);
    const auto slash = key.rfind('/');
    m.directory = (slash == std::string::npos ? "" : key.substr(0, slash == 0 ? 1 : slash)) + query;
  }
  m.container_hash = want;
  const auto kind = static_cast<std::uint32_t>(get_le(bytes.data() + 12, 4));
  if (kind > static_cast<std::uint32_t>(Checksum::kXxh3)) {
    return bad("unknown checksum kind " + std::to_string(kind));
  }
  m.checksum = static_cast<Checksum>(kind);
  Cursor c(std::span<const std::uint8_t>(bytes.data() + kHeaderBytes, body));
  std::uint64_t n = 0;
  std::span<const std::uint8_t> part;
  if (!c.varint(&n) || !c.bytes(n, &part)) return bad("malformed pattern field");
  m.pattern.assign(reinterpret_cast<const char*>(part.data()), part.size());
  if (m.pattern.find('\0') != std::string::npos) return bad("pattern holds a NUL character");
  if (!c.varint(&n) || !c.bytes(n, &part)) return bad("malformed layout field");
  auto layout = decode_layout(part);
  if (!layout) return bad(layout.status().message());
  const std::size_t shards = layout->shards.size();
  // discover() never makes a layout without shards; a manifest of one is not ours.
  if (shards == 0) return bad("lists no shards");
  const std::size_t want_sums = m.checksum == Checksum::kNone ? 0 : shards;
  if (c.left() / 8 != want_sums || c.left() % 8 != 0) {
    return bad(std::to_string(c.left()) + " bytes after the layout, expected " +
               std::to_string(want_sums * 8) + " (8 per shard's checksum)");
  }
  std::span<const std::uint8_t> sums;
  (void)c.bytes(c.left(), &sums);
  m.checksums.resize(want_sums);
  for (std::size_t i = 0; i < want_sums; ++i) m.checksums[i] = get_le(sums.data() + 8 * i, 8);
  std::string why;
  // In an s3:// directory a name's '?' would begin the URL's query: the rest of the name would
  // be read as store options (another endpoint, say) and the key before it read instead. In an
  // http(s) one a name's '%', '#' and '?' are percent-encoded (url_key): the server decodes the
  // path, and would read "a%2Fb" as "a/b" and end the path at a '#' or '?'. (The names are
  // keys: an index of object storage or of a local directory wrote them; none is written over
  // http.)
  for (auto& s : layout->shards) {
    if (!safe_relative(s.path, &why)) return bad("shard " + path_for_message(why));
    if (why = unnameable_key(m.directory, s.path); !why.empty()) {
      return bad("shard '" + path_for_message(s.path) + "': " + why);
    }
    s.path = shard_in(m.directory, url_key(m.directory, s.path));
    for (auto& f : s.linked) {
      if (!safe_relative(f.path, &why)) return bad("linked file " + path_for_message(why));
      if (why = unnameable_key(m.directory, f.path); !why.empty()) {
        return bad("linked file '" + path_for_message(f.path) + "': " + why);
      }
      f.path = shard_in(m.directory, url_key(m.directory, f.path));
    }
  }
  m.layout = std::move(layout).value();
  return m;
}

namespace {

// Formats whose probe is cheap enough to repeat at every checked discovery (an .npy header,
// a raw file's size and sidecar, a Zarr store's metadata file). The others (HDF5, Parquet,
// Arrow, a user's reader) would reparse a file's metadata, which is what the manifest saves.
// In object storage an .npy header is a GET per object, the very cost the manifest saves,
// and the object's snapshot is its size and ETag, which change with its bytes: there npy is
// checked as HDF5 is locally, by the snapshot (one HEAD). A raw probe reads no shard bytes
// (a HEAD, and the sidecar once), so it stays.
bool reprobe_when_checked(const Layout& layout) {
  const FormatDescriptor* d = find_format(layout.format, layout.options.reader);
  if (layout.format == Format::kNpy && !layout.shards.empty() &&
      path_traits(layout.shards.front().path).round_trips) {
    return false;
  }
  return d != nullptr && d->capabilities.cheap_reprobe;
}

template <typename T>
std::string text_of(const T& v) {
  return std::to_string(v);
}
std::string text_of(bool v) { return v ? "true" : "false"; }

// The options for a message, the ones set only: "format parquet, columns [a, b], dtype float32".
std::string format_options_text(const FormatOptions& o) {
  std::string out = std::string("format ") + format_name(o.format);
  if (!o.reader.empty()) out += " (reader '" + o.reader + "')";
  for (const auto& row : format_option_table()) {
    if (const auto v = row.get(o)) {
      out += std::string(", ") + row.label + " " + option_value_text(*v, row.kind);
    }
  }
  return out;
}

// Where a shard's probe differs from what the manifest says of it, or "".
std::string probe_difference(const Layout& l, const Shard& s, const ShardProbe& p) {
  const std::string where = path_for_message(s.path) + ": ";
  if (p.shard.snapshot != s.snapshot) {
    return where + snapshot_difference(s.path, s.snapshot, p.shard.snapshot);
  }
  auto says = [&](const std::string& field, const std::string& file, const std::string& manifest) {
    return where + "the file says " + field + " " + file + ", the manifest " + manifest;
  };
  if (p.dtype != l.dtype) return says("dtype", p.dtype.name(), l.dtype.name());
  if (p.trailing_shape != l.trailing_shape) {
    return says("trailing shape", shape_string(p.trailing_shape), shape_string(l.trailing_shape));
  }
  // A manifest of discovery's never holds a view of a file: it lists whole files.
  if (p.shard.rows != s.rows || s.is_view() || s.first_row != 0) {
    return says("rows", text_of(p.shard.rows),
                s.is_view()
                    ? "a view of rows [" + text_of(s.first_row) + ", +" + text_of(s.rows) + ")"
                    : text_of(s.rows));
  }
  if (p.shard.data_offset != s.data_offset) {
    return says("data offset", text_of(p.shard.data_offset), text_of(s.data_offset));
  }
  if (p.shard.byte_swap != s.byte_swap) {
    return says("byte swap", text_of(p.shard.byte_swap), text_of(s.byte_swap));
  }
  if (p.shard.fortran_order != s.fortran_order) {
    return says("Fortran order", text_of(p.shard.fortran_order), text_of(s.fortran_order));
  }
  if (p.shard.decode_rows != s.decode_rows) {
    return says("decode unit rows", text_of(p.shard.decode_rows), text_of(s.decode_rows));
  }
  if (p.shard.extra != s.extra) return where + "its format data differs from the manifest's";
  if (p.shard.linked != s.linked) return where + "its linked files differ from the manifest's";
  // Shard::dirs are not the manifest's to describe: the layout takes the probe's (Renewed).
  return {};
}

// Another file (inode) with the size of the one indexed: what `cp -r`, a restore from a backup
// or a copy to another machine leaves. The file indexed, touched or rewritten in place, is not
// one: it stays stale as before. Local files only: an object's snapshot is its ETag, which
// changes with its bytes.
bool another_file_same_size(const std::string& path, const FileInfo& then, const FileInfo& now) {
  return path_traits(path).inode_is_identity && then.inode != now.inode && then.size == now.size &&
         then.regular == now.regular;
}

struct Staleness {
  std::string why;  // "" when the manifest describes the files
  // The first difference is another file of the indexed size, in a format checked by its
  // snapshot alone (the manifest would be believed for metadata no one read): a copy.
  bool copy_of_snapshot_checked = false;
  // The probe of the files themselves failed (`why` is its error): discovery, which probes
  // them in the manifest's place, fails the same way rather than reading them.
  bool probe_failed = false;
};

// What a probe at discovery gives a shard of a manifest's layout besides what the manifest says.
struct Renewed {
  // The file's snapshot, where the probe found another file equal in all else (a copy).
  std::optional<FileInfo> snapshot;
  // Shard::dirs as the probe found them, where it probed: a directory's identity is the
  // discovery's, as a read compares it, whatever the manifest was written with (a copy's
  // directories are others, a directory renamed keeps its own).
  std::optional<std::vector<DirIdentity>> dirs;
  // Shard::server_snapshot_s as the probe found it, where it probed (a remote Zarr store's
  // metadata read now): its chunks are judged against this discovery, not the indexing.
  std::int64_t server_snapshot_s = 0;
};

// manifest_staleness, where `renewed` (when given, sized to the shards) receives the file's
// snapshot of each shard whose probe (npy, raw, Zarr locally: the header or metadata read now)
// equals the manifest's in everything but the file's identity: such a shard is what probing
// would give, so it is not stale, and the layout takes the snapshot the probe saw; and the
// directories of each probed shard (Renewed::dirs).
// With `bytes_verified` (verify's question over http(s), where every shard's checksum matched)
// a shard's snapshot is not compared, nor its linked files': a web server's ETag and
// Last-Modified never match those of the copy that was indexed, so discovery always probes
// there, and what matters is whether the probe reads the objects as the manifest says.
Staleness check_manifest(const Manifest& m, IoBackend& io, std::vector<Renewed>* renewed,
                         bool bytes_verified = false) {
  auto differs = [&](const std::string& path, const FileInfo& then) -> std::string {
    auto now = io.stat_path(path);
    if (!now) return now.status().message();
    if (*now == then) return {};
    return path_for_message(path) + ": " + snapshot_difference(path, then, *now);
  };
  const Layout& layout = m.layout;
  const auto& shards = layout.shards;
  if (reprobe_when_checked(layout)) {
    // The file's own header against the manifest's, not only its snapshot: a manifest
    // with a valid container checksum can still say another dtype than the files (it was
    // written by someone else, or by hand), and the data would be read as that dtype.
    std::vector<std::string> paths;
    paths.reserve(shards.size());
    for (const auto& s : shards) paths.push_back(s.path);
    ReaderContext ctx;
    ctx.source = ShardSource::over(io);
    const unsigned threads =
        detail::probe_threads(find_format(layout.format, layout.options.reader), ctx, paths.size(),
                              0, !paths.empty() && path_traits(paths.front()).round_trips);
    auto probes = detail::probe_shards(paths, layout.format, layout.options, ctx, threads);
    if (!probes) return {probes.status().message(), false, true};
    for (std::size_t i = 0; i < shards.size(); ++i) {
      const auto& probe = (*probes)[i];
      if (!probe) return {path_for_message(shards[i].path) + ": not probed"};  // not reached
      if (!*probe) return {probe->status().message(), false, true};
      const FileInfo& seen = (**probe).shard.snapshot;
      Shard as_indexed = shards[i];
      if (bytes_verified) as_indexed.snapshot = seen;
      std::string why = probe_difference(layout, as_indexed, **probe);
      if (!why.empty() && another_file_same_size(shards[i].path, shards[i].snapshot, seen)) {
        Shard same = shards[i];
        same.snapshot = seen;
        std::string beyond = probe_difference(layout, same, **probe);
        if (!beyond.empty()) {
          why = std::move(beyond);  // more than a copy: say what
        } else if (renewed != nullptr) {
          why.clear();
          (*renewed)[i].snapshot = seen;
        }
      }
      if (renewed != nullptr) {
        (*renewed)[i].dirs = (**probe).shard.dirs;
        (*renewed)[i].server_snapshot_s = (**probe).shard.server_snapshot_s;
      }
      for (const auto& f : shards[i].linked) {
        if (why.empty() && !bytes_verified) why = differs(f.path, f.snapshot);
      }
      if (!why.empty()) return {why};
    }
  } else if (!bytes_verified) {
    // HDF5, Parquet, Arrow and a user's reader (and remote .npy): the snapshot of each file
    // (and of each linked file); their metadata is taken from the manifest while the
    // snapshots match. On as many threads as probing as many .npy files would use, so that
    // the check (one stat or HEAD per shard) never takes longer than probing would; the
    // answer is the lowest shard that differs, whatever the timing: shards are claimed in
    // order, so every one below it has been checked.
    std::vector<std::string> why(shards.size());
    std::vector<char> copied(shards.size(), 0);
    std::atomic<std::size_t> next{0};
    std::atomic<std::size_t> first_bad{shards.size()};
    const auto work = [&] {
      for (std::size_t i = next.fetch_add(1); i < shards.size(); i = next.fetch_add(1)) {
        if (i > first_bad.load()) return;
        std::string w;
        if (auto now = io.stat_path(shards[i].path); !now) {
          w = now.status().message();
        } else if (*now != shards[i].snapshot) {
          w = path_for_message(shards[i].path) + ": " +
              snapshot_difference(shards[i].path, shards[i].snapshot, *now);
          copied[i] = another_file_same_size(shards[i].path, shards[i].snapshot, *now);
        }
        for (const auto& f : shards[i].linked) {
          if (w.empty()) w = differs(f.path, f.snapshot);
        }
        if (w.empty()) continue;
        why[i] = std::move(w);
        std::size_t seen = first_bad.load();
        while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
        }
      }
    };
    ReaderContext ctx;
    ctx.source = ShardSource::over(io);
    const unsigned threads =
        detail::probe_threads(find_format(Format::kNpy), ctx, shards.size(), 0,
                              !shards.empty() && path_traits(shards.front().path).round_trips);
    detail::StorageContext::process().pool().run(std::min<std::size_t>(threads, shards.size()),
                                                 [&](std::size_t) { work(); });
    if (const std::size_t bad = first_bad.load(); bad < shards.size()) {
      return {why[bad], copied[bad] != 0};
    }
  }
  // A web server has no listing: the manifest alone says which objects are the dataset, so an
  // object added after indexing is not seen (nor would it be without the manifest).
  if (!m.pattern.empty() && path_traits(m.directory).listable) {
    auto listed = resolve(Source::directory(m.directory, m.pattern));
    if (!listed) return {listed.status().message()};
    for (std::size_t i = 0; i < std::max(listed->size(), shards.size()); ++i) {
      if (i >= shards.size()) {
        return {path_for_message((*listed)[i]) + " is new: the manifest lists " +
                std::to_string(shards.size()) + " shards, the directory holds " +
                std::to_string(listed->size())};
      }
      if (i >= listed->size() || (*listed)[i] != shards[i].path) {
        return {path_for_message(i < listed->size() ? (*listed)[i] : shards[i].path) +
                (i < listed->size() ? " is not in the manifest" : " is gone")};
      }
    }
  }
  return {};
}

}  // namespace

std::string manifest_staleness(const Manifest& m, IoBackend& io) {
  return check_manifest(m, io, nullptr).why;
}

Result<std::vector<ChecksumMismatch>> verify_range(const Manifest& m, std::size_t lo,
                                                   std::size_t hi, IoBackend& io) {
  if (m.checksum == Checksum::kNone) {
    return file_error(ErrorCode::kLayout, m.path,
                      "the manifest holds no checksums; index the directory again with "
                      "checksum xxh3");
  }
  if (lo > hi || hi > m.layout.shards.size()) {
    return Status(ErrorCode::kInvalidArgument,
                  "shards [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "): outside the manifest's " + std::to_string(m.layout.shards.size()));
  }
  std::vector<ChecksumMismatch> out;
  for (std::size_t i = lo; i < hi; ++i) {
    const std::string& path = m.layout.shards[i].path;
    auto h = file_checksum(path, m.checksum, io);
    if (!h) {
      out.push_back({i, path, h.status().message()});
    } else if (*h != m.checksums[i]) {
      out.push_back({i, path,
                     std::string(checksum_name(m.checksum)) + " " + hex(m.checksums[i]) +
                         " expected, found " + hex(*h)});
    }
  }
  return out;
}

// Each linked file (an HDF5 shard's external storage, a virtual dataset's source file) whose
// snapshot is not the manifest's: no checksum covers its bytes, yet discovery reads them and
// calls the manifest stale for it, so an unchanged shard file says nothing of its data.
static std::vector<ChecksumMismatch> linked_file_mismatches(const Manifest& m) {
  std::vector<ChecksumMismatch> out;
  const auto& shards = m.layout.shards;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    for (const auto& f : shards[i].linked) {
      auto now = posix_io().stat_path(f.path);
      if (now && *now == f.snapshot) continue;
      const std::string what =
          now ? "changed after indexing (" + snapshot_difference(f.path, f.snapshot, *now) + ")"
              : now.status().message();
      out.push_back({i, f.path,
                     "linked file of " + path_for_message(shards[i].path) + ": " + what +
                         "; its bytes are not verified (discovery calls the manifest stale)"});
    }
  }
  return out;
}

static Result<std::size_t> add_listing_and_linked_mismatches(
    const Manifest& m, std::vector<ChecksumMismatch>* mismatches) {
  std::vector<ChecksumMismatch> linked = linked_file_mismatches(m);
  mismatches->insert(mismatches->end(), std::make_move_iterator(linked.begin()),
                     std::make_move_iterator(linked.end()));
  std::stable_sort(
      mismatches->begin(), mismatches->end(),
      [](const ChecksumMismatch& a, const ChecksumMismatch& b) { return a.shard < b.shard; });
  auto listed = shards_listed(m.directory, m.pattern, m.layout.options);
  // A listing that fails (a gap in the numbering, nothing left to match) names no shard the
  // manifest lacks; the shards gone are named by their checksum reads.
  if (!listed || !*listed) return std::size_t{0};
  const auto& shards = m.layout.shards;
  std::vector<std::string> names;
  names.reserve(shards.size());
  for (const auto& s : shards) {
    std::string name = s.path;
    if (!relative_to(m.directory, &name)) name = s.path;
    names.push_back(std::move(name));
  }
  const std::unordered_set<std::string> indexed(names.begin(), names.end());
  const std::unordered_set<std::string> now((*listed)->names.begin(), (*listed)->names.end());
  // Without a recorded pattern, a numbered group that holds none of the manifest's shards is
  // other files, as discovery says ("not used"), not shards added to these.
  if (m.pattern.empty() && std::none_of(names.begin(), names.end(),
                                        [&](const std::string& n) { return now.count(n) != 0; })) {
    return std::size_t{0};
  }
  const std::string counts = "the manifest lists " + std::to_string(shards.size()) +
                             " shards, the directory holds " +
                             std::to_string((*listed)->names.size());
  std::vector<ChecksumMismatch> more;
  for (std::size_t i = 0; i < (*listed)->names.size(); ++i) {
    if (indexed.count((*listed)->names[i]) == 0) {
      more.push_back({i, (*listed)->paths[i],
                      "not in the manifest: added after indexing (" + counts +
                          "); its bytes are not verified"});
    }
  }
  const std::size_t added = more.size();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const bool reported = std::any_of(
        mismatches->begin(), mismatches->end(),
        [&](const ChecksumMismatch& c) { return c.shard == i && c.path == shards[i].path; });
    if (now.count(names[i]) == 0 && !reported) {
      more.push_back({i, shards[i].path,
                      "in the manifest, not in the directory: gone since "
                      "indexing (" +
                          counts + ")"});
    }
  }
  mismatches->insert(mismatches->end(), std::make_move_iterator(more.begin()),
                     std::make_move_iterator(more.end()));
  std::stable_sort(
      mismatches->begin(), mismatches->end(),
      [](const ChecksumMismatch& a, const ChecksumMismatch& b) { return a.shard < b.shard; });
  return added;
}

// What changed beside a raw directory's shards, for verify's message where every checksum
// matches and every shard's snapshot too: its sidecar, which no checksum covers (added,
// rewritten or removed since indexing); "" where that is not what differs.
static std::string sidecar_change(const Manifest& m, bool bytes_verified) {
  if (m.layout.format != Format::kRaw || m.layout.shards.empty()) return {};
  // Over http(s) the checksums, not the snapshots, say that no shard changed.
  for (const auto& s : bytes_verified ? std::span<const Shard>() : std::span(m.layout.shards)) {
    auto now = posix_io().stat_path(s.path);
    if (!now || *now != s.snapshot) return {};
  }
  // An object's URL carries the store's options as its query: the sidecar is asked for with
  // them, as the raw reader asks (and named without them).
  const auto [first, query] = split_options(m.layout.shards.front().path);
  const std::size_t slash = first.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : first.substr(0, slash);
  std::string present;
  for (const char* name : {"shardload.json", "shard_meta.json"}) {
    const std::string path = dir + "/" + name;
    if (posix_io().stat_path(path + query)) {
      present += (present.empty() ? "" : " or ") + path_for_message(path);
    }
  }
  if (present.empty()) {
    return "no shard changed: the directory's sidecar (shardload.json or shard_meta.json) was "
           "removed since indexing";
  }
  return "no shard changed: the directory's sidecar " + present +
         " was written or changed since indexing";
}

Result<std::size_t> add_listing_mismatches(const Manifest& m,
                                           std::vector<ChecksumMismatch>* mismatches) {
  SHARDLOAD_ASSIGN_OR_RETURN(const std::size_t added,
                             add_listing_and_linked_mismatches(m, mismatches));
  // Every checksum, linked file and name matching, discovery may still call the manifest stale
  // (a raw directory's shardload.json rewritten: its probe says another dtype than the
  // manifest) and read the files instead: then "every checksum matches" said nothing of what a
  // load reads. Its check, as discovery runs it, names what differs: in object storage and
  // over http(s) too, where discovery asks the same (a HEAD per object, beside verify's reading
  // of every byte). Over http(s) the objects' snapshots never match an indexed copy's, and
  // their checksums just matched: there the question is whether the probe reads them as the
  // manifest says.
  if (mismatches->empty()) {
    const bool http = !path_traits(m.directory).listable;
    // Given the place for renewed snapshots, as discovery gives it: a shard that is another
    // file of the indexed size and header (a copy: cp -r, a restore) is what probing gives,
    // and discovery uses the manifest.
    std::vector<Renewed> renewed(m.layout.shards.size());
    if (Staleness st = check_manifest(m, posix_io(), &renewed, http); !st.why.empty()) {
      // Every shard matched its checksum: saying what changed beside them (a raw directory's
      // sidecar) points at the fix, where "shards differ" would not.
      std::string found = sidecar_change(m, http);
      if (!found.empty()) found = "; " + found;
      // Discovery's reason quotes a shard's URL as the engine holds it (a credentials handle
      // in its query): hidden as every message hides it.
      mismatches->push_back(
          {0, m.path,
           redact_secrets(
               st.probe_failed
                   ? "every shard matches its checksum, but discovery calls this manifest stale "
                     "and fails probing the files in its place: " +
                         st.why + found
                   : "every shard matches its checksum, but discovery calls this manifest "
                     "stale: " +
                         st.why + found +
                         " (it reads the files in its place; index the directory again)")});
    }
  }
  return added;
}

// Whether a directory named without a pattern is a store of a format that may be taken (a Zarr
// array): its metadata keys say so, no listing needed, so probing finds it where it cannot list.
static bool directory_is_store(const Source& source, const DiscoverOptions& options) {
  if (!source.pattern.empty()) return false;
  const Format asked = options.format.format;
  const FormatDescriptor* asked_d = find_format(asked);
  if (asked != Format::kAuto && (asked_d == nullptr || !asked_d->is_store)) return false;
  const Format store = store_format(source.dir_path);
  return store != Format::kAuto && (asked == Format::kAuto || asked == store);
}

ManifestDiscovery discover_from_manifest(const Source& source, const DiscoverOptions& options) {
  ManifestDiscovery r;
  const std::string path = manifest_path(source.dir_path);
  // An http(s):// directory cannot be listed: its manifest is the only way to its objects,
  // and where the manifest cannot be used as it is, the objects it names are probed.
  const bool http = !path_traits(source.dir_path).listable;
  auto m = read_manifest(path);
  if (!m) {
    if (http && m.status().sys_errno() == ENOENT && !directory_is_store(source, options)) {
      r.error = file_error(ErrorCode::kLayout, source.dir_path,
                           "HTTP has no directory listing, and no manifest names the objects "
                           "there (" +
                               m.status().message() +
                               "); name each object by its URL (or a list of URLs), or serve "
                               "the directory's " +
                               std::string(kManifestName) +
                               " (shardload index of a local or s3:// copy writes it)",
                           ENOENT);
      return r;
    }
    // A manifest linked from a place that is gone is one that cannot be read, not none: it
    // is never skipped silently, as a damaged one is not (a trusted request would probe). A
    // directory that is such a link is the listing's to name.
    if (std::string link; m.status().sys_errno() == ENOENT && path_traits(path).kernel_files &&
                          detail::is_dangling_link(path, &link) && link == path) {
      r.error = file_error(ErrorCode::kLayout, path,
                           "manifest: a symbolic link whose target does not exist; run "
                           "shardload index again, or delete it");
      return r;
    }
    if (m.status().sys_errno() == ENOENT || m.status().sys_errno() == ENOTDIR) {
      // Without one, discovery probes as before; trusting a manifest that is not there
      // cannot mean anything else.
      r.note = "manifest: absent";
      r.state = ManifestState::kAbsent;
    } else {
      r.error = m.status();
    }
    return r;
  }
  auto not_used = [&](ManifestState state, const std::string& why) {
    if (options.trust_manifest) {
      r.error = file_error(ErrorCode::kLayout, path,
                           "manifest: cannot be trusted for this request: " + why);
    } else {
      r.note = "manifest: not used: " + why;
      r.state = state;
      if (http) {
        r.note += "; probed the objects it names instead (HTTP has no listing)";
        for (const auto& s : m->layout.shards) r.probe_paths.push_back(s.path);
      }
    }
    return r;
  };
  if (!source.pattern.empty() && source.pattern != m->pattern) {
    return not_used(ManifestState::kOtherPattern,
                    "it was indexed " +
                        (m->pattern.empty() ? std::string("without a pattern")
                                            : "with pattern '" + m->pattern + "'") +
                        ", and pattern '" + source.pattern + "' was asked");
  }
  // Only the options it was made with, exactly: a plain request must not be given the
  // columns, fill value or cast an index() was asked for (it would read other data than
  // the files give without them). A format left to auto-detection is the recorded one, as
  // probing would find it, and a user's reader is the recorded one by name.
  FormatOptions asked = options.format;
  if (asked.format == Format::kAuto) {
    asked.format = m->layout.format;
    asked.reader = m->layout.options.reader;
  }
  if (asked != m->layout.options) {
    return not_used(ManifestState::kOtherOptions, "it was indexed with other format options (" +
                                                      format_options_text(m->layout.options) +
                                                      ") than asked (" +
                                                      format_options_text(asked) + ")");
  }
  // Without a pattern a request stands for the directory's own naming, as probing finds it;
  // a manifest indexed under another pattern (part_{}.npy beside shard_0000.npy ...) would
  // answer with other files. The trusted path touches no file, so it takes the recorded one.
  // Over HTTP there is no naming to find but the manifest's.
  if (source.pattern.empty() && !options.trust_manifest && !http) {
    DiscoverOptions probing = options;
    auto own = detail::auto_directory(source, &probing);
    if (!own) {
      return not_used(
          ManifestState::kOtherPattern,
          "without a pattern the directory's shards cannot be told: " + own.status().message());
    }
    const auto& shards = m->layout.shards;
    bool same = own->kind == Source::Kind::kDirectory && own->pattern == m->pattern;
    if (!same && own->kind == Source::Kind::kDirectory) {
      // Two spellings of one numbering ("part_{}.npy", "part_{:01d}.npy") name the same files.
      auto listed = resolve(*own);
      same = listed && listed->size() == shards.size() &&
             std::equal(listed->begin(), listed->end(), shards.begin(),
                        [](const std::string& p, const Shard& s) { return p == s.path; });
    }
    if (!same) {
      return not_used(
          ManifestState::kOtherPattern,
          "it was indexed " +
              (m->pattern.empty() ? std::string("without a pattern")
                                  : "with pattern '" + m->pattern + "'") +
              ", and without a pattern the directory's shards are " +
              (own->kind == Source::Kind::kDirectory ? "those of '" + own->pattern + "'"
                                                     : std::string("the directory itself")));
    }
  }
  const std::size_t n = m->layout.shards.size();
  if (options.trust_manifest) {
    m->layout.manifest_status =
        "manifest: used without checking the " + std::to_string(n) + " shards (trusted)";
    m->layout.manifest_state = ManifestState::kTrusted;
  } else {
    IoBackend& io = options.io != nullptr ? *options.io : posix_io();
    std::vector<Renewed> renewed(n);
    const Staleness staleness = check_manifest(*m, io, &renewed);
    const std::string& why = staleness.why;
    if (!why.empty()) {
      r.state = ManifestState::kStale;
      if (http) {
        // The objects it names are still the dataset (no listing could name others): probing
        // them gives what they hold now, and one that is gone is an error naming its URL.
        r.note = "manifest: stale because " + why +
                 "; probed the objects it names instead (HTTP has no listing)";
        for (const auto& s : m->layout.shards) r.probe_paths.push_back(s.path);
      } else {
        r.note = "manifest: stale because " + why + "; probed the files instead";
        if (staleness.copy_of_snapshot_checked) {
          // What a copy of the directory costs, said where the user sees it.
          r.note += std::string(" (") + format_name(m->layout.format) +
                    " shards are checked by their snapshots alone, and this is another file "
                    "of the indexed size, as after a copy: every discovery of this directory "
                    "probes until shardload index runs in it again)";
        }
      }
      return r;
    }
    std::size_t copies = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (renewed[i].dirs) m->layout.shards[i].dirs = std::move(*renewed[i].dirs);
      m->layout.shards[i].server_snapshot_s = renewed[i].server_snapshot_s;
      if (renewed[i].snapshot) {
        m->layout.shards[i].snapshot = *renewed[i].snapshot;
        ++copies;
      }
    }
    m->layout.manifest_status =
        copies == 0 ? "manifest: used (" + std::to_string(n) + " shards unchanged since indexing)"
                    : "manifest: used (" + std::to_string(n) + " shards as indexed; " +
                          std::to_string(copies) +
                          " of them other files with the same size and header, as after a copy: "
                          "their snapshots were taken from the files)";
    m->layout.manifest_state = ManifestState::kUsed;
  }
  r.layout = std::move(m->layout);
  return r;
}

}  // namespace shardload
