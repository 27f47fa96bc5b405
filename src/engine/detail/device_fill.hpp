// What the device fill's files share: the staging pool and its options (staging_pool.cc), the
// reader threads (reader_threads.cc), the staged pipeline (device_fill.cc) and the strided
// fill (device_fill_strided.cc).
#pragma once

#include <cstdint>
#include <string>

#include "shardload/status.hpp"

namespace shardload::detail {

// A whole decimal number in [lo, hi] from the environment variable `var` into *out; *out is
// left as it is when the variable is unset. kInvalidArgument naming the variable otherwise.
Status env_number(const char* var, std::uint64_t lo, std::uint64_t hi, std::uint64_t* out);

// "[lo, hi)", for messages that name rows.
inline std::string rows_string(std::int64_t lo, std::int64_t hi) {
  // Appended, not "[" + ...: GCC 12 warns falsely (-Wrestrict) on that once inlined.
  std::string s = "[";
  s += std::to_string(lo);
  s += ", ";
  s += std::to_string(hi);
  s += ")";
  return s;
}

}  // namespace shardload::detail
