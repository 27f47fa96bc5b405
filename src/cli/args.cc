// The command line's argument handling, shared by every command: the commands' specs and
// help, the option parser, the format options, and the error and spelling helpers.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>

#include "base/detail/links.hpp"
#include "cli/commands.hpp"
#include "shardload/formats.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/io.hpp"
#include "shardload/layout.hpp"
#include "shardload/location.hpp"
#include "shardload/source.hpp"
#include "shardload/store_options.hpp"

namespace shardload::cli {

bool parse_int(const std::string& text, long long* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size();
}

// The core's messages mark the options they name (shardload/format.hpp); the command line
// spells them as its flags (--dtype) here, where every message is printed. A message may
// quote an argument as given (a URL with its credentials): redacted here too.
int fail(const char* cmd, const std::string& msg) {
  // What an interrupt made fail: main says "interrupted" instead.
  if (interrupt_requested()) return 1;
  std::cerr << "shardload " << cmd
            << ": error: " << printable_redacted(spell_options(msg, OptionSpelling::kCli)) << "\n";
  return 1;
}

int usage_error(const char* cmd, const std::string& msg) {
  // As in fail(): an argument refused because of the interrupt (credentials whose
  // credential_process it ended) is no usage error.
  if (interrupt_requested()) return 2;
  std::cerr << "shardload " << cmd << ": "
            << printable_redacted(spell_options(msg, OptionSpelling::kCli)) << "; see 'shardload "
            << cmd << " --help'\n";
  return 2;
}

// Source::parse's faults: a malformed argument (a pattern with a file or a glob, as Python's
// ValueError) is a usage error, exit 2; a source that is not there is exit 1.
int source_error(const char* cmd, const Status& s) {
  if (s.code() == ErrorCode::kInvalidArgument) return usage_error(cmd, s.message());
  return fail(cmd, s.message());
}

// What of a SOURCE is read for a number field or wildcards: a path whole, an s3:// URL's last
// part without its query (its prefix is taken as spelled, see Source::parse).
static std::string pattern_part(const std::string& p) {
  if (!is_remote_url(p)) return p;
  const std::string key = p.substr(0, p.find('?'));
  return key.substr(key.rfind('/') + 1);
}

// Several SOURCE arguments are a list of files (a Zarr store counts as one). A directory of
// shards, a numbered pattern or a glob among them is a SOURCE of its own that the list would
// take for a file name ("cannot tell the format of DIR"): say so instead.
std::optional<int> check_file_list(const char* cmd, const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    struct ::stat st {};
    const char* what = nullptr;
    if (::stat(p.c_str(), &st) == 0) {
      // Metadata linked from a place that is gone still makes a store (a file of the list),
      // whose reader names the link, not "a directory".
      const auto has = [&](const char* meta) {
        const std::string file = p + "/" + meta;
        return ::access(file.c_str(), F_OK) == 0 ||
               (errno == ENOENT && detail::is_dangling_link(file));
      };
      if (S_ISDIR(st.st_mode) && !has(".zarray") && !has(".zgroup") && !has("zarr.json")) {
        what = "a directory";
      }
    } else if (const std::string last = pattern_part(p);
               last.find_first_of("{*?[") != std::string::npos) {
      // Told as discovery tells them ("run{1}/*.npy" is a glob, "x[1]_{:04d}.npy" a pattern):
      // neither asks a store anything.
      const auto parsed = Source::parse(p);
      const bool glob =
          parsed ? parsed->kind == Source::Kind::kGlob : last.find('{') == std::string::npos;
      what = glob ? "a glob" : "a numbered pattern";
    }
    if (what != nullptr) {
      // Appended piece by piece: GCC 12 takes a chain of operator+ here for overlapping
      // copies (-Wrestrict) in an optimized build.
      std::string msg = "'";
      msg += path_for_message(p);
      msg += "' is ";
      msg += what;
      msg += ", a SOURCE of its own: give one directory, pattern or glob alone, or several files (";
      msg += std::to_string(paths.size());
      msg += " arguments given)";
      return usage_error(cmd, msg);
    }
  }
  return std::nullopt;
}

namespace {

const OptionSpec* find_option(const CommandSpec& spec, const std::string& name) {
  for (const auto& o : spec.options) {
    if (name == o.name) return &o;
  }
  if (spec.format_options) {
    for (const auto& o : format_option_specs()) {
      if (name == o.name) return &o;
    }
  }
  if (spec.discover_options) {
    for (const auto& o : discover_option_specs()) {
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

// The rows of the store option table (shardload/store_options.hpp) as KEY=VALUE lines, each
// with its default and range where it has a field, and whether http(s) takes it: the keys
// --storage-option takes.
void print_store_options(std::ostream& out) {
  const StoreOptions defaults;
  for (const auto& row : store_option_table()) {
    const std::string left = std::string("  ") + row.name + "=" + row.metavar;
    out << left;
    if (left.size() >= 23) {
      out << "\n" << std::string(24, ' ');
    } else {
      out << std::string(24 - left.size(), ' ');
    }
    std::string notes;
    if (row.kind == OptionKind::kCount) {
      notes = "default " + std::to_string(std::get<std::uint64_t>(row.get(defaults))) + "; " +
              std::to_string(row.lo) + " to " + std::to_string(row.hi);
    } else if (row.kind == OptionKind::kNumber) {
      notes = "default " + option_value_text(row.get(defaults), row.kind) + "; at most " +
              std::to_string(row.hi);
    }
    if ((row.stores & kStoreHttp) != 0) notes += notes.empty() ? "http(s) too" : "; http(s) too";
    out << row.help << (notes.empty() ? "" : " (" + notes + ")") << "\n";
  }
}

}  // namespace

// The flags of the format option table (shardload/format.hpp), led by --format and with
// --astype, the command line's name for the type parquet/arrow decode into, after --dtype.
const std::vector<OptionSpec>& format_option_specs() {
  static const std::vector<std::string> flags = [] {
    std::vector<std::string> f;
    for (const auto& row : format_option_table()) {
      std::string flag = row.name;
      std::replace(flag.begin(), flag.end(), '_', '-');
      f.push_back(std::move(flag));
    }
    return f;
  }();
  // The names from the format table, so that a format added there is named here too.
  static const std::string format_help = [] {
    std::string names;
    for (const auto& d : formats()) {
      if (!d.registered) names += d.name + ", ";
    }
    return names.substr(0, names.size() - 2) + " or auto (the default: by extension)";
  }();
  static const std::vector<OptionSpec> specs = [] {
    std::vector<OptionSpec> out{{"format", "F", format_help.c_str()}};
    const auto table = format_option_table();
    for (std::size_t i = 0; i < table.size(); ++i) {
      // Only a list of dimensions means something when empty ('' is 1-D data).
      out.push_back(
          {flags[i].c_str(), table[i].metavar, table[i].help, table[i].kind == OptionKind::kDims});
      if (table[i].kind == OptionKind::kDType) {
        out.push_back({"astype", "T", "parquet/arrow: the type to decode the columns into"});
      }
    }
    out.push_back({"storage-option", "KEY=VALUE",
                   "s3://, http(s)://: an option of the store (see storage options); repeatable"});
    return out;
  }();
  return specs;
}

// The table's flag name of a row: its name with '-' for '_'.
static std::string cli_flag(const char* name) {
  std::string flag = name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

const std::vector<OptionSpec>& discover_option_specs() {
  static const std::vector<std::string> flags = [] {
    std::vector<std::string> f;
    for (const auto& row : discover_option_table()) f.push_back(cli_flag(row.name));
    return f;
  }();
  static const std::vector<OptionSpec> specs = [] {
    std::vector<OptionSpec> out;
    const auto table = discover_option_table();
    for (std::size_t i = 0; i < table.size(); ++i) {
      out.push_back({flags[i].c_str(), table[i].metavar, table[i].help});
    }
    return out;
  }();
  return specs;
}

Status parse_discover_options(const Parsed& parsed, DiscoverOptions* out) {
  for (const auto& row : discover_option_table()) {
    const std::string flag = cli_flag(row.name);
    OptionValue value;
    if (row.metavar == nullptr) {
      if (parsed.flags.count(flag) == 0) continue;
      value = true;
    } else {
      const auto it = parsed.opts.find(flag);
      if (it == parsed.opts.end()) continue;
      auto v = parse_option_text(row.kind, it->second);
      if (!v) return {ErrorCode::kInvalidArgument, "--" + flag + ": " + v.status().message()};
      value = std::move(*v);
    }
    if (Status st = row.set(value, out); !st) {
      return {ErrorCode::kInvalidArgument, "--" + flag + ": " + st.message()};
    }
  }
  return Status::ok();
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
        {"json", nullptr, "print the layout as JSON (paths not in UTF-8: \\udcXX per byte)"}},
       true,
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
       "Hashes every shard named in DIR/shardload.manifest (or the manifest file given; DIR\n"
       "may be an s3:// or http(s):// directory URL, read by ranged GETs) in a\n"
       "Legate task, one point per group of shards, and names every file whose checksum\n"
       "differs or that cannot be read, and every shard the directory holds that the\n"
       "manifest does not list (added after indexing). Exit status 1 when any does.",
       {{"groups", "G", "points of the launch (default four per CPU)"},
        {"storage-option", "KEY=VALUE",
         "s3://, http(s)://: an option of the store (see storage options); repeatable"}},
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
        {"shard-dir", "DIR", "deprecated: the same as giving DIR as SOURCE"}},
       true,
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
  if (spec.discover_options) {
    out << "\ndiscovery options:\n";
    print_options(discover_option_specs(), out);
  }
  if (find_option(spec, "storage-option") != nullptr) {
    out << "\nstorage options (each as --storage-option KEY=VALUE, for s3:// SOURCEs; those\n"
           "marked http(s) too for http(s):// SOURCEs as well):\n";
    print_store_options(out);
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
    if (name == "storage-option") {
      // Repeatable; each one joins the query that every s3:// SOURCE gets below.
      const auto eq = value->find('=');
      if (eq == 0 || eq == std::string::npos || value->find_first_of("&?#") != std::string::npos) {
        // Only the key part is shown, up to the first '=', '%', ':' or blank: what follows it
        // may be a secret's value however it was typed ("secret_key=a&b", "secret_key:V",
        // "secret_key%3DV" copied from a URL's query, "=secret_key=V").
        const std::size_t cut = value->find_first_of("=%: \t\n\r\v\f");
        return usage_error(
            cmd, "--storage-option: expected KEY=VALUE (no '&', '?' or '#'), found '" +
                     (cut == std::string::npos ? *value : value->substr(0, cut + 1) + "***") + "'");
      }
      if (value->find_first_of(" \t\n\r\v\f") < eq) {
        // A key with a blank in it (" =V", "secret_key =V") is no option's name.
        return usage_error(cmd, "--storage-option: unknown option '" + value->substr(0, eq) +
                                    "' (a KEY holds no blank; the options are listed in --help), "
                                    "found '" +
                                    value->substr(0, eq + 1) + "***'");
      }
      auto& joined = out->opts[name];
      joined += (joined.empty() ? "" : "&") + *value;
      continue;
    }
    if (const auto it = out->opts.find(name); it != out->opts.end()) {
      return usage_error(cmd, "--" + name + " is given twice ('" + it->second + "', then '" +
                                  *value + "'); give it once");
    }
    out->opts[name] = *value;
  }
  // The store's options travel in the query of each URL, as Arrow's URIs take them, so that
  // every object under a directory or glob gets them.
  if (const auto it = out->opts.find("storage-option"); it != out->opts.end()) {
    for (auto& p : out->positional) {
      if (is_http_url(p)) {
        // An http(s) URL's query is the server's but for the keys of the rows http(s) takes:
        // any other key would be sent to the server, so it is refused here.
        const std::string& query = it->second;
        for (std::size_t pos = 0; pos < query.size();) {
          std::size_t amp = query.find('&', pos);
          if (amp == std::string::npos) amp = query.size();
          const std::string key = query.substr(pos, query.find('=', pos) - pos);
          pos = amp + 1;
          const StoreOptionSpec* row = find_store_option(key);
          if (row == nullptr || (row->stores & kStoreHttp) == 0) {
            return usage_error(cmd, "--storage-option " + key +
                                        " applies to s3:// SOURCEs only (an http(s):// SOURCE "
                                        "takes those marked http(s) in --help), found '" +
                                        path_for_message(p) + "'");
          }
        }
      } else if (!is_remote_url(p)) {
        return usage_error(cmd, "--storage-option applies to s3:// SOURCEs only, found '" +
                                    path_for_message(p) + "'");
      }
      // Sealed at once: the SOURCE handed on names the URL's secrets by handle.
      p = seal_credentials(p + (p.find('?') == std::string::npos ? "?" : "&") + it->second);
    }
    out->opts.erase(it);
  }
  return std::nullopt;
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
    // A C1 control or a bidirectional override or isolate: JSON may carry them raw, but a
    // terminal showing the output may take the one for a control (U+009B for CSI) and
    // reorder the line at the other; escaped, they decode the same.
    const Utf8Sequence seq = utf8_sequence_at(bytes, i);
    if (seq.length == 0) {
      escape(0xdc00 + c);
      ++i;
    } else {
      if (acts_on_a_terminal(seq.code_point)) {
        escape(seq.code_point);
      } else {
        out.append(bytes, i, seq.length);
      }
      i += seq.length;
    }
  }
  out += '"';
  return out;
}

namespace {

// Only the columnar readers decode into another type; every other format reads its stored one.
bool decodes_into(Format f) { return f == Format::kParquet || f == Format::kArrow; }

std::string astype_refusal(Format f) {
  return std::string(
             "--astype: only parquet and arrow decode into another type, and the data "
             "is ") +
         format_name(f) + " (for raw files, --dtype is their stored type)";
}

}  // namespace

Status parse_format_options(const std::map<std::string, std::string>& opts, FormatOptions* out) {
  auto get = [&](const char* k) -> const std::string* {
    auto it = opts.find(k);
    return it == opts.end() ? nullptr : &it->second;
  };
  if (const auto* v = get("format")) {
    SHARDLOAD_ASSIGN_OR_RETURN(out->format, parse_format(*v));
  }
  const auto* dtype = get("dtype");
  const auto* astype = get("astype");
  if (dtype != nullptr && astype != nullptr) {
    return {ErrorCode::kInvalidArgument,
            "--astype '" + *astype + "' and --dtype '" + *dtype +
                "': give one (--dtype is the stored type of raw files, --astype the type "
                "parquet/arrow decode into)"};
  }
  if (dtype != nullptr) SHARDLOAD_RETURN_IF_ERROR(set_dtype_option(*dtype, out));
  if (astype != nullptr) {
    // The read-as type of the parquet/arrow decode, which FormatOptions::dtype carries there.
    auto parsed = parse_dtype(*astype);
    if (!parsed) return {ErrorCode::kInvalidArgument, "--astype: " + parsed.status().message()};
    out->dtype = *parsed;
  }
  if (astype != nullptr && out->format != Format::kAuto && !decodes_into(out->format)) {
    return {ErrorCode::kInvalidArgument, astype_refusal(out->format)};
  }
  // The rest by the table: each flag's text parsed by its kind, the one parser.
  for (const auto& row : format_option_table()) {
    if (row.kind == OptionKind::kDType) continue;  // --dtype and --astype above
    std::string flag = row.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    const auto* v = get(flag.c_str());
    if (v == nullptr) continue;
    auto value = parse_option_text(row.kind, *v);
    if (!value) {
      return {ErrorCode::kInvalidArgument, "--" + flag + ": " + value.status().message()};
    }
    if (Status st = row.set(*value, out); !st) {
      return {ErrorCode::kInvalidArgument, "--" + flag + ": " + st.message()};
    }
  }
  return Status::ok();
}

std::optional<int> check_type_options(const char* cmd,
                                      const std::map<std::string, std::string>& opts,
                                      Format format) {
  if (opts.count("astype") != 0 && !decodes_into(format)) {
    return usage_error(cmd, astype_refusal(format));
  }
  if (const auto it = opts.find("dtype"); it != opts.end() && decodes_into(format)) {
    std::cerr << "shardload " << cmd << ": note: --dtype is deprecated for " << format_name(format)
              << " data, where it is the type to decode into; pass --astype " << it->second << "\n";
  }
  return std::nullopt;
}

std::optional<int> check_type_options_after_failure(const char* cmd,
                                                    const std::map<std::string, std::string>& opts,
                                                    const Source& source, DiscoverOptions options) {
  if (opts.count("astype") == 0 || options.format.format != Format::kAuto) return std::nullopt;
  // Only on this error path: the format without the read-as type, which the readers of other
  // formats refuse as an option that does not apply.
  options.format.dtype.reset();
  options.use_manifest = false;
  const auto found = try_discover(source, options);
  if (!found || decodes_into(found->format)) return std::nullopt;
  return usage_error(cmd, astype_refusal(found->format));
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

}  // namespace shardload::cli
