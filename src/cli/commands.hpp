// The subcommands of the `shardload` program. Each returns the process exit
// code and prints its own errors; none throws.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardload/format.hpp"
#include "shardload/status.hpp"

namespace shardload::cli {

using Args = std::vector<std::string>;

int cmd_write(const Args& args);
int cmd_inspect(const Args& args);
#ifdef SHARDLOAD_WITH_LEGATE
int cmd_read(const Args& args);
#endif

// The options that select a format and what to read from it, shared by the
// commands that discover a layout: --format, --dtype, --trailing-shape,
// --header-bytes, --dataset, --columns, --fill-value.
const std::vector<std::string>& format_option_names();
Status parse_format_options(const std::map<std::string, std::string>& opts, FormatOptions* out);

// What `shardload write` recorded in DIR/_meta.json for `shardload read` to
// verify against. A missing file, or one without a seed, gives no seed; a file
// that is not such JSON (too large, nested too deep, a seed that is not an
// integer) is a kFormat error naming it.
struct WriteMeta {
  std::optional<long long> seed;
  std::string dtype;  // empty when not recorded
};
Result<WriteMeta> read_write_meta(const std::string& dir);

// Parses "a,b,c" into integers; false on anything else.
bool parse_int_list(const std::string& text, std::vector<long long>* out);

}  // namespace shardload::cli
