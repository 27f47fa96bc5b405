// `shardload verify`: checks the shards against their manifest's checksums in a Legate task and
// names every file that differs.
#include <sys/stat.h>

#include <iostream>
#include <ostream>
#include <string>

#include "cli/commands.hpp"
#include "cli/legate_start.hpp"
#include "cli/progress.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/io.hpp"
#include "shardload/legate.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest.hpp"
#include "shardload/manifest_legate.hpp"
#include "shardload/source.hpp"

namespace shardload::cli {

int cmd_verify(const Args& args) {
  const char* cmd = "verify";
  Parsed p;
  if (auto rc = parse_command_line(*find_command(cmd), args, &p)) return *rc;
  if (p.positional.size() != 1) {
    std::cerr << "shardload verify: expected one DIR or MANIFEST; see 'shardload verify --help'\n";
    return 2;
  }
  std::int64_t groups = 0;
  if (auto it = p.opts.find("groups"); it != p.opts.end()) {
    // The integers of every command: no spaces or '+' (std::stoll took " 3" and "+3").
    long long g = 0;
    if (!parse_int(it->second, &g) || g < 1) {
      std::cerr << "shardload verify: --groups: expected an integer >= 1, found '" << it->second
                << "'; see 'shardload verify --help'\n";
      return 2;
    }
    groups = g;
  }
  // A directory means its manifest; anything else is the manifest file itself. A URL is a
  // directory unless its key names the manifest (object storage and HTTP have no stat).
  std::string path = p.positional[0];
  // Spelled as discovery checks it: a mistyped URL is refused, not looked for as a file.
  if (Status st = check_source(Source::directory(path)); !st) return source_error(cmd, st);
  struct ::stat st {};
  if (!path_traits(path).kernel_files) {
    const std::string key = split_options(path).first;
    const std::string name = "/" + std::string(kManifestName);
    if (key.size() < name.size() || key.compare(key.size() - name.size(), name.size(), name) != 0) {
      path = manifest_path(path);
    }
  } else if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    path = manifest_path(path);
  }
  start_legate("verify");
  interrupt_on_sigint();  // again: the runtime installs a handler of its own
  RankStreams io;
  std::ostream& out = io.out;
  std::ostream& err = io.err;
  int rc = 1;
  try {
    // The tasks report nothing as they end: the bar counts this process's bytes read, of the
    // shards' bytes the manifest lists (read only for the bar; verify_manifest reads it again).
    std::uint64_t bytes = 0;
    const bool bar_on = stderr_is_terminal();
    if (bar_on) {
      if (auto m = read_manifest(path)) {
        for (const auto& s : m->layout.shards) bytes += s.snapshot.size;
      }
    }
    TerminalBar bar("verify", bytes, 0, "", bar_on && bytes > 0);
    IoTicker ticker(&bar, false);
    const VerifyReport r = verify_manifest(path, groups);
    ticker.stop();
    bar.finish();
    // The core marks the options a message names (a stale manifest's reason from discovery);
    // the command line spells them as its flags, as every other message of it does.
    std::size_t stale = 0;
    for (const auto& m : r.mismatches) {
      err << "shardload verify: " << printable_redacted(m.path) << ": "
          << printable(spell_options(m.what, OptionSpelling::kCli)) << "\n";
      if (m.path == path) ++stale;  // the manifest itself, not a shard
    }
    if (r.mismatches.empty()) {
      out << "verified " << r.shards << " shards in " << r.groups
          << " groups: every checksum matches\n";
      rc = 0;
    } else {
      const std::size_t differ = r.mismatches.size() - r.added - stale;
      if (differ == 0 && r.added == 0) {
        // No shard differs: discovery's reason (a sidecar changed or gone) is the error.
        err << "shardload verify: error: every one of the " << r.shards
            << " shards matches its checksum, but discovery calls " << printable_redacted(path)
            << " stale";
      } else {
        err << "shardload verify: error: " << differ << " of " << r.shards << " shards differ from "
            << printable_redacted(path);
      }
      if (r.added != 0) {
        err << ", and " << r.added << (r.added == 1 ? " shard" : " shards") << " of the directory "
            << (r.added == 1 ? "is" : "are") << " not in it";
      }
      err << "\n";
    }
  } catch (const Error& e) {
    // What an interrupt made fail is reported by main as the interrupt.
    if (!interrupt_requested()) {
      err << "shardload " << cmd << ": error: " << e.message(OptionSpelling::kCli) << "\n";
    }
  }
  const int finish = legate::finish();
  return rc != 0 ? rc : finish;
}

}  // namespace shardload::cli
