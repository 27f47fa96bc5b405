// What the format writers' metadata and save's file steps share: a system error naming a
// path, and JSON lists of integers. (A save's bytes go through the store's sinks.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardload/status.hpp"

namespace shardload::detail {

// kIo naming `path`, "what: strerror(err)", with the errno.
Status sys_error(const std::string& path, const std::string& what, int err);

// "[1, 2, 3]": the spelling of an integer list in the metadata shardload writes.
std::string json_int_list(const std::vector<std::int64_t>& values);

}  // namespace shardload::detail
