// The rank-0 streams of the commands that run under Legate (commands.hpp).
#include <legate.h>

#include <iostream>

#include "cli/commands.hpp"
#include "cli/progress.hpp"

namespace shardload::cli {

RankStreams::RankStreams()
    : speaks(legate::Runtime::get_runtime()->node_id() == 0),
      out(speaks ? std::cout : null_),
      err(speaks ? std::cerr : null_) {
  if (!speaks) silence_progress();
}

}  // namespace shardload::cli
