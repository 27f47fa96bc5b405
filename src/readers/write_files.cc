#include "readers/detail/write_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/detail/bytes.hpp"

namespace shardload::detail {

Status sys_error(const std::string& path, const std::string& what, int err) {
  return file_error(ErrorCode::kIo, path, what + ": " + std::strerror(err), err);
}

Status create_file(const std::string& path, const std::string& head, std::int64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0) return sys_error(path, "cannot create", errno);
  Status st = head.empty() ? Status::ok() : write_all(fd, path, head.data(), head.size(), 0);
  if (st && ::ftruncate(fd, size) != 0) {
    st = sys_error(path, "cannot size to " + std::to_string(size) + " bytes", errno);
  }
  if (::close(fd) != 0 && st) st = sys_error(path, "close failed", errno);
  return st;
}

Status write_text(const std::string& path, const std::string& text) {
  return create_file(path, text, static_cast<std::int64_t>(text.size()));
}

Status write_file_at(const std::string& path, std::int64_t offset, const std::byte* src,
                     std::size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return sys_error(path, "cannot open for writing", errno);
  Status st = write_all(fd, path, src, n, offset);
  if (::close(fd) != 0 && st) st = sys_error(path, "close failed", errno);
  return st;
}

std::string json_int_list(const std::vector<std::int64_t>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(values[i]);
  }
  return s + "]";
}

}  // namespace shardload::detail
