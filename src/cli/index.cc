// `shardload index DIR`: discovers DIR by probing and writes its manifest.
#include <iostream>

#include "cli/commands.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"
#include "shardload/source.hpp"

namespace shardload::cli {

IndexSteps local_index_steps() {
  return {[](const std::string&, const std::string&, const Source& parsed,
             const DiscoverOptions& options) -> Result<Layout> {
            auto layout = try_discover(parsed, options);
            if (!layout) return layout.status().with_context("loading " + parsed.describe());
            return layout;
          },
          [](const Layout& layout, const std::string& directory, const ManifestOptions& options) {
            return write_manifest(layout, directory, options);
          }};
}

int cmd_index(const Args& args, const IndexSteps& steps) {
  const char* cmd = "index";
  Parsed p;
  if (auto rc = parse_command_line(*find_command(cmd), args, &p)) return *rc;
  if (p.positional.size() != 1) {
    return usage_error(cmd, "expected one DIR, the directory that holds the shards");
  }
  DiscoverOptions opts;
  opts.use_manifest = false;  // the files themselves, not the manifest being replaced
  if (Status s = parse_format_options(p.opts, &opts.format); !s) {
    return usage_error(cmd, s.message());
  }
  ManifestOptions mopts;
  if (auto c = parse_checksum(p.opts["checksum"]); c) {
    mopts.checksum = *c;
  } else {
    return usage_error(cmd, "--checksum: " + c.status().message());
  }
  mopts.pattern = p.opts["pattern"];
  // Before discovery, which would only say that HTTP has no listing.
  if (Status st = check_manifest_writable(p.positional[0]); !st) return fail(cmd, st.message());
  Result<Source> src = Source::parse(p.positional[0], mopts.pattern);
  if (!src) return source_error(cmd, src.status());
  if (src->kind != Source::Kind::kDirectory) {
    return fail(cmd, path_for_message(p.positional[0]) +
                         ": a manifest is written into the directory of the shards; give that "
                         "directory (with --pattern for another numbering)");
  }
  auto layout = steps.discover(p.positional[0], mopts.pattern, *src, opts);
  if (!layout) {
    if (auto rc = check_type_options_after_failure(cmd, p.opts, *src, opts)) return *rc;
    return fail(cmd, layout.status().message());
  }
  if (auto rc = check_type_options(cmd, p.opts, layout->format)) return *rc;
  auto written = steps.write(*layout, src->dir_path, mopts);
  if (!written) return fail(cmd, "indexing " + src->describe() + ": " + written.status().message());
  std::cout << "wrote " << redact_secrets(path_for_message(*written)) << ": "
            << layout->shards.size() << " shards, " << layout->total_rows() << " rows, checksums "
            << checksum_name(mopts.checksum) << "\n";
  return 0;
}

}  // namespace shardload::cli
