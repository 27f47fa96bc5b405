// Remote Parquet and IPC reads (arrow_reader.cc) go through these: an object in object
// storage as Arrow's random-access file, and the footers already parsed per snapshot.
#include "readers/detail/arrow_io.hpp"

#include <algorithm>
#include <cstring>

namespace shardload::detail {

const Status* read_failure(const arrow::Status& st) {
  const auto& d = st.detail();
  if (d == nullptr || std::strcmp(d->type_id(), "shardload::ReadFailure") != 0) return nullptr;
  return &static_cast<const ReadFailure&>(*d).status();
}

arrow::Status IoRandomAccessFile::Close() {
  closed_ = true;
  return arrow::Status::OK();
}

arrow::Result<std::int64_t> IoRandomAccessFile::Tell() const {
  std::lock_guard lock(mu_);
  return pos_;
}

arrow::Status IoRandomAccessFile::Seek(std::int64_t position) {
  if (position < 0) return arrow::Status::Invalid("negative position");
  std::lock_guard lock(mu_);
  pos_ = position;
  return arrow::Status::OK();
}

arrow::Result<std::int64_t> IoRandomAccessFile::Read(std::int64_t nbytes, void* out) {
  std::int64_t at = 0;
  {
    std::lock_guard lock(mu_);
    at = pos_;
  }
  ARROW_ASSIGN_OR_RAISE(const std::int64_t got, ReadAt(at, nbytes, out));
  std::lock_guard lock(mu_);
  pos_ = at + got;
  return got;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> IoRandomAccessFile::Read(std::int64_t nbytes) {
  ARROW_ASSIGN_OR_RAISE(
      auto buf, arrow::AllocateResizableBuffer(std::max<std::int64_t>(0, std::min(nbytes, size_))));
  ARROW_ASSIGN_OR_RAISE(const std::int64_t got, Read(nbytes, buf->mutable_data()));
  ARROW_RETURN_NOT_OK(buf->Resize(got, /*shrink_to_fit=*/false));
  return std::shared_ptr<arrow::Buffer>(std::move(buf));
}

arrow::Result<std::int64_t> IoRandomAccessFile::ReadAt(std::int64_t position, std::int64_t nbytes,
                                                       void* out) {
  if (position < 0 || nbytes < 0) return arrow::Status::Invalid("negative read range");
  // Clipped at the end as a file read is: the snapshot's size is the object's.
  const std::int64_t n = std::max<std::int64_t>(0, std::min(nbytes, size_ - position));
  if (n == 0) return 0;
  if (const auto held = find_held(position, n)) {
    std::memcpy(out, held->data(), static_cast<std::size_t>(n));
    return n;
  }
  {
    std::lock_guard lock(mu_);
    if (detached_) return arrow::Status::IOError("a read after its reader returned");
    ++active_;
  }
  Status st =
      file_.read_exact(out, static_cast<std::size_t>(n), static_cast<std::uint64_t>(position));
  {
    std::lock_guard lock(mu_);
    if (--active_ == 0) idle_.notify_all();
  }
  if (!st.is_ok()) {
    std::string message = st.message();
    return arrow::Status(arrow::StatusCode::IOError, std::move(message),
                         std::make_shared<ReadFailure>(std::move(st)));
  }
  return n;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> IoRandomAccessFile::ReadAt(std::int64_t position,
                                                                         std::int64_t nbytes) {
  if (position < 0 || nbytes < 0) return arrow::Status::Invalid("negative read range");
  const std::int64_t n = std::max<std::int64_t>(0, std::min(nbytes, size_ - position));
  if (n > 0) {
    if (auto held = find_held(position, n)) return held;
  }
  ARROW_ASSIGN_OR_RAISE(auto buf, arrow::AllocateBuffer(n));
  ARROW_ASSIGN_OR_RAISE(const std::int64_t got, ReadAt(position, n, buf->mutable_data()));
  (void)got;
  return std::shared_ptr<arrow::Buffer>(std::move(buf));
}

void IoRandomAccessFile::hold(std::int64_t at, std::shared_ptr<arrow::Buffer> bytes) {
  std::lock_guard lock(mu_);
  held_[at] = std::move(bytes);
}

void IoRandomAccessFile::detach() {
  std::unique_lock lock(mu_);
  detached_ = true;
  idle_.wait(lock, [&] { return active_ == 0; });
  file_ = File();
}

void IoRandomAccessFile::drop(std::int64_t at) {
  std::lock_guard lock(mu_);
  held_.erase(at);
}

std::shared_ptr<arrow::Buffer> IoRandomAccessFile::find_held(std::int64_t position,
                                                             std::int64_t n) const {
  std::lock_guard lock(mu_);
  auto it = held_.upper_bound(position);
  if (it == held_.begin()) return nullptr;
  --it;
  const std::int64_t start = it->first;
  if (position + n > start + it->second->size()) return nullptr;
  return arrow::SliceBuffer(it->second, position - start, n);
}

FooterCache<parquet::FileMetaData>& remote_footers() {
  static auto* cache = new FooterCache<parquet::FileMetaData>();  // never destroyed: tasks
  return *cache;                                                  // may run until exit
}

FooterCache<IpcTail>& remote_ipc_tails() {
  static auto* cache = new FooterCache<IpcTail>();
  return *cache;
}

}  // namespace shardload::detail
