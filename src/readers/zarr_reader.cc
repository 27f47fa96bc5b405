// The Zarr reader (v2 and v3): one store per shard, one array per store.
//
// probe() reads the array's metadata file, validates it and keeps what
// reading needs in Shard::extra (see encode_zarr_meta) and the metadata
// file's snapshot in Shard::snapshot. read_rows() touches only the chunks
// (or, with sharding_indexed, the inner chunks through the shard's index)
// that overlap the requested rows; a chunk that does not exist holds the
// fill value, as in Zarr itself. Chunks are decoded whole into reusable
// scratch, so memory is bounded by the chunk size; a chunk that covers whole
// rows and lies inside the request is decoded straight into the destination.
//
// A store may also be an object-storage prefix ("s3://bucket/a.zarr"): its
// metadata and chunks are keys of the reader's ShardSource, a read's chunk objects
// (or a shard's inner chunks) fetched several at once while it decodes them (fetch_ahead),
// since each costs a request's wait. Only a 404 is a missing chunk (the fill value); any
// other failure is an error. A chunk or shard object written after discovery read the store's
// metadata is kChanged: its open's answer says its Last-Modified, which is compared with the
// server's Date at that read (Shard::server_snapshot_s).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>

#include "base/detail/checked.hpp"
#include "base/detail/json.hpp"
#include "base/detail/links.hpp"
#include "readers/detail/readers.hpp"
#include "readers/detail/zarr.hpp"
#include "shardload/byte_order.hpp"
#include "shardload/location.hpp"
#include "storage/detail/fetch_ahead.hpp"
#include "storage/detail/read_ranges.hpp"
#include "storage/detail/server_time.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail {

namespace {

constexpr std::uint64_t kMaxMetadataBytes = std::uint64_t{64} << 20;
constexpr std::uint64_t kNoChunk = ~std::uint64_t{0};
// statfs(2)'s f_type of procfs (PROC_SUPER_MAGIC).
constexpr long kProcfsMagic = 0x9fa0;
// A remote read fetches its chunk objects ahead while it decodes: at most this many of their
// encoded bytes wait to be decoded (besides the chunks in flight), as Parquet's window.
constexpr std::uint64_t kFetchWindowBytes = std::uint64_t{64} << 20;

enum class PathKind { kMissing, kFile, kDirectory, kOther };

// "dir/name" for a local directory, an object-storage prefix or a store's key, `t` the traits
// of dir's source (ShardSource::traits); a URL's query configures the store, so it stays at the
// end of every key derived from it.
std::string join(const PathTraits& t, const std::string& dir, const std::string& name) {
  if (t.kernel_files) return dir + "/" + name;
  // In a flat key space "a//b" is another key than "a/b": the prefix's trailing '/'s go.
  auto [key, options] = t.options_in_query ? split_options(dir) : std::pair{dir, std::string()};
  while (!key.empty() && key.back() == '/') key.pop_back();
  return key + "/" + name + options;
}

// An object is a file; a 404 is missing. Any other answer (403, a 5xx after the retries) is
// an error: reading it as missing would fill real data with the fill value.
// `shown`: the name messages give a local path looked up under another name (a held
// directory's descriptor path), or "" for `path` itself.
Result<PathKind> path_kind(ShardSource& source, const std::string& path,
                           const std::string& shown = "") {
  if (source.traits(path).flat_keys) {
    // An open is the object's one HEAD, as a stat would be.
    FileInfo info;
    auto f = source.open_stat(path, &info);
    if (f) return PathKind::kFile;
    if (f.status().sys_errno() == ENOENT) return PathKind::kMissing;
    return f.status();
  }
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    // A chunk linked from a pool that was deleted is no chunk never written: its rows are not
    // the fill value. Nor are those of every chunk below such a linked directory (a v2 row
    // block's "1/", v3's "c/", a group's).
    if (std::string link; err == ENOENT && detail::is_dangling_link(path, &link)) {
      const std::string& named = shown.empty() ? path : shown;
      if (link.size() == path.size()) {
        return Status(ErrorCode::kIo, named + ": a symbolic link whose target does not exist");
      }
      // `link` is a part of `path`, which `shown` names with the same tail.
      const std::size_t tail = path.size() - link.size();
      const std::string link_shown =
          tail < named.size() ? named.substr(0, named.size() - tail) : link;
      return Status(ErrorCode::kIo, named + ": its directory " + link_shown +
                                        " is a symbolic link whose target does not exist");
    }
    if (err == ENOENT || err == ENOTDIR) return PathKind::kMissing;
    return Status(ErrorCode::kIo,
                  (shown.empty() ? path : shown) + ": cannot stat (" + std::strerror(err) + ")");
  }
  if (S_ISREG(st.st_mode)) return PathKind::kFile;
  if (S_ISDIR(st.st_mode)) return PathKind::kDirectory;
  return PathKind::kOther;
}

// `st` with `from` named `to` in its message and as its file: an open under a held
// directory's descriptor path reports the path the user gave.
Status renamed(const Status& st, const std::string& from, const std::string& to) {
  std::string message = st.message();
  for (std::size_t at = message.find(from); at != std::string::npos;
       at = message.find(from, at + to.size())) {
    message.replace(at, from.size(), to);
  }
  return Status(st.code(), message).with_errno(st.sys_errno()).with_path(to);
}

std::string array_dir(const PathTraits& t, const std::string& store, const std::string& dataset) {
  return dataset.empty() ? store : join(t, store, dataset);
}

std::string metadata_path(const PathTraits& t, const std::string& dir, int zarr_format) {
  return join(t, dir, zarr_format == 2 ? ".zarray" : "zarr.json");
}

// The node_type of the v3 metadata file `file`, or nullopt where it cannot be read or has
// none. Opened without blocking (a FIFO is refused, not waited on).
std::optional<std::string> v3_node_type(const std::string& file) {
  auto text = read_small_file(posix_io(), file, kMaxMetadataBytes, nullptr);
  if (!text) return std::nullopt;
  auto j = parse_json_object(file, *text);
  if (!j) return std::nullopt;
  const auto it = j->find("node_type");
  if (it == j->end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// The arrays in the store at `root` (a local directory) by the paths dataset= takes
// ("grp/inner"), to suggest one when what was named is no array. An array is a directory
// holding a .zarray (v2) or a zarr.json whose node_type is "array" (v3); groups (.zgroup, or
// a zarr.json of another node_type) are walked into, breadth first; arrays are not (their
// chunks lie below), nor directories that are neither. A store of millions of entries is not
// read whole for a hint: the walk stops after kWalkEntries entries or kWalkDepth levels (a
// link back to a parent group is a cycle) and `stopped` says so.
struct ArraysFound {
  std::vector<std::string> paths;
  bool stopped = false;
};

constexpr std::size_t kWalkEntries = 10000;
constexpr std::size_t kWalkDepth = 16;

ArraysFound arrays_in_store(const std::string& root) {
  ArraysFound found;
  std::size_t entries = 0;
  std::deque<std::pair<std::string, std::size_t>> groups{{"", 0}};  // (path, depth)
  while (!groups.empty() && entries <= kWalkEntries) {
    const auto [rel, depth] = std::move(groups.front());
    groups.pop_front();
    const std::string dir = rel.empty() ? root : root + "/" + rel;
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (++entries > kWalkEntries) {
        found.stopped = true;
        break;
      }
      // A regular file (a chunk, a metadata file) is no node: no look-ups under it.
      if (e->d_type == DT_REG) continue;
      const std::string child = dir + "/" + name;
      const std::string path = rel.empty() ? name : rel + "/" + name;
      bool group = false;
      if (::access((child + "/.zarray").c_str(), F_OK) == 0) {
        found.paths.push_back(path);
        continue;
      }
      if (::access((child + "/zarr.json").c_str(), F_OK) == 0) {
        const std::optional<std::string> node = v3_node_type(child + "/zarr.json");
        if (node == "array") {
          found.paths.push_back(path);
          continue;
        }
        group = node == "group";
      } else {
        group = ::access((child + "/.zgroup").c_str(), F_OK) == 0;
      }
      if (!group) continue;
      if (depth + 1 >= kWalkDepth) {
        found.stopped = true;
        continue;
      }
      groups.emplace_back(path, depth + 1);
    }
    ::closedir(d);
  }
  return found;
}

// The store's arrays as a hint names them ("b, grp/inner"), or "" for none found. A prefix in
// object storage is not walked: its children would cost a listing of every chunk key below.
std::string arrays_hint(const PathTraits& t, const std::string& root) {
  if (!t.kernel_files) return "";
  ArraysFound found = arrays_in_store(root);
  if (found.paths.empty()) return "";
  std::string s = listed_names(std::move(found.paths));
  if (found.stopped) {
    s += " (perhaps others: the look stopped after " + std::to_string(kWalkEntries) +
         " entries or " + std::to_string(kWalkDepth) + " levels)";
  }
  return s;
}

std::string dims_string(const std::vector<std::int64_t>& v) { return shape_string(v); }

// Calls f(run_start) for each run of a box along its last axis, in C order.
template <typename F>
void for_each_run(const std::vector<std::int64_t>& lo, const std::vector<std::int64_t>& hi, F f) {
  const std::size_t n = lo.size();
  std::vector<std::int64_t> idx = lo;
  for (;;) {
    f(idx);
    std::size_t k = n - 1;
    for (;;) {
      if (k == 0) return;
      --k;
      if (++idx[k] < hi[k]) break;
      idx[k] = lo[k];
    }
  }
}

class ZarrReader final : public ShardReader {
 public:
  ZarrReader(const FormatOptions& options, const ReaderContext& ctx)
      : options_(options), ctx_(ctx) {}

  // What the reader's source says of `path` and the keys below it: a store's keys are a flat
  // name space whatever their text, a path's as its text says.
  [[nodiscard]] PathTraits traits(const std::string& path) const {
    return ctx_.source->traits(path);
  }

  Result<ShardProbe> probe(const std::string& path) override {
    ShardProbe p;
    p.shard.path = path;
    // A prefix in object storage exists only through its objects: the metadata's look-ups
    // below say whether it is a store.
    if (!traits(path).flat_keys) {
      SHARDLOAD_ASSIGN_OR_RETURN(const PathKind kind, path_kind(*ctx_.source, path));
      if (kind == PathKind::kMissing) return Status(ErrorCode::kFormat, path + ": not found");
      if (kind != PathKind::kDirectory) {
        return Status(ErrorCode::kFormat, path + ": not a directory (a Zarr store is a directory)");
      }
    }
    const std::string dir = array_dir(traits(path), path, options_.dataset);
    if (dir != path && !traits(dir).flat_keys) {
      // A group on the way to the array that is a link whose target is gone is named as such,
      // not as an array without metadata; a missing one gets the arrays there are below.
      SHARDLOAD_RETURN_IF_ERROR(path_kind(*ctx_.source, dir).status());
    }
    SHARDLOAD_ASSIGN_OR_RETURN(const PathKind v2,
                               path_kind(*ctx_.source, metadata_path(traits(dir), dir, 2)));
    SHARDLOAD_ASSIGN_OR_RETURN(const PathKind v3,
                               path_kind(*ctx_.source, metadata_path(traits(dir), dir, 3)));
    if (v2 != PathKind::kMissing && v3 != PathKind::kMissing) {
      return Status(ErrorCode::kFormat, dir +
                                            ": both .zarray (v2) and zarr.json (v3) exist; "
                                            "cannot tell which array to read");
    }
    if (v2 == PathKind::kMissing && v3 == PathKind::kMissing) {
      // Also when a dataset was named: a group's name, or a misspelt one, gets the ones there are.
      const std::string arrays = arrays_hint(traits(path), path);
      const std::string hint = arrays.empty()
                                   ? ""
                                   : " (arrays in the store: " + arrays + "; name one with " +
                                         option_mention("dataset") + ")";
      return Status(ErrorCode::kFormat, dir + ": no Zarr array metadata (neither " +
                                            metadata_path(traits(dir), dir, 2) + " nor " +
                                            metadata_path(traits(dir), dir, 3) + " exists)" + hint);
    }
    const int version = v2 != PathKind::kMissing ? 2 : 3;
    if (traits(path).kernel_files) {
      // The store's directory and the array's, by identity (Shard::dirs): its metadata file
      // and chunks, hard-linked into another directory (`cp -al`), keep their snapshots.
      SHARDLOAD_RETURN_IF_ERROR(add_directory(path, "", &p.shard));
      if (dir != path)
        SHARDLOAD_RETURN_IF_ERROR(add_directory(path, dir.substr(path.size()), &p.shard));
    }
    const std::string meta_file = metadata_path(traits(dir), dir, version);
    SHARDLOAD_ASSIGN_OR_RETURN(
        const std::string text,
        ctx_.source->read_small(meta_file, kMaxMetadataBytes, &p.shard.snapshot));
    bool not_an_array = false;
    auto meta = parse_zarr_metadata(meta_file, text, version, &not_an_array);
    if (!meta) {
      Status st = meta.status();
      if (not_an_array) {
        const std::string arrays = arrays_hint(traits(path), path);
        if (!arrays.empty()) {
          st = Status(st.code(), st.message() + "; arrays in the store: " + arrays);
        }
      }
      return st;
    }
    p.dtype = meta->dtype;
    p.trailing_shape.assign(meta->shape.begin() + 1, meta->shape.end());
    p.shard.rows = meta->shape[0];
    p.shard.byte_swap = meta->dtype.size > 1 && meta->big_endian == host_is_little_endian();
    p.shard.fortran_order = meta->fortran;
    p.shard.extra = encode_zarr_meta(*meta);
    // The server's clock at the metadata's read: what the chunk objects' Last-Modified are
    // compared with (0 where the answer had no Date, or the store is local).
    p.shard.server_snapshot_s = p.shard.snapshot.answered_s;
    const auto& unit = meta->sharded ? meta->inner_chunks : meta->chunks;
    if (!unit.empty()) p.decode_rows = unit[0];
    p.shard.decode_rows = p.decode_rows;
    return p;
  }

  Status read_rows(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override {
    if (hi <= lo || l.row_bytes == 0) return Status::ok();
    SHARDLOAD_ASSIGN_OR_RETURN(const ZarrMeta* m, meta_for(s));
    if (m->dtype != l.dtype || m->shape[0] != s.stored_rows() ||
        !std::equal(m->shape.begin() + 1, m->shape.end(), l.trailing_shape.begin(),
                    l.trailing_shape.end())) {
      return {ErrorCode::kFormat, s.path + ": the layout (" + l.dtype.name() + ", rows " +
                                      std::to_string(s.stored_rows()) + ", trailing shape " +
                                      shape_string(l.trailing_shape) +
                                      ") disagrees with the store's metadata (" + m->dtype.name() +
                                      ", shape " + dims_string(m->shape) + ")"};
    }
    const std::string dir = array_dir(traits(s.path), s.path, options_.dataset);
    // The metadata file stays open over the chunk reads and is compared
    // again after them: chunks read under a rewritten .zarray / zarr.json
    // may follow another geometry or codec than the one decoded.
    File meta_file;
    if (ctx_.check_snapshot) {
      SHARDLOAD_ASSIGN_OR_RETURN(
          meta_file, ctx_.source->open(metadata_path(traits(dir), dir, m->zarr_format)));
      SHARDLOAD_RETURN_IF_ERROR(check_snapshot(meta_file, s.snapshot));
    }
    // A local array's directory is opened once, held to the identity discovery found, and every
    // chunk of this read opened below that descriptor (under its /proc/self/fd name): a store
    // exchanged with a copy and back between two chunk opens cannot lend the copy's chunks,
    // which a stat of the directory before and after the chunks would not see.
    HeldDirectory held;
    if (ctx_.check_snapshot && traits(dir).kernel_files) {
      Status same = hold_directory(s, dir, &held);
      if (!same.is_ok()) {
        // A link on the directory's path re-pointed since is the cause to name, where it is.
        const Request named{*m, dir, dir, lo, hi, dst, l.discovered_ns};
        SHARDLOAD_RETURN_IF_ERROR(links_since_discovery(named, dir));
        return same;
      }
    }
    const std::string at = held.fd >= 0 ? descriptor_path(held.fd, dir) : dir;
    Request r{*m, dir, at, lo, hi, dst, ctx_.check_snapshot ? l.discovered_ns : 0};
    if (ctx_.check_snapshot) r.server_snapshot_s = s.server_snapshot_s;
    const std::size_t n = m->shape.size();
    std::vector<std::int64_t> glo(n, 0);
    std::vector<std::int64_t> ghi(n, 0);
    for (std::size_t k = 0; k < n; ++k) {
      const std::int64_t a = k == 0 ? lo : 0;
      const std::int64_t b = k == 0 ? hi : m->shape[k];
      glo[k] = a / m->chunks[k];
      ghi[k] = (b - 1) / m->chunks[k] + 1;
    }
    Status status;
    if (traits(dir).round_trips && !m->sharded) {
      status = read_chunks_remote(r, glo, ghi);
    } else {
      // for_each_run visits all but the last axis; walk the last one here.
      for_each_run(glo, ghi, [&](const std::vector<std::int64_t>& start) {
        if (!status.is_ok()) return;
        std::vector<std::int64_t> g = start;
        for (g[n - 1] = glo[n - 1]; g[n - 1] < ghi[n - 1] && status.is_ok(); ++g[n - 1]) {
          status = m->sharded ? read_shard(r, g) : read_chunk(r, g);
        }
      });
    }
    if (ctx_.check_snapshot) {
      // A directory replaced before or while the chunks were read: they may be another
      // one's. Asked once the chunks are read, so that a cause the chunk reads name (a link
      // re-pointed, a chunk written) is the one reported.
      if (status.is_ok()) status = same_directories(s);
      status = check_unchanged(meta_file, s.snapshot, std::move(status));
    }
    return status;
  }

 private:
  static Status add_directory(const std::string& path, const std::string& below, Shard* shard) {
    const std::string dir = path + below;
    struct ::stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      return {ErrorCode::kIo, dir + ": cannot stat (" + std::strerror(errno) + ")"};
    }
    shard->dirs.push_back(
        {below, static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)});
    return Status::ok();
  }

  // Each of the shard's directories (Shard::dirs: the store's and the array's) is the one the
  // probe found, by identity, links followed: a store or array directory replaced since (by a
  // rename, or a link re-pointed) at another one whose files are hard links of the discovered
  // files (`cp -al`, `rsync --link-dest`) passes every file's snapshot and ctime, and would be
  // read as the discovered store. One stat per directory; the chunks' own directories below
  // the array's are held to the ctime rule (directories_since_discovery).
  static Status same_directories(const Shard& s) {
    for (const auto& d : s.dirs) {
      const std::string dir = s.path + d.below;
      struct ::stat st {};
      if (::stat(dir.c_str(), &st) != 0) {
        return {ErrorCode::kChanged, dir + ": changed since discovery: the directory is gone (" +
                                         std::strerror(errno) + ")"};
      }
      SHARDLOAD_RETURN_IF_ERROR(same_directory(dir, st, d));
    }
    return Status::ok();
  }

  static Status same_directory(const std::string& dir, const struct ::stat& st,
                               const DirIdentity& d) {
    const auto device = static_cast<std::uint64_t>(st.st_dev);
    const auto inode = static_cast<std::uint64_t>(st.st_ino);
    if (inode == d.inode && (d.device == 0 || device == d.device)) return Status::ok();
    std::string was = "inode " + std::to_string(d.inode) + " -> " + std::to_string(inode);
    if (d.device != 0 && device != d.device) {
      was += ", device " + std::to_string(d.device) + " -> " + std::to_string(device);
    }
    return {ErrorCode::kChanged,
            dir + ": changed since discovery: another directory than discovery found (" + was +
                "): it was replaced, renamed into place or re-pointed by a link, since"};
  }

  // The array's directory, open (O_PATH) for one read; -1 where none is held.
  struct HeldDirectory {
    int fd = -1;
    HeldDirectory() = default;
    HeldDirectory(const HeldDirectory&) = delete;
    HeldDirectory& operator=(const HeldDirectory&) = delete;
    ~HeldDirectory() {
      if (fd >= 0) ::close(fd);
    }
  };

  // Opens the array's directory `dir` (links followed, as the probe's stat did) and compares
  // the descriptor's identity with the one the probe recorded for it (Shard::dirs). Nothing is
  // held for a shard that records no identity for it (one encoded before they were kept).
  static Status hold_directory(const Shard& s, const std::string& dir, HeldDirectory* held) {
    const DirIdentity* want = nullptr;
    for (const auto& d : s.dirs) {
      if (s.path + d.below == dir) want = &d;
    }
    if (want == nullptr) return Status::ok();
    const int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      return {ErrorCode::kChanged, dir + ": changed since discovery: the directory is gone (" +
                                       std::strerror(errno) + ")"};
    }
    held->fd = fd;
    struct ::stat st {};
    if (::fstat(fd, &st) != 0) {
      return {ErrorCode::kIo, dir + ": cannot stat (" + std::strerror(errno) + ")"};
    }
    return same_directory(dir, st, *want);
  }

  struct Request {
    const ZarrMeta& m;
    const std::string& dir;
    // The name chunk keys are opened and looked up under: the held directory's descriptor
    // path ("/proc/self/fd/N") for a local array read with its snapshots checked, else `dir`.
    // Messages name `dir`.
    const std::string& at;
    std::int64_t lo;
    std::int64_t hi;
    std::byte* dst;
    // ReadSpec::discovered_ns where the snapshots are checked, else 0 (not compared).
    std::int64_t discovered_ns;
    // Shard::server_snapshot_s where the snapshots are checked, else 0 (not compared).
    std::int64_t server_snapshot_s = 0;
  };

  // A chunk or shard object is too many to snapshot at discovery, but its open's answer says
  // its Last-Modified by the server's clock: one later than the server's Date when discovery
  // read the store's metadata was written since (server_time.hpp), and is kChanged, as a
  // local chunk written since discovery began is, instead of read as it now is. No request of
  // its own: the time comes with the open's GET (s3://) or HEAD (http(s)://).
  static Status object_written_since(std::int64_t snapshot_s, const std::string& path,
                                     const FileInfo& info) {
    const std::string why = written_after(snapshot_s, info);
    if (why.empty()) return Status::ok();
    return file_error(ErrorCode::kChanged, path, "changed since discovery: " + why);
  }

  // Chunk and shard files are too many to snapshot at discovery, but a local one's change
  // time says whether it was written after discovery began: ctime cannot be set by a user
  // (touch and utime set mtime and atime) and is stamped from the clock discovery read, so a
  // file untouched since is never later. One written since is kChanged, as a shard file
  // changed since discovery is, instead of being read as it now is. No call of its own: the
  // time comes from the open's fstat.
  static Status written_since_discovery(const Request& r, const std::string& path,
                                        const FileInfo& info) {
    if (r.discovered_ns == 0 || info.ctime_ns <= r.discovered_ns) return Status::ok();
    return {ErrorCode::kChanged,
            path + ": changed since discovery: ctime " + std::to_string(info.ctime_ns) +
                " ns, after discovery began at " + std::to_string(r.discovered_ns) +
                " ns (the chunk was written since)"};
  }

  // A symbolic link anywhere the chunk's path resolves through (the chunk's own name, a
  // directory of the store, the store's own name, a link another link leads to, outside the
  // store too) that was made after discovery began: re-pointing one (`ln -sfn`) makes a new
  // link, while the files it now leads to keep their old times (a hard-linked copy's, `cp -al`,
  // even the metadata file's snapshot). The path is walked as the kernel resolves it, one
  // lstat per name and a readlink per link (at most 40 links, as the kernel allows). A link of
  // procfs (`/proc/self/root`, `/proc/PID/cwd`, `/proc/PID/fd/N`) is the kernel's, made when
  // first looked up and never re-pointed by a user: not held to the rule, and followed as the
  // kernel follows it, through a descriptor opened on it (O_PATH), never by its text: the text
  // of another mount namespace's or chroot's root reads "/" while the kernel goes on in that
  // process's tree. Called after the chunk was opened, so a walk that cannot finish (a name
  // gone, a link that cannot be read or whose text names nothing, too many links) means the
  // path changed or cannot be checked: the chunk is refused rather than read unchecked.
  static Status links_since_discovery(const Request& r, const std::string& path) {
    if (r.discovered_ns == 0) return Status::ok();
    const auto unchecked = [&](const std::string& why) -> Status {
      return {ErrorCode::kChanged, path +
                                       ": the symbolic links on its path cannot be checked "
                                       "against discovery's start (" +
                                       why + "): refused rather than read unchecked"};
    };
    // Directories the walk holds by descriptor ("/proc/self/fd/N", its name for messages): the
    // array's directory where the read holds it (Request::at), and each procfs link met.
    struct Held {
      std::vector<std::pair<std::string, std::string>> names;
      std::vector<int> fds;
      ~Held() {
        for (const int fd : fds) ::close(fd);
      }
    } held;
    const auto shown_of = [&](const std::string& at) {
      for (const auto& [by_fd, name] : held.names) {
        if (at.compare(0, by_fd.size(), by_fd) == 0 &&
            (at.size() == by_fd.size() || at[by_fd.size()] == '/')) {
          return name + at.substr(by_fd.size());
        }
      }
      return at;
    };
    const auto hold = [&](const std::string& name, const std::string& shown,
                          std::string* at) -> Status {
      const int fd = ::open(name.c_str(), O_PATH | O_CLOEXEC);
      if (fd < 0) return unchecked(shown + ": " + std::strerror(errno));
      held.fds.push_back(fd);
      *at = "/proc/self/fd/" + std::to_string(fd);
      held.names.emplace_back(*at, shown);
      return Status::ok();
    };
    const bool below_held = r.at != r.dir;
    if (below_held) held.names.emplace_back(r.at, r.dir);
    // Where the array's directory is held, the walk goes by name up to it and below it from
    // the held descriptor, as the chunk's open resolves.
    std::string rest = below_held ? r.dir : path;
    if (rest.empty() || rest[0] != '/') {
      char cwd[4096];
      if (::getcwd(cwd, sizeof cwd) == nullptr) {
        return unchecked(std::string("the working directory: ") + std::strerror(errno));
      }
      rest = std::string(cwd) + "/" + rest;
    }
    std::string at;      // resolved so far, without a trailing '/' ("" is the root)
    bool below = false;  // walking below the held array directory
    int links = 0;
    while (true) {
      if (rest.find_first_not_of('/') == std::string::npos) {
        if (!below_held || below) break;
        at = r.at;
        rest = path.substr(r.dir.size());
        below = true;
        continue;
      }
      const std::size_t b = rest.find_first_not_of('/');
      const std::size_t e = rest.find('/', b);
      const std::string name = rest.substr(b, e == std::string::npos ? e : e - b);
      rest = e == std::string::npos ? std::string() : rest.substr(e);
      if (name == ".") continue;
      if (name == "..") {
        if (const std::string shown = shown_of(at); shown != at) {
          // Above a directory held by descriptor: its parent as the kernel finds it.
          const std::size_t up = shown.rfind('/');
          SHARDLOAD_RETURN_IF_ERROR(
              hold(at + "/..",
                   up == std::string::npos || up == 0 ? shown + "/.." : shown.substr(0, up), &at));
          continue;
        }
        at.resize(at.rfind('/') == std::string::npos ? 0 : at.rfind('/'));
        continue;
      }
      const std::string next = at + "/" + name;
      // Named for messages as the user's path, never by a descriptor's name.
      const std::string shown = shown_of(next);
      struct ::stat st {};
      if (::lstat(next.c_str(), &st) != 0) {
        return unchecked(shown + ": " + std::strerror(errno));
      }
      if (!S_ISLNK(st.st_mode)) {
        at = next;
        continue;
      }
      if (++links > 40) return unchecked("more than 40 symbolic links");
      struct ::statfs fs {};
      const bool kernels = ::statfs(at.empty() ? "/" : at.c_str(), &fs) == 0 &&
                           fs.f_type == static_cast<decltype(fs.f_type)>(kProcfsMagic);
      if (kernels) {
        SHARDLOAD_RETURN_IF_ERROR(hold(next, shown, &at));
        continue;
      }
      const std::int64_t ctime =
          static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
      if (ctime > r.discovered_ns) {
        return {ErrorCode::kChanged, path + ": changed since discovery: the symbolic link " +
                                         shown + " on its path was made after discovery began " +
                                         "(ctime " + std::to_string(ctime) + " ns > " +
                                         std::to_string(r.discovered_ns) +
                                         " ns): it was re-pointed or replaced since"};
      }
      std::string target(std::max<std::size_t>(static_cast<std::size_t>(st.st_size) + 1, 256),
                         '\0');
      ssize_t n = -1;
      while (true) {
        n = ::readlink(next.c_str(), target.data(), target.size());
        if (n < 0) return unchecked(shown + ": " + std::strerror(errno));
        if (static_cast<std::size_t>(n) < target.size()) break;
        if (target.size() >= (std::size_t{1} << 20))
          return unchecked(shown + ": its text is too long");
        target.resize(target.size() * 2);
      }
      target.resize(static_cast<std::size_t>(n));
      if (target.empty()) return unchecked(shown + ": an empty link");
      if (target[0] == '/') at.clear();
      rest = target + "/" + rest;
    }
    return Status::ok();
  }

  // The name a chunk's path (under Request::dir) is looked up and opened under (Request::at).
  static std::string opened_name(const Request& r, const std::string& path) {
    return r.at == r.dir ? path : r.at + path.substr(r.dir.size());
  }

  // A present chunk file keeps its ctime when a directory above it is renamed into place (a
  // new version's row block published by rename): that rename changes the directory's own
  // ctime. So each directory on the chunk's path below the array's is held to the same rule,
  // stat'ed after the open: one swapped before the open shows a later ctime, and one swapped
  // after it as well (or is gone), which refuses rows that were right rather than pass wrong
  // ones. One stat per directory level per chunk; none where chunk keys have no '/'. The links
  // the path resolves through first (links_since_discovery).
  static Status directories_since_discovery(const Request& r, const std::string& path) {
    if (r.discovered_ns == 0) return Status::ok();
    SHARDLOAD_RETURN_IF_ERROR(links_since_discovery(r, path));
    std::string dir = path;
    while (true) {
      const std::size_t slash = dir.rfind('/');
      if (slash == std::string::npos) return Status::ok();
      dir.resize(slash == 0 ? 1 : slash);
      if (dir.size() <= r.dir.size()) return Status::ok();  // the array's own directory
      struct ::stat st {};
      if (::stat(opened_name(r, dir).c_str(), &st) != 0) {
        return {ErrorCode::kChanged, path + ": changed since discovery: its directory " + dir +
                                         " is gone (" + std::strerror(errno) +
                                         "): it was moved or deleted during the read"};
      }
      const std::int64_t ctime =
          static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
      if (ctime <= r.discovered_ns) continue;
      // An entry made or removed in the directory (Zarr v3's chunks share `c/`: another chunk
      // row written) sets its mtime and ctime to one instant; a rename or exchange onto its
      // path sets the ctime alone. The chunk's own file is held to its own ctime.
      if (st.st_mtim.tv_sec == st.st_ctim.tv_sec && st.st_mtim.tv_nsec == st.st_ctim.tv_nsec) {
        continue;
      }
      return {ErrorCode::kChanged, path + ": changed since discovery: its directory " + dir +
                                       " changed after discovery began (ctime " +
                                       std::to_string(ctime) + " ns > " +
                                       std::to_string(r.discovered_ns) +
                                       " ns): it was renamed into place or written since"};
    }
  }

  // A local chunk or shard file that is missing holds the fill value, unless it may have been
  // deleted since discovery: a deletion changes its directory's ctime (the nearest directory
  // up to the array's that still exists, when the chunk's own went with it). Where that
  // directory changed after discovery began, the chunk is kChanged: it may have existed then.
  // One stat a missing chunk, none for a chunk that exists.
  static Status missing_since_discovery(const Request& r, const std::string& path) {
    if (r.discovered_ns == 0) return Status::ok();
    std::string dir = path;
    while (true) {
      const std::size_t slash = dir.rfind('/');
      if (slash == std::string::npos || dir.size() <= r.dir.size()) return Status::ok();
      dir.resize(slash == 0 ? 1 : slash);
      struct ::stat st {};
      if (::stat(opened_name(r, dir).c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) continue;  // gone with the chunk: look above
        return Status::ok();  // the chunk's own look-up said it is missing; nothing to compare
      }
      const std::int64_t ctime =
          static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
      if (ctime <= r.discovered_ns) return Status::ok();
      return {ErrorCode::kChanged,
              path + ": changed since discovery: not found, and its directory " + dir +
                  " changed after discovery began (ctime " + std::to_string(ctime) + " ns > " +
                  std::to_string(r.discovered_ns) + " ns): the chunk may have been deleted since"};
    }
  }

  Result<const ZarrMeta*> meta_for(const Shard& s) {
    if (!has_meta_ || s.extra != meta_extra_) {
      SHARDLOAD_ASSIGN_OR_RETURN(meta_, decode_zarr_meta(s.extra, s.path));
      meta_extra_ = s.extra;
      has_meta_ = true;
      cached_key_.clear();
    }
    return &meta_;
  }

  // The part of a unit (a chunk or inner chunk at `origin` of shape `unit`)
  // that the request needs; false when none.
  static bool clip(const Request& r, const std::vector<std::int64_t>& origin,
                   const std::vector<std::int64_t>& unit, std::vector<std::int64_t>* blo,
                   std::vector<std::int64_t>* bhi) {
    const std::size_t n = origin.size();
    blo->resize(n);
    bhi->resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      const std::int64_t a = k == 0 ? r.lo : 0;
      const std::int64_t b = k == 0 ? r.hi : r.m.shape[k];
      (*blo)[k] = std::max(origin[k], a);
      (*bhi)[k] = std::min(origin[k] + unit[k], b);
      if ((*bhi)[k] <= (*blo)[k]) return false;
    }
    return true;
  }

  // Byte offset in the destination of global element index idx.
  static std::uint64_t dst_offset(const Request& r, const std::vector<std::int64_t>& idx) {
    std::uint64_t off = 0;
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const std::int64_t i = k == 0 ? idx[0] - r.lo : idx[k];
      off = off * static_cast<std::uint64_t>(k == 0 ? 1 : r.m.shape[k]) +
            static_cast<std::uint64_t>(i);
    }
    return off * r.m.dtype.size;
  }

  // A unit that is whole rows of the destination (spans every other axis)
  // and lies inside the request can be decoded straight into place.
  static std::byte* direct_target(const Request& r, const std::vector<std::int64_t>& origin,
                                  const std::vector<std::int64_t>& unit) {
    if (r.m.fortran || origin[0] < r.lo || origin[0] + unit[0] > r.hi) return nullptr;
    for (std::size_t k = 1; k < origin.size(); ++k) {
      if (origin[k] != 0 || unit[k] != r.m.shape[k]) return nullptr;
    }
    std::vector<std::int64_t> idx(origin.size(), 0);
    idx[0] = origin[0];
    return r.dst + dst_offset(r, idx);
  }

  void fill_box(const Request& r, const std::vector<std::int64_t>& blo,
                const std::vector<std::int64_t>& bhi) {
    const std::size_t item = r.m.dtype.size;
    const auto run = static_cast<std::size_t>(bhi.back() - blo.back());
    const bool zero = r.m.fill.find_first_not_of('\0') == std::string::npos;
    for_each_run(blo, bhi, [&](const std::vector<std::int64_t>& idx) {
      std::byte* out = r.dst + dst_offset(r, idx);
      if (zero) {
        std::memset(out, 0, run * item);
      } else {
        for (std::size_t e = 0; e < run; ++e) std::memcpy(out + e * item, r.m.fill.data(), item);
      }
    });
  }

  void copy_box(const Request& r, const std::byte* unit_data,
                const std::vector<std::int64_t>& origin, const std::vector<std::int64_t>& unit,
                const std::vector<std::int64_t>& blo, const std::vector<std::int64_t>& bhi) {
    const std::size_t item = r.m.dtype.size;
    const auto run = static_cast<std::size_t>(bhi.back() - blo.back()) * item;
    for_each_run(blo, bhi, [&](const std::vector<std::int64_t>& idx) {
      std::uint64_t src = 0;
      for (std::size_t k = 0; k < idx.size(); ++k) {
        src = src * static_cast<std::uint64_t>(unit[k]) +
              static_cast<std::uint64_t>(idx[k] - origin[k]);
      }
      std::memcpy(r.dst + dst_offset(r, idx), unit_data + src * item, run);
    });
  }

  static std::size_t unit_bytes(const ZarrMeta& m, const std::vector<std::int64_t>& unit) {
    std::size_t e = m.dtype.size;
    for (const auto d : unit) e *= static_cast<std::size_t>(d);
    return e;
  }

  // Decodes `n` encoded bytes at `in` through the codec chain into exactly
  // `expected` bytes at `out`. `what` names the chunk in errors.
  Status decode_chain(const ZarrMeta& m, const std::byte* in, std::size_t n, std::byte* out,
                      std::size_t expected, const std::string& what) {
    if (m.codecs.empty()) {
      if (n != expected) {
        return {ErrorCode::kFormat, what + ": " + std::to_string(n) + " bytes, expected " +
                                        std::to_string(expected) + " (an uncompressed chunk)"};
      }
      std::memcpy(out, in, n);
      return Status::ok();
    }
    // Intermediate stages may not grow past what any sane encoding of the
    // chunk needs.
    const std::size_t cap = 2 * expected + (std::size_t{1} << 20);
    const std::byte* cur = in;
    std::size_t cur_n = n;
    for (std::size_t i = m.codecs.size(); i-- > 1;) {
      std::vector<std::byte>& buf = (i % 2 == 0) ? stage_a_ : stage_b_;
      Status st = zarr_decode_grow(m.codecs[i], cur, cur_n, &buf, cap);
      if (!st) return st.with_context(what);
      cur = buf.data();
      cur_n = buf.size();
    }
    Status st = zarr_decode_exact(m.codecs[0], cur, cur_n, out, expected);
    if (!st) return st.with_context(what);
    return Status::ok();
  }

  // Places a decoded unit (in `data`, stored byte order and memory order)
  // into the destination; `data` may be the destination itself (direct).
  // A unit decoded into unit_ stays there, keyed by `key`: the next call
  // (a tile or staging chunk of fewer rows than a chunk) reuses it instead
  // of decoding the same chunk again.
  void place(const Request& r, std::byte* data, bool direct, const std::string& key,
             const std::vector<std::int64_t>& origin, const std::vector<std::int64_t>& unit,
             const std::vector<std::int64_t>& blo, const std::vector<std::int64_t>& bhi) {
    const std::size_t bytes = unit_bytes(r.m, unit);
    const std::size_t swap = r.m.dtype.swap_unit();
    if (r.m.dtype.size > 1 && r.m.big_endian == host_is_little_endian()) {
      byte_swap(data, bytes / swap, swap);
    }
    if (direct) return;
    if (r.m.fortran) {
      transposed_.resize(bytes);
      to_c_order(data, transposed_.data(), unit, r.m.dtype.size);
      unit_.swap(transposed_);
    }
    cached_key_ = key;
    copy_box(r, unit_.data(), origin, unit, blo, bhi);
  }

  // Column-major chunk -> row-major chunk.
  static void to_c_order(const std::byte* f, std::byte* c, const std::vector<std::int64_t>& unit,
                         std::size_t item) {
    const std::size_t n = unit.size();
    std::vector<std::uint64_t> fstride(n, 1);
    for (std::size_t k = 1; k < n; ++k)
      fstride[k] = fstride[k - 1] * static_cast<std::uint64_t>(unit[k - 1]);
    std::vector<std::int64_t> idx(n, 0);
    std::uint64_t total = 1;
    for (const auto d : unit) total *= static_cast<std::uint64_t>(d);
    std::uint64_t foff = 0;
    for (std::uint64_t ci = 0; ci < total; ++ci) {
      std::memcpy(c + ci * item, f + foff * item, item);
      for (std::size_t k = n; k-- > 0;) {
        if (++idx[k] < unit[k]) {
          foff += fstride[k];
          break;
        }
        foff -= static_cast<std::uint64_t>(idx[k] - 1) * fstride[k];
        idx[k] = 0;
      }
    }
  }

  Status read_chunk(const Request& r, const std::vector<std::int64_t>& g) {
    const std::size_t n = g.size();
    std::vector<std::int64_t> origin(n);
    for (std::size_t k = 0; k < n; ++k) origin[k] = g[k] * r.m.chunks[k];
    std::vector<std::int64_t> blo;
    std::vector<std::int64_t> bhi;
    if (!clip(r, origin, r.m.chunks, &blo, &bhi)) return Status::ok();
    const std::string path = join(traits(r.dir), r.dir, zarr_chunk_key(r.m, g));
    const std::size_t expected = unit_bytes(r.m, r.m.chunks);
    std::byte* direct = direct_target(r, origin, r.m.chunks);
    // A missing chunk: looked up here in a file system; in a flat key space the open's own
    // request tells (open_unit).
    if (!traits(path).flat_keys) {
      SHARDLOAD_ASSIGN_OR_RETURN(const PathKind kind,
                                 path_kind(*ctx_.source, opened_name(r, path), path));
      if (kind == PathKind::kMissing) {
        SHARDLOAD_RETURN_IF_ERROR(missing_since_discovery(r, path));
        fill_box(r, blo, bhi);
        return Status::ok();
      }
      if (kind != PathKind::kFile) return {ErrorCode::kFormat, path + ": not a regular file"};
      if (direct == nullptr && !cached_key_.empty() && cached_key_ == path) {
        copy_box(r, unit_.data(), origin, r.m.chunks, blo, bhi);
        return Status::ok();
      }
    }
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(std::optional<File> opened,
                               open_unit(path, &info, whole_request(r.m, expected), &r));
    if (!opened) {
      fill_box(r, blo, bhi);
      return Status::ok();
    }
    File& f = *opened;
    if (!traits(path).flat_keys) {
      SHARDLOAD_RETURN_IF_ERROR(written_since_discovery(r, path, info));
      SHARDLOAD_RETURN_IF_ERROR(directories_since_discovery(r, path));
    } else {
      SHARDLOAD_RETURN_IF_ERROR(object_written_since(r.server_snapshot_s, path, info));
    }
    count_decode();
    std::byte* target = direct;
    if (target == nullptr) {
      cached_key_.clear();
      unit_.resize(expected);
      target = unit_.data();
    }
    SHARDLOAD_RETURN_IF_ERROR(check_chunk_size(r.m, path, info.size, expected));
    if (r.m.codecs.empty()) {
      SHARDLOAD_RETURN_IF_ERROR(unchanged(f, info, f.read_exact(target, expected, 0)));
    } else {
      encoded_.resize(static_cast<std::size_t>(info.size));
      SHARDLOAD_RETURN_IF_ERROR(
          unchanged(f, info, f.read_exact(encoded_.data(), encoded_.size(), 0)));
      SHARDLOAD_RETURN_IF_ERROR(
          decode_chain(r.m, encoded_.data(), encoded_.size(), target, expected, path));
    }
    place(r, target, direct != nullptr, path, origin, r.m.chunks, blo, bhi);
    return Status::ok();
  }

  // What a chunk object's open asks for so that the object arrives in one request: its
  // decoded size, which an encoded chunk rarely exceeds by more than its codecs' headers.
  static std::size_t whole_request(const ZarrMeta& m, std::size_t expected) {
    return expected + (m.codecs.empty() ? 0 : 4096);
  }

  // A chunk object's size against what its array's chunk may take.
  static Status check_chunk_size(const ZarrMeta& m, const std::string& path, std::uint64_t size,
                                 std::size_t expected) {
    if (m.codecs.empty()) {
      if (size != expected) {
        return {ErrorCode::kFormat, path + ": size: " + std::to_string(size) + " bytes, expected " +
                                        std::to_string(expected) +
                                        " (an uncompressed chunk of shape " +
                                        dims_string(m.chunks) + ", " + m.dtype.name() + ")"};
      }
      return Status::ok();
    }
    const std::size_t cap = 2 * expected + (std::size_t{1} << 20);
    if (size > cap) {
      return {ErrorCode::kFormat, path + ": size: " + std::to_string(size) +
                                      " bytes, more than any encoding of a chunk of " +
                                      std::to_string(expected) + " bytes needs"};
    }
    return Status::ok();
  }

  // A chunk object (or a shard's inner chunk) a remote read needs, and what its fetch brought.
  struct RemoteChunk {
    std::string path;  // the object's URL; an inner chunk's: "URL: inner chunk [i, j]"
    std::string key;   // what unit_ is keyed by once it is decoded there
    std::uint64_t offset = 0, nbytes = 0;  // an inner chunk's bytes in its shard
    std::vector<std::int64_t> origin, blo, bhi;
    std::byte* direct = nullptr;   // where it decodes straight into the destination, if it does
    bool missing = false;          // 404: the fill value
    std::vector<std::byte> bytes;  // its encoded bytes (none when read straight into `direct`)
  };

  // A remote store's chunks: each object costs its requests' latency (a HEAD, the GET, a HEAD
  // after), so several are fetched at once (chunks_in_flight, a key of the URL's query) by
  // helper threads, while this thread decodes them in order as they arrive. Each chunk keeps
  // the guarantees of the one-by-one path: a 404 is the fill value, any other failure names
  // its URL, and it is compared with itself, as its HEAD saw it, after its GET.
  Status read_chunks_remote(const Request& r, const std::vector<std::int64_t>& glo,
                            const std::vector<std::int64_t>& ghi) {
    SHARDLOAD_ASSIGN_OR_RETURN(const std::size_t in_flight, chunks_in_flight_of(r.dir));
    const std::size_t n = glo.size();
    std::vector<RemoteChunk> chunks;
    for_each_run(glo, ghi, [&](const std::vector<std::int64_t>& start) {
      std::vector<std::int64_t> g = start;
      for (g[n - 1] = glo[n - 1]; g[n - 1] < ghi[n - 1]; ++g[n - 1]) {
        RemoteChunk c;
        c.origin.resize(n);
        for (std::size_t k = 0; k < n; ++k) c.origin[k] = g[k] * r.m.chunks[k];
        if (!clip(r, c.origin, r.m.chunks, &c.blo, &c.bhi)) continue;
        c.path = join(traits(r.dir), r.dir, zarr_chunk_key(r.m, g));
        c.key = c.path;
        c.direct = direct_target(r, c.origin, r.m.chunks);
        // An object decoded by the previous call needs no request at all (served now, before
        // any other chunk is decoded into unit_).
        if (c.direct == nullptr && cached_key_ == c.path) {
          copy_box(r, unit_.data(), c.origin, r.m.chunks, c.blo, c.bhi);
          continue;
        }
        chunks.push_back(std::move(c));
      }
    });
    const std::size_t expected = unit_bytes(r.m, r.m.chunks);
    return fetch_ahead(
        chunks.size(), in_flight, kFetchWindowBytes,
        [&](std::size_t i) { return fetch_chunk(r.m, expected, r.server_snapshot_s, &chunks[i]); },
        [&](std::size_t i) { return decode_chunk(r, expected, &chunks[i], r.m.chunks); });
  }

  // A remote shard's inner chunks, as read_inner reads them one by one, fetched several at
  // once (ranged GETs of the one open shard object) and decoded here in order. The shard's
  // HEAD after all of them is the caller's.
  template <typename Entry>
  Status read_inners_remote(const Request& r, const File& f, const FileInfo& info,
                            const std::string& path, const std::vector<std::int64_t>& shard_origin,
                            const std::vector<std::int64_t>& ilo,
                            const std::vector<std::int64_t>& ihi,
                            const std::vector<std::int64_t>& per, Entry entry,
                            std::size_t expected) {
    SHARDLOAD_ASSIGN_OR_RETURN(const std::size_t in_flight, chunks_in_flight_of(r.dir));
    const ZarrMeta& m = r.m;
    const std::size_t n = ilo.size();
    std::vector<RemoteChunk> chunks;
    Status status;
    for_each_run(ilo, ihi, [&](const std::vector<std::int64_t>& start) {
      std::vector<std::int64_t> w = start;
      for (w[n - 1] = ilo[n - 1]; w[n - 1] < ihi[n - 1] && status.is_ok(); ++w[n - 1]) {
        RemoteChunk c;
        c.origin.resize(n);
        std::uint64_t linear = 0;
        for (std::size_t k = 0; k < n; ++k) {
          c.origin[k] = shard_origin[k] + w[k] * m.inner_chunks[k];
          linear = linear * static_cast<std::uint64_t>(per[k]) + static_cast<std::uint64_t>(w[k]);
        }
        if (!clip(r, c.origin, m.inner_chunks, &c.blo, &c.bhi)) continue;
        c.offset = entry(linear, 0);
        c.nbytes = entry(linear, 1);
        c.path = path + ": inner chunk " + dims_string(w);
        if (c.offset == kNoChunk && c.nbytes == kNoChunk) {
          fill_box(r, c.blo, c.bhi);
          continue;
        }
        std::uint64_t end = 0;
        if (!checked_add(c.offset, c.nbytes, &end) || end > info.size) {
          status = {ErrorCode::kFormat, c.path + ": the index says " + std::to_string(c.nbytes) +
                                            " bytes at offset " + std::to_string(c.offset) +
                                            ", past the end of the file (" +
                                            std::to_string(info.size) + " bytes; corrupt shard)"};
          return;
        }
        if (m.codecs.empty() && c.nbytes != expected) {
          status = {ErrorCode::kFormat, c.path + ": " + std::to_string(c.nbytes) +
                                            " bytes, expected " + std::to_string(expected) +
                                            " (an uncompressed chunk)"};
          return;
        }
        if (!m.codecs.empty() && c.nbytes > 2 * expected + (std::uint64_t{1} << 20)) {
          status = {ErrorCode::kFormat, c.path + ": " + std::to_string(c.nbytes) +
                                            " bytes, more than any encoding of the chunk needs"};
          return;
        }
        c.direct = direct_target(r, c.origin, m.inner_chunks);
        c.key = path + "#" + std::to_string(linear);
        if (c.direct == nullptr && cached_key_ == c.key) {
          copy_box(r, unit_.data(), c.origin, m.inner_chunks, c.blo, c.bhi);
          continue;
        }
        chunks.push_back(std::move(c));
      }
    });
    SHARDLOAD_RETURN_IF_ERROR(status);
    // The storage layer merges neighbouring inner chunks into one GET (storage/detail/
    // read_ranges.hpp); a chunk fetched alone and stored raw goes straight into its rows.
    std::vector<ByteRange> ranges(chunks.size());
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      ranges[i] = ByteRange{chunks[i].offset, chunks[i].nbytes,
                            m.codecs.empty() ? chunks[i].direct : nullptr};
    }
    return fetch_ranges(f, ranges, CoalesceLimits{}, in_flight, kFetchWindowBytes,
                        [&](std::size_t i, const std::byte* bytes) {
                          return decode_chunk(r, expected, &chunks[i], m.inner_chunks, bytes);
                        });
  }

  // On a helper thread: touches only `c` (and the File's backend, safe from any thread).
  Result<std::uint64_t> fetch_chunk(const ZarrMeta& m, std::size_t expected,
                                    std::int64_t server_snapshot_s, RemoteChunk* c) const {
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(std::optional<File> opened,
                               open_unit(c->path, &info, whole_request(m, expected)));
    if (!opened) {
      c->missing = true;
      return std::uint64_t{0};
    }
    const File& f = *opened;
    SHARDLOAD_RETURN_IF_ERROR(object_written_since(server_snapshot_s, c->path, info));
    SHARDLOAD_RETURN_IF_ERROR(check_chunk_size(m, c->path, info.size, expected));
    std::byte* into = m.codecs.empty() ? c->direct : nullptr;  // distinct rows per chunk
    if (into == nullptr) {
      c->bytes.resize(static_cast<std::size_t>(info.size));
      into = c->bytes.data();
    }
    SHARDLOAD_RETURN_IF_ERROR(
        unchanged(f, info, f.read_exact(into, static_cast<std::size_t>(info.size), 0)));
    return static_cast<std::uint64_t>(c->bytes.size());
  }

  // On the calling thread, in the chunks' order.
  // `from`: the chunk's encoded bytes (c->nbytes of them) where they are not in c->bytes.
  Status decode_chunk(const Request& r, std::size_t expected, RemoteChunk* c,
                      const std::vector<std::int64_t>& unit, const std::byte* from = nullptr) {
    if (c->missing) {
      fill_box(r, c->blo, c->bhi);
      return Status::ok();
    }
    count_decode();
    std::byte* target = c->direct;
    if (target == nullptr) {
      cached_key_.clear();
      unit_.resize(expected);
      target = unit_.data();
    }
    const std::byte* src = from != nullptr ? from : c->bytes.data();
    const std::size_t src_n =
        from != nullptr ? static_cast<std::size_t>(c->nbytes) : c->bytes.size();
    if (r.m.codecs.empty()) {
      // Read straight into the rows already, or copied from where it was read.
      if (from == nullptr ? c->direct == nullptr : src != target) {
        std::memcpy(target, src, expected);
      }
    } else {
      SHARDLOAD_RETURN_IF_ERROR(decode_chain(r.m, src, src_n, target, expected, c->path));
    }
    std::vector<std::byte>().swap(c->bytes);  // out of the window now
    place(r, target, c->direct != nullptr, c->key, c->origin, unit, c->blo, c->bhi);
    return Status::ok();
  }

  Status read_shard(const Request& r, const std::vector<std::int64_t>& g) {
    const ZarrMeta& m = r.m;
    const std::size_t n = g.size();
    std::vector<std::int64_t> origin(n);
    for (std::size_t k = 0; k < n; ++k) origin[k] = g[k] * m.chunks[k];
    std::vector<std::int64_t> blo;
    std::vector<std::int64_t> bhi;
    if (!clip(r, origin, m.chunks, &blo, &bhi)) return Status::ok();
    const std::string path = join(traits(r.dir), r.dir, zarr_chunk_key(m, g));
    if (!traits(path).flat_keys) {
      SHARDLOAD_ASSIGN_OR_RETURN(const PathKind kind,
                                 path_kind(*ctx_.source, opened_name(r, path), path));
      if (kind == PathKind::kMissing) {
        SHARDLOAD_RETURN_IF_ERROR(missing_since_discovery(r, path));
        fill_box(r, blo, bhi);
        return Status::ok();
      }
      if (kind != PathKind::kFile) return {ErrorCode::kFormat, path + ": not a regular file"};
    }
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(std::optional<File> opened, open_unit(path, &info, 0, &r));
    if (!opened) {
      fill_box(r, blo, bhi);
      return Status::ok();
    }
    const File& f = *opened;
    if (!traits(path).flat_keys) {
      SHARDLOAD_RETURN_IF_ERROR(written_since_discovery(r, path, info));
      SHARDLOAD_RETURN_IF_ERROR(directories_since_discovery(r, path));
    } else {
      SHARDLOAD_RETURN_IF_ERROR(object_written_since(r.server_snapshot_s, path, info));
    }

    // The index: one (offset, nbytes) pair per inner chunk, C order.
    std::vector<std::int64_t> per(n);
    std::uint64_t count = 1;
    for (std::size_t k = 0; k < n; ++k) {
      per[k] = m.chunks[k] / m.inner_chunks[k];
      count *= static_cast<std::uint64_t>(per[k]);
    }
    const std::uint64_t index_bytes = 16 * count + (m.index_crc32c ? 4 : 0);
    if (info.size < index_bytes) {
      return {ErrorCode::kFormat, path + ": size: " + std::to_string(info.size) +
                                      " bytes, smaller than its index of " +
                                      std::to_string(index_bytes) + " bytes (corrupt shard)"};
    }
    index_.resize(static_cast<std::size_t>(index_bytes));
    const std::uint64_t index_at = m.index_at_end ? info.size - index_bytes : 0;
    SHARDLOAD_RETURN_IF_ERROR(f.read_exact(index_.data(), index_.size(), index_at));
    if (m.index_crc32c) {
      const std::size_t body = index_.size() - 4;
      std::uint32_t want = 0;
      for (int i = 3; i >= 0; --i) {
        want = (want << 8) |
               std::to_integer<std::uint32_t>(index_[body + static_cast<std::size_t>(i)]);
      }
      if (crc32c(index_.data(), body) != want) {
        return {ErrorCode::kFormat,
                path + ": shard index: crc32c checksum mismatch (corrupt shard)"};
      }
    }
    auto entry = [&](std::uint64_t i, int field) {
      std::uint64_t v = 0;
      const std::byte* p = index_.data() + i * 16 + static_cast<std::size_t>(field) * 8;
      for (int b = 0; b < 8; ++b) {
        const int at = m.index_big_endian ? b : 7 - b;
        v = (v << 8) | std::to_integer<std::uint64_t>(p[at]);
      }
      return v;
    };

    // Inner chunks of this shard that overlap the request.
    std::vector<std::int64_t> ilo(n);
    std::vector<std::int64_t> ihi(n);
    for (std::size_t k = 0; k < n; ++k) {
      ilo[k] = (blo[k] - origin[k]) / m.inner_chunks[k];
      ihi[k] = (bhi[k] - 1 - origin[k]) / m.inner_chunks[k] + 1;
    }
    const std::size_t expected = unit_bytes(m, m.inner_chunks);
    Status status;
    if (traits(path).round_trips) {
      status = read_inners_remote(r, f, info, path, origin, ilo, ihi, per, entry, expected);
    } else {
      for_each_run(ilo, ihi, [&](const std::vector<std::int64_t>& start) {
        std::vector<std::int64_t> w = start;
        for (w[n - 1] = ilo[n - 1]; w[n - 1] < ihi[n - 1] && status.is_ok(); ++w[n - 1]) {
          if (!status.is_ok()) return;
          status = read_inner(r, f, info, path, origin, w, per, entry, expected);
        }
      });
    }
    status = unchanged(f, info, std::move(status));
    // An inner chunk decoded from a shard that changed under the reads is
    // not kept for the next call.
    if (!status.is_ok()) cached_key_.clear();
    return status;
  }

  // Opens a chunk or shard file and sets `*info` to its snapshot. An object's open is its
  // one HEAD, whose 404 is the missing chunk (nullopt): no look-up of its own before it. A
  // local file was looked up by the caller, so any failure here is an error.
  // `whole`: the bytes a chunk object read whole next is expected to have (its open may
  // fetch them with the snapshot), or 0 for a shard object, read by ranges.
  // A local file is opened under its name below `r`'s held directory (Request::at) and named
  // by `path`.
  Result<std::optional<File>> open_unit(const std::string& path, FileInfo* info,
                                        std::size_t whole = 0, const Request* r = nullptr) const {
    if (!traits(path).flat_keys) {
      const std::string name = r == nullptr ? path : opened_name(*r, path);
      auto opened = ctx_.source->open_as(name, path);
      if (!opened) return renamed(opened.status(), name, path);
      File f = std::move(opened).value();
      SHARDLOAD_ASSIGN_OR_RETURN(*info, f.stat());
      return std::optional<File>(std::move(f));
    }
    auto f =
        whole > 0 ? ctx_.source->open_whole(path, info, whole) : ctx_.source->open_stat(path, info);
    if (f) return std::optional<File>(std::move(f).value());
    if (f.status().sys_errno() == ENOENT) return std::optional<File>();
    return f.status();
  }

  // Chunk and shard files are too many to snapshot at discovery: each is
  // compared with itself, as it was when opened, after the reads from it.
  // A chunk replaced between discovery and the read is told by its time
  // (a local file's ctime, an object's Last-Modified) where one is known;
  // the metadata's snapshot still guards the array's geometry and codecs.
  Status unchanged(const File& f, const FileInfo& opened, Status read) const {
    if (!ctx_.check_snapshot) return read;
    return check_unchanged(f, opened, std::move(read));
  }

  template <typename Entry>
  Status read_inner(const Request& r, const File& f, const FileInfo& info, const std::string& path,
                    const std::vector<std::int64_t>& shard_origin,
                    const std::vector<std::int64_t>& w, const std::vector<std::int64_t>& per,
                    Entry entry, std::size_t expected) {
    const ZarrMeta& m = r.m;
    const std::size_t n = w.size();
    std::vector<std::int64_t> origin(n);
    std::uint64_t linear = 0;
    for (std::size_t k = 0; k < n; ++k) {
      origin[k] = shard_origin[k] + w[k] * m.inner_chunks[k];
      linear = linear * static_cast<std::uint64_t>(per[k]) + static_cast<std::uint64_t>(w[k]);
    }
    std::vector<std::int64_t> blo;
    std::vector<std::int64_t> bhi;
    if (!clip(r, origin, m.inner_chunks, &blo, &bhi)) return Status::ok();
    const std::uint64_t off = entry(linear, 0);
    const std::uint64_t nbytes = entry(linear, 1);
    const std::string what = path + ": inner chunk " + dims_string(w);
    if (off == kNoChunk && nbytes == kNoChunk) {
      fill_box(r, blo, bhi);
      return Status::ok();
    }
    std::uint64_t end = 0;
    if (!checked_add(off, nbytes, &end) || end > info.size) {
      return {ErrorCode::kFormat, what + ": the index says " + std::to_string(nbytes) +
                                      " bytes at offset " + std::to_string(off) +
                                      ", past the end of the file (" + std::to_string(info.size) +
                                      " bytes; corrupt shard)"};
    }
    std::byte* direct = direct_target(r, origin, m.inner_chunks);
    const std::string key = path + "#" + std::to_string(linear);
    if (direct == nullptr && cached_key_ == key) {
      copy_box(r, unit_.data(), origin, m.inner_chunks, blo, bhi);
      return Status::ok();
    }
    count_decode();
    std::byte* target = direct;
    if (target == nullptr) {
      cached_key_.clear();
      unit_.resize(expected);
      target = unit_.data();
    }
    if (m.codecs.empty()) {
      if (nbytes != expected) {
        return {ErrorCode::kFormat, what + ": " + std::to_string(nbytes) + " bytes, expected " +
                                        std::to_string(expected) + " (an uncompressed chunk)"};
      }
      SHARDLOAD_RETURN_IF_ERROR(f.read_exact(target, expected, off));
    } else {
      if (nbytes > 2 * expected + (std::uint64_t{1} << 20)) {
        return {ErrorCode::kFormat, what + ": " + std::to_string(nbytes) +
                                        " bytes, more than any encoding of the chunk needs"};
      }
      encoded_.resize(static_cast<std::size_t>(nbytes));
      SHARDLOAD_RETURN_IF_ERROR(f.read_exact(encoded_.data(), encoded_.size(), off));
      SHARDLOAD_RETURN_IF_ERROR(
          decode_chain(m, encoded_.data(), encoded_.size(), target, expected, what));
    }
    place(r, target, direct != nullptr, key, origin, m.inner_chunks, blo, bhi);
    return Status::ok();
  }

  void count_decode() const {
    if (ctx_.stats != nullptr) ctx_.stats->decodes.fetch_add(1, std::memory_order_relaxed);
  }

  FormatOptions options_;
  ReaderContext ctx_;
  bool has_meta_ = false;
  std::string meta_extra_;
  ZarrMeta meta_;
  // Scratch kept between calls; each is at most about one chunk.
  std::vector<std::byte> encoded_, stage_a_, stage_b_, unit_, transposed_, index_;
  std::string cached_key_;  // the chunk whose decoded, C-order, native bytes unit_ holds
};

}  // namespace

Result<std::unique_ptr<ShardReader>> make_zarr_reader(const FormatOptions& options,
                                                      const ReaderContext& context) {
  // The array path: components separated by '/', none empty, '.' or '..'
  // (it must stay inside each store).
  FormatOptions o = options;
  std::string& d = o.dataset;
  while (!d.empty() && d.front() == '/') d.erase(0, 1);
  while (!d.empty() && d.back() == '/') d.pop_back();
  std::size_t start = 0;
  while (!d.empty() && start <= d.size()) {
    const auto slash = std::min(d.find('/', start), d.size());
    const std::string part = d.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") {
      return Status(ErrorCode::kInvalidArgument,
                    "zarr: dataset '" + options.dataset +
                        "': expected an array path inside the store such as 'group/array'");
    }
    start = slash + 1;
  }
  return std::unique_ptr<ShardReader>(std::make_unique<ZarrReader>(o, context));
}

}  // namespace shardload::detail
