#include "shardload/layout.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <deque>
#include <iterator>
#include <sstream>

#include "base/detail/bytes.hpp"
#include "base/detail/checked.hpp"
#include "base/detail/listing_memo.hpp"
#include "engine/detail/auto_directory.hpp"
#include "engine/detail/probe.hpp"
#include "engine/detail/save_files.hpp"
#include "shardload/formats.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest.hpp"
#include "shardload/reader_registry.hpp"
#include "shardload/shard_source.hpp"
#include "shardload/store_options.hpp"

namespace shardload {

std::vector<std::int64_t> Layout::shape() const {
  std::vector<std::int64_t> s{total_rows()};
  s.insert(s.end(), trailing_shape.begin(), trailing_shape.end());
  return s;
}

std::vector<std::int64_t> Layout::rows() const {
  std::vector<std::int64_t> r;
  r.reserve(shards.size());
  for (const auto& s : shards) r.push_back(s.rows);
  return r;
}

Result<Layout> assemble_layout(Format format, FormatOptions options, DType dtype,
                               std::vector<std::int64_t> trailing, std::vector<Shard> shards) {
  Layout l;
  l.format = format;
  l.options = std::move(options);
  l.options.format = format;
  l.dtype = dtype;
  l.trailing_shape = std::move(trailing);
  std::uint64_t row_bytes = dtype.size;
  for (const auto d : l.trailing_shape) {
    if (d < 0 || !detail::checked_mul(row_bytes, static_cast<std::uint64_t>(d), &row_bytes)) {
      return Status(ErrorCode::kLayout, "trailing shape " + shape_string(l.trailing_shape) +
                                            ": the row size overflows 64 bits");
    }
  }
  l.row_bytes = row_bytes;
  // The credentials its paths name, kept while it is: paths of one source name one handle.
  CredentialPins pins;
  std::string_view pinned;
  const auto pin = [&](const std::string& path) {
    const std::size_t q = path.find("credentials=");
    if (q == std::string::npos || std::string_view(path).substr(q) == pinned) return;
    pin_credentials(path, &pins);
    pinned = std::string_view(path).substr(q);
  };
  for (const auto& s : shards) {
    pin(s.path);
    for (const auto& f : s.linked) pin(f.path);
  }
  if (!pins.empty()) l.credentials = std::make_shared<const CredentialPins>(std::move(pins));
  l.offsets.reserve(shards.size() + 1);
  l.offsets.push_back(0);
  std::int64_t total = 0;
  for (const auto& s : shards) {
    if (s.first_row < 0 || (!s.is_view() && s.first_row != 0) ||
        (s.is_view() && (s.rows < 0 || s.first_row > s.file_rows - s.rows))) {
      return Status(ErrorCode::kLayout, s.path + ": the view of rows [" +
                                            std::to_string(s.first_row) + ", +" +
                                            std::to_string(s.rows) + ") does not fit the file's " +
                                            std::to_string(s.stored_rows()) + " rows");
    }
    std::uint64_t bytes = 0;
    if (s.rows < 0 || !detail::checked_add(total, s.rows, &total) ||
        !detail::checked_mul(static_cast<std::uint64_t>(total), row_bytes, &bytes) ||
        bytes > static_cast<std::uint64_t>(INT64_MAX)) {
      return Status(ErrorCode::kLayout,
                    s.path + ": rows: the dataset size overflows 64 bits at this shard");
    }
    l.offsets.push_back(total);
  }
  l.shards = std::move(shards);
  return l;
}

Result<Layout> slice_rows(const Layout& layout, std::int64_t lo, std::int64_t hi) {
  const std::int64_t total = layout.total_rows();
  if (lo < 0 || hi < lo || hi > total) {
    return Status(ErrorCode::kInvalidArgument,
                  "rows [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "): expected 0 <= lo <= hi <= " + std::to_string(total) +
                      " (the dataset's rows)");
  }
  std::vector<Shard> shards;
  const std::size_t n = layout.shards.size();
  std::size_t begin = 0;
  if (lo < hi && n > 0) {
    // Start at the shard holding row lo (upper_bound skips the zero-row shards that share
    // its first row), so that a slice costs the shards it covers, not the layout's.
    const auto it = std::upper_bound(layout.offsets.begin(), layout.offsets.end() - 1, lo);
    begin = static_cast<std::size_t>(it - layout.offsets.begin()) - 1;
  }
  for (std::size_t i = begin; i < n; ++i) {
    const std::int64_t first = layout.offsets[i];
    if (lo < hi && first >= hi) break;
    const std::int64_t end = layout.offsets[i + 1];
    const std::int64_t a = std::max(lo, first);
    const std::int64_t b = std::min(hi, end);
    // Shards outside the range are dropped so that nothing opens them; an
    // empty range keeps the one shard it falls in, so that a layout always
    // names a file.
    const bool keep = a < b || (lo == hi && shards.empty() && (lo < end || i + 1 == n));
    if (!keep) continue;
    Shard s = layout.shards[i];
    const std::int64_t stored = s.stored_rows();
    s.first_row += a - first;
    s.rows = std::max<std::int64_t>(0, b - a);
    s.file_rows = stored;
    // The whole file is no view: one layout, one encoding.
    if (s.first_row == 0 && s.rows == stored) s.file_rows = -1;
    shards.push_back(std::move(s));
  }
  auto sliced = assemble_layout(layout.format, layout.options, layout.dtype, layout.trailing_shape,
                                std::move(shards));
  if (sliced) sliced->discovered_ns = layout.discovered_ns;
  return sliced;
}

Result<Format> resolve_format(const std::string& path, const FormatOptions& options) {
  return resolve_format(path, options, *ShardSource::files());
}

Result<Format> resolve_format(const std::string& path, const FormatOptions& options,
                              ShardSource& source) {
  if (options.format != Format::kAuto) return options.format;
  const Format by_ext = format_from_extension(path);
  if (by_ext != Format::kAuto) return by_ext;
  const Format by_content = sniff_format(path, source);
  if (by_content != Format::kAuto) return by_content;
  // A FIFO, socket or device has no first bytes to tell by, and no format= reads it.
  if (struct ::stat st{}; source.traits(path).kernel_files && ::stat(path.c_str(), &st) == 0 &&
                          !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return Status(ErrorCode::kLayout, path + ": not a regular file");
  }
  return Status(ErrorCode::kLayout,
                path + ": cannot tell the format from the name or the first bytes; name it with " +
                    option_mention("format") + " (" + format_names_text() + ")");
}

// "npy, raw, parquet and arrow": the built-in formats read from object storage.
static std::string remote_format_names_text() {
  std::vector<const std::string*> names;
  for (const auto& d : formats()) {
    if (!d.registered && d.capabilities.remote_reads) names.push_back(&d.name);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += *names[i];
  }
  return out;
}

// The last segment of `path`, trailing '/'s left out.
static std::string_view last_segment(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (const std::size_t slash = path.rfind('/'); slash != std::string_view::npos) {
    path.remove_prefix(slash + 1);
  }
  return path;
}

// The name of the file an http(s) server resolves `url` to: the path (its query and fragment
// left out) percent-decoded first and cut into segments after, as nginx, Python's http.server
// and object stores decode "%2F" to a '/' that separates segments ("x%2Fshardload.json" is
// the file shardload.json in x); then its dot segments resolved and empty ones merged, as
// such servers resolve them. A server that refuses an encoded '/' (Apache's default) serves
// no file by that name at all, so taking the name as decoded refuses nothing it would serve.
// Each segment's path parameters (";jsessionid=X", ";v=1") are cut before, as servlet
// containers (Tomcat, Jetty) cut them before they map the path to a file ("shardload.json;v=1"
// is shardload.json there, "x/.;y/shardload.json" too), and a '\\' separates segments as on
// Windows servers (IIS).
static std::string served_file_name(std::string_view url) {
  std::size_t start = url.find("://");
  start = start == std::string_view::npos ? 0 : url.find('/', start + 3);
  if (start == std::string_view::npos) return {};
  std::string_view path = url.substr(start);
  path = path.substr(0, path.find_first_of("?#"));
  const std::string decoded = percent_decoded(path);
  std::vector<std::string_view> segments;
  for (std::size_t pos = 0; pos <= decoded.size();) {
    const std::size_t end = std::min(decoded.find_first_of("/\\", pos), decoded.size());
    std::string_view segment(decoded.data() + pos, end - pos);
    segment = segment.substr(0, segment.find(';'));
    if (segment == "..") {
      if (!segments.empty()) segments.pop_back();
    } else if (!segment.empty() && segment != ".") {
      segments.push_back(segment);
    }
    pos = end + 1;
  }
  return segments.empty() ? std::string() : std::string(segments.back());
}

// A list or glob names the shards of one dataset in one format. Refused, naming the file:
// the dataset's own metadata (a glob D/* over a raw directory matches its sidecar, whose size
// may be whole rows), and, where the format was told from the first file, a later file whose
// name says another format (a .npy among .bin shards would be read as raw rows, its header
// among them).
static Status check_one_dataset(const std::vector<std::string>& paths, Format format,
                                bool told_from_first, ShardSource& source) {
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const std::string bare = split_options(paths[i]).first;
    // The name as the server reads it: an http(s) server (no listing) decodes the URL's path
    // (shardload%2Ejson is shardload.json there); a file's name and an s3 key are as written.
    const PathTraits traits = path_traits(paths[i]);
    const std::string decoded = !traits.kernel_files && !traits.listable
                                    ? served_file_name(bare)
                                    : std::string(last_segment(bare));
    // A Windows server (IIS) also serves a name in any case and with trailing dots or
    // blanks ("SHARDLOAD.JSON.") as the file.
    std::string windows = decoded;
    if (!traits.kernel_files && !traits.listable) {
      while (!windows.empty() && (windows.back() == '.' || windows.back() == ' ')) {
        windows.pop_back();
      }
      for (char& c : windows) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    const std::string& meta = detail::is_dataset_metadata_name(decoded) ? decoded : windows;
    if (detail::is_dataset_metadata_name(meta)) {
      return file_error(ErrorCode::kLayout, paths[i],
                        "the dataset's metadata file (" + meta +
                            "), not a shard: leave it out of the list or glob (name the "
                            "shards, e.g. DIR/*.bin)");
    }
    if (!told_from_first || i == 0) continue;
    const Format by_name = format_from_extension(paths[i]);
    // Raw has no magic bytes to refuse another format's file, so a later raw file whose name
    // says no format (none, ".NPY", "x.npy.1") is sniffed too: one small read each.
    const Format by_bytes = by_name == Format::kAuto && format == Format::kRaw
                                ? sniff_format(paths[i], source)
                                : Format::kAuto;
    const Format other = by_name != Format::kAuto ? by_name : by_bytes;
    if (other != Format::kAuto && other != format) {
      return file_error(ErrorCode::kLayout, paths[i],
                        std::string("a ") + format_name(other) + " file by its " +
                            (by_name != Format::kAuto ? "name" : "first bytes") + ", among " +
                            format_name(format) + " shards (the format of " + paths[0] +
                            "): a list or glob holds one format (name " + option_mention("format") +
                            " to read every file as one)");
    }
  }
  return Status::ok();
}

static std::int64_t realtime_ns();
static Result<Layout> try_discover_paths_at(const std::vector<std::string>& paths,
                                            const DiscoverOptions& given);

static void began_at(Layout& layout, std::int64_t began);

// A layout's local files by the paths the kernel resolves now (detail::anchored_path), its
// linked files' too: a relative path is resolved against the working directory, and a read
// after a chdir, or in a worker started elsewhere, opened another directory's file of that
// name, which the snapshot refused as "changed since discovery" though nothing changed.
// An injected backend's names are its own.
static void anchor_paths(Layout& layout, const DiscoverOptions& options) {
  if (options.io != nullptr) return;
  for (auto& s : layout.shards) {
    s.path = detail::anchored_path(s.path);
    for (auto& f : s.linked) f.path = detail::anchored_path(f.path);
  }
}

Result<Layout> try_discover_paths(const std::vector<std::string>& paths,
                                  const DiscoverOptions& given) {
  const std::int64_t began = realtime_ns();
  auto l = try_discover_paths_at(paths, given);
  if (l) {
    began_at(*l, began);
    anchor_paths(*l, given);
  }
  return l;
}

static Result<Layout> try_discover_paths_at(const std::vector<std::string>& paths,
                                            const DiscoverOptions& given) {
  if (paths.empty()) return Status(ErrorCode::kLayout, "no shards to load");
  DiscoverOptions options = given;
  if (options.format.format == Format::kAuto && format_from_extension(paths[0]) == Format::kAuto) {
    if (const FormatDescriptor* d = registered_format_for_path(paths[0])) {
      select_format(*d, &options.format);
    }
  }
  ReaderContext ctx;
  ctx.source = options.io != nullptr ? ShardSource::over(*options.io) : ShardSource::files();
  SHARDLOAD_ASSIGN_OR_RETURN(const Format format,
                             resolve_format(paths[0], options.format, *ctx.source));
  SHARDLOAD_RETURN_IF_ERROR(
      check_one_dataset(paths, format, given.format.format == Format::kAuto, *ctx.source));
  // Object storage serves positional reads only: the formats whose readers read through the
  // IoBackend say so (remote_reads); the others open files by name or descriptor themselves.
  const FormatDescriptor* reads = find_format(format, options.format.reader);
  if (reads == nullptr || !reads->capabilities.remote_reads) {
    for (const auto& p : paths) {
      if (const PathTraits traits = path_traits(p); !traits.kernel_files) {
        return file_error(ErrorCode::kLayout, p,
                          std::string("the ") + format_name(format) +
                              " format is not yet supported for " +
                              std::string(traits.scheme_label) + " sources (" +
                              remote_format_names_text() + " are)");
      }
    }
  }
  const FormatDescriptor* table = find_format(format);
  const bool custom = table != nullptr && table->registered;
  if (custom && options.format.reader.empty()) {
    return Status(ErrorCode::kInvalidArgument, "format custom: name the registered reader");
  }
  detail::ProbeResults probes;
  std::vector<FileInfo> custom_info;
  if (custom) {
    // The built-in readers refuse FIFOs and devices themselves; a user's probe is not trusted
    // to (opening a FIFO would block it), so each file is opened and its snapshot taken here
    // first, one file at a time, and probing stops at the first failure as in path order.
    auto reader = make_reader(format, options.format, ctx);
    if (!reader) return Status(ErrorCode::kLayout, reader.status().message());
    probes.resize(paths.size());
    custom_info.resize(paths.size());
    for (std::size_t i = 0; i < paths.size(); ++i) {
      auto file = ctx.source->open(paths[i]);
      auto stat = file ? file->stat() : Result<FileInfo>(file.status());
      if (!stat) {
        probes[i].emplace(Status(ErrorCode::kLayout, stat.status().message()).with_path(paths[i]));
        break;
      }
      custom_info[i] = *stat;
      probes[i].emplace((*reader)->probe(paths[i]));
      if (!*probes[i]) break;
    }
  } else {
    const unsigned threads =
        detail::probe_threads(find_format(format), ctx, paths.size(), options.probe_threads,
                              path_traits(paths.front()).round_trips);
    SHARDLOAD_ASSIGN_OR_RETURN(probes,
                               detail::probe_shards(paths, format, options.format, ctx, threads));
  }
  std::vector<Shard> shards;
  shards.reserve(paths.size());
  DType dtype;
  std::vector<std::int64_t> trailing;
  std::string shared;  // the first shard's ShardProbe::shared
  // In path order, so that the first bad shard is reported whatever the threads did.
  for (std::size_t i = 0; i < paths.size(); ++i) {
    auto& probe = *probes[i];
    if (!probe) {
      // At discovery every failure is a layout failure, whatever its cause; the file stays
      // attached as data (not the errno: a shard gone missing is no missing source).
      return Status(ErrorCode::kLayout, probe.status().message()).with_path(probe.status().path());
    }
    if (custom) {
      probe->shard.path = paths[i];
      probe->shard.snapshot = custom_info[i];
      probe->shard.first_row = 0;
      probe->shard.file_rows = -1;
      if (probe->shard.rows < 0) {
        return Status(ErrorCode::kLayout,
                      paths[i] + ": rows: the reader '" + options.format.reader + "' reported " +
                          std::to_string(probe->shard.rows) + ", expected a count >= 0");
      }
      if (probe->dtype.name() == "invalid") {
        return Status(ErrorCode::kLayout, paths[i] + ": dtype: the reader '" +
                                              options.format.reader + "' reported no valid type");
      }
      for (const auto d : probe->trailing_shape) {
        if (d < 0) {
          return Status(ErrorCode::kLayout, paths[i] + ": trailing shape " +
                                                shape_string(probe->trailing_shape) +
                                                ": expected dimensions >= 0");
        }
      }
    }
    const std::string& path = probe->shard.path;
    if (i == 0) {
      // numpy's own limit (NPY_MAXDIMS); a header or metadata file may list
      // any number of dimensions, and nothing past discovery should see more.
      constexpr std::size_t kMaxDims = 64;
      if (probe->trailing_shape.size() + 1 > kMaxDims) {
        return Status(ErrorCode::kLayout,
                      path + ": shape: " + std::to_string(probe->trailing_shape.size() + 1) +
                          " dimensions, more than the " + std::to_string(kMaxDims) +
                          " numpy allows");
      }
      dtype = probe->dtype;
      trailing = probe->trailing_shape;
      shared = probe->shared;
    } else if (probe->shared != shared) {
      return Status(ErrorCode::kLayout, path + ": " + probe->shared_what + " " + probe->shared +
                                            " differ from " + shared + " of " + paths[0]);
    } else if (probe->dtype != dtype) {
      return Status(ErrorCode::kLayout, path + ": dtype " + probe->dtype.name() + " differs from " +
                                            dtype.name() + " of " + paths[0]);
    } else if (probe->trailing_shape != trailing) {
      return Status(ErrorCode::kLayout, path + ": trailing shape " +
                                            shape_string(probe->trailing_shape) + " differs from " +
                                            shape_string(trailing) + " of " + paths[0]);
    }
    shards.push_back(std::move(probe->shard));
  }
  return assemble_layout(format, options.format, dtype, std::move(trailing), std::move(shards));
}

namespace {

// Extensions of a known format, named in what a directory holds.
bool known_extension(std::string_view extension) {
  return format_from_extension(extension) != Format::kAuto;
}

// The format a numbered group holds: its extension's (a built-in format's, else a registered
// reader's), else its first entry's content; nullptr when none tells.
const FormatDescriptor* group_format(const DirectoryScan& scan, const NumberedGroup& g,
                                     ShardSource& source) {
  if (const FormatDescriptor* d = find_format(format_from_extension(g.extension))) return d;
  if (const FormatDescriptor* d = registered_format_for_path(g.extension)) return d;
  // Joined as a key: a URL's options (an s3:// directory's query) stay after the name.
  return find_format(sniff_format(join_key(scan.directory, g.first), source));
}

std::string group_text(const NumberedGroup& g, const FormatDescriptor& d) {
  return path_for_message(g.pattern) + " (" + std::to_string(g.count) + " " +
         (g.directories ? "store" : "file") + (g.count == 1 ? "" : "s") + ", " + d.name + ")";
}

}  // namespace

namespace detail {

// A directory named without a pattern: what it holds decides. A Zarr store is itself;
// otherwise the one numbered group of a known format (by extension or content); with
// groups of one format the default naming wins; anything else is an error saying what
// the directory holds.
Result<Source> auto_directory(const Source& s, DiscoverOptions* options) {
  const Format asked = options->format.format;
  // Only a format that could be a store is looked for: a file format named (npy, hdf5)
  // never takes the directory as a store, so its stat and metadata look-ups would be waste.
  const FormatDescriptor* asked_d = find_format(asked);
  if (asked == Format::kAuto || (asked_d != nullptr && asked_d->is_store)) {
    // Asked ahead where try_discover could (listing_memo.hpp), else now.
    const std::optional<Format> ahead = ListingMemo::store(s.dir_path);
    if (const Format store = ahead ? *ahead : store_format(s.dir_path);
        store != Format::kAuto && (asked == Format::kAuto || asked == store)) {
      return Source::list({s.dir_path});
    }
  }
  if (asked != Format::kAuto) {
    SHARDLOAD_ASSIGN_OR_RETURN(std::string pattern, default_pattern(options->format));
    return Source::directory(s.dir_path, pattern);
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const DirectoryScan scan, scan_directory(s.dir_path));
  std::vector<std::pair<const NumberedGroup*, const FormatDescriptor*>> found;
  const std::shared_ptr<ShardSource> source =
      options->io != nullptr ? ShardSource::over(*options->io) : ShardSource::files();
  for (const auto& g : scan.groups) {
    if (const FormatDescriptor* d = group_format(scan, g, *source)) found.emplace_back(&g, d);
  }
  if (found.empty()) {
    return Status(ErrorCode::kLayout, path_for_message(s.dir_path) +
                                          ": no numbered shards of a known format; the directory " +
                                          scan.describe(known_extension) + scan.suggestion());
  }
  const auto ambiguous = [&](const auto& groups) {
    std::string list;
    for (const auto& [g, d] : groups) list += (list.empty() ? "" : " and ") + group_text(*g, *d);
    return Status(ErrorCode::kLayout, path_for_message(s.dir_path) +
                                          ": holds numbered shards of more than one "
                                          "kind: " +
                                          list + "; name one with " + option_mention("pattern") +
                                          " (and " + option_mention("format") +
                                          " where the name does not tell)");
  };
  if (found.size() > 1) {
    // Groups of one format under the default naming and others (notes_1.npy beside
    // shard_0000.npy ...): the default naming is what shardload writes and reads.
    const bool one_format = std::all_of(found.begin(), found.end(),
                                        [&](const auto& x) { return x.second == found[0].second; });
    const auto def = std::find_if(found.begin(), found.end(), [](const auto& x) {
      return x.first->pattern == default_pattern(*x.second);
    });
    if (!one_format || def == found.end()) return ambiguous(found);
    // Unless its own prefix is also spelled otherwise (shard_3.npy or shard_00004.npy beside
    // shard_0000.npy ...): those are shards of the same run under another padding, which the
    // default would leave out unsaid.
    std::vector<std::pair<const NumberedGroup*, const FormatDescriptor*>> same;
    for (const auto& x : found) {
      if (x.first->prefix == def->first->prefix && x.first->extension == def->first->extension) {
        same.push_back(x);
      }
    }
    if (same.size() > 1) return ambiguous(same);
    found = {*def};
  }
  select_format(*found[0].second, &options->format);
  return Source::directory(s.dir_path, found[0].first->pattern);
}

}  // namespace detail

const char* manifest_state_name(ManifestState state) {
  switch (state) {
    case ManifestState::kNone:
      return "none";
    case ManifestState::kAbsent:
      return "absent";
    case ManifestState::kUsed:
      return "used";
    case ManifestState::kTrusted:
      return "trusted";
    case ManifestState::kStale:
      return "stale";
    case ManifestState::kOtherOptions:
      return "other_options";
    case ManifestState::kOtherPattern:
      return "other_pattern";
  }
  return "none";
}

std::optional<ManifestState> parse_manifest_state(std::string_view name) {
  for (const auto s :
       {ManifestState::kNone, ManifestState::kAbsent, ManifestState::kUsed, ManifestState::kTrusted,
        ManifestState::kStale, ManifestState::kOtherOptions, ManifestState::kOtherPattern}) {
    if (name == manifest_state_name(s)) return s;
  }
  return std::nullopt;
}

static Result<Layout> discover_probing(const Source& source, const DiscoverOptions& options);

static std::int64_t clock_ns(clockid_t clock) {
  timespec t{};
  ::clock_gettime(clock, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// Now on the clock file systems stamp change times from (CLOCK_REALTIME), for
// ReadSpec::discovered_ns: taken before anything is looked at, so that a file written before
// discovery began has a change time no later.
static std::int64_t realtime_ns() { return clock_ns(CLOCK_REALTIME); }

// Returns once the kernel's coarse clock (CLOCK_REALTIME_COARSE) has passed `stamp`, so that
// every file change from then on is stamped later than `stamp`: a write stamps the tick's start
// (up to a tick behind the precise clock), or a finer time where the file system has multigrain
// timestamps and the file was asked its times since its last change. Waits only where `stamp`
// lies in the current tick or the next (at most a tick or two): a time further ahead was set by
// hand (`touch -d`) or by a clock stepped back, and no wait passes it. A coarse clock that does
// not move is waited for 50 ms at most.
static void wait_out_tick(std::int64_t stamp) {
  timespec res{};
  ::clock_getres(CLOCK_REALTIME_COARSE, &res);
  const std::int64_t tick = std::max<std::int64_t>(
      static_cast<std::int64_t>(res.tv_sec) * 1'000'000'000 + res.tv_nsec, 1'000'000);
  const std::int64_t now = clock_ns(CLOCK_REALTIME_COARSE);
  if (stamp < now || stamp - now >= 2 * tick) return;
  const std::int64_t give_up = clock_ns(CLOCK_MONOTONIC) + 50'000'000;
  while (clock_ns(CLOCK_REALTIME_COARSE) <= stamp && clock_ns(CLOCK_MONOTONIC) < give_up) {
    timespec nap{0, 200'000};
    ::nanosleep(&nap, nullptr);
  }
}

// The change time a later write of a local file must differ from: its ctime (every write sets
// it, and no one can set it back), its mtime where the snapshot has no ctime.
static std::int64_t change_stamp(const FileInfo& snapshot) {
  return snapshot.ctime_ns != 0 ? snapshot.ctime_ns : snapshot.mtime_ns;
}

// Sets the layout's discovered_ns, and returns only once a change to what discovery saw has a
// later stamp than what it saw. A local file's snapshot (size, mtime, ctime, inode) tells a
// rewrite at the same size only by its times: a file written in the tick discovery snapshot it
// in and rewritten before that tick is over kept them all, and its new rows were read as the
// discovered ones. Zarr's chunks are judged by their change times against `began` itself (a
// chunk changed after discovery began is refused), so for Zarr `began` must be passed too.
static void began_at(Layout& layout, std::int64_t began) {
  layout.discovered_ns = began;
  // A store's keys and objects are stamped by no kernel clock: not waited for.
  std::int64_t stamp = layout.format == Format::kZarr ? began : INT64_MIN;
  const bool local = !layout.shards.empty() && path_traits(layout.shards[0].path).kernel_files;
  for (const Shard& s : layout.shards) {
    if (local) stamp = std::max(stamp, change_stamp(s.snapshot));
    for (const LinkedFile& f : s.linked) {
      if (path_traits(f.path).kernel_files) stamp = std::max(stamp, change_stamp(f.snapshot));
    }
  }
  if (stamp != INT64_MIN) wait_out_tick(stamp);
}

static Result<Layout> try_discover_at(const Source& source, const DiscoverOptions& options);

namespace {

// What a local directory's path reaches at one moment: each directory and symbolic link met
// while resolving it, from its first part to the directory itself, every link followed as the
// kernel follows it (a link within a link's target, "..", "." included). Publishing a new
// version under readers re-points a link (`ln -sfn v2 current`: a new link renamed over the
// old one) or renames or exchanges a directory onto the path, and discovery reads the path
// many times (its listing, a sidecar, a manifest, each file's probe), each resolved anew: a
// publish between two of them paired one version's listing or sidecar with the other's files,
// a layout that each file's snapshot then vouched for. A swap and its undoing (v1, v2, v1)
// leave every directory the path reaches the same, so identities alone miss it wherever the
// swapped link or directory lies on the path (`current/.`, `current/sub`, a glob under it):
// a link is a new one after a swap (its inode or change time differs), and a directory renamed
// or exchanged, and back, has a later change time. A directory's change time also moves when
// a file is made or removed in it, which is no new version: then its modification time moves
// with it, to the same instant, while a rename sets the change time alone. So a directory
// counts as moved only where its change time moved past its modification time.
struct PathPart {
  bool link = false;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::int64_t ctime_ns = 0;
  std::int64_t mtime_ns = 0;
};

bool same_part(const PathPart& before, const PathPart& after) {
  if (before.link != after.link || before.device != after.device || before.inode != after.inode) {
    return false;
  }
  if (before.ctime_ns == after.ctime_ns) return true;
  // A link is never written in place: any change to it is a new version.
  return !after.link && after.ctime_ns == after.mtime_ns;
}

struct DirectoryVersion {
  int error = 0;  // the errno of the part that could not be resolved; 0: the directory was found
  std::vector<PathPart> parts;

  // Not symmetric: a directory whose change time moved since `before` is the same one only
  // where this later look finds its modification time moved with it.
  bool same_as_before(const DirectoryVersion& before) const {
    return error == before.error && parts.size() == before.parts.size() &&
           std::equal(before.parts.begin(), before.parts.end(), parts.begin(), same_part);
  }
  // The latest change time compared: a change made in its clock tick may be stamped the same.
  std::int64_t latest_ctime_ns() const {
    std::int64_t t = INT64_MIN;
    for (const auto& p : parts) t = std::max(t, p.ctime_ns);
    return t;
  }
};

std::int64_t stat_ns(const struct ::timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// One lstat per part of the path and per part of each link's target met, one readlink per link.
// The parts are walked by name, as the kernel would: the path is not opened, so a directory
// without search permission below an ancestor fails here as its listing would.
DirectoryVersion directory_version(const std::string& dir) {
  constexpr int kMaxLinks = 40;  // the kernel's own limit (ELOOP)
  DirectoryVersion v;
  std::deque<std::string> left;
  const auto push_front_parts = [&left](std::string_view path) {
    std::vector<std::string> parts;
    for (std::size_t pos = 0; pos <= path.size();) {
      const std::size_t end = std::min(path.find('/', pos), path.size());
      if (end > pos) parts.emplace_back(path.substr(pos, end - pos));
      pos = end + 1;
    }
    left.insert(left.begin(), parts.begin(), parts.end());
  };
  // `at`: the part resolved so far, links in it already replaced by what they reach ("" for
  // the working directory, "/" for the root), so ".." below it is its parent by name.
  std::string at = !dir.empty() && dir[0] == '/' ? "/" : "";
  push_front_parts(dir);
  int links = 0;
  while (!left.empty()) {
    const std::string name = std::move(left.front());
    left.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      const std::size_t slash = at.rfind('/');
      const std::string_view last = slash == std::string::npos
                                        ? std::string_view(at)
                                        : std::string_view(at).substr(slash + 1);
      if (at == "/") continue;
      if (at.empty() || last == "..") {
        at += at.empty() ? ".." : "/..";
      } else {
        at.erase(slash == std::string::npos ? 0 : (slash == 0 ? 1 : slash));
      }
      continue;
    }
    const std::string next = at.empty() ? name : (at == "/" ? "/" + name : at + "/" + name);
    struct ::stat st {};
    if (::lstat(next.c_str(), &st) != 0) {
      v.error = errno;
      return v;
    }
    PathPart part;
    part.link = S_ISLNK(st.st_mode);
    part.device = static_cast<std::uint64_t>(st.st_dev);
    part.inode = static_cast<std::uint64_t>(st.st_ino);
    part.ctime_ns = stat_ns(st.st_ctim);
    part.mtime_ns = stat_ns(st.st_mtim);
    v.parts.push_back(part);
    if (!part.link) {
      at = next;
      continue;
    }
    if (++links > kMaxLinks) {
      v.error = ELOOP;
      return v;
    }
    std::string target(static_cast<std::size_t>(st.st_size > 0 ? st.st_size : 4095) + 1, '\0');
    const ssize_t n = ::readlink(next.c_str(), target.data(), target.size());
    if (n < 0) {
      v.error = errno;
      return v;
    }
    target.resize(static_cast<std::size_t>(n));
    if (!target.empty() && target[0] == '/') at = "/";
    push_front_parts(target);
  }
  return v;
}

// The one local directory a discovery of `source` lists and reads its files from: a
// directory's (a pattern's), a glob's literal leading directory, a list's where every file is
// in one; empty where there is none (object storage, a list over several directories).
std::string held_directory(const Source& source) {
  std::string dir;
  switch (source.kind) {
    case Source::Kind::kDirectory:
      dir = source.dir_path;
      break;
    case Source::Kind::kGlob: {
      const std::string& g = source.glob_expr;
      const std::size_t wild = g.find_first_of("*?[\\");
      const std::size_t slash = g.rfind('/', wild == std::string::npos ? g.size() : wild);
      if (slash != std::string::npos) dir = g.substr(0, slash == 0 ? 1 : slash);
      break;
    }
    case Source::Kind::kList:
      for (const auto& p : source.paths) {
        const std::string bare = split_options(p).first;
        const std::size_t slash = bare.rfind('/');
        if (slash == std::string::npos) return {};
        const std::string parent = bare.substr(0, slash == 0 ? 1 : slash);
        if (!dir.empty() && parent != dir) return {};
        dir = parent;
      }
      break;
  }
  if (dir.empty() || !path_traits(dir).kernel_files || dir.find("://") != std::string::npos) {
    return {};
  }
  return dir;
}

// Discoveries of a directory replaced while each ran, before the last is refused: a publish
// lands between two reads only now and then, so a few tries pass one; a directory re-pointed
// without pause is refused rather than waited on without end.
constexpr int kMaxReplacedDiscoveries = 4;

}  // namespace

// One discovery describes one version of its directory (of reading it through one held
// descriptor or comparing what its path reaches around the whole discovery, the second: one
// lstat per part of the path on either side, where a descriptor would have to reach every
// reader's opens (HDF5's and user readers' by name), the paths they record and the messages
// they write, all kept as the user spelled them).
// A discovery during which the directory was replaced is done again; at load, each file's
// snapshot refuses a version put in place after it.
Result<Layout> try_discover(const Source& source, const DiscoverOptions& options) {
  const std::string dir = held_directory(source);
  for (int replaced = 0;; ++replaced) {
    const std::int64_t began = realtime_ns();
    const DirectoryVersion before = dir.empty() ? DirectoryVersion{} : directory_version(dir);
    // A link made in this tick of the coarse clock, and one made over it before the tick is
    // over, may have the same change time and (the old one's freed) the same inode; a
    // directory renamed twice in the tick its change time was read in, the same change time.
    if (!before.parts.empty()) wait_out_tick(before.latest_ctime_ns());
    auto l = try_discover_at(source, options);
    if (dir.empty() || directory_version(dir).same_as_before(before)) {
      if (l) {
        began_at(*l, began);
        anchor_paths(*l, options);
      }
      return l;
    }
    if (replaced + 1 == kMaxReplacedDiscoveries) {
      return Status(ErrorCode::kLayout,
                    path_for_message(dir) + ": changed during discovery (replaced " +
                        std::to_string(replaced + 1) +
                        " times): another version was put in its place (a link re-pointed, a "
                        "directory renamed onto it) while its files were listed and probed; "
                        "discover it again once the new version is in place")
          .with_path(dir);
    }
  }
}

static Result<Layout> try_discover_at(const Source& source, const DiscoverOptions& options) {
  // Its names are checked before its manifest is looked for in the directory they name.
  SHARDLOAD_RETURN_IF_ERROR(check_source(source));
  // The manifest's check, the format's scan and the pattern's resolve list one directory.
  detail::ListingMemo listings;
  // A directory of a store where each answer is a round trip and that lists (s3://, a
  // registered store's): whether it is a store, and its listing, are asked while the manifest
  // is looked up (one after the other otherwise). Not when a found manifest is trusted: then
  // neither is needed; nor for http(s)://, which has no listing.
  if (const PathTraits traits = path_traits(source.dir_path);
      source.kind == Source::Kind::kDirectory && traits.round_trips && traits.listable &&
      options.use_manifest && !options.trust_manifest) {
    const FormatDescriptor* asked = find_format(options.format.format);
    const bool may_be_store = source.pattern.empty() && (options.format.format == Format::kAuto ||
                                                         (asked && asked->is_store));
    listings.look_ahead(
        source.dir_path,
        may_be_store ? std::function<Format(const std::string&)>(store_format) : nullptr);
  }
  std::string manifest_note;
  ManifestState manifest_state = ManifestState::kNone;
  if (source.kind == Source::Kind::kDirectory && options.use_manifest) {
    ManifestDiscovery m = discover_from_manifest(source, options);
    if (m.layout) return std::move(*m.layout);
    if (!m.error.is_ok()) return m.error;
    // A note names shards (a stale one's URL): it is shown, so its secrets are not kept.
    manifest_note = redact_secrets(std::move(m.note));
    manifest_state = m.state;
    if (!m.probe_paths.empty()) {
      auto probed = try_discover_paths(m.probe_paths, options);
      if (probed) {
        probed->manifest_status = std::move(manifest_note);
        probed->manifest_state = manifest_state;
      }
      return probed;
    }
  }
  auto probed = discover_probing(source, options);
  if (probed) {
    probed->manifest_status = std::move(manifest_note);
    probed->manifest_state = manifest_state;
  }
  return probed;
}

static Result<Layout> discover_probing(const Source& source, const DiscoverOptions& options) {
  Source s = source;
  DiscoverOptions opts = options;
  if (s.kind == Source::Kind::kDirectory && s.pattern.empty()) {
    SHARDLOAD_ASSIGN_OR_RETURN(s, detail::auto_directory(source, &opts));
  }
  bool nothing_matches = false;
  auto paths = resolve(s, &nothing_matches);
  if (!paths && s.kind == Source::Kind::kDirectory && nothing_matches) {
    // Say what is there instead: the pattern was named, or the format's default.
    if (auto scan = scan_directory(s.dir_path)) {
      return Status(
          ErrorCode::kLayout,
          paths.status().message() + "; the directory " + scan->describe(known_extension) +
              (scan->groups.empty() || scan->groups[0].pattern == s.pattern ? std::string()
                                                                            : scan->suggestion()));
    }
  }
  if (!paths) return paths.status();
  return try_discover_paths(*paths, opts);
}

std::string describe(const Layout& l, std::size_t edge) {
  std::ostringstream o;
  const std::size_t n = l.shards.size();
  o << "format:         " << format_name(l.format) << "\n";
  o << "shards:         " << n << "\n";
  o << "dtype:          " << l.dtype.name() << "\n";
  o << "trailing shape: " << shape_string(l.trailing_shape) << "\n";
  o << "total rows:     " << l.total_rows() << "\n";
  o << "shape:          " << shape_string(l.shape()) << "\n";
  o << "bytes:          " << detail::size_string(l.total_bytes()) << "\n";
  o << "rows per shard:\n";
  for (std::size_t i = 0; i < n; ++i) {
    if (n > 2 * edge && i == edge) {
      o << "  ... (" << (n - 2 * edge) << " more)\n";
      i = n - edge - 1;
      continue;
    }
    o << "  [" << i << "] " << printable_redacted(l.shards[i].path) << ": " << l.shards[i].rows
      << "\n";
  }
  return o.str();
}

}  // namespace shardload
