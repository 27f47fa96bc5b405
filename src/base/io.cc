#include "shardload/io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace shardload {

namespace {

std::atomic<RemoteIo*> g_store{nullptr};
std::atomic<PathRouter> g_router{nullptr};

FileInfo info_from_stat(const struct ::stat& st) {
  FileInfo info;
  info.size = static_cast<std::uint64_t>(st.st_size);
  info.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  info.regular = S_ISREG(st.st_mode);
  info.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  info.inode = static_cast<std::uint64_t>(st.st_ino);
  return info;
}

// Only regular files are ever read. The open itself must not block or take
// over anything: O_NONBLOCK makes a FIFO without a writer open at once (a
// plain open waits for a writer forever) and O_NOCTTY keeps a terminal from
// becoming ours; the descriptor is then refused unless fstat says it is a
// regular file. Checking the descriptor rather than the name leaves no window
// in which the name could be swapped for something else. `st`: what that
// fstat found, for callers that want the snapshot too.
Result<int> open_regular_stat(const std::string& path, int flags, int* open_errno,
                              struct ::stat* st_out) {
  if (open_errno != nullptr) *open_errno = 0;
  if (path.find('\0') != std::string::npos) {
    return Status(ErrorCode::kInvalidArgument,
                  path_for_message(path) + ": the path holds a NUL character");
  }
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags | O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    if (open_errno != nullptr) *open_errno = err;
    // A socket cannot be opened at all (ENXIO); say what it is instead.
    struct ::stat st {};
    if (err == ENXIO && ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return file_error(ErrorCode::kIo, path, "not a regular file");
    }
    return file_error(ErrorCode::kIo, path, std::string("cannot open: ") + std::strerror(err), err);
  }
  struct ::stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return file_error(ErrorCode::kIo, path, std::string("cannot stat: ") + std::strerror(err), err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return file_error(ErrorCode::kIo, path, "not a regular file");
  }
  // Reads of a regular file never return EAGAIN, but the flag has no business
  // on a descriptor that others (Arrow, cuFile) may read from.
  const int now = ::fcntl(fd, F_GETFL);
  if (now < 0 || ::fcntl(fd, F_SETFL, now & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return Status(ErrorCode::kIo, path + ": cannot clear O_NONBLOCK: " + std::strerror(err));
  }
  if (st_out != nullptr) *st_out = st;
  return fd;
}

}  // namespace

Result<int> open_regular(const std::string& path, int flags, int* open_errno) {
  return open_regular_stat(path, flags, open_errno, nullptr);
}

Result<int> IoBackend::open_known(const std::string& path, const FileInfo& /*snapshot*/) {
  return open(path);
}

Result<int> IoBackend::open_whole(const std::string& path, FileInfo* info,
                                  std::size_t /*expected*/) {
  return open_stat(path, info);
}

Result<int> IoBackend::open_tail(const std::string& path, FileInfo* info, std::size_t /*tail*/) {
  return open_stat(path, info);
}

Result<int> IoBackend::open_stat(const std::string& path, FileInfo* info) {
  SHARDLOAD_ASSIGN_OR_RETURN(const int fd, open(path));
  auto st = stat(fd, path);
  if (!st) {
    close(fd);
    return st.status();
  }
  *info = *st;
  return fd;
}

std::string path_for_message(const std::string& path) { return printable(path); }

std::string descriptor_path(int fd, const std::string& path) {
  // Checked once: /proc is either mounted for the whole process or not.
  static const bool have_proc = ::access("/proc/self/fd", X_OK) == 0;
  return have_proc ? "/proc/self/fd/" + std::to_string(fd) : path;
}

void set_store_io(RemoteIo* io) { g_store.store(io, std::memory_order_release); }

RemoteIo* store_io() { return g_store.load(std::memory_order_acquire); }

void set_path_router(PathRouter router) { g_router.store(router, std::memory_order_release); }

Result<RemoteIo*> routed_io(std::string_view path) {
  const PathRouter router = g_router.load(std::memory_order_acquire);
  if (router == nullptr) return static_cast<RemoteIo*>(nullptr);
  return router(path);
}

std::uint64_t remote_retries() {
  const RemoteIo* const r = store_io();
  return r != nullptr ? r->retries() : 0;
}

Status RemoteIo::write_object(const std::string& url, const void*, std::size_t) {
  return file_error(ErrorCode::kIo, url, "this object-storage backend cannot write objects");
}

Result<FileInfo> IoBackend::stat_path(const std::string& path) {
  SHARDLOAD_ASSIGN_OR_RETURN(RemoteIo* const routed, routed_io(path));
  if (routed != nullptr) return routed->stat_path(path);
  if (path.find('\0') != std::string::npos) {
    return Status(ErrorCode::kInvalidArgument,
                  path_for_message(path) + ": the path holds a NUL character");
  }
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return file_error(ErrorCode::kIo, path, std::string("cannot stat: ") + std::strerror(err), err);
  }
  return info_from_stat(st);
}

namespace {

class PosixIo final : public IoBackend {
 public:
  Result<int> open(const std::string& path) override {
    SHARDLOAD_ASSIGN_OR_RETURN(RemoteIo* const r, routed_io(path));
    if (r != nullptr) return r->open(path);
    return open_regular(path);
  }

  Result<int> open_known(const std::string& path, const FileInfo& snapshot) override {
    SHARDLOAD_ASSIGN_OR_RETURN(RemoteIo* const r, routed_io(path));
    if (r != nullptr) return r->open_known(path, snapshot);
    return open_regular(path);
  }

  // The fstat that refuses what is not a regular file is the snapshot: one call, not two.
  Result<int> open_stat(const std::string& path, FileInfo* info) override {
    SHARDLOAD_ASSIGN_OR_RETURN(RemoteIo* const r, routed_io(path));
    if (r != nullptr) return r->open_stat(path, info);
    struct ::stat st {};
    SHARDLOAD_ASSIGN_OR_RETURN(const int fd, open_regular_stat(path, 0, nullptr, &st));
    *info = info_from_stat(st);
    return fd;
  }

  Result<int> open_whole(const std::string& path, FileInfo* info, std::size_t expected) override {
    SHARDLOAD_ASSIGN_OR_RETURN(RemoteIo* const r, routed_io(path));
    if (r != nullptr) return r->open_whole(path, info, expected);
    return open_stat(path, info);
  }

  Result<int> open_tail(const std::string& path, FileInfo* info, std::size_t tail) override {
    SHARDLOAD_ASSIGN_OR_RETURN(RemoteIo* const r, routed_io(path));
    if (r != nullptr) return r->open_tail(path, info, tail);
    return open_stat(path, info);
  }

  Result<FileInfo> stat(int fd, const std::string& path) override {
    if (fd >= kRemoteFdBase) return store_io()->stat(fd, path);
    struct ::stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      return file_error(ErrorCode::kIo, path, std::string("cannot stat: ") + std::strerror(err),
                        err);
    }
    return info_from_stat(st);
  }

  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) override {
    t_routed_read = fd >= kRemoteFdBase;
    if (t_routed_read) return store_io()->pread(fd, buf, n, offset);
    const ssize_t got = ::pread(fd, buf, n, static_cast<off_t>(offset));
    return got < 0 ? -static_cast<std::int64_t>(errno) : static_cast<std::int64_t>(got);
  }

  void close(int fd) override {
    if (fd >= kRemoteFdBase) {
      store_io()->close(fd);
    } else {
      ::close(fd);
    }
  }

  // The adapter's words where this thread's last pread went there.
  std::string last_read_error() const override {
    return t_routed_read ? store_io()->last_read_error() : std::string();
  }

 private:
  static thread_local bool t_routed_read;
};

thread_local bool PosixIo::t_routed_read = false;

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

int File::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
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

Result<File> File::open_stat(IoBackend& io, const std::string& path, FileInfo* info) {
  auto fd = io.open_stat(path, info);
  if (!fd) return fd.status();
  return File(&io, *fd, path);
}

Result<File> File::open_whole(IoBackend& io, const std::string& path, FileInfo* info,
                              std::size_t expected) {
  auto fd = io.open_whole(path, info, expected);
  if (!fd) return fd.status();
  return File(&io, *fd, path);
}

Result<File> File::open_tail(IoBackend& io, const std::string& path, FileInfo* info,
                             std::size_t tail) {
  auto fd = io.open_tail(path, info, tail);
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
      std::string why = std::strerror(static_cast<int>(-got));
      // An errno says little of an HTTP failure: the backend's own words, where it gave some.
      const std::string said = io_->last_read_error();
      if (!said.empty()) why += " (" + said + ")";
      // ESTALE: the file or key is another one than the open found (a store's read under the
      // open's generation, an NFS file replaced on the server): a change, not a failing disk.
      return file_error(got == -ESTALE ? ErrorCode::kChanged : ErrorCode::kIo, path_,
                        "read of " + std::to_string(n) + " bytes at offset " +
                            std::to_string(offset) + " failed after " + std::to_string(done) +
                            " bytes: " + why,
                        static_cast<int>(-got));
    }
    if (got == 0) {
      return file_error(ErrorCode::kIo, path_,
                        "short read at offset " + std::to_string(offset) + ": expected " +
                            std::to_string(n) + " bytes, got " + std::to_string(done) +
                            " (file truncated?)");
    }
    done += static_cast<std::size_t>(got);
  }
  return Status::ok();
}

}  // namespace shardload
