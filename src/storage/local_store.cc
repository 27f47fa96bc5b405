// The local POSIX driver: a directory, its keys the paths below it, read through posix_io()
// (so a FIFO or device is refused without blocking, as the readers refuse it); a publish is a
// hidden staging directory beside the destination, renamed over it or exchanged with it.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/detail/bytes.hpp"
#include "base/detail/links.hpp"
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

// The (device, inode) each staged key's file had when this process's sink made it, by the
// key's full path: a reopened sink refuses another file in its place (a hard link to a file
// elsewhere, or any file renamed over it), and a publish checks every one once more. Keys made
// by another process (a rank or worker filling a key that the launcher made) are not known
// here; their maker checks them at its publish. Held across fork(2), so that a child forked
// while a thread holds it finds it free.
class StagedFiles {
 public:
  static StagedFiles& get() {
    static StagedFiles* const files = [] {
      auto* f = new StagedFiles;  // never destroyed: a sink may outlive static destruction
      ::pthread_atfork([] { get().mu_.lock(); }, [] { get().mu_.unlock(); },
                       [] { get().mu_.unlock(); });
      return f;
    }();
    return *files;
  }
  void made(const std::string& path, const struct ::stat& st) { made(path, st.st_dev, st.st_ino); }
  void made(const std::string& path, dev_t device, ino_t inode) {
    std::lock_guard lock(mu_);
    files_[key_of(path)] = {device, inode};
  }
  // A key written again whole (write(): a new file renamed over it) is that new file.
  void rewritten(const std::string& path, const struct ::stat& st) {
    std::lock_guard lock(mu_);
    const auto it = files_.find(key_of(path));
    if (it != files_.end()) it->second = {st.st_dev, st.st_ino};
  }
  void forget(const std::string& path) {
    std::lock_guard lock(mu_);
    files_.erase(key_of(path));
  }
  // Whether `st` is the file made at `path` (true for a path this process made nothing at).
  bool is_made(const std::string& path, const struct ::stat& st) {
    std::lock_guard lock(mu_);
    const auto it = files_.find(key_of(path));
    return it == files_.end() || it->second == std::pair{st.st_dev, st.st_ino};
  }
  // The files made below the directory `dir`, taken out of the table.
  std::vector<std::pair<std::string, std::pair<dev_t, ino_t>>> take_below(const std::string& dir) {
    const std::string prefix = dir + "/";
    std::vector<std::pair<std::string, std::pair<dev_t, ino_t>>> out;
    std::lock_guard lock(mu_);
    for (auto it = files_.lower_bound(prefix);
         it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      out.emplace_back(it->first, it->second);
      it = files_.erase(it);
    }
    return out;
  }

 private:
  // A key's path as describe() spells it below the root ("//k") or as joined() does ("/k").
  static std::string key_of(const std::string& path) {
    return path.starts_with("//") ? path.substr(1) : path;
  }
  std::mutex mu_;
  std::map<std::string, std::pair<dev_t, ino_t>> files_;
};

Status replaced_staged_file(const std::string& path) {
  return file_error(ErrorCode::kIo, path,
                    "is not the file the save made there (replaced during the save, by another "
                    "file or a link to one); nothing is written into it or published",
                    ESTALE);
}

// A key of a staging written in place: the file created at its size, filled by pwrite(2),
// closed by finish(); deleted on a failure or abort() when this sink made it (`made`), left to
// the staging when the sink reopened a key made before (reopen_sink: another process's writes
// may be in it).
class LocalSink final : public KeySink {
 public:
  LocalSink(Fd parent, int fd, std::string leaf, std::string path, std::uint64_t size,
            const struct ::stat& st, bool made = true)
      : parent_(std::move(parent)),
        fd_(fd),
        leaf_(std::move(leaf)),
        path_(std::move(path)),
        size_(size),
        identity_{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)},
        removed_(!made) {}
  ~LocalSink() override { abort(); }

  Status write(std::uint64_t offset, std::span<const std::byte> data) override {
    {
      std::lock_guard lock(mu_);
      if (!failed_.is_ok()) return failed_;
      if (fd_ < 0) return closed();
    }
    SHARDLOAD_RETURN_IF_ERROR(check_within_key(path_, offset, data.size(), size_));
    if (data.empty()) return Status::ok();
    const Status st =
        write_all(fd_, path_, data.data(), data.size(), static_cast<std::int64_t>(offset));
    if (!st) {
      std::lock_guard lock(mu_);
      if (failed_.is_ok()) failed_ = st;
    }
    return st;
  }

  Status finish() override {
    std::lock_guard lock(mu_);
    if (fd_ < 0) return closed();
    Status st = failed_;
    if (::close(std::exchange(fd_, -1)) != 0 && st.is_ok()) {
      const int err = errno;
      st = file_error(ErrorCode::kIo, path_, sys_what("close failed", err), err);
    }
    if (st.is_ok()) {
      finished_ = true;
    } else if (!removed_) {
      ::unlinkat(parent_.get(), leaf_.c_str(), 0);
      StagedFiles::get().forget(path_);
      removed_ = true;
    }
    return st;
  }

  void abort() noexcept override {
    std::lock_guard lock(mu_);
    if (finished_) return;
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    if (!removed_) {
      ::unlinkat(parent_.get(), leaf_.c_str(), 0);
      StagedFiles::get().forget(path_);
      removed_ = true;
    }
  }

  [[nodiscard]] std::uint64_t size() const override { return size_; }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> file_identity() const override {
    return identity_;
  }

 private:
  Status closed() const {
    return file_error(ErrorCode::kInvalidArgument, path_, "the sink is finished or aborted", EBADF);
  }

  Fd parent_;
  int fd_;
  std::string leaf_, path_;
  std::uint64_t size_;
  std::pair<std::uint64_t, std::uint64_t> identity_;
  std::mutex mu_;
  Status failed_ = Status::ok();
  bool finished_ = false, removed_ = false;
};

// --- Publishing: the staging directory, the rename or exchange, the replaced keys' removal.

Status sys_error(const std::string& path, const std::string& what, int err) {
  return file_error(ErrorCode::kIo, path, sys_what(what.c_str(), err), err);
}

std::int64_t ns_of(const struct ::timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

std::pair<std::string, std::string> split_path(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// `dir` + "/" + `name`, with no doubled '/' at the root.
std::string joined(const std::string& dir, const std::string& name) {
  return (dir == "/" ? std::string() : dir) + "/" + name;
}

// 0777 less this process's umask: the mode mkdir(2) gives a new directory. Read from
// /proc (umask(2) can only be read by setting it, which races with other threads).
mode_t new_directory_mode() {
  if (std::FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    unsigned mask = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::sscanf(line, "Umask: %o", &mask) == 1) {
        found = true;
        break;
      }
    }
    std::fclose(f);
    if (found) return static_cast<mode_t>(0777 & ~mask);
  }
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0777 & ~mask;
}

// The extended attributes of `path` (ACLs are among them: system.posix_acl_*); none where
// the file system has none.
Result<std::map<std::string, std::string>> xattrs_of(const std::string& path) {
  std::map<std::string, std::string> out;
  std::string names;
  for (;;) {
    const ssize_t n = ::llistxattr(path.c_str(), nullptr, 0);
    if (n < 0) {
      if (errno == ENOTSUP) return out;
      return sys_error(path, "cannot list the extended attributes", errno);
    }
    names.resize(static_cast<std::size_t>(n));
    const ssize_t got = n == 0 ? 0 : ::llistxattr(path.c_str(), names.data(), names.size());
    if (got >= 0) {
      names.resize(static_cast<std::size_t>(got));
      break;
    }
    if (errno != ERANGE) return sys_error(path, "cannot list the extended attributes", errno);
  }
  for (std::size_t at = 0; at < names.size();) {
    const std::string name(names.c_str() + at);
    at += name.size() + 1;
    if (name.empty()) continue;
    std::string value;
    for (;;) {
      const ssize_t n = ::lgetxattr(path.c_str(), name.c_str(), nullptr, 0);
      if (n < 0) {
        if (errno == ENODATA) break;  // removed meanwhile
        return sys_error(path, "cannot read the extended attribute " + name, errno);
      }
      value.resize(static_cast<std::size_t>(n));
      const ssize_t got =
          n == 0 ? 0 : ::lgetxattr(path.c_str(), name.c_str(), value.data(), value.size());
      if (got >= 0) {
        value.resize(static_cast<std::size_t>(got));
        out.emplace(name, std::move(value));
        break;
      }
      if (errno != ERANGE) {
        return sys_error(path, "cannot read the extended attribute " + name, errno);
      }
    }
  }
  return out;
}

// Gives the staging directory what the directory it replaces (as lstat found it just after the
// check) has: mode, owner, group and extended attributes (ACLs included); or, for a new
// destination, the mode mkdir(2) gives. Refuses (nothing published) where one of them cannot
// be kept.
Status take_attributes(const std::string& staging, const std::string& dest,
                       const struct ::stat* existing) {
  const auto cannot = [&](const std::string& what, int err) {
    return file_error(ErrorCode::kIo, dest,
                      "cannot give the new dataset the destination's " + what + ": " +
                          std::strerror(err) + "; nothing was replaced",
                      err);
  };
  if (existing == nullptr) {
    if (::chmod(staging.c_str(), new_directory_mode()) != 0) {
      return sys_error(staging, "cannot set the mode", errno);
    }
    return Status::ok();
  }
  struct ::stat st {};
  if (::lstat(staging.c_str(), &st) != 0) return sys_error(staging, "cannot look at", errno);
  if ((st.st_uid != existing->st_uid || st.st_gid != existing->st_gid) &&
      ::lchown(staging.c_str(), existing->st_uid, existing->st_gid) != 0) {
    return cannot("owner and group (" + std::to_string(existing->st_uid) + ":" +
                      std::to_string(existing->st_gid) + ")",
                  errno);
  }
  // After the chown, which may clear the set-group-ID bit.
  if (::chmod(staging.c_str(), existing->st_mode & 07777) != 0) return cannot("mode", errno);
  SHARDLOAD_ASSIGN_OR_RETURN(const auto want, xattrs_of(dest));
  SHARDLOAD_ASSIGN_OR_RETURN(const auto have, xattrs_of(staging));
  for (const auto& [name, value] : want) {
    const auto it = have.find(name);
    if (it != have.end() && it->second == value) continue;
    if (::lsetxattr(staging.c_str(), name.c_str(), value.data(), value.size(), 0) != 0) {
      return cannot("extended attribute " + name, errno);
    }
  }
  // What the staging directory inherited (a default ACL of the parent) and the destination
  // does not have.
  for (const auto& [name, value] : have) {
    if (want.count(name) == 0 && ::lremovexattr(staging.c_str(), name.c_str()) != 0 &&
        errno != ENODATA) {
      return cannot("lack of the extended attribute " + name, errno);
    }
  }
  return Status::ok();
}

// FNV-1a: a short, stable stand-in for a name too long to be part of another name.
std::string name_hash(const std::string& name) {
  std::uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string host_name() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string out;
  for (const char* p = host; *p != '\0'; ++p) {
    const char c = *p;
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_';
    out += plain ? c : '_';  // '-' too: "-PID-N" is parsed from the end
  }
  return out.empty() ? std::string("host") : out;
}

// Room kept after a stem for "-PID-N" and ".old".
constexpr std::size_t kEndingRoom = 1 + 10 + 1 + 20 + 4;

// The staging directory's name without its "-PID-N" ending: ".NAME.shardload-tmp-HOST", or,
// where that would leave no room within NAME_MAX, ".HASH.shardload-tmp-HOST" (HASH: 16 hex
// digits of NAME). The host name tells a later save which staging directories it may judge
// by their PID.
std::string staging_stem(const std::string& base) {
  const std::string tail = ".shardload-tmp-" + host_name();
  std::string stem = "." + base + tail;
  if (stem.size() + kEndingRoom > NAME_MAX) stem = "." + name_hash(base) + tail;
  return stem;
}

void remove_tree(const std::string& path) noexcept {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

// Removes what saves to the same destination killed on this host left: directories named
// exactly stem + "-PID-N" whose PID is no running process here.
void remove_stale_staging(const std::string& parent, const std::string& stem) {
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) return;  // making the staging directory reports the parent's trouble
  std::vector<std::string> stale;
  const std::string head = stem + "-";
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name.size() <= head.size() || name.substr(0, head.size()) != head) continue;
    const std::string_view rest = name.substr(head.size());
    const auto dash = rest.find('-');
    if (dash == std::string_view::npos || dash == 0 || dash > 10 || dash + 1 == rest.size() ||
        rest.size() - dash - 1 > 20) {
      continue;
    }
    const auto digits = [](std::string_view s) {
      return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!digits(rest.substr(0, dash)) || !digits(rest.substr(dash + 1))) continue;
    const long long pid = std::stoll(std::string(rest.substr(0, dash)));
    if (pid <= 0 || pid > INT32_MAX || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or unknown
    stale.emplace_back(name);
  }
  ::closedir(d);
  for (const auto& name : stale) {
    const std::string path = joined(parent, name);
    struct ::stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(path);
  }
}

// Deletes the replaced dataset, now at `old`, key by key: a file a user put into it after the
// last check is never deleted. Its directory then stays, renamed to a visible name beside
// dest, and the publish reports it (the new dataset is in place by then).
Status remove_replaced(const std::string& old, const std::string& dest,
                       const std::vector<ReplacedKey>& replaced) {
  if (remove_checked_keys(old, replaced)) return Status::ok();
  const auto [parent, base] = split_path(dest);
  const std::string ending = "-" + std::to_string(::getpid()) + "-" + name_hash(old).substr(0, 8);
  std::string kept = joined(parent, base + ".shardload-kept" + ending);
  if (base.size() + 15 + ending.size() > NAME_MAX) {
    kept = joined(parent, "shardload-kept-" + name_hash(base) + ending);
  }
  if (::rename(old.c_str(), kept.c_str()) != 0) kept = old;
  return file_error(ErrorCode::kIo, dest,
                    "the new dataset is in place, but files were added to the one it replaced "
                    "during the save; they were not deleted, and are in " +
                        kept,
                    0);
}

// The (device, inode) of the directory at `path` (not followed if a link), or {0, 0}.
std::pair<std::uint64_t, std::uint64_t> identity_of(const std::string& path) noexcept {
  struct ::stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {0, 0};
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

// A destination below the store: one name, no '/' (the staging directory is made beside it).
Status check_destination_name(std::string_view name, const std::string& shown) {
  if (name.empty() || name.find('/') != std::string_view::npos) {
    return Status{ErrorCode::kInvalidArgument,
                  "save: the destination '" + shown + "' must name a directory by its name"};
  }
  return check_store_key(name);
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
      // shard); a link to a directory is no prefix: the keys below it are refused. A link
      // whose target is gone is a key too, whose read names it: left out, a listing of
      // numbered shards would end before it, its rows dropped without a word.
      if (S_ISLNK(st.st_mode)) {
        if (::fstatat(::dirfd(d), e->d_name, &st, 0) != 0) {
          if (errno == ENOENT) keys.push_back(std::string(prefix) + name);
          continue;
        }
        if (!S_ISREG(st.st_mode)) continue;
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
    struct ::stat written {};
    if (s.is_ok() && ::fstat(fd, &written) != 0) {
      const int err = errno;
      s = file_error(ErrorCode::kIo, tmp, sys_what("cannot stat", err), err);
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
    if (!s.is_ok()) {
      ::unlinkat(parent.get(), tmp_leaf.c_str(), 0);
    } else {
      StagedFiles::get().rewritten(joined(dir_, k), written);
    }
    return s;
  }

  // The file is made where a key's write would put it (open_parent, its directories made
  // with mkdir's mode), new (O_EXCL: a file already there is no sink's), at its final size.
  Result<std::unique_ptr<KeySink>> open_key_sink(std::string_view key,
                                                 std::uint64_t size) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string k(key);
    const std::string path = describe(key);
    SHARDLOAD_ASSIGN_OR_RETURN(Fd parent, open_parent(dir_, k, /*create=*/true));
    const std::string leaf = leaf_of(k);
    const int fd = ::openat(parent.get(), leaf.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
      const int err = errno;
      return file_error(ErrorCode::kIo, path, sys_what("cannot create", err), err);
    }
    if (size > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ||
        ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      const int err =
          size > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ? EFBIG : errno;
      ::close(fd);
      ::unlinkat(parent.get(), leaf.c_str(), 0);
      return file_error(
          ErrorCode::kIo, path,
          sys_what(("cannot size to " + std::to_string(size) + " bytes").c_str(), err), err);
    }
    struct ::stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      ::unlinkat(parent.get(), leaf.c_str(), 0);
      return file_error(ErrorCode::kIo, path, sys_what("cannot stat", err), err);
    }
    StagedFiles::get().made(joined(dir_, k), st);
    return std::unique_ptr<KeySink>(new LocalSink(std::move(parent), fd, leaf, path, size, st));
  }

  // The file as a sink made it, for more pwrites: opened by its path, as a writer of a file
  // made beforehand opens it (O_NOFOLLOW: not through a link at its end), then checked to be
  // the file reached through the key's directories without following a link (open_parent), so
  // a directory on the way switched to a link is refused as the key's other writes refuse it.
  Result<std::unique_ptr<KeySink>> reopen_key_sink(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string k(key);
    const std::string path = describe(key);
    SHARDLOAD_ASSIGN_OR_RETURN(Fd parent, open_parent(dir_, k, /*create=*/false));
    const std::string leaf = leaf_of(k);
    // O_NONBLOCK: a FIFO put in its place fails (ENXIO) rather than waiting for a reader.
    Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (fd.get() < 0) {
      const int err = errno;
      return file_error(ErrorCode::kIo, path, sys_what("cannot open for writing", err), err);
    }
    struct ::stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      const int err = errno;
      return file_error(ErrorCode::kIo, path, sys_what("cannot stat", err), err);
    }
    if (!S_ISREG(st.st_mode)) {
      return file_error(ErrorCode::kIo, path, "is not a regular file (a staged key is one)",
                        EINVAL);
    }
    // The very file the sink made, not another one renamed or linked into its place.
    if (!StagedFiles::get().is_made(joined(dir_, k), st)) return replaced_staged_file(path);
    struct ::stat at {};
    if (::fstatat(parent.get(), leaf.c_str(), &at, AT_SYMLINK_NOFOLLOW) != 0 ||
        at.st_dev != st.st_dev || at.st_ino != st.st_ino) {
      return file_error(ErrorCode::kInvalidArgument, path,
                        "store key '" + path_for_message(k) +
                            "': its path no longer leads to the key's file (a directory on the "
                            "way was replaced); a key does not leave the store's location",
                        ELOOP);
    }
    return std::unique_ptr<KeySink>(new LocalSink(std::move(parent), fd.release(), leaf, path,
                                                  static_cast<std::uint64_t>(st.st_size), st,
                                                  /*made=*/false));
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

  Result<Staging> stage(std::string_view name, const PublishSteps& steps) override {
    const std::string dest = joined(dir_, std::string(name));
    SHARDLOAD_RETURN_IF_ERROR(check_destination_name(name, dest));
    if (steps.check) {
      std::vector<ReplacedKey> replaced;
      SHARDLOAD_RETURN_IF_ERROR(steps.check(&replaced));
    }
    const std::string stem = staging_stem(std::string(name));
    remove_stale_staging(dir_, stem);
    static std::atomic<std::int64_t> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      const std::string leaf =
          stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
      const std::string path = joined(dir_, leaf);
      // Private while it is built: it takes the destination's mode (or mkdir's) at the publish.
      if (::mkdir(path.c_str(), 0700) == 0) {
        Staging s;
        s.name = std::string(name);
        s.prefix = leaf + "/";
        s.location = path;
        std::tie(s.dev, s.ino) = identity_of(path);
        return s;
      }
      if (errno != EEXIST) {
        return sys_error(dest, "cannot create the staging directory " + path + " beside it", errno);
      }
    }
    return file_error(ErrorCode::kIo, dest, "cannot find a free staging directory name", EEXIST);
  }

  Status publish(const Staging& staging, const PublishSteps& steps, bool* published) override {
    *published = false;
    SHARDLOAD_RETURN_IF_ERROR(check_staging(staging));
    const std::string dest = joined(dir_, staging.name);
    const std::string& path = staging.location;
    if (steps.seal) SHARDLOAD_RETURN_IF_ERROR(steps.seal(path));
    // Every key this process made in the staging is still the file it made: a file renamed or
    // linked over one is never published (its rows are not the save's). Checked last before
    // each rename, so that only a file put there within those few system calls can pass.
    const auto made = StagedFiles::get().take_below(path);
    const auto check_made = [&]() -> Status {
      for (const auto& [file, id] : made) {
        struct ::stat st {};
        if (::lstat(file.c_str(), &st) != 0 || std::pair{st.st_dev, st.st_ino} != id) {
          return replaced_staged_file(file);
        }
      }
      return Status::ok();
    };
    for (int attempt = 0;; ++attempt) {
      const bool again = attempt < 3;
      // The destination may have changed since it was first checked: check it again just
      // before replacing it, and take the attributes of what is there now.
      std::vector<ReplacedKey> replaced;
      if (steps.check) SHARDLOAD_RETURN_IF_ERROR(steps.check(&replaced));
      struct ::stat st {};
      const bool exists = ::lstat(dest.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      SHARDLOAD_RETURN_IF_ERROR(take_attributes(path, dest, exists ? &st : nullptr));
      SHARDLOAD_RETURN_IF_ERROR(check_made());
      if (replaced.empty()) {
        // rename(2) replaces an absent destination or an empty directory in one step.
        if (::rename(path.c_str(), dest.c_str()) == 0) {
          *published = true;
          return Status::ok();
        }
        const int err = errno;
        // Filled meanwhile: with overwrite the check may now allow replacing it.
        if ((err == ENOTEMPTY || err == EEXIST) && steps.overwrite && again) continue;
        return sys_error(dest, "cannot move the new dataset into place", err);
      }
      if (::renameat2(AT_FDCWD, path.c_str(), AT_FDCWD, dest.c_str(), RENAME_EXCHANGE) == 0) {
        *published = true;
        return remove_replaced(path, dest, replaced);  // the old dataset is at `path`
      }
      const int err = errno;
      if (err == ENOENT && again) continue;  // removed meanwhile
      if (err != EINVAL && err != ENOSYS && err != ENOTSUP) {
        return sys_error(dest, "cannot swap the new dataset into place", err);
      }
      // No atomic exchange on this file system: move the old dataset aside, then the new one in.
      const std::string aside = path + ".old";
      if (::rename(dest.c_str(), aside.c_str()) != 0) {
        return sys_error(dest, "cannot move the old dataset aside", errno);
      }
      if (::rename(path.c_str(), dest.c_str()) != 0) {
        const int e = errno;
        (void)::rename(aside.c_str(), dest.c_str());
        return sys_error(dest, "cannot move the new dataset into place", e);
      }
      *published = true;
      return remove_replaced(aside, dest, replaced);
    }
  }

  void discard(const Staging& staging, const PublishSteps& /*steps*/) noexcept override {
    if (!check_staging(staging) || staging.ino == 0) return;
    // The very directory stage() made, not whatever its path leads to by then.
    if (identity_of(staging.location) != std::pair{staging.dev, staging.ino}) return;
    remove_tree(staging.location);
    (void)StagedFiles::get().take_below(staging.location);
  }

 private:
  // A staging of this store: a staging directory's name, directly in the store's directory, so
  // that a damaged one cannot make publish or discard touch another tree.
  [[nodiscard]] Status check_staging(const Staging& staging) const {
    const auto [parent, leaf] = split_path(staging.location);
    if (parent != dir_ || leaf.find(".shardload-tmp-") == std::string::npos ||
        !check_destination_name(staging.name, staging.name)) {
      return Status{ErrorCode::kInvalidArgument, "save: expected a staging directory in " + dir_ +
                                                     ", found '" + staging.location + "'"};
    }
    return Status::ok();
  }

 public:
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
      // A key linked from a file that is gone is no key never written (ENOENT, which a reader
      // takes for a missing chunk and fills with the fill value): no errno of "none there".
      if (err == ENOENT && is_dangling_link(path)) {
        return file_error(ErrorCode::kIo, path, "a symbolic link whose target does not exist");
      }
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

std::string generation_of_stat(const struct ::stat& st) {
  FileInfo info;
  info.size = static_cast<std::uint64_t>(st.st_size);
  info.mtime_ns = ns_of(st.st_mtim);
  info.regular = S_ISREG(st.st_mode);
  info.ctime_ns = ns_of(st.st_ctim);
  info.inode = static_cast<std::uint64_t>(st.st_ino);
  return generation_of(info);
}

bool remove_checked_keys(const std::string& dir, const std::vector<ReplacedKey>& keys) {
  bool all = true;
  for (const ReplacedKey& e : keys) {
    if (!e.key.empty() && e.key.back() == '/') {
      const std::string path = dir + "/" + e.key.substr(0, e.key.size() - 1);
      if (::rmdir(path.c_str()) != 0 && errno != ENOENT) all = false;
      continue;
    }
    const std::string path = dir + "/" + e.key;
    struct ::stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno != ENOENT) all = false;
      continue;
    }
    // Only the very file that was checked: one put there since is not ours to delete.
    if ((!e.generation.empty() && generation_of_stat(st) != e.generation) ||
        ::unlink(path.c_str()) != 0) {
      all = false;
    }
  }
  if (::rmdir(dir.c_str()) != 0) all = false;
  return all;
}

void note_staged_file(const std::string& path, std::uint64_t device, std::uint64_t inode) {
  StagedFiles::get().made(path, static_cast<dev_t>(device), static_cast<ino_t>(inode));
}

std::unique_ptr<Store> make_local_store(std::string dir) {
  return std::make_unique<LocalStore>(std::move(dir));
}

}  // namespace shardload::detail
