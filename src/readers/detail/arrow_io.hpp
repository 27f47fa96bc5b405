// The I/O side of the Parquet and IPC readers (arrow_io.cc): an object in object storage as
// Arrow's random-access file, and the process-wide caches of remote footers. Internal to the
// readers layer; built only with SHARDLOAD_WITH_ARROW.
#pragma once

#include <arrow/api.h>
#include <arrow/io/interfaces.h>
#include <parquet/metadata.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "readers/detail/ipc_file.hpp"
#include "storage/detail/store_options.hpp"
#include "shardload/io.hpp"
#include "shardload/shard_source.hpp"

namespace shardload::detail {

// A failed read of the File under an Arrow status (IoRandomAccessFile's reads): the Status
// read_exact gave (its code, kIo or kChanged, and its message naming the key), which Arrow and
// Parquet carry back unchanged through their own errors, so that a read the store failed is
// reported as that, never as a file Arrow found unreadable.
class ReadFailure final : public arrow::StatusDetail {
 public:
  explicit ReadFailure(Status status) : status_(std::move(status)) {}
  const char* type_id() const override { return "shardload::ReadFailure"; }
  std::string ToString() const override { return status_.message(); }
  [[nodiscard]] const Status& status() const { return status_; }

 private:
  Status status_;
};

// The read failure `st` carries, or null where it carries none.
const Status* read_failure(const arrow::Status& st);

// ---- an object in object storage as Arrow's random-access file -----------------
// Parquet and IPC read a remote shard, or any key whose descriptor is not the kernel's (a
// store's key), through this: each ReadAt is a ranged read of the
// File the reader's ShardSource opened (its retries included), so the footer and only the needed
// column chunks or batch buffers travel, never the whole object. Thread-safe: Parquet's
// pre-buffering issues its reads from Arrow's I/O pool, and File serves concurrent positional
// reads.
class IoRandomAccessFile final : public arrow::io::RandomAccessFile {
 public:
  // `source`: what `file` was opened from, kept while the file is (see Close), since the
  // File borrows it.
  IoRandomAccessFile(File file, std::int64_t size, std::shared_ptr<ShardSource> source = nullptr)
      : source_(std::move(source)), file_(std::move(file)), size_(size) {}

  // The object stays open until the last reference goes: a read Arrow issued in the
  // background may still hold one after its reader closed the file.
  arrow::Status Close() override;
  bool closed() const override { return closed_; }
  arrow::Result<std::int64_t> Tell() const override;
  arrow::Status Seek(std::int64_t position) override;
  arrow::Result<std::int64_t> GetSize() override { return size_; }

  arrow::Result<std::int64_t> Read(std::int64_t nbytes, void* out) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(std::int64_t nbytes) override;

  arrow::Result<std::int64_t> ReadAt(std::int64_t position, std::int64_t nbytes,
                                     void* out) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(std::int64_t position,
                                                       std::int64_t nbytes) override;

  // Bytes [at, at + size) fetched already (by one request for a range Arrow would read in
  // many): reads within them are served from memory, zero-copy, until drop(at).
  void hold(std::int64_t at, std::shared_ptr<arrow::Buffer> bytes);
  void drop(std::int64_t at);

  // Called by the reader before it returns: waits for the reads running now, closes the File
  // and fails every later read. A read Arrow issued in the background (a pre-buffer, a
  // read-ahead) may start, and the last reference go, after the reader is done, when what the
  // File borrows (an injected backend the caller owns) may be gone.
  void detach();

 private:
  // The held bytes [position, position + n) as a slice, or null where no one hold has them.
  std::shared_ptr<arrow::Buffer> find_held(std::int64_t position, std::int64_t n) const;

  mutable std::mutex mu_;         // guards pos_, held_, active_ and detached_; reads need no lock
  std::condition_variable idle_;  // active_ went to 0
  std::atomic<bool> closed_{false};
  const std::shared_ptr<ShardSource> source_;  // before file_: outlives it
  File file_;  // closed by detach(), while what it borrows is still there
  const std::int64_t size_;
  std::int64_t pos_ = 0;
  std::map<std::int64_t, std::shared_ptr<arrow::Buffer>> held_;
  int active_ = 0;  // reads of file_ running
  bool detached_ = false;
};

// Parsed footers of remote objects (Parquet's FileMetaData, an IPC file's footer bytes and
// batch blocks), by URL and snapshot, for this process. Each piece of a load opens its object
// again, and without this it fetched the footer again: a request's round trip per piece
// before its row groups or batches could be asked for, and the footer's bytes (MBs for a
// wide table of many groups) once per piece instead of once. The probe that took the
// snapshot, or the first piece read on a rank, parses it; later opens of that snapshot take
// it (a footer is only read, never changed, once parsed); a probe always reads its object's
// own (discovery validates the files as they are). A piece's reads are checked against
// the same snapshot (the ETag), so a footer kept for it never describes other bytes; a
// snapshot told by no ETag (etag_snapshot) may name another version alike, and nothing is kept
// for it. Bounded by the footers' serialized bytes; the oldest go first.
template <typename T>
class FooterCache {
 public:
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 20;
  static constexpr std::size_t kMaxEntries = 4096;

  std::shared_ptr<T> find(const std::string& path, const FileInfo& snap) {
    if (!etag_snapshot(snap)) return nullptr;
    const std::string k = key(path, snap);
    std::lock_guard lock(mu_);
    const auto it = entries_.find(k);
    return it == entries_.end() ? nullptr : it->second;
  }

  void put(const std::string& path, const FileInfo& snap, std::shared_ptr<T> value,
           std::size_t bytes) {
    if (bytes > kMaxBytes / 4) return;  // a footer this large would push out the rest
    if (!etag_snapshot(snap)) return;
    std::string k = key(path, snap);
    std::lock_guard lock(mu_);
    if (!entries_.emplace(k, std::move(value)).second) return;
    order_.emplace_back(std::move(k), bytes);
    bytes_ += bytes;
    while (bytes_ > kMaxBytes || order_.size() > kMaxEntries) {
      entries_.erase(order_.front().first);
      bytes_ -= order_.front().second;
      order_.pop_front();
    }
  }

 private:
  static std::string key(const std::string& path, const FileInfo& snap) {
    return path + '\n' + std::to_string(snap.size) + ':' + std::to_string(snap.inode) + ':' +
           std::to_string(snap.mtime_ns);
  }

  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<T>> entries_;
  std::deque<std::pair<std::string, std::size_t>> order_;
  std::size_t bytes_ = 0;
};

// An IPC file's last bytes (its footer, the footer's length and the magic), where Arrow's
// open reads them, and the record batches' blocks that footer lists.
struct IpcTail {
  std::int64_t at = 0;
  std::shared_ptr<arrow::Buffer> bytes;
  std::vector<IpcBlock> batches;
};

// This process's caches of remote Parquet footers and IPC tails (never destroyed: tasks may
// run until exit).
FooterCache<parquet::FileMetaData>& remote_footers();
FooterCache<IpcTail>& remote_ipc_tails();

}  // namespace shardload::detail
