// The format table: one descriptor per format. Adding a format is adding its line here.
#include "shardload/formats.hpp"
#include "shardload/location.hpp"
#include "shardload/shard_source.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "base/detail/links.hpp"
#include "readers/detail/readers.hpp"
#include "shardload/reader_registry.hpp"
#include "shardload/source.hpp"
#include "storage/detail/context.hpp"

namespace shardload {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Whether `file` holds `magic` at `offset`.
bool magic_at(const File& file, std::uint64_t size, std::uint64_t offset, std::string_view magic) {
  std::array<char, 16> buf{};
  if (magic.size() > buf.size() || offset + magic.size() > size) return false;
  return file.read_exact(buf.data(), magic.size(), offset).is_ok() &&
         std::string_view(buf.data(), magic.size()) == magic;
}

auto magic(std::string_view bytes) {
  return [bytes](const File& f, std::uint64_t size) { return magic_at(f, size, 0, bytes); };
}

// HDF5's superblock sits at 0 or, after a user block, at 512, 1024, 2048, ...
bool hdf5_sniff(const File& f, std::uint64_t size) {
  constexpr std::string_view kMagic("\x89HDF\r\n\x1a\n", 8);
  for (std::uint64_t off = 0; off < size && off <= (std::uint64_t{1} << 20);
       off = off == 0 ? 512 : off * 2) {
    if (magic_at(f, size, off, kMagic)) return true;
  }
  return false;
}

// A store's root metadata: an array's (v2 .zarray, v3 zarr.json) or a group's (v2 .zgroup, v3
// zarr.json), whose array dataset= names: a v2 group is one store, as a v3 group is, not a
// directory of numbered shards.
constexpr const char* kZarrRootMetadata[] = {"/.zarray", "/zarr.json", "/.zgroup"};

bool zarr_store(const std::string& path) {
  if (path_traits(path).flat_keys) {
    // A prefix is a store when its metadata object exists: a HEAD each, never a LIST (a v2
    // store's chunk keys all sit directly under the prefix, so its listing is as long as
    // the array has chunks).
    auto [base, query] = split_options(path);
    while (!base.empty() && base.back() == '/') base.pop_back();
    // An open is the one request (and works with any store, whose stat_path a RemoteIo need not
    // have). All are asked at once: a directory of shards answers three 404s, and one round trip
    // is all that should cost.
    const auto exists = [&](const char* meta) {
      FileInfo info;
      return static_cast<bool>(ShardSource::files()->open_stat(base + meta + query, &info));
    };
    bool found[std::size(kZarrRootMetadata)] = {};
    detail::StorageContext::process().pool().run(std::size(kZarrRootMetadata), [&](std::size_t k) {
      found[k] = exists(kZarrRootMetadata[k]);
    });
    return std::find(std::begin(found), std::end(found), true) != std::end(found);
  }
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  for (const char* meta : kZarrRootMetadata) {
    if (::access((path + meta).c_str(), F_OK) == 0) return true;
    // Metadata linked from a place that is gone still makes a store, whose reader names the
    // link: taken for none, the store was "no numbered shards of a known format".
    if (errno == ENOENT && detail::is_dangling_link(path + meta)) return true;
  }
  return false;
}

#if !defined(SHARDLOAD_WITH_HDF5) || !defined(SHARDLOAD_WITH_ARROW)
// The factory of a format this build leaves out.
ReaderMaker unsupported(const char* name) {
  return
      [name](const FormatOptions&, const ReaderContext&) -> Result<std::unique_ptr<ShardReader>> {
        return Status(ErrorCode::kInvalidArgument,
                      std::string("the ") + name + " format is not supported by this build");
      };
}
#endif

std::vector<FormatDescriptor> build_table() {
  std::vector<FormatDescriptor> t;
  {
    FormatDescriptor d;
    d.format = Format::kNpy;
    d.name = "npy";
    d.extensions = {".npy"};
    d.sniff = magic(std::string_view("\x93NUMPY", 6));
    d.capabilities = {.contiguous_rows = true,
                      .parallel_probe = true,
                      .cheap_reprobe = true,
                      .remote_reads = true,
                      .remote_piece_lanes = true};
    d.make_reader = detail::make_npy_reader;
    d.writer = detail::npy_writer();
    t.push_back(std::move(d));
  }
  {
    FormatDescriptor d;
    d.format = Format::kRaw;
    d.name = "raw";
    d.extensions = {".bin", ".raw", ".dat"};
    // A sidecar's "rows" list is by position: probing on several threads gives each probe
    // its shard's position (ShardReader::probe_at), since a reader per thread, given some of
    // the shards, cannot count it. The threads' readers share the sidecar (ShardReader::sibling),
    // and a read needs none: a tile's objects may be read at once.
    d.capabilities = {.parallel_probe = true,
                      .cheap_reprobe = true,
                      .remote_reads = true,
                      .remote_piece_lanes = true};
    d.make_reader = detail::make_raw_reader;
    d.writer = detail::raw_writer();
    t.push_back(std::move(d));
  }
  {
    FormatDescriptor d;
    d.format = Format::kHdf5;
    d.name = "hdf5";
    d.aliases = {"h5"};
    d.extensions = {".h5", ".hdf5"};
    d.sniff = hdf5_sniff;
#ifdef SHARDLOAD_WITH_HDF5
    // HDF5 reads a remote shard through a file driver over the IoBackend (hdf5_remote.cc).
    // A remote probe's or piece's request is made before HDF5's lock is taken (the object's
    // first bytes; a contiguous dataset's rows need no HDF5 call at all), so several overlap.
    d.capabilities.remote_reads = true;
    d.capabilities.parallel_probe = true;
    d.capabilities.remote_piece_lanes = true;
    d.contiguous_shard = detail::hdf5_rows_at_offset;
    d.make_reader = detail::make_hdf5_reader;
#else
    d.make_reader = unsupported("hdf5");
#endif
    t.push_back(std::move(d));
  }
  for (const Format f : {Format::kParquet, Format::kArrow}) {
    FormatDescriptor d;
    d.format = f;
    const bool parquet = f == Format::kParquet;
    d.name = parquet ? "parquet" : "arrow";
    if (!parquet) d.aliases = {"feather", "ipc"};
    d.extensions = parquet ? std::vector<std::string>{".parquet", ".pq"}
                           : std::vector<std::string>{".arrow", ".feather", ".ipc"};
    d.sniff = parquet ? magic("PAR1") : magic(std::string_view("ARROW1\0\0", 8));
#ifdef SHARDLOAD_WITH_ARROW
    // Arrow reads a remote shard through a random-access file over the IoBackend. Probes on
    // several threads: discovery, not a reader, holds each file's default columns to the
    // first's (ShardProbe::shared).
    d.capabilities.remote_reads = true;
    d.capabilities.parallel_probe = true;
    d.capabilities.remote_piece_lanes = true;
    d.make_reader = [f](const FormatOptions& o, const ReaderContext& c) {
      return detail::make_arrow_reader(f, o, c);
    };
#else
    d.make_reader = unsupported(parquet ? "parquet" : "arrow");
#endif
    t.push_back(std::move(d));
  }
  {
    FormatDescriptor d;
    d.format = Format::kZarr;
    d.name = "zarr";
    d.extensions = {".zarr"};
    d.is_store = zarr_store;
    // Its reader opens metadata and chunks through the IoBackend, by key in object storage.
    d.capabilities = {
        .freshness = Freshness::kMetadataFile, .cheap_reprobe = true, .remote_reads = true};
    d.make_reader = detail::make_zarr_reader;
    d.writer = detail::zarr_writer();
    t.push_back(std::move(d));
  }
  t.push_back(detail::npz_format());
  {
    // Readers registered by name: the name travels in FormatOptions::reader.
    FormatDescriptor d;
    d.format = Format::kCustom;
    d.name = "custom";
    d.make_reader = detail::make_registered_reader;
    d.registered = true;
    t.push_back(std::move(d));
  }
  return t;
}

}  // namespace

const std::vector<FormatDescriptor>& formats() {
  // Never destroyed: a task may make a reader while the process exits.
  static const auto* table = new std::vector<FormatDescriptor>(build_table());
  return *table;
}

const FormatDescriptor* find_format(Format f) {
  for (const auto& d : formats()) {
    if (d.format == f) return &d;
  }
  return nullptr;
}

const char* format_name(Format f) {
  if (f == Format::kAuto) return "auto";
  const FormatDescriptor* d = find_format(f);
  return d != nullptr ? d->name.c_str() : "unknown";
}

namespace {

// "a, b or c": the names of the descriptors `pick` takes, in table order.
template <typename Pick>
std::string names_text(Pick pick) {
  std::vector<const std::string*> names;
  for (const auto& d : formats()) {
    if (pick(d)) names.push_back(&d.name);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += *names[i];
  }
  return out;
}

}  // namespace

std::string format_names_text() {
  return names_text([](const FormatDescriptor& d) { return !d.registered; });
}

std::string writable_format_names_text() {
  return names_text([](const FormatDescriptor& d) { return d.writer != nullptr; });
}

Result<Format> parse_format(std::string_view name) {
  if (name == "auto") return Format::kAuto;
  for (const auto& d : formats()) {
    if (d.registered) continue;
    if (d.name == name) return d.format;
    for (const auto& a : d.aliases) {
      if (a == name) return d.format;
    }
  }
  return Status(ErrorCode::kInvalidArgument, "unknown format '" + std::string(name) +
                                                 "' (expected auto, " + format_names_text() + ")");
}

Format format_from_extension(std::string_view path) {
  // An object-storage URL's query configures the store; the name ends before it.
  const std::string name = split_options(path).first;
  path = name;
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  for (const auto& d : formats()) {
    for (const auto& ext : d.extensions) {
      if (ends_with(path, ext)) return d.format;
    }
  }
  return Format::kAuto;
}

std::string default_pattern(const FormatDescriptor& d) {
  if (d.extensions.empty()) {
    return std::string(kDefaultPattern);  // .npy, the numbering Source uses by default
  }
  return "shard_{:04d}" + d.extensions.front();
}

std::string default_pattern(Format f) {
  const FormatDescriptor* d = find_format(f);
  return d == nullptr ? std::string(kDefaultPattern) : default_pattern(*d);
}

Result<std::string> default_pattern(const FormatOptions& options) {
  const FormatDescriptor* d = find_format(options.format);
  if (d == nullptr || !d->registered) return default_pattern(options.format);
  return registered_default_pattern(options.reader);
}

const FormatDescriptor* find_format(const FormatOptions& options) {
  return find_format(options.format, options.reader);
}

void select_format(const FormatDescriptor& d, FormatOptions* options) {
  options->format = d.format;
  options->reader = d.registered ? d.name : std::string();
}

Format store_format(const std::string& directory) {
  for (const auto& d : formats()) {
    if (d.is_store && d.is_store(directory)) return d.format;
  }
  return Format::kAuto;
}

Format sniff_format(const std::string& path) { return sniff_format(path, *ShardSource::files()); }

Format sniff_format(const std::string& path, ShardSource& source) {
  if (const Format f = store_format(path); f != Format::kAuto) return f;
  // Only regular files: the open refuses anything else without blocking (a FIFO without
  // a writer), and reading a FIFO's first bytes would block or consume them.
  FileInfo info;
  auto file = source.open_stat(path, &info);
  if (!file) return Format::kAuto;
  for (const auto& d : formats()) {
    if (d.sniff && d.sniff(*file, info.size)) return d.format;
  }
  return Format::kAuto;
}

}  // namespace shardload
