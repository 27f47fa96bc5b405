#include "cli/commands.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>

#include "readers/detail/json.hpp"
#include "shardload/layout.hpp"
#include "shardload/source.hpp"
#include "shardload/synth.hpp"

namespace shardload::cli {

namespace {

// --name value pairs and positionals; unknown flags are errors.
struct Parsed {
  std::map<std::string, std::string> opts;
  std::vector<std::string> positional;
};

bool parse(const Args& args, const std::vector<std::string>& known, Parsed* out, const char* cmd) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0) {
      std::string name = a.substr(2);
      std::string value;
      const auto eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        std::cerr << "shardload " << cmd << ": --" << name << " needs a value\n";
        return false;
      }
      bool ok = false;
      for (const auto& k : known) ok = ok || k == name;
      if (!ok) {
        std::cerr << "shardload " << cmd << ": unknown option --" << name << "\n";
        return false;
      }
      out->opts[name] = value;
    } else {
      out->positional.push_back(a);
    }
  }
  return true;
}

bool parse_int(const std::string& s, long long* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

int fail(const char* cmd, const std::string& msg) {
  std::cerr << "shardload " << cmd << ": error: " << msg << "\n";
  return 1;
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

const std::vector<std::string>& format_option_names() {
  static const std::vector<std::string> names{
      "format", "dtype", "trailing-shape", "header-bytes", "dataset", "columns", "fill-value"};
  return names;
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
    if (v->empty() || end != v->c_str() + v->size()) {
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

int cmd_write(const Args& args) {
  const char* cmd = "write";
  Parsed p;
  if (!parse(args, {"shard-dir", "num-shards", "shape", "dtype", "seed"}, &p, cmd)) return 2;
  for (const char* req : {"shard-dir", "num-shards", "shape"}) {
    if (p.opts.count(req) == 0) return fail(cmd, std::string("--") + req + " is required");
  }
  const std::string dir = p.opts["shard-dir"];
  long long shards = 0;
  long long seed = 0;
  std::vector<long long> shape;
  if (!parse_int(p.opts["num-shards"], &shards) || shards < 1) {
    return fail(cmd,
                "--num-shards: expected an integer >= 1, found '" + p.opts["num-shards"] + "'");
  }
  if (p.opts.count("seed") != 0 && !parse_int(p.opts["seed"], &seed)) {
    return fail(cmd, "--seed: expected an integer, found '" + p.opts["seed"] + "'");
  }
  if (!parse_int_list(p.opts["shape"], &shape) || shape.size() > 8) {
    return fail(
        cmd, "--shape: expected ROWS[,DIM...] (1 to 8 integers), found '" + p.opts["shape"] + "'");
  }
  for (const auto d : shape) {
    if (d < 0) return fail(cmd, "--shape: dimensions must be >= 0");
  }
  auto dtype = parse_dtype(p.opts.count("dtype") != 0 ? p.opts["dtype"] : "float32");
  if (!dtype) return fail(cmd, "--dtype: " + dtype.status().message());

  ::mkdir(dir.c_str(), 0755);
  struct ::stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(cmd, dir + ": cannot create the shard directory");
  }
  if (Status s = remove_stale(dir); !s) return fail(cmd, s.message());

  const auto rows = synth_split(static_cast<std::uint64_t>(seed), shape[0], shards);
  std::uint64_t row_elements = 1;
  for (std::size_t i = 1; i < shape.size(); ++i)
    row_elements *= static_cast<std::uint64_t>(shape[i]);
  const NumberPattern pat{"shard_", 4, ".npy"};
  std::uint64_t first_row = 0;
  for (long long i = 0; i < shards; ++i) {
    NpyWriteSpec spec{*dtype, {rows[static_cast<std::size_t>(i)]}};
    spec.shape.insert(spec.shape.end(), shape.begin() + 1, shape.end());
    const std::string path = dir + "/" + pat.format(i);
    if (Status s =
            write_npy(path, spec, static_cast<std::uint64_t>(seed), first_row * row_elements);
        !s) {
      return fail(cmd, s.message());
    }
    first_row += static_cast<std::uint64_t>(rows[static_cast<std::size_t>(i)]);
  }
  // The metadata goes last: its presence means the set is complete.
  const std::string meta = dir + "/_meta.json";
  {
    std::ofstream m(meta + ".tmp");
    m << "{\"seed\": " << seed << ", \"dtype\": \"" << dtype->name() << "\", \"shape\": [";
    for (std::size_t i = 0; i < shape.size(); ++i) m << (i ? ", " : "") << shape[i];
    m << "], \"num_shards\": " << shards << ", \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) m << (i ? ", " : "") << rows[i];
    m << "]}\n";
    if (!m) return fail(cmd, meta + ": write failed");
  }
  if (std::rename((meta + ".tmp").c_str(), meta.c_str()) != 0) {
    return fail(cmd, meta + ": rename failed");
  }
  std::cout << "wrote " << shards << " shards to " << dir << ": shape "
            << "(";
  for (std::size_t i = 0; i < shape.size(); ++i) std::cout << (i ? ", " : "") << shape[i];
  std::cout << (shape.size() == 1 ? ",)" : ")") << " " << dtype->name() << ", seed " << seed
            << "\n";
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

int cmd_inspect(const Args& args) {
  const char* cmd = "inspect";
  Parsed p;
  std::vector<std::string> known{"pattern"};
  known.insert(known.end(), format_option_names().begin(), format_option_names().end());
  if (!parse(args, known, &p, cmd)) return 2;
  if (p.positional.empty())
    return fail(cmd, "expected SOURCE (a directory, pattern, glob or file)");
  DiscoverOptions opts;
  if (Status s = parse_format_options(p.opts, &opts.format); !s) return fail(cmd, s.message());
  Result<Source> src = p.positional.size() == 1 ? Source::parse(p.positional[0], p.opts["pattern"])
                                                : Result<Source>(Source::list(p.positional));
  if (!src) return fail(cmd, src.status().message());
  auto layout = discover(*src, opts);
  if (!layout) return fail(cmd, "loading " + src->describe() + ": " + layout.status().message());
  std::cout << "source:         " << src->describe() << "\n" << describe(*layout);
  return 0;
}

}  // namespace shardload::cli
