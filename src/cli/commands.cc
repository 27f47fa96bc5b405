#include "cli/commands.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>

#include "readers/detail/json.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"
#include "shardload/source.hpp"
#include "shardload/synth.hpp"

namespace shardload::cli {

bool parse_int(const std::string& text, long long* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size();
}

namespace {

int fail(const char* cmd, const std::string& msg) {
  std::cerr << "shardload " << cmd << ": error: " << cli_spelling(msg) << "\n";
  return 1;
}

int usage_error(const char* cmd, const std::string& msg) {
  std::cerr << "shardload " << cmd << ": " << msg << "; see 'shardload " << cmd << " --help'\n";
  return 2;
}

// Source::parse's faults: a malformed argument (a pattern with a file or a glob, as Python's
// ValueError) is a usage error, exit 2; a source that is not there is exit 1.
int source_error(const char* cmd, const Status& s) {
  if (s.code() == ErrorCode::kInvalidArgument) return usage_error(cmd, cli_spelling(s.message()));
  return fail(cmd, s.message());
}

// Several SOURCE arguments are a list of files (a Zarr store counts as one). A directory of
// shards, a numbered pattern or a glob among them is a SOURCE of its own that the list would
// take for a file name ("cannot tell the format of DIR"): say so instead.
std::optional<int> check_file_list(const char* cmd, const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    struct ::stat st {};
    const char* what = nullptr;
    if (::stat(p.c_str(), &st) == 0) {
      const auto has = [&](const char* meta) {
        return ::access((p + "/" + meta).c_str(), F_OK) == 0;
      };
      if (S_ISDIR(st.st_mode) && !has(".zarray") && !has(".zgroup") && !has("zarr.json")) {
        what = "a directory";
      }
    } else if (p.find('{') != std::string::npos) {
      what = "a numbered pattern";
    } else if (p.find_first_of("*?[") != std::string::npos) {
      what = "a glob";
    }
    if (what != nullptr) {
      return usage_error(cmd, "'" + path_for_message(p) + "' is " + what +
                                  ", a SOURCE of its own: give one directory, pattern or glob "
                                  "alone, or several files (" +
                                  std::to_string(paths.size()) + " arguments given)");
    }
  }
  return std::nullopt;
}

const OptionSpec* find_option(const CommandSpec& spec, const std::string& name) {
  for (const auto& o : spec.options) {
    if (name == o.name) return &o;
  }
  if (spec.format_options) {
    for (const auto& o : format_option_specs()) {
      if (name == o.name) return &o;
    }
  }
  return nullptr;
}

void print_options(const std::vector<OptionSpec>& options, std::ostream& out) {
  for (const auto& o : options) {
    std::string left = std::string("  --") + o.name;
    if (o.metavar != nullptr) left += std::string(" ") + o.metavar;
    out << left;
    if (left.size() >= 23) {
      out << "\n" << std::string(24, ' ');
    } else {
      out << std::string(24 - left.size(), ' ');
    }
    out << o.help << "\n";
  }
}

// Removes files an earlier `write` left: shard_*.npy and their temporaries.
Status remove_stale(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status(ErrorCode::kIo, dir + ": cannot list the directory");
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    const bool shard = n.rfind("shard_", 0) == 0 &&
                       (n.size() > 10 && (n.compare(n.size() - 4, 4, ".npy") == 0 ||
                                          n.compare(n.size() - 8, 8, ".npy.tmp") == 0));
    if (shard || n == "_meta.json") stale.push_back(dir + "/" + n);
  }
  ::closedir(d);
  for (const auto& p : stale) {
    if (::unlink(p.c_str()) != 0) return Status(ErrorCode::kIo, p + ": cannot remove a stale file");
  }
  return Status::ok();
}

}  // namespace

const std::vector<OptionSpec>& format_option_specs() {
  static const std::vector<OptionSpec> specs{
      {"format", "F", "npy, raw, hdf5, parquet, arrow, zarr or auto (the default: by extension)"},
      {"dtype", "T", "raw: the element type (float32, >f4, ...); parquet/arrow: cast to it"},
      {"trailing-shape", "D[,D...]",
       "raw: the shape of one row after the first axis ('' for 1-D data)", true},
      {"header-bytes", "N", "raw: bytes to skip at the start of each file"},
      {"dataset", "NAME", "hdf5: the dataset in each file; zarr: the array in each store"},
      {"columns", "A[,B...]", "parquet/arrow: the columns to read (default: every numeric one)"},
      {"fill-value", "X", "parquet/arrow: the value for nulls (default: a null is an error)"},
  };
  return specs;
}

const std::vector<std::string>& format_option_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& o : format_option_specs()) n.emplace_back(o.name);
    return n;
  }();
  return names;
}

const std::vector<CommandSpec>& commands() {
  static const std::string shape_help = "the shape of the whole dataset (1 to " +
                                        std::to_string(kMaxWriteDims) +
                                        " dimensions: those of a Legate array)";
  static const std::vector<CommandSpec> specs{
      {"write",
       "--shard-dir DIR --num-shards N --shape ROWS[,DIM...] [options]",
       "write a demo dataset of .npy shards with values to verify",
       "Writes N .npy shards of deterministic values (a function of the seed and the element\n"
       "index) and DIR/_meta.json, which `shardload read` verifies against.",
       {{"shard-dir", "DIR", "the directory to write (created; stale shards removed)"},
        {"num-shards", "N", "the number of shards (1 to 1000000); rows are split unevenly"},
        {"shape", "ROWS[,DIM...]", shape_help.c_str()},
        {"dtype", "T", "the element type (default float32)"},
        {"seed", "S", "the seed of the values (default 0)"}},
       false},
      {"inspect",
       "SOURCE... [options]",
       "print the layout of a dataset (no Legate, no data read)",
       "Prints the discovered layout of a directory, numbered pattern, glob, file or list of\n"
       "files without reading their data. Exit status 1 when they do not form a dataset.",
       {{"pattern", "P", "the numbering of the files in a directory SOURCE (shard_{:04d}.npy)"},
        {"json", nullptr, "print the layout as JSON (paths not in UTF-8: \\udcXX per byte)"},
        {"trust-manifest", nullptr, "take DIR/shardload.manifest without checking any shard"}},
       true},
      {"index",
       "DIR [options]",
       "write DIR/shardload.manifest: the layout, for discovery without probing",
       "Discovers DIR (probing every shard) and writes its manifest, DIR/shardload.manifest,\n"
       "atomically: every shard's path, rows, format data and snapshot, and with --checksum\n"
       "a checksum of each file for `shardload verify`. Later discoveries of DIR read it\n"
       "instead of the shards while every shard's size and times match.",
       {{"pattern", "P", "the numbering of the files in DIR (shard_{:04d}.npy)"},
        {"checksum", "C", "xxh3 or none (default none)"}},
       true},
      {"verify",
       "DIR|MANIFEST [options]",
       "check the shards against the manifest's checksums, in parallel under Legate",
       "Hashes every shard named in DIR/shardload.manifest (or the manifest file given) in a\n"
       "Legate task, one point per group of shards, and names every file whose checksum\n"
       "differs or that cannot be read. Exit status 1 when any does.",
       {{"groups", "G", "points of the launch (default four per CPU)"}},
       false},
      {"read",
       "SOURCE [options]",
       "load a dataset under Legate, time it and verify it",
       "Loads SOURCE under Legate (configured by LEGATE_CONFIG or the legate launcher), prints\n"
       "the layout, the plan, the time and GB/s, and verifies the values against the seed of\n"
       "_meta.json (as `shardload write` made it) or --seed.",
       {{"pattern", "P", "the numbering of the files in a directory SOURCE"},
        {"overdecompose", "K", "tiles per processor (default 1)"},
        {"repeat", "N", "load N times, timing each (default 1)"},
        {"seed", "S", "verify against this seed instead of _meta.json's"},
        {"no-verify", nullptr, "skip the verification"},
        {"trust-manifest", nullptr, "take DIR/shardload.manifest without checking any shard"},
        {"shard-dir", "DIR", "deprecated: the same as giving DIR as SOURCE"}},
       true},
  };
  return specs;
}

const CommandSpec* find_command(const std::string& name) {
  for (const auto& c : commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

void print_help(const CommandSpec& spec, std::ostream& out) {
  out << "usage: shardload " << spec.name << " " << spec.usage << "\n\n" << spec.summary << "\n";
  out << "\noptions:\n";
  print_options(spec.options, out);
  out << "  -h, --help            show this help and exit\n";
  if (spec.format_options) {
    out << "\nformat options:\n";
    print_options(format_option_specs(), out);
  }
  out << "\nAn option's value follows it (--opt VALUE) or is joined by '=' (--opt=VALUE).\n";
}

std::optional<int> parse_command_line(const CommandSpec& spec, const Args& args, Parsed* out) {
  const char* cmd = spec.name;
  // Help wins wherever it is, over any other argument's fault, as with argparse.
  for (const auto& a : args) {
    if (a == "--") break;
    if (a == "-h" || a == "--help") {
      print_help(spec, std::cout);
      return 0;
    }
  }
  bool only_positionals = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_positionals || a == "-" || a.empty() || a[0] != '-') {
      // An empty path names nothing; Python refuses "" as a source too.
      if (a.empty()) return usage_error(cmd, "an empty argument ('') is not a path");
      out->positional.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positionals = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) return usage_error(cmd, "unknown option " + a);
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const OptionSpec* o = find_option(spec, name);
    if (o == nullptr) return usage_error(cmd, "unknown option --" + name);
    if (o->metavar == nullptr) {
      if (value) return usage_error(cmd, "--" + name + " takes no value");
      out->flags.insert(name);  // a flag twice says nothing new
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) {
        return usage_error(cmd, "--" + name + " needs a value (" + o->metavar + ")");
      }
      value = args[++i];
    }
    if (value->empty() && !o->empty_ok) {
      return usage_error(
          cmd, "--" + name + ": expected a non-empty value (" + o->metavar + "), found ''");
    }
    if (const auto it = out->opts.find(name); it != out->opts.end()) {
      return usage_error(cmd, "--" + name + " is given twice ('" + it->second + "', then '" +
                                  *value + "'); give it once");
    }
    out->opts[name] = *value;
  }
  return std::nullopt;
}

// The core's phrases that name an option as the Python API spells it, and the
// command line's spelling. Whole phrases, so that a file name or a value that
// merely contains "dtype" is left alone. tests/python/test_cli.py checks that
// every "name=" phrase in the core's sources has a row here.
std::string cli_spelling(std::string message) {
  static const std::pair<const char*, const char*> kPhrases[] = {
      {"name it with format= ", "name it with --format "},
      {"; pass pattern=", "; pass --pattern="},
      {"name one with pattern= (and format= where the name does not tell)",
       "name one with --pattern (and --format where the name does not tell)"},
      {"pass dtype= or write", "pass --dtype or write"},
      {"pass dtype= to cast", "pass --dtype to cast"},
      {"pass shape= (() for 1-D data)", "pass --trailing-shape ('' for 1-D data)"},
      {"name one with dataset=", "name one with --dataset"},
      {"name the array with dataset=", "name the array with --dataset"},
      {"pass fill_value= to replace nulls", "pass --fill-value to replace nulls"},
      {"differs from the dtype option", "differs from the --dtype option"},
      {"differs from the shape option", "differs from the --trailing-shape option"},
      {"differs from the header_bytes option", "differs from the --header-bytes option"},
      {"raw: shape option", "raw: --trailing-shape option"},
      {"(dataset, columns, fill value) do not apply",
       "(--dataset, --columns, --fill-value) do not apply"},
      {"name only numeric columns in columns=", "name only numeric columns in --columns"},
      {"(pass columns= to choose)", "(pass --columns to choose)"},
  };
  for (const auto& [from, to] : kPhrases) {
    const std::string f = from;
    const std::string t = to;
    for (std::size_t at = message.find(f); at != std::string::npos;
         at = message.find(f, at + t.size())) {
      message.replace(at, f.size(), t);
    }
  }
  return message;
}

std::string json_path_string(const std::string& bytes) {
  std::string out = "\"";
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  auto escape = [&](unsigned v) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", v);
    out += buf;
  };
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20 || c == 0x7f) {
        escape(c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // The length of a valid UTF-8 sequence starting here, by the strict
    // rules (no overlong forms, no surrogates, nothing past U+10FFFF), as
    // Python's decoder applies them; 0 when the byte starts none.
    std::size_t len = 0;
    unsigned lo = 0x80;
    unsigned hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    }
    bool valid = len != 0 && i + len <= n;
    for (std::size_t k = 1; valid && k < len; ++k) {
      const unsigned b = s[i + k];
      valid = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xbf);
    }
    if (valid) {
      out.append(bytes, i, len);
      i += len;
    } else {
      escape(0xdc00 + c);
      ++i;
    }
  }
  out += '"';
  return out;
}

Status parse_format_options(const std::map<std::string, std::string>& opts, FormatOptions* out) {
  auto get = [&](const char* k) -> const std::string* {
    auto it = opts.find(k);
    return it == opts.end() ? nullptr : &it->second;
  };
  if (const auto* v = get("format")) {
    SHARDLOAD_ASSIGN_OR_RETURN(out->format, parse_format(*v));
  }
  if (const auto* v = get("dtype")) {
    bool big = false;
    SHARDLOAD_ASSIGN_OR_RETURN(out->dtype, parse_dtype(*v, &big));
    if (!v->empty() && ((*v)[0] == '<' || (*v)[0] == '>')) out->big_endian = big;
  }
  if (const auto* v = get("trailing-shape")) {
    std::vector<long long> dims;
    if (!v->empty() && !parse_int_list(*v, &dims)) {
      return {ErrorCode::kInvalidArgument,
              "--trailing-shape: expected DIM[,DIM...] or '' for 1-D, found '" + *v + "'"};
    }
    // A usage error, as Python's shape= refuses a negative dimension (ValueError).
    if (std::any_of(dims.begin(), dims.end(), [](long long d) { return d < 0; })) {
      return {ErrorCode::kInvalidArgument,
              "--trailing-shape: dimensions must be >= 0, found '" + *v + "'"};
    }
    out->trailing_shape = std::vector<std::int64_t>(dims.begin(), dims.end());
  }
  if (const auto* v = get("header-bytes")) {
    long long n = 0;
    if (!parse_int(*v, &n) || n < 0) {
      return {ErrorCode::kInvalidArgument,
              "--header-bytes: expected an integer >= 0, found '" + *v + "'"};
    }
    out->header_bytes = static_cast<std::uint64_t>(n);
  }
  if (const auto* v = get("dataset")) out->dataset = *v;
  if (const auto* v = get("columns")) {
    std::size_t start = 0;
    while (start <= v->size()) {
      const auto comma = v->find(',', start);
      out->columns.push_back(v->substr(start, comma == std::string::npos ? comma : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (const auto* v = get("fill-value")) {
    char* end = nullptr;
    const double d = std::strtod(v->c_str(), &end);
    // strtod skips leading spaces, which no other number option takes.
    if (v->empty() || std::isspace(static_cast<unsigned char>((*v)[0])) != 0 ||
        end != v->c_str() + v->size()) {
      return {ErrorCode::kInvalidArgument, "--fill-value: expected a number, found '" + *v + "'"};
    }
    out->fill_value = d;
  }
  return Status::ok();
}

bool parse_int_list(const std::string& text, std::vector<long long>* out) {
  out->clear();
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    long long v = 0;
    if (!parse_int(part, &v)) return false;
    out->push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out->empty();
}

std::optional<int> parse_write_args(const Args& args, WriteArgs* out) {
  const char* cmd = "write";
  Parsed p;
  if (auto rc = parse_command_line(*find_command(cmd), args, &p)) return *rc;
  if (!p.positional.empty())
    return usage_error(cmd, "unexpected argument '" + p.positional[0] + "'");
  for (const char* req : {"shard-dir", "num-shards", "shape"}) {
    if (p.opts.count(req) == 0) return usage_error(cmd, std::string("--") + req + " is required");
  }
  out->dir = p.opts["shard-dir"];
  if (!parse_int(p.opts["num-shards"], &out->shards) || out->shards < 1) {
    return usage_error(
        cmd, "--num-shards: expected an integer >= 1, found '" + p.opts["num-shards"] + "'");
  }
  if (out->shards > 1000000) {  // save's bound (shardload/save.hpp)
    return usage_error(
        cmd, "--num-shards: expected at most 1000000 shards, found " + p.opts["num-shards"]);
  }
  if (p.opts.count("seed") != 0 && !parse_int(p.opts["seed"], &out->seed)) {
    return usage_error(cmd, "--seed: expected an integer, found '" + p.opts["seed"] + "'");
  }
  if (!parse_int_list(p.opts["shape"], &out->shape)) {
    return usage_error(cmd, "--shape: expected ROWS[,DIM...] (1 to " +
                                std::to_string(kMaxWriteDims) + " integers), found '" +
                                p.opts["shape"] + "'");
  }
  if (out->shape.size() > kMaxWriteDims) {
    // Legate ends the process on a store of more dimensions than it was built for.
    return usage_error(cmd, "--shape: " + std::to_string(out->shape.size()) +
                                " dimensions, and a Legate array has at most " +
                                std::to_string(kMaxWriteDims) + " (LEGATE_MAX_DIM); found '" +
                                p.opts["shape"] + "'");
  }
  for (const auto d : out->shape) {
    if (d < 0) return usage_error(cmd, "--shape: dimensions must be >= 0");
  }
  const std::string dtype_text = p.opts.count("dtype") != 0 ? p.opts["dtype"] : "float32";
  bool big = false;
  auto dtype = parse_dtype(dtype_text, &big);
  if (!dtype) return usage_error(cmd, "--dtype: " + dtype.status().message());
  // The shards are written in this machine's byte order; another one is refused, not ignored.
  if (dtype->size > 1 && big != !host_is_little_endian()) {
    return usage_error(cmd, "--dtype: '" + dtype_text + "' is " + (big ? "big" : "little") +
                                "-endian, and write writes " + (big ? "little" : "big") +
                                "-endian shards (this machine's order); pass '" + dtype->name() +
                                "'");
  }
  out->dtype = *dtype;
  return std::nullopt;
}

std::vector<std::int64_t> write_rows_per_shard(const WriteArgs& a) {
  return synth_split(static_cast<std::uint64_t>(a.seed), a.shape[0], a.shards);
}

std::string write_meta_json(const WriteArgs& a, const std::vector<std::int64_t>& rows) {
  std::ostringstream m;
  m << "{\"seed\": " << a.seed << ", \"dtype\": \"" << a.dtype.name() << "\", \"shape\": [";
  for (std::size_t i = 0; i < a.shape.size(); ++i) m << (i ? ", " : "") << a.shape[i];
  m << "], \"num_shards\": " << a.shards << ", \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) m << (i ? ", " : "") << rows[i];
  m << "]}\n";
  return m.str();
}

std::string write_summary(const WriteArgs& a) {
  std::ostringstream o;
  o << "wrote " << a.shards << " shards to " << a.dir << ": shape "
    << "(";
  for (std::size_t i = 0; i < a.shape.size(); ++i) o << (i ? ", " : "") << a.shape[i];
  o << (a.shape.size() == 1 ? ",)" : ")") << " " << a.dtype.name() << ", seed " << a.seed << "\n";
  return o.str();
}

int cmd_write(const Args& args) {
  const char* cmd = "write";
  WriteArgs a;
  if (auto rc = parse_write_args(args, &a)) return *rc;
  const std::string& dir = a.dir;

  ::mkdir(dir.c_str(), 0755);
  struct ::stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(cmd, dir + ": cannot create the shard directory");
  }
  if (Status s = remove_stale(dir); !s) return fail(cmd, s.message());

  const auto rows = write_rows_per_shard(a);
  std::uint64_t row_elements = 1;
  for (std::size_t i = 1; i < a.shape.size(); ++i)
    row_elements *= static_cast<std::uint64_t>(a.shape[i]);
  const NumberPattern pat{"shard_", 4, ".npy"};
  std::uint64_t first_row = 0;
  for (long long i = 0; i < a.shards; ++i) {
    NpyWriteSpec spec{a.dtype, {rows[static_cast<std::size_t>(i)]}};
    spec.shape.insert(spec.shape.end(), a.shape.begin() + 1, a.shape.end());
    const std::string path = dir + "/" + pat.format(i);
    if (Status s =
            write_npy(path, spec, static_cast<std::uint64_t>(a.seed), first_row * row_elements);
        !s) {
      return fail(cmd, s.message());
    }
    first_row += static_cast<std::uint64_t>(rows[static_cast<std::size_t>(i)]);
  }
  // The metadata goes last: its presence means the set is complete.
  const std::string meta = dir + "/_meta.json";
  {
    std::ofstream m(meta + ".tmp");
    m << write_meta_json(a, rows);
    if (!m) return fail(cmd, meta + ": write failed");
  }
  if (std::rename((meta + ".tmp").c_str(), meta.c_str()) != 0) {
    return fail(cmd, meta + ": rename failed");
  }
  std::cout << write_summary(a);
  return 0;
}

Result<WriteMeta> read_write_meta(const std::string& dir) {
  // _meta.json is a few hundred bytes; the cap keeps a stray huge file from
  // being read whole.
  constexpr std::uint64_t kMaxMetaBytes = std::uint64_t{1} << 20;
  const std::string path = dir + "/_meta.json";
  WriteMeta m;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return m;
  SHARDLOAD_ASSIGN_OR_RETURN(const std::string text,
                             detail::read_small_file(posix_io(), path, kMaxMetaBytes, nullptr));
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
  return m;
}

namespace {

void json_int_list(std::ostream& o, const std::vector<std::int64_t>& v) {
  o << "[";
  for (std::size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
}

// The layout as one JSON object; names follow the Python Layout's properties.
void print_json(std::ostream& o, const Source& src, const Layout& l) {
  o << "{\n  \"source\": " << json_path_string(src.describe()) << ",\n  \"format\": \""
    << format_name(l.format) << "\",\n  \"dtype\": \"" << l.dtype.name() << "\",\n  \"shape\": ";
  json_int_list(o, l.shape());
  o << ",\n  \"trailing_shape\": ";
  json_int_list(o, l.trailing_shape);
  o << ",\n  \"total_rows\": " << l.total_rows() << ",\n  \"row_bytes\": " << l.row_bytes
    << ",\n  \"bytes\": " << l.total_bytes() << ",\n  \"num_shards\": " << l.shards.size()
    << ",\n  \"shards\": [";
  for (std::size_t i = 0; i < l.shards.size(); ++i) {
    const Shard& s = l.shards[i];
    o << (i ? "," : "") << "\n    {\"path\": " << json_path_string(s.path)
      << ", \"rows\": " << s.rows << ", \"first_row\": " << l.offsets[i]
      << ", \"bytes\": " << static_cast<std::uint64_t>(s.rows) * l.row_bytes << "}";
  }
  o << (l.shards.empty() ? "]" : "\n  ]") << "\n}\n";
}

}  // namespace

int cmd_inspect(const Args& args) {
  const char* cmd = "inspect";
  Parsed p;
  if (auto rc = parse_command_line(*find_command(cmd), args, &p)) return *rc;
  if (p.positional.empty()) {
    return usage_error(cmd, "expected SOURCE (a directory, pattern, glob or file)");
  }
  DiscoverOptions opts;
  if (Status s = parse_format_options(p.opts, &opts.format); !s) {
    return usage_error(cmd, cli_spelling(s.message()));
  }
  if (p.positional.size() > 1) {
    if (auto rc = check_file_list(cmd, p.positional)) return *rc;
    if (p.opts.count("pattern") != 0) {
      return usage_error(cmd, "--pattern applies to one directory SOURCE, not to a list of files");
    }
  }
  Result<Source> src = p.positional.size() == 1 ? Source::parse(p.positional[0], p.opts["pattern"])
                                                : Result<Source>(Source::list(p.positional));
  if (!src) return source_error(cmd, src.status());
  opts.trust_manifest = p.flags.count("trust-manifest") != 0;
  auto layout = discover(*src, opts);
  if (!layout) return fail(cmd, "loading " + src->describe() + ": " + layout.status().message());
  if (p.flags.count("json") != 0) {
    print_json(std::cout, *src, *layout);
  } else {
    std::cout << "source:         " << src->describe() << "\n";
    if (layout->manifest_state != ManifestState::kNone &&
        layout->manifest_state != ManifestState::kAbsent) {
      std::cout << layout->manifest_status << "\n";
    }
    std::cout << describe(*layout);
  }
  return 0;
}

int cmd_index(const Args& args) {
  const char* cmd = "index";
  Parsed p;
  if (auto rc = parse_command_line(*find_command(cmd), args, &p)) return *rc;
  if (p.positional.size() != 1) {
    return usage_error(cmd, "expected one DIR, the directory that holds the shards");
  }
  DiscoverOptions opts;
  opts.use_manifest = false;  // the files themselves, not the manifest being replaced
  if (Status s = parse_format_options(p.opts, &opts.format); !s) {
    return usage_error(cmd, cli_spelling(s.message()));
  }
  ManifestOptions mopts;
  if (auto c = parse_checksum(p.opts["checksum"]); c) {
    mopts.checksum = *c;
  } else {
    return usage_error(cmd, "--checksum: " + c.status().message());
  }
  mopts.pattern = p.opts["pattern"];
  Result<Source> src = Source::parse(p.positional[0], mopts.pattern);
  if (!src) return source_error(cmd, src.status());
  if (src->kind != Source::Kind::kDirectory) {
    return fail(cmd, path_for_message(p.positional[0]) +
                         ": a manifest is written into the directory of the shards; give that "
                         "directory (with --pattern for another numbering)");
  }
  auto layout = discover(*src, opts);
  if (!layout) return fail(cmd, "loading " + src->describe() + ": " + layout.status().message());
  auto written = write_manifest(*layout, src->directory, mopts);
  if (!written) return fail(cmd, "indexing " + src->describe() + ": " + written.status().message());
  std::cout << "wrote " << path_for_message(*written) << ": " << layout->shards.size()
            << " shards, " << layout->total_rows() << " rows, checksums "
            << checksum_name(mopts.checksum) << "\n";
  return 0;
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
    return usage_error(cmd, cli_spelling(src.status().message()));
  }
  struct ::stat st {};
  if (::stat(out->source.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
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
    return usage_error(cmd, cli_spelling(s.message()));
  }
  out->trust_manifest = p.flags.count("trust-manifest") != 0;
  return std::nullopt;
}

}  // namespace shardload::cli
