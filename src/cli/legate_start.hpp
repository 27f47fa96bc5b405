// legate::start() for the program's commands, and the lines it prints when Legate cannot start.
#pragma once

#include <string>

namespace shardload::cli {

// legate::start(), with what Legate writes to stderr while it starts held back until the start
// returns, then passed on as it was. An unknown flag in LEGATE_CONFIG makes Legate print its
// whole usage (over 160 lines) and exit(1) from inside the start, past any handler of
// `command`; such an exit prints the two lines of start_failure instead, with Legate's status.
// A start that throws is the caller's to report (start_failure with the exception's first line).
void start_legate(const std::string& command);

// "shardload COMMAND: Legate could not start: FIRST\nshardload COMMAND: it was given ...; set
// LEGATE_CONFIG to ...\n": Legate's first line, the configuration it was given and the fix.
std::string start_failure(const std::string& command, const std::string& first);

}  // namespace shardload::cli
