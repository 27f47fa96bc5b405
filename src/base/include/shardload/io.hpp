// The operating-system calls the core reads files through.
//
// All file access in the core goes through an IoBackend so that tests can
// inject faults (a failing or short read in the middle of a load) without
// touching real disks. posix_io() is the real thing and is what users get.
//
// Contract: a File owns its descriptor (move-only, closed by the destructor) and borrows its
// IoBackend, which must outlive it. posix_io() is a process-wide singleton, safe from any
// thread; one File may serve concurrent positional reads. Errors are Status (kIo, naming the
// file, with the path and errno as data); nothing throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/status.hpp"

namespace shardload {

// What a file looked like at one moment. Equal snapshots before and after a
// read mean the bytes read are the file's bytes of that moment: a write
// updates mtime and ctime, truncation the size, a file renamed over the path
// the inode. ctime is the field users cannot set back (touch -d and cp -p
// restore mtime only); a chmod or a new hard link also moves it, which reads
// as a change, the safe side. The device number is left out on purpose: it
// numbers a mount on one node (a shared file system has another on each),
// and a file renamed over a path is always on the path's file system, so the
// inode alone tells a replacement.
struct FileInfo {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  bool regular = false;
  std::int64_t ctime_ns = 0;
  std::uint64_t inode = 0;
  // What a server answered with an object's snapshot, in seconds since the epoch (0 where it
  // said nothing): its Last-Modified, and its Date (the server's clock when it answered). A
  // Zarr chunk object is judged by them against its store's discovery (its Last-Modified later
  // than the Date discovery read the store's metadata at: written since). Not part of the
  // snapshot's identity (==): a Date differs in every answer, and neither is kept where a
  // snapshot is stored (a layout's encoding, a manifest).
  std::int64_t modified_s = 0;
  std::int64_t answered_s = 0;
  friend bool operator==(const FileInfo& a, const FileInfo& b) {
    return a.size == b.size && a.mtime_ns == b.mtime_ns && a.regular == b.regular &&
           a.ctime_ns == b.ctime_ns && a.inode == b.inode;
  }
};

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  // Opens a regular file for reading; returns a descriptor or an error naming
  // the path. posix_io() refuses anything else ("PATH: not a regular file")
  // without blocking: a FIFO, socket or device never stalls discovery.
  virtual Result<int> open(const std::string& path) = 0;
  virtual Result<FileInfo> stat(int fd, const std::string& path) = 0;
  // open() and then stat() of the new descriptor, for callers that want both (a reader checks
  // the snapshot of every file it opens). posix_io() answers with the one fstat that also
  // refuses what is not a regular file, so a small file costs one call less.
  virtual Result<int> open_stat(const std::string& path, FileInfo* info);
  // Opens `path` without asking its state where asking costs a request of its own (an object
  // in object storage: no HEAD), for a caller that knows the file's snapshot and compares the
  // file with it after its reads (check_unchanged); the snapshot's size bounds the reads, and
  // a backend that sees the object's state in each read's answer (signed s3:// reads) checks
  // each read against it. The default, and posix_io() for a local file, is open().
  virtual Result<int> open_known(const std::string& path, const FileInfo& snapshot);
  // open_stat() for a caller that reads the whole file next and expects about `expected`
  // bytes (a Zarr chunk object): a backend whose open fetches an object's first bytes with its
  // snapshot (signed s3:// reads) fetches up to that many instead, so that a small object
  // costs one request instead of two. The default, and posix_io() for a local file, is
  // open_stat().
  virtual Result<int> open_whole(const std::string& path, FileInfo* info, std::size_t expected);
  // open_stat() for a caller that reads the file's last bytes first (a Parquet footer): a
  // backend whose open fetches part of an object with its snapshot (signed s3:// reads)
  // fetches its last `tail` bytes instead of its first, so that the footer costs no request
  // of its own. The default, and posix_io() for a local file, is open_stat().
  virtual Result<int> open_tail(const std::string& path, FileInfo* info, std::size_t tail);
  // One positional read: bytes read (0 at end of file) or -errno.
  virtual std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) = 0;
  virtual void close(int fd) = 0;
  // The snapshot of a path without opening it (stat(2), following links): the one call a
  // manifest's check makes per HDF5, Parquet or Arrow file (npy, raw and Zarr are probed).
  // Not pure, so that backends written before it keep compiling; the default is the real
  // call, which a counting or failing backend overrides.
  virtual Result<FileInfo> stat_path(const std::string& path);
  // What the backend said of this thread's last failed pread (which returns only an errno), or
  // "" when it said nothing: read_exact adds it to its message. An errno says little of an
  // HTTP failure; a store's backend keeps its own words. The default, and posix_io() for a
  // local file, says nothing.
  virtual std::string last_read_error() const { return {}; }
};

// The process-wide POSIX backend. It is stateless, so sharing it is safe. It also serves the
// paths that the storage layer routes to its adapter (every URL of a scheme a store driver
// serves; see set_path_router): open() of such a path hands out the adapter's descriptor, at
// or above kRemoteFdBase, which the other calls route there. A local file costs nothing more
// than the router's answer and the comparison of its descriptor.
IoBackend& posix_io();

// A backend of keys reached by requests or held by a store ("s3://bucket/key",
// "https://host/key", a registered store's URL). This layer knows no scheme and links no
// client: the storage layer implements it (its adapter, and each built-in driver's transport
// behind it) and registers the adapter (set_store_io) before the first URL is opened. Its
// FileInfo is the key's size, its last-modified time as mtime and ctime, and a hash of its
// generation (an ETag) as the inode, so that a key overwritten under the same name differs.
// Discovery probes a directory's keys from several threads at once, and a load's tiles read
// concurrently: every call of a RemoteIo must be safe to make concurrently.
class RemoteIo : public IoBackend {
 public:
  // The objects directly under the "directory" `dir_url` (a prefix ending at a '/'), as
  // full URLs in name order (kLayout naming the URL when the bucket is missing or the
  // listing is refused; an empty list when nothing is there).
  virtual Result<std::vector<std::string>> list(const std::string& dir_url) = 0;
  // Whether `url` names an object (true) or a prefix with objects under it (false);
  // kIo naming the URL when it is neither.
  virtual Result<bool> is_object(const std::string& url) = 0;
  // Requests retried so far in this process (after a 5xx, a SlowDown, a reset or a timeout),
  // for LoadInfo: a load's count is the difference around it.
  virtual std::uint64_t retries() const { return 0; }
  // Writes `n` bytes as the whole object `url`, replacing one of that name: readers see the
  // old object or the new one, never part of one (the store makes an object visible only
  // once its upload completed). kIo naming the URL when it fails; the default says this
  // backend does not write.
  virtual Status write_object(const std::string& url, const void* data, std::size_t n);
};

// The adapter's descriptors (the one backend posix_io() routes to) are at or above
// kRemoteFdBase, far above any the kernel hands out, and go round that range.
inline constexpr int kRemoteFdBase = 1 << 30;

// The storage layer's adapter: the RemoteIo that every routed path and every descriptor at or
// above kRemoteFdBase go to, or nullptr before it is registered.
void set_store_io(RemoteIo* io);
RemoteIo* store_io();
// Which backend serves a path, decided by the storage layer (which knows the schemes; this
// layer knows none): nullptr for a path the kernel's calls reach, the RemoteIo for one it
// routes, or the error (kIo naming the path) for one whose store this build has no driver for.
// Storage registers it at load time (set_path_router); until then every path is local.
using PathRouter = Result<RemoteIo*> (*)(std::string_view path);
void set_path_router(PathRouter router);
// The registered router's answer for `path` (nullptr without a router).
Result<RemoteIo*> routed_io(std::string_view path);
// The requests the adapter's stores retried so far in this process (the sum over its
// transports), or 0 without it.
std::uint64_t remote_retries();

// What posix_io().open does, for the few callers that need the kernel's
// descriptor with more flags (O_DIRECT): opens `path` read-only without
// blocking and refuses ("PATH: not a regular file") anything but a regular
// file. `open_errno`: set to the open's errno when the open itself failed.
Result<int> open_regular(const std::string& path, int flags = 0, int* open_errno = nullptr);

// For libraries that open files by name (HDF5, Arrow's memory map): a name
// for the file open on `fd` ("/proc/self/fd/N", which opens that very file,
// whatever has since happened to `path`), so what they open is what we
// checked. `path` itself where /proc is not mounted.
std::string descriptor_path(int fd, const std::string& path);

// `path` for a message: printable(path) (status.hpp): a NUL shows as "\0" instead of ending
// it, a newline as "\n", an ESC as "\x1b".
std::string path_for_message(const std::string& path);

// An open file that closes itself.
class File {
 public:
  File() = default;
  File(IoBackend* io, int fd, std::string path) : io_(io), fd_(fd), path_(std::move(path)) {}
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File(File&& o) noexcept { *this = std::move(o); }
  File& operator=(File&& o) noexcept;
  ~File() { reset(); }

  static Result<File> open(IoBackend& io, const std::string& path);
  // Opens `path` and sets `*info` to what the descriptor looked like at the open.
  static Result<File> open_stat(IoBackend& io, const std::string& path, FileInfo* info);
  // open_stat() for a file read whole next (IoBackend::open_whole).
  static Result<File> open_whole(IoBackend& io, const std::string& path, FileInfo* info,
                                 std::size_t expected);
  // open_stat() for a file whose last bytes are read first (IoBackend::open_tail).
  static Result<File> open_tail(IoBackend& io, const std::string& path, FileInfo* info,
                                std::size_t tail);

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] int fd() const { return fd_; }
  Result<FileInfo> stat() const { return io_->stat(fd_, path_); }
  // Gives up the descriptor (the caller closes it) and leaves this empty.
  int release();

  // Reads exactly n bytes at offset, retrying partial reads and EINTR. A
  // read that ends early is kIo naming the file, offset, expected and got.
  Status read_exact(void* dst, std::size_t n, std::uint64_t offset) const;

 private:
  void reset();
  IoBackend* io_ = nullptr;
  int fd_ = -1;
  std::string path_;
};

}  // namespace shardload
