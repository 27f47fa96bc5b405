// `shardload read`'s arguments and the _meta.json it verifies against, checked before Legate
// starts (the load itself: read_legate.cc).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <iostream>
#include <optional>
#include <vector>

#include "base/detail/checked.hpp"
#include "base/detail/json.hpp"
#include "base/detail/links.hpp"
#include "cli/commands.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/source.hpp"

namespace shardload::cli {

namespace {

// _meta.json is a few hundred bytes; the cap keeps a stray huge file from being read whole.
constexpr std::uint64_t kMaxMetaBytes = std::uint64_t{1} << 20;

// The text of the _meta.json of the source URL `url`: below its key (a prefix, as `write`
// makes it), else beside it (the key is a glob, a pattern or an object); nullopt where neither
// object is there. `beside_dir`, where given and the object lies beside the key, is the URL of
// the directory holding it (with the source's options): the key is then a part of it.
Result<std::optional<std::string>> remote_meta_text(const std::string& url, std::string* path,
                                                    std::string* beside_dir = nullptr) {
  auto [base, query] = split_options(url);
  std::vector<std::string> dirs;
  if (!base.empty() && base.back() != '/') {
    dirs.push_back(base + "/");
    base.resize(base.rfind('/') + 1);
  }
  dirs.push_back(base);
  for (std::size_t i = 0; i < dirs.size(); ++i) {
    *path = dirs[i] + "_meta.json" + query;
    auto text = detail::read_small_file(posix_io(), *path, kMaxMetaBytes, nullptr);
    if (text) {
      if (beside_dir != nullptr && i == 1) {
        *beside_dir = dirs[i].substr(0, dirs[i].size() - 1) + query;
      }
      return std::optional<std::string>(std::move(*text));
    }
    if (text.status().sys_errno() != ENOENT) return text.status();
  }
  return std::optional<std::string>();
}

// Where a part of a directory `write` wrote (a shard, a pattern or a glob of some) lies in
// the dataset: write's values are a function of the element's index in the whole array, so a
// part beginning at the dataset's row R holds the seed's values from R on, not from 0. Its
// shards are named by write's numbering; `rows` is _meta.json's. `first_row` where the part's
// shards are consecutive shards of the dataset, each holding the rows _meta.json records;
// `unknown` says why its place cannot be told; `error` where a shard's rows are not the ones
// recorded (the directory changed since it was written).
struct PartPlace {
  std::optional<std::int64_t> first_row;
  std::string unknown;
  std::string error;
};

PartPlace part_place(const Layout& layout, const std::vector<std::int64_t>& rows) {
  const NumberPattern written{"shard_", 4, ".npy"};  // write.cc's naming
  PartPlace place;
  std::int64_t previous = -1;
  std::int64_t first = 0;
  for (const Shard& s : layout.shards) {
    // A URL's options are no part of its name (a local name may hold a '?').
    const std::string bare =
        path_traits(s.path).kernel_files ? s.path : split_options(s.path).first;
    const std::string name = bare.substr(bare.rfind('/') + 1);
    const std::int64_t n = written.match(name);
    if (n < 0 || static_cast<std::size_t>(n) >= rows.size()) {
      place.unknown = printable_redacted(name) + " is none of the " + std::to_string(rows.size()) +
                      " shards _meta.json records";
      return place;
    }
    if (s.rows != rows[static_cast<std::size_t>(n)]) {
      place.error = "_meta.json says " + printable_redacted(name) + " holds " +
                    std::to_string(rows[static_cast<std::size_t>(n)]) + " rows, it holds " +
                    std::to_string(s.rows);
      return place;
    }
    if (previous < 0) {
      for (std::int64_t i = 0; i < n; ++i) first += rows[static_cast<std::size_t>(i)];
    } else if (n != previous + 1) {
      place.unknown = "its shards are not consecutive shards of the dataset (" +
                      written.format(previous) + " is followed by " + printable_redacted(name) +
                      ")";
      return place;
    }
    previous = n;
  }
  place.first_row = first;
  return place;
}

}  // namespace

Result<WriteMeta> read_write_meta(const std::string& dir) {
  WriteMeta m;
  std::string path = dir + "/_meta.json";
  std::string text;
  if (!path_traits(dir).kernel_files) {
    SHARDLOAD_ASSIGN_OR_RETURN(auto found, remote_meta_text(dir, &path));
    if (!found) return m;
    text = std::move(*found);
  } else {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) {
      if (detail::is_dangling_link(path)) {
        return Status(ErrorCode::kLayout, path + ": a symbolic link whose target does not exist");
      }
      return m;
    }
    SHARDLOAD_ASSIGN_OR_RETURN(text,
                               detail::read_small_file(posix_io(), path, kMaxMetaBytes, nullptr));
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const detail::Json j, detail::parse_json_object(path, text));
  // Its seed means shardload's value formula only when shardload wrote it.
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  std::sort(keys.begin(), keys.end());
  if (keys != std::vector<std::string>{"dtype", "num_shards", "rows", "seed", "shape"}) {
    m.foreign = true;
    return m;
  }
  if (auto it = j.find("dtype"); it != j.end()) {
    SHARDLOAD_ASSIGN_OR_RETURN(m.dtype, detail::json_string(path, "dtype", *it));
  }
  if (auto it = j.find("seed"); it != j.end()) {
    if (!it->is_number_integer() ||
        (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t{INT64_MAX})) {
      return detail::json_error(path, "seed", "an integer that fits int64", *it);
    }
    m.seed = it->get<long long>();
  }
  if (auto it = j.find("shape"); it != j.end()) {
    SHARDLOAD_ASSIGN_OR_RETURN(m.shape, detail::json_shape(path, "shape", *it));
  }
  if (auto it = j.find("rows"); it != j.end()) {
    SHARDLOAD_ASSIGN_OR_RETURN(m.rows, detail::json_shape(path, "rows", *it));
  }
  // A part's place in the dataset is summed from `rows`: a damaged or crafted list (one that
  // overflows, or no list at all) would place it anywhere, and its verdict would be wrong.
  if (!m.shape.empty()) {
    std::int64_t total = 0;
    for (const std::int64_t r : m.rows) {
      if (!detail::checked_add(total, r, &total)) {
        return Status(ErrorCode::kLayout, path + ": rows: they add up to more than int64 holds");
      }
    }
    if (total != m.shape[0]) {
      return Status(ErrorCode::kLayout, path + ": rows: they add up to " + std::to_string(total) +
                                            ", where shape[0] is " + std::to_string(m.shape[0]) +
                                            ": the file is damaged");
    }
  }
  return m;
}

std::optional<int> parse_read_args(const Args& args, ReadArgs* out) {
  const char* cmd = "read";
  Parsed p;
  if (auto rc = parse_command_line(*find_command(cmd), args, &p)) return *rc;
  if (p.positional.size() > 1) {
    return usage_error(cmd, "expected one SOURCE, found " + std::to_string(p.positional.size()) +
                                " arguments ('" + p.positional[1] + "' is the second)");
  }
  if (auto it = p.opts.find("shard-dir"); it != p.opts.end()) {
    if (!p.positional.empty()) {
      return usage_error(cmd, "give SOURCE or --shard-dir (deprecated), not both");
    }
    std::cerr << "shardload read: note: --shard-dir is deprecated; give the directory as SOURCE "
                 "(shardload read DIR)\n";
    p.positional.push_back(it->second);
  }
  if (p.positional.empty()) {
    return usage_error(cmd, "expected SOURCE (a directory, pattern, glob or file)");
  }
  out->source = p.positional[0];
  out->pattern = p.opts["pattern"];
  // A malformed source (a pattern with a file or a glob) is refused before Legate starts; one
  // that is not there is discovery's error, under Legate.
  if (auto src = Source::parse(out->source, out->pattern);
      !src && src.status().code() == ErrorCode::kInvalidArgument) {
    return usage_error(cmd, src.status().message());
  }
  struct ::stat st {};
  if (!path_traits(out->source).kernel_files) {
    out->meta_dir = out->source;
  } else if (::stat(out->source.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    out->meta_dir = out->source;
  } else {
    const auto slash = out->source.rfind('/');
    out->meta_dir = slash == std::string::npos ? "."
                    : slash == 0               ? "/"
                                               : out->source.substr(0, slash);
  }
  out->verify = p.flags.count("no-verify") == 0;
  if (!out->verify && p.opts.count("seed") != 0) {
    return usage_error(cmd,
                       "--seed is the seed to verify against, and --no-verify skips the "
                       "verification; give one of them");
  }
  const std::pair<const char*, std::int64_t*> positive[] = {{"overdecompose", &out->overdecompose},
                                                            {"repeat", &out->repeat}};
  for (const auto& [name, field] : positive) {
    auto it = p.opts.find(name);
    if (it == p.opts.end()) continue;
    long long v = 0;
    if (!parse_int(it->second, &v) || v < 1) {
      return usage_error(
          cmd, std::string("--") + name + ": expected an integer >= 1, found '" + it->second + "'");
    }
    *field = v;
  }
  if (auto it = p.opts.find("seed"); it != p.opts.end()) {
    long long v = 0;
    if (!parse_int(it->second, &v)) {
      return usage_error(cmd, "--seed: expected an integer, found '" + it->second + "'");
    }
    out->seed = v;
  }
  if (Status s = parse_format_options(p.opts, &out->format); !s) {
    return usage_error(cmd, s.message());
  }
  for (const char* name : {"dtype", "astype"}) {
    if (const auto it = p.opts.find(name); it != p.opts.end()) out->type_options.insert(*it);
  }
  if (Status s = parse_discover_options(p, &out->discovery); !s) {
    return usage_error(cmd, s.message());
  }
  return std::nullopt;
}

VerifySeed verify_seed(const ReadArgs& a, const Layout& layout, std::ostream& out,
                       std::ostream& err) {
  VerifySeed failed;
  failed.rc = 1;
  if (!a.verify) {
    out << "verify:         skipped (--no-verify)\n";
    return {};
  }
  std::string meta_dtype;
  std::vector<std::int64_t> meta_shape;
  std::vector<std::int64_t> meta_rows;
  std::optional<long long> seed = a.seed;
  std::string meta_dir = a.meta_dir;
  bool part = a.meta_dir != a.source;
  if (!path_traits(a.source).kernel_files) {
    // Whether a URL names the dataset or a part of it (a shard, a glob of some) is told only
    // by where its _meta.json lies, below the key or beside it; taken for the dataset, a part
    // was held to the whole dataset's shape and values from row 0, and FAILED intact. An error
    // here is read_write_meta's to report.
    std::string path;
    std::string beside;
    if (const auto found = remote_meta_text(a.source, &path, &beside);
        found && *found && !beside.empty()) {
      meta_dir = beside;
      part = true;
    }
  }
  if (seed && part) {
    // --seed of a part: _meta.json, where write left one, still tells the part's place; without
    // one the part is verified as a dataset of its own, from its row 0. A damaged one tells no
    // place: taken for none, the part was compared from row 0 and FAILED.
    const Result<WriteMeta> meta = read_write_meta(meta_dir);
    if (!meta) {
      err << "shardload read: verify: "
          << spell_options(meta.status().message(), OptionSpelling::kCli) << "\n";
      return failed;
    }
    if (!meta->foreign) meta_rows = meta->rows;
  }
  if (!seed) {
    const Result<WriteMeta> meta = read_write_meta(meta_dir);
    if (!meta) {
      err << "shardload read: verify: "
          << spell_options(meta.status().message(), OptionSpelling::kCli) << "\n";
      return failed;
    }
    if (meta->foreign) {
      out << "verify:         skipped (_meta.json in " << printable_redacted(meta_dir)
          << " was not written by shardload write)\n";
      return {};
    }
    seed = meta->seed;
    meta_dtype = meta->dtype;
    meta_shape = meta->shape;
    meta_rows = meta->rows;
  }
  if (!seed) {
    out << "verify:         skipped (no --seed and no _meta.json with a seed in "
        << printable_redacted(meta_dir) << ")\n";
    return {};
  }
  if (!meta_dtype.empty() && meta_dtype != layout.dtype.name()) {
    err << "shardload read: verify: _meta.json says dtype " << meta_dtype << ", the shards hold "
        << layout.dtype.name() << "\n";
    return failed;
  }
  // The directory as a whole is what write wrote: rows it lost (a shard deleted) would verify
  // as the seed's values of the rows that are left. A file or pattern of it may be a part.
  if (!meta_shape.empty() && !part) {
    const std::vector<std::int64_t> held = layout.shape();
    if (held != meta_shape) {
      err << "shardload read: verify: _meta.json says shape " << shape_string(meta_shape)
          << ", the shards hold " << shape_string(held) << "\n";
      return failed;
    }
  }
  VerifySeed v;
  v.seed = seed;
  if (part && !meta_rows.empty()) {
    const PartPlace place = part_place(layout, meta_rows);
    if (!place.error.empty()) {
      err << "shardload read: verify: " << place.error << "\n";
      return failed;
    }
    if (!place.first_row) {
      out << "verify:         skipped (" << printable_redacted(a.source)
          << " is a part of the dataset in " << printable_redacted(meta_dir)
          << " whose place in it cannot be told: " << place.unknown << ")\n";
      return {};
    }
    v.first_row = *place.first_row;
    v.place = " at rows [" + std::to_string(v.first_row) + ", " +
              std::to_string(v.first_row + layout.total_rows()) + ") of the dataset in " +
              printable_redacted(meta_dir);
  }
  return v;
}

int report_verify(std::int64_t bad, const Layout& layout, const VerifySeed& v, std::ostream& out) {
  const auto elements = layout.total_bytes() / layout.dtype.size;
  if (bad != 0) {
    out << "verify:         FAILED: " << bad << " of " << elements << " elements differ from seed "
        << *v.seed << v.place << "\n";
    return 1;
  }
  out << "verify:         OK (" << elements << " elements match seed " << *v.seed << v.place
      << ")\n";
  return 0;
}

}  // namespace shardload::cli
