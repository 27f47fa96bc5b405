// The source the readers open their shards from (shardload/shard_source.hpp): the paths and
// URLs discovery names, through posix_io() (which hands a registered scheme's URL to its store)
// or an injected backend, or the keys of one Store through a small descriptor table over it.
#include "shardload/shard_source.hpp"

#include <cerrno>
#include <climits>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>

#include "base/detail/json.hpp"
#include "shardload/location.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/store_schemes.hpp"

namespace shardload {

namespace {

int errno_of(const Status& st) {
  if (st.code() == ErrorCode::kChanged) return ESTALE;
  return st.sys_errno() != 0 ? st.sys_errno() : EIO;
}

}  // namespace

// The keys of one store as an IoBackend: a descriptor per open key, holding the generation its
// open found, which conditions each of its reads (Store::read's if_generation).
struct ShardSource::Keys final : IoBackend {
  explicit Keys(std::shared_ptr<Store> s) : store(std::move(s)) {}

  struct Open {
    std::string key;
    std::string generation;  // "" (open()): reads carry no condition
  };

  Result<int> open(const std::string& key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key).with_path(store->describe(key)));
    return add(Open{key, {}});
  }

  Result<int> open_stat(const std::string& key, FileInfo* info) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key).with_path(store->describe(key)));
    SHARDLOAD_ASSIGN_OR_RETURN(const KeyInfo k, store->stat(key));
    *info = detail::generation_info(k);
    return add(Open{key, k.generation});
  }

  // A key whose snapshot the caller took earlier (discovery's) is asked its state again, as
  // every open of a store's key is: a key written since is kChanged here, and the generation
  // found conditions the reads, so one written after this open is kChanged at its read, never
  // read as the discovered key's bytes.
  Result<int> open_known(const std::string& key, const FileInfo& snapshot) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key).with_path(store->describe(key)));
    SHARDLOAD_ASSIGN_OR_RETURN(const KeyInfo k, store->stat(key));
    const FileInfo now = detail::generation_info(k);
    if (now != snapshot) {
      std::string what =
          "size " + std::to_string(snapshot.size) + " -> " + std::to_string(now.size) + " bytes";
      if (now.inode != snapshot.inode) what += ", overwritten (its generation differs)";
      return file_error(ErrorCode::kChanged, store->describe(key),
                        "changed since discovery: " + what);
    }
    return add(Open{key, k.generation});
  }

  Result<FileInfo> stat(int fd, const std::string& path) override {
    std::string key;
    {
      std::lock_guard lock(mu);
      const auto it = files.find(fd);
      if (it == files.end()) return file_error(ErrorCode::kIo, path, "not an open key", EBADF);
      key = it->second.key;
    }
    SHARDLOAD_ASSIGN_OR_RETURN(const KeyInfo k, store->stat(key));
    return detail::generation_info(k);
  }

  Result<FileInfo> stat_path(const std::string& key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key).with_path(store->describe(key)));
    SHARDLOAD_ASSIGN_OR_RETURN(const KeyInfo k, store->stat(key));
    return detail::generation_info(k);
  }

  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) override {
    t_error.clear();
    Open o;
    {
      std::lock_guard lock(mu);
      const auto it = files.find(fd);
      if (it == files.end()) return -EBADF;
      o = it->second;
    }
    if (n == 0) return 0;
    const Result<std::size_t> got = store->read(
        o.key, offset, std::span<std::byte>(static_cast<std::byte*>(buf), n), o.generation);
    if (!got) {
      t_error = message_after_path(got.status(), got.status().path());
      return -static_cast<std::int64_t>(errno_of(got.status()));
    }
    if (*got > n) return -EIO;
    return static_cast<std::int64_t>(*got);
  }

  void close(int fd) override {
    std::lock_guard lock(mu);
    files.erase(fd);
  }

  std::string last_read_error() const override { return t_error; }

  Result<int> add(Open o) {
    std::lock_guard lock(mu);
    if (files.size() >= static_cast<std::size_t>(INT_MAX - 1)) {
      return file_error(ErrorCode::kIo, store->describe(o.key), "too many keys open", EMFILE);
    }
    while (files.count(next) != 0) next = next == INT_MAX ? 0 : next + 1;
    const int fd = next;
    next = next == INT_MAX ? 0 : next + 1;
    files.emplace(fd, std::move(o));
    return fd;
  }

  std::shared_ptr<Store> store;
  std::mutex mu;
  std::unordered_map<int, Open> files;
  int next = 0;
  static thread_local std::string t_error;
};

thread_local std::string ShardSource::Keys::t_error;

ShardSource::ShardSource(IoBackend* io, std::unique_ptr<Keys> keys)
    : io_(io), keys_(std::move(keys)) {
  if (keys_ != nullptr) io_ = keys_.get();
}

ShardSource::~ShardSource() = default;

std::shared_ptr<ShardSource> ShardSource::files() {
  // One for the process, never destroyed: files may be open in other threads until the end.
  static auto* const source =
      new std::shared_ptr<ShardSource>(new ShardSource(&posix_io(), nullptr));
  return *source;
}

std::shared_ptr<ShardSource> ShardSource::over(IoBackend& io) {
  if (&io == &posix_io()) return files();
  return std::shared_ptr<ShardSource>(new ShardSource(&io, nullptr));
}

std::shared_ptr<ShardSource> ShardSource::of_store(std::shared_ptr<Store> store) {
  return std::shared_ptr<ShardSource>(
      new ShardSource(nullptr, std::make_unique<Keys>(std::move(store))));
}

std::string ShardSource::shown(const std::string& key) const {
  return keys_ != nullptr ? keys_->store->describe(key) : key;
}

Result<File> ShardSource::open(const std::string& key) {
  SHARDLOAD_ASSIGN_OR_RETURN(const int fd, io_->open(key));
  return File(io_, fd, shown(key));
}

Result<File> ShardSource::open_as(const std::string& key, std::string shown) {
  SHARDLOAD_ASSIGN_OR_RETURN(const int fd, io_->open(key));
  return File(io_, fd, std::move(shown));
}

Result<File> ShardSource::open_stat(const std::string& key, FileInfo* info) {
  SHARDLOAD_ASSIGN_OR_RETURN(const int fd, io_->open_stat(key, info));
  return File(io_, fd, shown(key));
}

Result<File> ShardSource::open_whole(const std::string& key, FileInfo* info, std::size_t expected) {
  SHARDLOAD_ASSIGN_OR_RETURN(const int fd, io_->open_whole(key, info, expected));
  return File(io_, fd, shown(key));
}

Result<File> ShardSource::open_tail(const std::string& key, FileInfo* info, std::size_t tail) {
  SHARDLOAD_ASSIGN_OR_RETURN(const int fd, io_->open_tail(key, info, tail));
  return File(io_, fd, shown(key));
}

Result<File> ShardSource::open_known(const std::string& key, const FileInfo& snapshot) {
  SHARDLOAD_ASSIGN_OR_RETURN(const int fd, io_->open_known(key, snapshot));
  return File(io_, fd, shown(key));
}

Result<FileInfo> ShardSource::stat(const std::string& key) { return io_->stat_path(key); }

Result<std::string> ShardSource::read_small(const std::string& key, std::uint64_t max_bytes,
                                            FileInfo* info) {
  FileInfo st;
  SHARDLOAD_ASSIGN_OR_RETURN(File f, open_stat(key, &st));
  return detail::read_small_opened(f, st, max_bytes, info);
}

bool ShardSource::round_trips(const std::string& key) const {
  // A store's keys are read by its own calls, each conditioned on the generation its open
  // found: the open asks the state, as a local file's does.
  return keys_ == nullptr && path_traits(key).round_trips;
}

PathTraits ShardSource::traits(const std::string& key) const {
  if (keys_ == nullptr) return path_traits(key);
  PathTraits t;
  t.kernel_files = false;
  t.flat_keys = true;
  t.inode_is_identity = false;  // a snapshot's inode is a hash of the key's generation
  return t;
}

bool ShardSource::kernel_descriptor(const File& file) const {
  // An injected backend's descriptors need not be the kernel's; posix_io()'s are, below the
  // range it routes to the store adapter.
  return io_ == &posix_io() && file.fd() >= 0 && file.fd() < kRemoteFdBase;
}

}  // namespace shardload
