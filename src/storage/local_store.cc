// The local POSIX driver: a directory, its keys the paths below it, read through posix_io()
// (so a FIFO or device is refused without blocking, as the readers refuse it).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "shardload/io.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/stores.hpp"

namespace shardload::detail {
namespace {

std::string sys_what(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

// A descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// The directory that holds `key`'s last segment, opened by walking the key's directories from
// the store's own without following a link: a directory of the store that is a link (to a
// place outside the location), or is switched to one meanwhile, would let a key write, replace
// or delete a file there. `create` makes the directories that are missing.
Result<Fd> open_parent(const std::string& root, const std::string& key, bool create) {
  Fd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) {
    const int err = errno;
    return file_error(ErrorCode::kIo, root, sys_what("cannot open the store's directory", err),
                      err);
  }
  for (std::size_t at = 0, slash = key.find('/'); slash != std::string::npos;
       at = slash + 1, slash = key.find('/', at)) {
    const std::string segment = key.substr(at, slash - at);
    const std::string where = root + "/" + key.substr(0, slash);
    int fd = ::openat(dir.get(), segment.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(dir.get(), segment.c_str(), 0777) != 0 && errno != EEXIST) {
        const int err = errno;
        return file_error(ErrorCode::kIo, where, sys_what("cannot create the directory", err), err);
      }
      fd = ::openat(dir.get(), segment.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      const int err = errno;
      struct ::stat st {};
      if (::fstatat(dir.get(), segment.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(st.st_mode)) {
        return file_error(ErrorCode::kInvalidArgument, where,
                          "store key '" + path_for_message(key) +
                              "': this directory of it is a symbolic link; a key does not "
                              "leave the store's location through a link",
                          ELOOP);
      }
      return file_error(ErrorCode::kIo, where, sys_what("cannot open the directory", err), err);
    }
    dir = Fd(fd);
  }
  return dir;
}

std::string leaf_of(const std::string& key) { return key.substr(key.rfind('/') + 1); }

class LocalStore final : public Store {
 public:
  explicit LocalStore(std::string dir) : dir_(std::move(dir)) {
    while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  }

  [[nodiscard]] std::string_view scheme() const override { return "file"; }
  [[nodiscard]] const std::string& location() const override { return dir_; }
  [[nodiscard]] std::string describe(std::string_view key) const override {
    return dir_ + "/" + std::string(key);
  }

  Result<KeyInfo> stat(std::string_view key) override {
    FileInfo info;
    // O_PATH: a stat needs no read permission, and opens nothing of a FIFO or device.
    SHARDLOAD_ASSIGN_OR_RETURN(const File file, open_key(key, &info, O_PATH));
    return KeyInfo{info.size, generation_of(info)};
  }

  Result<std::size_t> read(std::string_view key, std::uint64_t offset, std::span<std::byte> dst,
                           std::string_view if_generation) override {
    const std::string path = describe(key);
    FileInfo before;
    SHARDLOAD_ASSIGN_OR_RETURN(File file, open_key(key, &before, O_RDONLY | O_NONBLOCK | O_NOCTTY));
    if (!if_generation.empty() && generation_of(before) != if_generation) {
      return changed(path, if_generation, generation_of(before));
    }
    std::size_t done = 0;
    while (done < dst.size() && offset + done < before.size) {
      const std::int64_t got =
          posix_io().pread(file.fd(), dst.data() + done, dst.size() - done, offset + done);
      if (got < 0) {
        const int err = static_cast<int>(-got);
        return file_error(ErrorCode::kIo, path,
                          "read of " + std::to_string(dst.size()) + " bytes at offset " +
                              std::to_string(offset) + ": " + std::strerror(err),
                          err);
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    if (!if_generation.empty()) {
      // The bytes are the generation's only if the file still is it after the read.
      SHARDLOAD_ASSIGN_OR_RETURN(const FileInfo after, file.stat());
      if (generation_of(after) != if_generation) {
        return changed(path, if_generation, generation_of(after));
      }
    }
    return done;
  }

  Result<std::vector<std::string>> list(std::string_view prefix) override {
    SHARDLOAD_RETURN_IF_ERROR(detail::check_store_prefix(prefix));
    const std::string dir = prefix.empty() ? dir_ : describe(prefix.substr(0, prefix.size() - 1));
    // The prefix's directories walked as a key's are (open_parent): a linked one is refused.
    SHARDLOAD_ASSIGN_OR_RETURN(Fd parent, open_parent(dir_, std::string(prefix), false));
    DIR* d = ::fdopendir(parent.get());
    if (d == nullptr) {
      const int err = errno;
      return file_error(ErrorCode::kIo, dir, sys_what("cannot list the directory", err), err);
    }
    (void)parent.release();  // closedir closes it
    std::vector<std::string> keys;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct ::stat st {};
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone
      // A link to a file is a key (read as the file it names, as discovery reads a linked
      // shard); a link to a directory is no prefix: the keys below it are refused.
      if (S_ISLNK(st.st_mode) && ::fstatat(::dirfd(d), e->d_name, &st, 0) == 0 &&
          !S_ISREG(st.st_mode)) {
        continue;
      }
      if (S_ISREG(st.st_mode)) {
        keys.push_back(std::string(prefix) + name);
      } else if (S_ISDIR(st.st_mode)) {
        keys.push_back(std::string(prefix) + name + "/");
      }
    }
    ::closedir(d);
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  Status write(std::string_view key, std::span<const std::byte> data) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string k(key);
    const std::string path = describe(key);
    SHARDLOAD_ASSIGN_OR_RETURN(const Fd parent, open_parent(dir_, k, /*create=*/true));
    // Written beside the key and renamed over it: a reader opens the old file or the new one.
    static std::atomic<std::uint64_t> serial{0};
    const std::string leaf = leaf_of(k);
    const std::string tmp_leaf =
        leaf + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial.fetch_add(1));
    const std::string tmp = path + tmp_leaf.substr(leaf.size());
    const int fd = ::openat(parent.get(), tmp_leaf.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
      const int err = errno;
      return file_error(ErrorCode::kIo, tmp, sys_what("cannot create", err), err);
    }
    Status s = Status::ok();
    for (std::size_t done = 0; done < data.size() && s.is_ok();) {
      const ::ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        s = file_error(ErrorCode::kIo, tmp, sys_what("cannot write", err), err);
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    if (s.is_ok() && ::fsync(fd) != 0) {
      const int err = errno;
      s = file_error(ErrorCode::kIo, tmp, sys_what("cannot sync", err), err);
    }
    if (::close(fd) != 0 && s.is_ok()) {
      const int err = errno;
      s = file_error(ErrorCode::kIo, tmp, sys_what("cannot close", err), err);
    }
    if (s.is_ok() && ::renameat(parent.get(), tmp_leaf.c_str(), parent.get(), leaf.c_str()) != 0) {
      const int err = errno;
      s = file_error(ErrorCode::kIo, path, sys_what("cannot rename the written file over it", err),
                     err);
    }
    if (!s.is_ok()) ::unlinkat(parent.get(), tmp_leaf.c_str(), 0);
    return s;
  }

  Status remove(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string k(key);
    const std::string path = describe(key);
    Result<Fd> parent = open_parent(dir_, k, /*create=*/false);
    if (!parent) {
      // A directory of the key that does not exist: nothing to delete, as for a missing key.
      if (parent.status().sys_errno() == ENOENT) return Status::ok();
      return parent.status();
    }
    if (::unlinkat(parent->get(), leaf_of(k).c_str(), 0) != 0 && errno != ENOENT) {
      const int err = errno;
      return file_error(ErrorCode::kIo, path, sys_what("cannot delete", err), err);
    }
    return Status::ok();
  }

 private:
  // `key` opened for reading in the directory that holds it, reached as a write reaches it
  // (open_parent, never through a linked directory: a key does not leave the location; a
  // link in a key's last segment is followed to the file it names). Refuses, without
  // blocking, what is not a regular file. `flags`: the open's (O_PATH for a stat).
  Result<File> open_key(std::string_view key, FileInfo* info, int flags) const {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string k(key);
    const std::string path = describe(key);
    SHARDLOAD_ASSIGN_OR_RETURN(const Fd parent, open_parent(dir_, k, /*create=*/false));
    int fd = -1;
    do {
      fd = ::openat(parent.get(), leaf_of(k).c_str(), flags | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      const int err = errno;
      if (err == ENXIO) return file_error(ErrorCode::kIo, path, "not a regular file");  // socket
      return file_error(ErrorCode::kIo, path, sys_what("cannot open", err), err);
    }
    File file(&posix_io(), fd, path);
    SHARDLOAD_ASSIGN_OR_RETURN(*info, file.stat());
    if (!info->regular) return file_error(ErrorCode::kIo, path, "not a regular file");
    return file;
  }

  static Status changed(const std::string& path, std::string_view expected,
                        const std::string& found) {
    return file_error(ErrorCode::kChanged, path,
                      "changed: generation " + found + ", expected " + std::string(expected));
  }

  std::string dir_;
};

}  // namespace

std::unique_ptr<Store> make_local_store(std::string dir) {
  return std::make_unique<LocalStore>(std::move(dir));
}

}  // namespace shardload::detail
