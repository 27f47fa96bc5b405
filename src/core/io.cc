#include "shardload/io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace shardload {

namespace {

class PosixIo final : public IoBackend {
 public:
  Result<int> open(const std::string& path) override {
    int fd = -1;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      const int err = errno;
      return Status(ErrorCode::kIo, path + ": cannot open: " + std::strerror(err));
    }
    return fd;
  }

  Result<FileInfo> stat(int fd, const std::string& path) override {
    struct ::stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      return Status(ErrorCode::kIo, path + ": cannot stat: " + std::strerror(err));
    }
    FileInfo info;
    info.size = static_cast<std::uint64_t>(st.st_size);
    info.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    info.regular = S_ISREG(st.st_mode);
    info.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
    info.inode = static_cast<std::uint64_t>(st.st_ino);
    return info;
  }

  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) override {
    const ssize_t got = ::pread(fd, buf, n, static_cast<off_t>(offset));
    return got < 0 ? -static_cast<std::int64_t>(errno) : static_cast<std::int64_t>(got);
  }

  void close(int fd) override { ::close(fd); }
};

}  // namespace

IoBackend& posix_io() {
  static PosixIo io;
  return io;
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    reset();
    io_ = o.io_;
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

void File::reset() {
  if (fd_ >= 0 && io_ != nullptr) io_->close(fd_);
  fd_ = -1;
}

Result<File> File::open(IoBackend& io, const std::string& path) {
  auto fd = io.open(path);
  if (!fd) return fd.status();
  return File(&io, *fd, path);
}

Status File::read_exact(void* dst, std::size_t n, std::uint64_t offset) const {
  auto* out = static_cast<std::byte*>(dst);
  std::size_t done = 0;
  // Large reads are split so that one call never exceeds what Linux returns
  // in one go (2 GiB - 4 KiB); the loop also handles partial reads.
  constexpr std::size_t kMaxRead = std::size_t{1} << 30;
  while (done < n) {
    const std::size_t want = std::min(n - done, kMaxRead);
    const std::int64_t got = io_->pread(fd_, out + done, want, offset + done);
    if (got < 0) {
      if (got == -EINTR) continue;
      return {ErrorCode::kIo, path_ + ": read of " + std::to_string(n) + " bytes at offset " +
                                  std::to_string(offset) + " failed after " + std::to_string(done) +
                                  " bytes: " + std::strerror(static_cast<int>(-got))};
    }
    if (got == 0) {
      return {ErrorCode::kIo, path_ + ": short read at offset " + std::to_string(offset) +
                                  ": expected " + std::to_string(n) + " bytes, got " +
                                  std::to_string(done) + " (file truncated?)"};
    }
    done += static_cast<std::size_t>(got);
  }
  return Status::ok();
}

}  // namespace shardload
