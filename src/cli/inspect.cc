// `shardload inspect`: the discovered layout of a source, as text or JSON (no Legate).
#include <iostream>
#include <ostream>

#include "cli/commands.hpp"
#include "shardload/layout.hpp"
#include "shardload/source.hpp"

namespace shardload::cli {

namespace {

void json_int_list(std::ostream& o, const std::vector<std::int64_t>& v) {
  o << "[";
  for (std::size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
}

// The layout as one JSON object; names follow the Python Layout's properties. Paths are shown
// as every message shows them, their secrets redacted: the output is for reading, and is
// often kept (a log, a ticket); the URLs to load stay the ones given.
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
    o << (i ? "," : "") << "\n    {\"path\": " << json_path_string(redact_secrets(s.path))
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
    return usage_error(cmd, s.message());
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
  if (Status s = parse_discover_options(p, &opts); !s) return usage_error(cmd, s.message());
  auto layout = try_discover(*src, opts);
  if (!layout) {
    if (auto rc = check_type_options_after_failure(cmd, p.opts, *src, opts)) return *rc;
    return fail(cmd, "loading " + src->describe() + ": " + layout.status().message());
  }
  if (auto rc = check_type_options(cmd, p.opts, layout->format)) return *rc;
  if (p.flags.count("json") != 0) {
    print_json(std::cout, *src, *layout);
  } else {
    std::cout << "source:         " << printable(src->describe()) << "\n";
    if (layout->manifest_state != ManifestState::kNone &&
        layout->manifest_state != ManifestState::kAbsent) {
      std::cout << printable_redacted(spell_options(layout->manifest_status, OptionSpelling::kCli))
                << "\n";
    }
    std::cout << describe(*layout);
  }
  return 0;
}

}  // namespace shardload::cli
