// The subcommands of the `shardload` program. Each returns the process exit
// code and prints its own errors; none throws.
#pragma once

#include <string>
#include <vector>

namespace shardload::cli {

using Args = std::vector<std::string>;

int cmd_write(const Args& args);
int cmd_inspect(const Args& args);

// Parses "a,b,c" into integers; false on anything else.
bool parse_int_list(const std::string& text, std::vector<long long>* out);

}  // namespace shardload::cli
