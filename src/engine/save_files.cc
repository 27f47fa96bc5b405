#include "engine/detail/save_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>

#include "base/detail/bytes.hpp"
#include "readers/detail/object_layout.hpp"
#include "readers/detail/write_files.hpp"
#include "shardload/formats.hpp"
#include "shardload/layout.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest.hpp"
#include "shardload/plan.hpp"
#include "shardload/source.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/stores.hpp"

namespace shardload::detail {

namespace {

bool mul_ok(std::int64_t a, std::size_t b, std::int64_t* out) {
  return !__builtin_mul_overflow(a, static_cast<std::int64_t>(b), out);
}

// The descriptor of a format save can write, or nullptr.
const FormatDescriptor* writable(Format f) {
  const FormatDescriptor* d = find_format(f);
  return d != nullptr && d->writer ? d : nullptr;
}

WriteSpec write_spec(const SaveSpec& spec) { return {spec.dtype, spec.trailing, spec.row_bytes}; }

std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::pair<std::string, std::string> split_dest(std::string dest) {
  while (dest.size() > 1 && dest.back() == '/') dest.pop_back();
  const auto slash = dest.rfind('/');
  if (slash == std::string::npos) return {".", dest};
  return {slash == 0 ? "/" : dest.substr(0, slash), dest.substr(slash + 1)};
}

// The files every save may write beside its shards: the CLI's _meta.json, the manifest and
// the writers' metadata (shardload.json).
bool fixed_name(std::string_view name) {
  if (name == "_meta.json" || name == kManifestName) return true;
  for (const auto& d : formats()) {
    if (!d.writer) continue;
    for (const auto& m : d.writer->metadata_names()) {
      if (name == m) return true;
    }
  }
  return false;
}

// The format whose shard a save names `name` (shard_NNNN and the format's first extension),
// a directory exactly when that format's shards are; nullptr for any other name.
const FormatDescriptor* shard_format(std::string_view name, bool is_dir) {
  for (const auto& d : formats()) {
    if (!d.writer || d.extensions.empty()) continue;
    if (NumberPattern{"shard_", 4, d.extensions.front()}.match(name) >= 0) {
      return d.writer->writes_directories() == is_dir ? &d : nullptr;
    }
  }
  return nullptr;
}

// The temporary file a manifest is written through before its rename (manifest.cc: mkostemp's
// six letters or digits after ".shardload.manifest."), left behind where the writing process
// was killed: shardload's own, replaced with the dataset by an overwrite.
bool manifest_leftover(std::string_view name) {
  constexpr std::string_view stem = ".shardload.manifest.";
  if (name.size() != stem.size() + 6 || !name.starts_with(stem)) return false;
  return std::all_of(name.begin() + stem.size(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  });
}

// The names a save writes, of the type it writes them; anything else in a directory makes
// overwrite refuse it.
bool saved_name(std::string_view name, bool is_dir) {
  if (fixed_name(name)) return !is_dir;
  return shard_format(name, is_dir) != nullptr;
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
  // The keys' files, where known: each shard's count of numbers, then the numbers.
  if (!key_files.empty()) {
    for (const auto& ids : key_files) v.push_back(static_cast<std::int64_t>(ids.size()));
    for (const auto& ids : key_files) v.insert(v.end(), ids.begin(), ids.end());
  }
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
  if (!next(&f) || !next(&kind) || !next(&size) || !next(&dims) || f < 0 || f > 255 ||
      writable(static_cast<Format>(f)) == nullptr || kind < 0 || kind > 4 || size < 1 ||
      size > 16 || dims < 0 || dims > 32) {
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
  if (!next(&n) || n < 1 || static_cast<std::size_t>(n) * 3 + 1 > v.size() - i) return bad();
  s.offsets.assign(v.begin() + static_cast<std::ptrdiff_t>(i),
                   v.begin() + static_cast<std::ptrdiff_t>(i + n + 1));
  i += static_cast<std::size_t>(n) + 1;
  s.data_offset.assign(v.begin() + static_cast<std::ptrdiff_t>(i),
                       v.begin() + static_cast<std::ptrdiff_t>(i + n));
  i += static_cast<std::size_t>(n);
  s.chunk_rows.assign(v.begin() + static_cast<std::ptrdiff_t>(i),
                      v.begin() + static_cast<std::ptrdiff_t>(i + n));
  i += static_cast<std::size_t>(n);
  if (i < v.size()) {
    // The keys' files: n counts (even, each at most what is left), then as many numbers.
    if (v.size() - i < static_cast<std::size_t>(n)) return bad();
    std::size_t at = i + static_cast<std::size_t>(n);
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t count = v[i + static_cast<std::size_t>(k)];
      if (count < 0 || count % 2 != 0 || static_cast<std::uint64_t>(count) > v.size() - at) {
        return bad();
      }
      s.key_files.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(at),
                               v.begin() + static_cast<std::ptrdiff_t>(at + count));
      at += static_cast<std::size_t>(count);
    }
    if (at != v.size()) return bad();
  }
  if (s.offsets.front() != 0 || !std::is_sorted(s.offsets.begin(), s.offsets.end())) return bad();
  return s;
}

std::string save_shard_name(SaveFormat format, std::int64_t shard) {
  // The format's first extension, the one its default pattern names.
  const FormatDescriptor* d = find_format(format);
  return NumberPattern{"shard_", 4,
                       d != nullptr && !d->extensions.empty() ? d->extensions.front() : ".npy"}
      .format(shard);
}

bool is_saved_file_name(std::string_view name) { return saved_name(name, false); }

bool is_dataset_metadata_name(std::string_view name) {
  // shard_meta.json: read as a sidecar, never written, so no part of fixed_name (an overwrite
  // must not delete it).
  return fixed_name(name) || name == "shard_meta.json";
}

const ShardWriter* saved_store_writer(std::string_view name) {
  const FormatDescriptor* d = shard_format(name, true);
  return d != nullptr ? d->writer.get() : nullptr;
}

namespace {

const ObjectShardLayout* layout_of(const SaveSpec& spec) {
  return object_shard_layout(spec.format);
}

Status no_writer(const std::string& where, const SaveSpec& spec) {
  return file_error(ErrorCode::kInvalidArgument, where,
                    std::string("no writer for the ") + format_name(spec.format) + " format");
}

std::int64_t rows_of(const SaveSpec& spec, std::int64_t s) {
  const auto i = static_cast<std::size_t>(s);
  return spec.offsets[i + 1] - spec.offsets[i];
}

// The local store at the staging directory `dir`, its keys the dataset's.
std::unique_ptr<Store> store_at(const std::string& dir) { return make_local_store(dir); }

}  // namespace

Result<ShardPlan> plan_shard(const SaveSpec& spec, std::int64_t s, const std::string& where) {
  const std::string name = save_shard_name(spec.format, s);
  ShardPlan plan;
  plan.rows = rows_of(spec, s);
  plan.row_bytes = spec.row_bytes;
  std::int64_t data = 0;
  if (!mul_ok(plan.rows, spec.row_bytes, &data)) {
    return file_error(ErrorCode::kInvalidArgument, where + name,
                      std::to_string(plan.rows) + " rows of " + std::to_string(spec.row_bytes) +
                          " bytes overflow a file size");
  }
  const ObjectShardLayout* layout = layout_of(spec);
  if (layout == nullptr) return no_writer(where + name, spec);
  const WriteSpec ws = write_spec(spec);
  plan.head = layout->head(ws, plan.rows);
  const auto rb = static_cast<std::uint64_t>(spec.row_bytes);
  if (layout->chunk_rows == nullptr) {
    plan.keys.push_back({name, plan.head.size() + static_cast<std::uint64_t>(data)});
    return plan;
  }
  plan.chunk_rows = layout->chunk_rows(ws, plan.rows);
  if (spec.row_bytes == 0) return plan;  // no bytes: every chunk is missing (the fill)
  // Zarr v2 stores an edge chunk at full size; its padding stays zeros.
  for (std::int64_t k = 0; k * plan.chunk_rows < plan.rows; ++k) {
    plan.keys.push_back(
        {name + "/" + layout->chunk_name(ws, k), static_cast<std::uint64_t>(plan.chunk_rows) * rb});
  }
  return plan;
}

std::vector<KeyWrite> ShardPlan::writes(std::int64_t lo, std::int64_t hi) const {
  const auto rb = static_cast<std::uint64_t>(row_bytes);
  std::vector<KeyWrite> out;
  if (hi <= lo || row_bytes == 0 || keys.empty()) return out;
  if (chunk_rows == 0) {
    out.push_back({0, head.size() + static_cast<std::uint64_t>(lo) * rb, lo, hi});
    return out;
  }
  for (std::int64_t r = lo; r < hi;) {
    const std::int64_t k = r / chunk_rows;
    const std::int64_t end = std::min(hi, (k + 1) * chunk_rows);
    out.push_back(
        {static_cast<std::size_t>(k), static_cast<std::uint64_t>(r - k * chunk_rows) * rb, r, end});
    r = end;
  }
  return out;
}

Status plan_shard_keys(const std::string& where, SaveSpec* spec) {
  const auto n = static_cast<std::size_t>(spec->shards());
  spec->data_offset.assign(n, 0);
  spec->chunk_rows.assign(n, 1);
  for (std::size_t s = 0; s < n; ++s) {
    SHARDLOAD_ASSIGN_OR_RETURN(const ShardPlan plan,
                               plan_shard(*spec, static_cast<std::int64_t>(s), where));
    spec->data_offset[s] = static_cast<std::int64_t>(plan.head.size());
    if (plan.chunk_rows > 0) spec->chunk_rows[s] = plan.chunk_rows;
  }
  return Status::ok();
}

Status create_shard_keys(Store& store, const Staging& staging, SaveSpec* spec) {
  const std::string where = store.describe(staging.prefix);
  SHARDLOAD_RETURN_IF_ERROR(plan_shard_keys(where, spec));
  std::vector<std::vector<std::int64_t>> key_files;
  for (std::int64_t s = 0; s < spec->shards(); ++s) {
    SHARDLOAD_ASSIGN_OR_RETURN(const ShardPlan plan, plan_shard(*spec, s, where));
    std::vector<std::int64_t> files;
    for (std::size_t k = 0; k < plan.keys.size(); ++k) {
      SHARDLOAD_ASSIGN_OR_RETURN(auto sink,
                                 store.open_sink(staging, plan.keys[k].key, plan.keys[k].size));
      if (const auto [dev, ino] = sink->file_identity(); dev != 0 || ino != 0) {
        files.push_back(static_cast<std::int64_t>(dev));
        files.push_back(static_cast<std::int64_t>(ino));
      }
      if (k == 0 && !plan.head.empty()) {
        SHARDLOAD_RETURN_IF_ERROR(
            sink->write(0, std::as_bytes(std::span(plan.head.data(), plan.head.size()))));
      }
      SHARDLOAD_RETURN_IF_ERROR(sink->finish());
    }
    // Every key's file or none (a store of objects): a shard's count is its keys' or 0.
    if (files.size() != 2 * plan.keys.size()) files.clear();
    key_files.push_back(std::move(files));
  }
  if (std::all_of(key_files.begin(), key_files.end(), [](const auto& f) { return f.empty(); })) {
    key_files.clear();
  }
  spec->key_files = std::move(key_files);
  return Status::ok();
}

Status write_shard_rows(Store& store, const Staging& staging, const SaveSpec& spec, std::int64_t lo,
                        std::int64_t hi, const std::byte* src) {
  if (layout_of(spec) == nullptr) {
    return Status{ErrorCode::kInvalidArgument,
                  std::string("save: no writer for the ") + format_name(spec.format) + " format"};
  }
  std::vector<Piece> pieces;
  pieces_for_rows(spec.offsets, lo, hi, &pieces);
  const auto rb = static_cast<std::int64_t>(spec.row_bytes);
  for (const Piece& p : pieces) {
    SHARDLOAD_ASSIGN_OR_RETURN(const ShardPlan plan, plan_shard(spec, p.shard));
    const std::byte* from = src + p.dst_row * rb;
    const auto shard = static_cast<std::size_t>(p.shard);
    const std::vector<std::int64_t>* files =
        shard < spec.key_files.size() && spec.key_files[shard].size() == 2 * plan.keys.size()
            ? &spec.key_files[shard]
            : nullptr;
    for (const KeyWrite& w : plan.writes(p.lo, p.hi)) {
      SHARDLOAD_ASSIGN_OR_RETURN(auto sink, store.reopen_sink(staging, plan.keys[w.key].key));
      // The very file the save made, whichever process reopens it: another one renamed or
      // linked into its place (a process that made no key knows no other way) is refused
      // before a byte goes into it.
      if (files != nullptr &&
          sink->file_identity() != std::pair{static_cast<std::uint64_t>((*files)[2 * w.key]),
                                             static_cast<std::uint64_t>((*files)[2 * w.key + 1])}) {
        sink->abort();
        return file_error(ErrorCode::kIo, store.describe(staging.prefix + plan.keys[w.key].key),
                          "is not the file the save made there (replaced during the save, by "
                          "another file or a link to one); nothing is written into it or "
                          "published",
                          ESTALE);
      }
      const Status st = sink->write(
          w.offset,
          std::span(from + (w.lo - p.lo) * rb, static_cast<std::size_t>((w.hi - w.lo) * rb)));
      const Status done = sink->finish();
      SHARDLOAD_RETURN_IF_ERROR(st);
      SHARDLOAD_RETURN_IF_ERROR(done);
    }
  }
  return Status::ok();
}

Status write_metadata(Store& store, const Staging& staging, const SaveSpec& spec,
                      const std::vector<std::pair<std::string, std::string>>& extra_files,
                      std::vector<WrittenKey>* written,
                      std::vector<std::pair<std::string, std::string>>* begun) {
  const ObjectShardLayout* layout = layout_of(spec);
  if (layout == nullptr) {
    return Status{ErrorCode::kInvalidArgument,
                  std::string("save: no writer for the ") + format_name(spec.format) + " format"};
  }
  std::vector<WrittenShard> shards;
  for (std::int64_t s = 0; s < spec.shards(); ++s) {
    const auto i = static_cast<std::size_t>(s);
    shards.push_back({save_shard_name(spec.format, s), rows_of(spec, s),
                      ShardPlacement{spec.data_offset[i], spec.chunk_rows[i]}});
  }
  SHARDLOAD_ASSIGN_OR_RETURN(ObjectFiles files, layout->metadata(write_spec(spec), shards));
  files.insert(files.end(), extra_files.begin(), extra_files.end());
  for (const auto& [name, text] : files) {
    if (begun != nullptr) begun->emplace_back(staging.prefix + name, text);
    SHARDLOAD_ASSIGN_OR_RETURN(auto sink, store.open_sink(staging, name, text.size()));
    SHARDLOAD_RETURN_IF_ERROR(sink->write(0, std::as_bytes(std::span(text.data(), text.size()))));
    SHARDLOAD_RETURN_IF_ERROR(sink->finish());
    if (written != nullptr) written->push_back({staging.prefix + name, text.size(), sink->etag()});
  }
  return Status::ok();
}

Status create_shard_files(const std::string& dir, SaveSpec* spec) {
  return create_shard_keys(*store_at(dir), Staging{}, spec);
}

Status write_rows(const std::string& dir, const SaveSpec& spec, std::int64_t lo, std::int64_t hi,
                  const std::byte* src) {
  return write_shard_rows(*store_at(dir), Staging{}, spec, lo, hi, src);
}

Status write_metadata(const std::string& dir, const SaveSpec& spec,
                      const std::vector<std::pair<std::string, std::string>>& extra_files) {
  return write_metadata(*store_at(dir), Staging{}, spec, extra_files);
}

Status write_save_manifest(const std::string& dir, Checksum checksum,
                           const std::function<Status(const Layout&)>& held_to) {
  // The layout is the one discover() finds for the finished directory, so that discovering
  // the destination later takes the manifest and gets exactly what probing would give.
  // Renaming the directory changes neither the files' inodes nor their times, so the
  // snapshots stay valid at the destination.
  DiscoverOptions opts;
  opts.use_manifest = false;
  SHARDLOAD_ASSIGN_OR_RETURN(const Layout layout, try_discover(Source::directory(dir), opts));
  if (held_to) SHARDLOAD_RETURN_IF_ERROR(held_to(layout));
  ManifestOptions mopts;
  mopts.checksum = checksum;
  SHARDLOAD_ASSIGN_OR_RETURN(const WrittenManifest written,
                             write_manifest_file(layout, dir, mopts));
  // Checked with the staged keys at the publish: another file put in its place is refused. The
  // file is the one written through the manifest's descriptor, never what the path names now
  // (a file renamed over it during the write would be taken for the save's own).
  if (path_traits(written.path).kernel_files) {
    note_staged_file(written.path, written.device, written.inode);
  }
  return Status::ok();
}

namespace {

bool in_my_groups(gid_t gid) {
  if (gid == ::getegid()) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  const int got = ::getgroups(n, groups.data());
  return got > 0 && std::find(groups.begin(), groups.begin() + got, gid) != groups.begin() + got;
}

// The new dataset takes the owner and group of the directory it replaces; where this process
// cannot give it them (it is not root, and they are another user's or a group it is not in)
// the save is refused before anything is written, rather than changing them.
Status check_owner(const std::string& dest, const struct ::stat& st) {
  const uid_t me = ::geteuid();
  if (me == 0) return Status::ok();  // a chown that still fails is reported at the commit
  if (st.st_uid != me) {
    return file_error(ErrorCode::kIo, dest,
                      "the destination belongs to user " + std::to_string(st.st_uid) +
                          ", and this process (user " + std::to_string(me) +
                          ") cannot give the new dataset that owner; save as that user, or "
                          "elsewhere",
                      EPERM);
  }
  if (!in_my_groups(st.st_gid)) {
    return file_error(ErrorCode::kIo, dest,
                      "the destination belongs to group " + std::to_string(st.st_gid) +
                          ", which this process is not in, so the new dataset cannot keep it; "
                          "save as a member of that group, or elsewhere",
                      EPERM);
  }
  return Status::ok();
}

// The names in a directory, sorted, so that the first foreign entry named is the same on
// every file system.
Status list_names(const std::string& dir, std::vector<std::string>* names) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return sys_error(dir, "cannot list", errno);
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names->emplace_back(name);
  }
  ::closedir(d);
  std::sort(names->begin(), names->end());
  return Status::ok();
}

// What an earlier save wrote into an existing dataset directory. With its manifest, the
// shards it lists (by name, and by snapshot: a file changed or replaced since is not the
// save's any more) and, in each store (Zarr), the metadata file it snapshots and the chunk
// keys its geometry gives. Without one (a save with manifest = false, or the CLI's older
// output): entries of the names and types a save writes, and in a store only the metadata
// file and chunk keys its writer writes.
struct SavedTree {
  std::string dest;
  std::optional<Manifest> manifest;
  std::map<std::string, const Shard*, std::less<>> shards;  // the manifest's, by file name

  Status foreign(const std::string& rel, const std::string& why) const {
    return file_error(ErrorCode::kIo, dest,
                      "overwrite replaces only a directory of saved shards, and it holds '" + rel +
                          "', " + why + "; remove it or save elsewhere",
                      EEXIST);
  }

  Status read_manifest_if_any() {
    const std::string path = manifest_path(dest);
    struct ::stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return Status::ok();
    auto m = read_manifest(path);
    if (!m) {
      return file_error(ErrorCode::kIo, dest,
                        "overwrite replaces only a directory of saved shards, and its manifest "
                        "cannot be read, so what the save wrote is unknown (" +
                            m.status().message() +
                            "); delete the manifest to have the shards checked by name, or "
                            "save elsewhere",
                        EEXIST);
    }
    manifest = std::move(*m);
    const std::string prefix = manifest->directory.empty() || manifest->directory.back() == '/'
                                   ? manifest->directory
                                   : manifest->directory + "/";
    for (const Shard& s : manifest->layout.shards) {
      if (s.path.size() <= prefix.size() || s.path.compare(0, prefix.size(), prefix) != 0) {
        continue;
      }
      const std::string name = s.path.substr(prefix.size());
      if (name.find('/') == std::string::npos) shards.emplace(name, &s);
    }
    return Status::ok();
  }

  // The snapshot of `path` against the manifest's.
  Status same_as_saved(const std::string& rel, const FileInfo& saved) const {
    auto now = posix_io().stat_path(dest + "/" + rel);
    if (now && *now == saved) return Status::ok();
    return foreign(rel,
                   "which changed since the save wrote it (its size, times or inode "
                   "differ from those in " +
                       manifest_path(dest) + ")");
  }

  Status check_store(const std::string& name, const FormatDescriptor& format, const Shard* shard,
                     std::vector<SavedEntry>* entries) const {
    // The chunk keys the store's geometry gives: from the manifest, or else from the store's
    // own metadata (probed); a store whose metadata cannot be read is held to the key pattern.
    std::size_t dims = 0;
    std::int64_t chunks = -1;  // unknown: any chunk number
    const auto geometry = [&](const Layout& layout, const Shard& s) {
      dims = layout.trailing_shape.size() + 1;
      if (layout.row_bytes == 0) {
        chunks = 0;
      } else if (s.decode_rows > 0) {
        chunks = (s.stored_rows() + s.decode_rows - 1) / s.decode_rows;
      }
    };
    if (shard != nullptr) {
      geometry(manifest->layout, *shard);
    } else {
      DiscoverOptions opts;
      opts.use_manifest = false;
      opts.format.format = format.format;
      const auto probed = try_discover_paths({dest + "/" + name}, opts);
      if (probed && probed->shards.size() == 1) geometry(*probed, probed->shards[0]);
    }
    std::vector<std::string> names;
    SHARDLOAD_RETURN_IF_ERROR(list_names(dest + "/" + name, &names));
    for (const std::string& e : names) {
      const std::string rel = name + "/" + e;
      struct ::stat es {};
      if (::lstat((dest + "/" + rel).c_str(), &es) != 0) {
        return sys_error(dest + "/" + rel, "cannot look at", errno);
      }
      if (!S_ISREG(es.st_mode)) return foreign(rel, "which is not a file a save writes");
      if (e == format.writer->store_metadata_name()) {
        if (shard != nullptr) SHARDLOAD_RETURN_IF_ERROR(same_as_saved(rel, shard->snapshot));
      } else {
        if (!format.writer->is_chunk_entry(e, dims, chunks)) {
          return foreign(rel, "which a save does not write");
        }
      }
      entries->push_back({rel, generation_of_stat(es)});
    }
    return Status::ok();
  }

  Status check(std::vector<SavedEntry>* entries) {
    SHARDLOAD_RETURN_IF_ERROR(read_manifest_if_any());
    std::vector<std::string> names;
    SHARDLOAD_RETURN_IF_ERROR(list_names(dest, &names));
    for (const std::string& name : names) {
      const std::string path = dest + "/" + name;
      struct ::stat es {};
      if (::lstat(path.c_str(), &es) != 0) return sys_error(path, "cannot look at", errno);
      const bool is_dir = S_ISDIR(es.st_mode);
      if (!is_dir && !S_ISREG(es.st_mode) && saved_name(name, false)) {
        return file_error(ErrorCode::kIo, path,
                          "not a regular file (a FIFO, device, socket or link is in the way of "
                          "the shard name); remove it first",
                          EINVAL);
      }
      if (S_ISREG(es.st_mode) && manifest_leftover(name)) {
        entries->push_back({name, generation_of_stat(es)});
        continue;
      }
      if (!saved_name(name, is_dir)) return foreign(name, "which a save does not write");
      const bool fixed = fixed_name(name);
      const Shard* shard = nullptr;
      if (manifest && !fixed) {
        const auto it = shards.find(name);
        if (it == shards.end()) {
          return foreign(name,
                         "which the dataset's manifest " + manifest_path(dest) + " does not list");
        }
        shard = it->second;
        if (!is_dir) SHARDLOAD_RETURN_IF_ERROR(same_as_saved(name, shard->snapshot));
      }
      if (is_dir) {
        SHARDLOAD_RETURN_IF_ERROR(check_store(name, *shard_format(name, true), shard, entries));
      }
      entries->push_back(is_dir ? SavedEntry{name + "/", ""}
                                : SavedEntry{name, generation_of_stat(es)});
    }
    return Status::ok();
  }
};

}  // namespace

Status check_destination(const std::string& dest, bool overwrite, ExistingDestination* existing) {
  struct ::stat st {};
  // "link/" would name the link's target: the destination is looked at without the slash.
  if (::lstat(without_trailing_slashes(dest).c_str(), &st) != 0) {
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
  std::string first;  // any entry
  {
    DIR* d = ::opendir(dest.c_str());
    if (d == nullptr) return sys_error(dest, "cannot list the destination", errno);
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      first = name;
      break;
    }
    ::closedir(d);
  }
  if (!first.empty() && !overwrite) {
    return file_error(ErrorCode::kIo, dest,
                      "the destination exists and is not empty (it holds '" + first +
                          "'); pass overwrite to replace a dataset saved there",
                      EEXIST);
  }
  SHARDLOAD_RETURN_IF_ERROR(check_owner(dest, st));
  std::vector<SavedEntry> entries;
  if (!first.empty()) {
    SavedTree tree;
    tree.dest = dest;
    SHARDLOAD_RETURN_IF_ERROR(tree.check(&entries));
  }
  if (existing != nullptr) {
    existing->exists = true;
    existing->mode = st.st_mode & 07777;
    existing->uid = st.st_uid;
    existing->gid = st.st_gid;
    existing->entries = std::move(entries);
  }
  return Status::ok();
}

bool remove_saved_entries(const std::string& dir, const std::vector<SavedEntry>& entries) {
  return remove_checked_keys(dir, entries);
}

namespace {

Status unnamed_destination(const std::string& dest) {
  return Status{ErrorCode::kInvalidArgument,
                "save: the destination '" + dest + "' must name a directory by its name"};
}

bool names_a_directory(const std::string& base) {
  return !base.empty() && base != "." && base != ".." && base != "/";
}

}  // namespace

Result<std::string> physical_destination(const std::string& dest) {
  const auto [parent, base] = split_dest(dest);
  if (!names_a_directory(base)) return unnamed_destination(dest);
  char* real = ::realpath(parent.c_str(), nullptr);
  if (real == nullptr) {
    return sys_error(dest, "cannot resolve the directory it is in (" + parent + ")", errno);
  }
  std::string out(real);
  std::free(real);
  return (out == "/" ? std::string() : out) + "/" + base;
}

namespace {

// The local store a save to the directory `dest` publishes through (the directory it is in),
// and dest's name in it.
std::pair<std::unique_ptr<Store>, std::string> local_destination(const std::string& dest) {
  auto [parent, base] = split_dest(dest);
  return {make_local_store(std::move(parent)), std::move(base)};
}

}  // namespace

Result<std::string> make_staging_dir(const std::string& dest) {
  const auto [parent, base] = split_dest(dest);
  if (!names_a_directory(base)) return unnamed_destination(dest);
  auto [store, name] = local_destination(dest);
  SHARDLOAD_ASSIGN_OR_RETURN(const Staging staging, store->stage(name, {}));
  return staging.location;
}

Status commit_staging(const std::string& staging, const std::string& dest, bool overwrite,
                      bool* published) {
  *published = false;
  auto [store, name] = local_destination(dest);
  Staging s;
  s.name = name;
  s.location = staging;
  PublishSteps steps;
  steps.overwrite = overwrite;
  steps.check = [&](std::vector<ReplacedKey>* replaced) {
    ExistingDestination existing;
    SHARDLOAD_RETURN_IF_ERROR(check_destination(dest, overwrite, &existing));
    *replaced = std::move(existing.entries);
    return Status::ok();
  };
  return store->publish(s, steps, published);
}

std::pair<std::uint64_t, std::uint64_t> directory_identity(const std::string& path) noexcept {
  struct ::stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {0, 0};
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

void remove_tree_if_same(const std::string& path,
                         std::pair<std::uint64_t, std::uint64_t> identity) noexcept {
  try {
    auto [store, name] = local_destination(path);
    Staging s;
    s.name = "staging";  // any name: discard removes the staging directory alone
    s.location = path;
    std::tie(s.dev, s.ino) = identity;
    store->discard(s, {});
  } catch (...) {  // best effort on a failure path
  }
}

Result<std::string> prepare_staging(const std::string& dest, SaveSpec* spec) {
  SHARDLOAD_ASSIGN_OR_RETURN(std::string staging, make_staging_dir(dest));
  const auto identity = directory_identity(staging);
  const Status st = create_shard_files(staging, spec);
  if (!st) {
    remove_tree_if_same(staging, identity);
    return st;
  }
  return staging;
}

Status publish_staging(const std::string& staging, const std::string& dest, const SaveSpec& spec,
                       const SaveOptions& options, bool* published) {
  *published = false;
  SHARDLOAD_RETURN_IF_ERROR(write_metadata(staging, spec, options.extra_files));
  if (options.manifest) SHARDLOAD_RETURN_IF_ERROR(write_save_manifest(staging, options.checksum));
  return commit_staging(staging, dest, options.overwrite, published);
}

}  // namespace shardload::detail
