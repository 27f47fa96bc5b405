#include "readers/detail/write_files.hpp"

#include <cerrno>
#include <cstring>

namespace shardload::detail {

Status sys_error(const std::string& path, const std::string& what, int err) {
  return file_error(ErrorCode::kIo, path, what + ": " + std::strerror(err), err);
}

std::string json_int_list(const std::vector<std::int64_t>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(values[i]);
  }
  return s + "]";
}

}  // namespace shardload::detail
