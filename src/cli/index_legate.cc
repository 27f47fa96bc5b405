// `shardload index DIR` on several ranks: every rank runs the program, so each would probe
// every shard (and with checksums read every byte) and upload the same manifest; here one
// point task discovers and one writes, and every rank reports the same outcome.
#include <legate.h>

#include <iostream>

#include "cli/commands.hpp"
#include "cli/legate_start.hpp"
#include "shardload/errors.hpp"
#include "shardload/manifest_legate.hpp"

namespace shardload::cli {

int cmd_index_legate(const Args& args) {
  start_legate("index");
  int rc = 1;
  {
    RankStreams io;
    // cmd_index prints to the standard streams: on ranks but the first, to nothing.
    std::streambuf* const out = std::cout.rdbuf(io.out.rdbuf());
    std::streambuf* const err = std::cerr.rdbuf(io.err.rdbuf());
    IndexSteps steps;
    steps.discover = [](const std::string& source, const std::string& pattern, const Source&,
                        const DiscoverOptions& options) -> Result<Layout> {
      try {
        return discover_once(source, pattern, options);
      } catch (const Error& e) {
        return e.status();  // "loading SOURCE: ...", as the discovering point says it
      }
    };
    steps.write = [](const Layout& layout, const std::string& directory,
                     const ManifestOptions& options) -> Result<std::string> {
      try {
        return write_manifest_once(layout, directory, options);
      } catch (const Error& e) {
        return e.status();
      }
    };
    steps.takes_io = false;
    rc = cmd_index(args, steps);
    std::cout.rdbuf(out);
    std::cerr.rdbuf(err);
  }
  const int finish = legate::finish();
  return rc != 0 ? rc : finish;
}

}  // namespace shardload::cli
