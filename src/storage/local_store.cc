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
#include <vector>

#include "shardload/io.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/stores.hpp"

namespace shardload::detail {
namespace {

std::string sys_what(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

// Creates the directories of `path` below `root` (which must exist).
Status make_parents(const std::string& root, const std::string& key) {
  for (std::size_t slash = key.find('/'); slash != std::string::npos;
       slash = key.find('/', slash + 1)) {
    const std::string dir = root + "/" + key.substr(0, slash);
    if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
      const int err = errno;
      return file_error(ErrorCode::kIo, dir, sys_what("cannot create the directory", err), err);
    }
  }
  return Status::ok();
}

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
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string path = describe(key);
    SHARDLOAD_ASSIGN_OR_RETURN(const FileInfo info, posix_io().stat_path(path));
    if (!info.regular) return file_error(ErrorCode::kIo, path, "not a regular file");
    return KeyInfo{info.size, generation_of(info)};
  }

  Result<std::size_t> read(std::string_view key, std::uint64_t offset, std::span<std::byte> dst,
                           std::string_view if_generation) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string path = describe(key);
    FileInfo before;
    SHARDLOAD_ASSIGN_OR_RETURN(File file, File::open_stat(posix_io(), path, &before));
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
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      const int err = errno;
      return file_error(ErrorCode::kIo, dir, sys_what("cannot list the directory", err), err);
    }
    std::vector<std::string> keys;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct ::stat st {};
      if (::fstatat(::dirfd(d), e->d_name, &st, 0) != 0) continue;  // gone meanwhile
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
    const std::string path = describe(key);
    SHARDLOAD_RETURN_IF_ERROR(make_parents(dir_, std::string(key)));
    // Written beside the key and renamed over it: a reader opens the old file or the new one.
    static std::atomic<std::uint64_t> serial{0};
    const std::string tmp =
        path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial.fetch_add(1));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
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
    if (s.is_ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      s = file_error(ErrorCode::kIo, path, sys_what("cannot rename the written file over it", err),
                     err);
    }
    if (!s.is_ok()) ::unlink(tmp.c_str());
    return s;
  }

  Status remove(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string path = describe(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      return file_error(ErrorCode::kIo, path, sys_what("cannot delete", err), err);
    }
    return Status::ok();
  }

 private:
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
