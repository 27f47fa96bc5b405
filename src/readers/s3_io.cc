// Object storage through Arrow's S3 file system (the one inside the pinned pyarrow's libarrow):
// the RemoteIo that posix_io() routes "s3://" URLs to. A read is one ranged GET
// (RandomAccessFile::ReadAt) into the caller's buffer; nothing downloads a whole object.
#include "readers/detail/s3_io.hpp"

#include <arrow/filesystem/filesystem.h>
#include <arrow/filesystem/s3fs.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/key_value_metadata.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace shardload::detail {

namespace {

// FNV-1a: the same hash of an ETag in every process of a run (discovery and the tasks may
// be different processes), which std::hash does not promise.
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// The errno that best says what Arrow's error was, for Python's exception classes.
int errno_of(const arrow::Status& st) {
  const std::string& m = st.message();
  if (m.find("does not exist") != std::string::npos ||
      m.find("NO_SUCH_BUCKET") != std::string::npos ||
      m.find("NoSuchBucket") != std::string::npos || m.find("NoSuchKey") != std::string::npos) {
    return ENOENT;
  }
  if (m.find("ACCESS_DENIED") != std::string::npos || m.find("AccessDenied") != std::string::npos ||
      m.find("403") != std::string::npos || m.find("InvalidAccessKeyId") != std::string::npos ||
      m.find("SignatureDoesNotMatch") != std::string::npos) {
    return EACCES;
  }
  return EIO;
}

Status remote_error(ErrorCode code, const std::string& url, const std::string& what,
                    const arrow::Status& st) {
  return file_error(code, url, what + ": " + st.message(), errno_of(st));
}

class ArrowRemoteIo final : public RemoteIo {
 public:
  Result<int> open(const std::string& url) override {
    FileInfo info;
    return open_stat(url, &info);
  }

  Result<int> open_stat(const std::string& url, FileInfo* info) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto file, open_object(url, info));
    std::lock_guard lock(mu_);
    const int fd = next_fd_++;
    files_.emplace(fd, Open{std::move(file), url});
    return fd;
  }

  // A fresh request, not what the open saw: the check after the last read asks the store.
  Result<FileInfo> stat(int fd, const std::string& path) override {
    std::string url;
    {
      std::lock_guard lock(mu_);
      auto it = files_.find(fd);
      if (it == files_.end()) return file_error(ErrorCode::kIo, path, "not an open object");
      url = it->second.url;
    }
    return stat_path(url);
  }

  Result<FileInfo> stat_path(const std::string& url) override {
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(auto file, open_object(url, &info));
    return info;
  }

  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) override {
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    {
      std::lock_guard lock(mu_);
      auto it = files_.find(fd);
      if (it == files_.end()) return -EBADF;
      file = it->second.file;
    }
    auto got = file->ReadAt(static_cast<std::int64_t>(offset), static_cast<std::int64_t>(n), buf);
    if (!got.ok()) return -errno_of(got.status());
    return *got;
  }

  void close(int fd) override {
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    {
      std::lock_guard lock(mu_);
      auto it = files_.find(fd);
      if (it == files_.end()) return;
      file = std::move(it->second.file);
      files_.erase(it);
    }
    (void)file->Close();
  }

  Result<std::vector<std::string>> list(const std::string& dir_url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(dir_url));
    auto& [fs, path] = where;
    while (!path.empty() && path.back() == '/') path.pop_back();
    arrow::fs::FileSelector sel;
    sel.base_dir = path;
    sel.recursive = false;
    sel.allow_not_found = false;
    auto infos = fs->GetFileInfo(sel);
    if (!infos.ok()) {
      const int err = errno_of(infos.status());
      return file_error(
          ErrorCode::kLayout, dir_url,
          std::string(err == ENOENT ? "shard directory not found" : "cannot list the directory") +
              " (" + infos.status().message() + ")",
          err);
    }
    std::vector<std::string> names;
    for (const auto& fi : *infos) {
      if (fi.type() == arrow::fs::FileType::File) names.push_back(fi.base_name());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  Result<bool> is_object(const std::string& url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(url));
    auto info = where.first->GetFileInfo(where.second);
    if (!info.ok()) return remote_error(ErrorCode::kIo, url, "cannot look up", info.status());
    switch (info->type()) {
      case arrow::fs::FileType::File:
        return true;
      case arrow::fs::FileType::Directory:
        return false;
      default:
        return file_error(ErrorCode::kIo, url, "no such object or prefix", ENOENT);
    }
  }

 private:
  struct Open {
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    std::string url;
  };

  // The file system for `url` (one per bucket and query, made once: each holds an S3 client)
  // and the object's path in it ("bucket/key").
  Result<std::pair<std::shared_ptr<arrow::fs::FileSystem>, std::string>> resolve(
      const std::string& url) {
    const auto q = url.find('?');
    const std::string base = url.substr(0, q);
    const std::string query = q == std::string::npos ? std::string() : url.substr(q);
    const std::string path = base.substr(5);  // after "s3://"
    const std::string bucket = path.substr(0, path.find('/'));
    if (bucket.empty()) {
      return Status(ErrorCode::kInvalidArgument, url + ": the URL names no bucket");
    }
    std::lock_guard lock(mu_);
    if (!initialized_) {
      const auto st = arrow::fs::EnsureS3Initialized();
      if (!st.ok()) return remote_error(ErrorCode::kIo, url, "cannot initialize S3", st);
      initialized_ = true;
    }
    const std::string key = bucket + query;
    auto it = fs_.find(key);
    if (it == fs_.end()) {
      std::string ignored;
      auto fs = arrow::fs::FileSystemFromUri("s3://" + bucket + query, &ignored);
      if (!fs.ok()) {
        return file_error(ErrorCode::kInvalidArgument, url,
                          "bad object-storage URL or options: " + fs.status().message());
      }
      it = fs_.emplace(key, *std::move(fs)).first;
      if (!exit_registered_) {
        // Registered after the first client was made, and so after Arrow's own static
        // state for its clients: the handlers run in reverse, so this one runs first and
        // lets go of the clients before S3 is finalized (pyarrow's handler, where
        // pyarrow.fs is imported, may have finalized it already: that is harmless).
        std::atexit(finalize_at_exit);
        exit_registered_ = true;
      }
    }
    return std::make_pair(it->second, path);
  }

  // Opens the object (one HEAD request) and reads its snapshot: size and ETag.
  Result<std::shared_ptr<arrow::io::RandomAccessFile>> open_object(const std::string& url,
                                                                   FileInfo* info) {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(url));
    if (where.second.empty() || where.second.back() == '/') {
      return file_error(ErrorCode::kIo, url, "not an object (the URL ends in '/')");
    }
    auto file = where.first->OpenInputFile(where.second);
    if (!file.ok()) return remote_error(ErrorCode::kIo, url, "cannot open", file.status());
    auto size = (*file)->GetSize();
    if (!size.ok()) return remote_error(ErrorCode::kIo, url, "cannot stat", size.status());
    auto meta = (*file)->ReadMetadata();
    if (!meta.ok()) return remote_error(ErrorCode::kIo, url, "cannot stat", meta.status());
    std::string etag;
    if (*meta != nullptr) {
      auto e = (*meta)->Get("ETag");
      if (e.ok()) etag = *e;
    }
    *info = FileInfo{};
    info->size = static_cast<std::uint64_t>(*size);
    info->regular = true;
    info->inode = fnv1a(etag);
    return *std::move(file);
  }

  static void finalize_at_exit();

  std::mutex mu_;
  bool initialized_ = false;
  bool exit_registered_ = false;
  std::map<std::string, std::shared_ptr<arrow::fs::FileSystem>> fs_;
  std::unordered_map<int, Open> files_;
  int next_fd_ = kRemoteFdBase;
};

ArrowRemoteIo* the_s3_io() {
  // Never destroyed: objects may be open in other threads until the very end; its S3
  // clients are let go of at exit, before FinalizeS3.
  static auto* io = new ArrowRemoteIo();
  return io;
}

void ArrowRemoteIo::finalize_at_exit() {
  ArrowRemoteIo* io = the_s3_io();
  {
    std::lock_guard lock(io->mu_);
    io->files_.clear();
    io->fs_.clear();
  }
  (void)arrow::fs::EnsureS3Finalized();
}

}  // namespace

void register_s3_io() { set_remote_io(the_s3_io()); }

}  // namespace shardload::detail
