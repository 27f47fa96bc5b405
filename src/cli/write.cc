// `shardload write` under Legate: the demo dataset is made in a distributed array by a synth
// task per tile and written by shardload::save, the same parallel path, temporary directory
// and final rename as any save; _meta.json goes in last, before the rename.
#include <legate.h>

#include <iostream>

#include "cli/commands.hpp"
#include "shardload/save.hpp"
#include "shardload/synth_array.hpp"

namespace shardload::cli {

int cmd_write_legate(const WriteArgs& a) {
  legate::start();
  const bool speaks = legate::Runtime::get_runtime()->node_id() == 0;
  int rc = 1;
  try {
    const auto rows = write_rows_per_shard(a);
    const std::vector<std::int64_t> shape(a.shape.begin(), a.shape.end());
    const legate::LogicalArray array =
        make_synth_array(a.dtype, shape, static_cast<std::uint64_t>(a.seed));
    SaveOptions opts;
    opts.shard_rows = rows;
    opts.format = SaveFormat::kNpy;
    // An earlier write's (or save's) dataset is replaced; a directory with other files is
    // refused rather than emptied.
    opts.overwrite = true;
    opts.extra_files = {{"_meta.json", write_meta_json(a, rows)}};
    save(array, a.dir, opts);
    if (speaks) std::cout << write_summary(a);
    rc = 0;
  } catch (const Error& e) {
    if (speaks) {
      std::cerr << "shardload write: error: " << cli_spelling(e.status().message()) << "\n";
    }
  }
  const int finish = legate::finish();
  return rc != 0 ? rc : finish;
}

}  // namespace shardload::cli
