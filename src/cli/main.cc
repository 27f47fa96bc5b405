// The `shardload` command line: write a demo dataset, inspect a layout, and
// (with Legate) read a dataset into a distributed array.
#include <iostream>
#include <string>

#include "cli/commands.hpp"

namespace {

void usage(std::ostream& o) {
  o << "usage: shardload <command> [options]\n"
       "  write   --shard-dir DIR --num-shards N --shape ROWS[,DIM...] [--dtype T] [--seed S]\n"
       "          write N .npy shards of deterministic data and _meta.json\n"
       "  inspect SOURCE [--pattern P] [--format F] [format options]\n"
       "          print the discovered layout of a directory, pattern, glob or file list\n"
       "  read    --shard-dir DIR [--pattern P] [--overdecompose K] [--no-verify] [--seed S]\n"
       "          [--repeat N]\n"
       "          [--format F] [format options]\n"
       "          load under Legate (LEGATE_CONFIG or the legate launcher), time it, verify\n"
       "          against the seed of _meta.json\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string cmd = argv[1];
  const shardload::cli::Args args(argv + 2, argv + argc);
  if (cmd == "write") return shardload::cli::cmd_write(args);
  if (cmd == "inspect") return shardload::cli::cmd_inspect(args);
  if (cmd == "read") {
#ifdef SHARDLOAD_WITH_LEGATE
    return shardload::cli::cmd_read(args);
#else
    std::cerr
        << "shardload read: this build has no Legate (configure with SHARDLOAD_WITH_LEGATE)\n";
    return 2;
#endif
  }
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    usage(std::cout);
    return 0;
  }
  std::cerr << "shardload: unknown command '" << cmd << "'\n";
  usage(std::cerr);
  return 2;
}
