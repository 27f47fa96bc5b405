// An HDF5 virtual file driver over an open File (a key of the reader's ShardSource), for HDF5 files
// in object storage.
//
// HDF5 opens files by name through its own drivers (sec2: open(2) and pread(2)); an "s3://"
// or "https://" URL is no name it can open, and the ROS3 driver is not in the distributions'
// builds. This driver hands HDF5 an object that shardload opened and snapshotted: every read
// HDF5 makes becomes a ranged read of that object (a ranged GET), so a tile fetches the file's
// metadata and the chunks of its rows only, never the whole object, and the snapshot check
// after the reads covers what HDF5 read.
//
// HDF5 reads metadata in many small pieces (an object header, a B-tree node: tens to hundreds
// of bytes, mostly near each other), which as GETs would each pay a request's latency. A read
// below kSmallRead is served from a window of kWindow bytes fetched around it (from the
// kWindowAlign boundary below it: HDF5 also reads a little before its last read), so the
// superblock, the root group and a dataset's headers come in one or a few requests; larger
// reads (chunks, contiguous rows) go straight into HDF5's buffer. The metadata read is kept
// between reads of the same snapshot (RemoteMetadata, detail/hdf5.hpp says why).
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "readers/detail/hdf5.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail::hdf5 {

// Byte ranges of one object, disjoint and apart (touching ones merged), by offset.
struct RemoteMetadata::Extents {
  std::map<std::uint64_t, std::vector<std::byte>> at;
  std::size_t bytes = 0;

  // The range holding all of [offset, offset + n), or null.
  const std::pair<const std::uint64_t, std::vector<std::byte>>* holding(std::uint64_t offset,
                                                                        std::size_t n) const {
    auto it = at.upper_bound(offset);
    if (it == at.begin()) return nullptr;
    --it;
    if (offset - it->first > it->second.size() || n > it->second.size() - (offset - it->first))
      return nullptr;
    return &*it;
  }

  bool copy(std::uint64_t offset, std::size_t n, std::byte* out) const {
    const auto* r = holding(offset, n);
    if (r == nullptr) return false;
    std::memcpy(out, r->second.data() + (offset - r->first), n);
    return true;
  }

  void add(std::uint64_t offset, const std::byte* data, std::size_t n) {
    if (n == 0) return;
    std::uint64_t first = offset, end = offset + n;
    // The ranges that overlap or touch [offset, end): merged into one.
    auto lo = at.upper_bound(offset);
    if (lo != at.begin()) {
      auto prev = std::prev(lo);
      if (prev->first + prev->second.size() >= offset) lo = prev;
    }
    auto hi = lo;
    while (hi != at.end() && hi->first <= end) {
      first = std::min(first, hi->first);
      end = std::max<std::uint64_t>(end, hi->first + hi->second.size());
      ++hi;
    }
    if (lo != hi && lo->first == first && lo->second.size() == end - first && std::next(lo) == hi) {
      return;  // held whole already
    }
    std::vector<std::byte> merged(static_cast<std::size_t>(end - first));
    for (auto it = lo; it != hi; ++it) {
      std::memcpy(merged.data() + (it->first - first), it->second.data(), it->second.size());
      bytes -= it->second.size();
    }
    std::memcpy(merged.data() + (offset - first), data, n);
    at.erase(lo, hi);
    bytes += merged.size();
    at.emplace(first, std::move(merged));
  }
};

namespace {

constexpr std::size_t kSmallRead = std::size_t{32} << 10;
constexpr std::size_t kWindow = kRemoteWindow;
constexpr std::size_t kWindowAlign = std::size_t{64} << 10;
static_assert(kWindowAlign + kSmallRead <= kWindow, "a small read fits its aligned window");

// What H5Pset_driver copies into the access list: the object, its size, and its metadata.
struct DriverInfo {
  const File* file;
  std::uint64_t size;
  RemoteMetadata* metadata;
};

// One open file: HDF5's part first (the driver API hands back H5FD_t pointers).
struct RemoteFile {
  H5FD_t pub;
  const File* file = nullptr;
  RemoteMetadata* metadata = nullptr;
  haddr_t eof = 0;
  haddr_t eoa = 0;
  std::vector<std::byte> window;
  haddr_t window_at = 0;
};

const Hdf5Api* g_api = nullptr;
thread_local Status t_error;

RemoteFile* of(H5FD_t* f) { return reinterpret_cast<RemoteFile*>(f); }
const RemoteFile* of(const H5FD_t* f) { return reinterpret_cast<const RemoteFile*>(f); }

H5FD_t* open_file(const char*, unsigned flags, hid_t fapl, haddr_t) {
  // Read-only: the object is never written. (H5F_ACC_RDWR's macro calls into the library,
  // which is loaded privately: the value is HDF5's documented 0x0001.)
  constexpr unsigned kReadWrite = 0x0001u;
  if ((flags & kReadWrite) != 0) return nullptr;
  const auto* info = static_cast<const DriverInfo*>(g_api->H5Pget_driver_info(fapl));
  if (info == nullptr || info->file == nullptr) return nullptr;
  auto* f = new RemoteFile();
  f->file = info->file;
  f->metadata = info->metadata;
  f->eof = info->size;
  return &f->pub;
}

herr_t close_file(H5FD_t* f) {
  delete of(f);
  return 0;
}

int compare(const H5FD_t* a, const H5FD_t* b) {
  const File* x = of(a)->file;
  const File* y = of(b)->file;
  return x < y ? -1 : (x > y ? 1 : 0);
}

herr_t query(const H5FD_t*, unsigned long* flags) {
  // The features sec2 has for reading: HDF5 merges neighbouring metadata reads and sieves
  // small raw-data reads, both fewer requests here.
  if (flags != nullptr) {
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
  }
  return 0;
}

haddr_t get_eoa(const H5FD_t* f, H5FD_mem_t) { return of(f)->eoa; }

herr_t set_eoa(H5FD_t* f, H5FD_mem_t, haddr_t addr) {
  of(f)->eoa = addr;
  return 0;
}

haddr_t get_eof(const H5FD_t* f, H5FD_mem_t) { return of(f)->eof; }

herr_t read(H5FD_t* h, H5FD_mem_t type, hid_t, haddr_t addr, std::size_t size, void* buffer) {
  RemoteFile* f = of(h);
  auto* out = static_cast<std::byte*>(buffer);
  if (addr == HADDR_UNDEF || addr + size < addr) return -1;
  // Past the end reads as zeros, as sec2 has it (HDF5 asks for whole blocks near the end).
  const std::size_t stored =
      addr >= f->eof ? 0 : static_cast<std::size_t>(std::min<haddr_t>(size, f->eof - addr));
  std::memset(out + stored, 0, size - stored);
  if (stored == 0) return 0;
  RemoteMetadata* meta = f->metadata;
  // Raw data (chunks) is never kept: the chunk path fetches it, and a copy here would hold a
  // second one.
  const bool raw = type == H5FD_MEM_DRAW;
  if (meta != nullptr && meta->copy(addr, stored, out, raw)) return 0;
  if (stored >= kSmallRead) {
    Status st = f->file->read_exact(out, stored, addr);
    if (!st.is_ok()) {
      t_error = std::move(st);
      return -1;
    }
    return 0;
  }
  if (f->window.empty() || addr < f->window_at || addr + stored > f->window_at + f->window.size()) {
    const haddr_t at = addr - addr % kWindowAlign;
    const auto n = static_cast<std::size_t>(std::min<haddr_t>(kWindow, f->eof - at));
    std::vector<std::byte> w(n);
    Status st = f->file->read_exact(w.data(), n, at);
    if (!st.is_ok()) {
      f->window.clear();
      t_error = std::move(st);
      return -1;
    }
    f->window = std::move(w);
    f->window_at = at;
  }
  std::memcpy(out, f->window.data() + (addr - f->window_at), stored);
  if (meta != nullptr && !raw) meta->keep(addr, out, stored);
  return 0;
}

herr_t write(H5FD_t*, H5FD_mem_t, hid_t, haddr_t, std::size_t, const void*) { return -1; }

H5FD_class_t make_class() {
  H5FD_class_t c{};
  c.name = "shardload_remote";
  c.maxaddr = (haddr_t{1} << 62) - 1;
  c.fc_degree = H5F_CLOSE_WEAK;
  c.fapl_size = sizeof(DriverInfo);
  c.open = open_file;
  c.close = close_file;
  c.cmp = compare;
  c.query = query;
  c.get_eoa = get_eoa;
  c.set_eoa = set_eoa;
  c.get_eof = get_eof;
  c.read = read;
  c.write = write;
  const H5FD_mem_t map[H5FD_MEM_NTYPES] = H5FD_FLMAP_DICHOTOMY;
  std::copy(std::begin(map), std::end(map), std::begin(c.fl_map));
  return c;
}

// The process's cache: one entry per URL (one snapshot, the latest kept), most recently used
// first. Every call reads and adds to it under its mutex as it goes: a call that reads an object
// while another walks its chunk index (two tasks' reads of one object, whose HDF5 calls
// interleave) finds each node the other fetched.
struct CacheEntry {
  std::string path;
  FileInfo snapshot;
  RemoteMetadata::Extents extents;
};

struct MetadataCache {
  std::mutex mu;
  std::list<CacheEntry> order;
  std::unordered_map<std::string, std::list<CacheEntry>::iterator> by_path;
  std::size_t bytes = 0;

  // The entry of `path` at `snapshot`, made the most recently used; null where none.
  CacheEntry* find(const std::string& path, const FileInfo& snapshot) {
    const auto it = by_path.find(path);
    if (it == by_path.end() || it->second->snapshot != snapshot) return nullptr;
    order.splice(order.begin(), order, it->second);
    return &*it->second;
  }

  void drop(std::unordered_map<std::string, std::list<CacheEntry>::iterator>::iterator it) {
    bytes -= it->second->extents.bytes;
    order.erase(it->second);
    by_path.erase(it);
  }
};

MetadataCache& cache() {
  static MetadataCache* const c = [] {
    auto* made = new MetadataCache();  // never destroyed: readers may run at exit
    // Held over fork(), so that a child does not copy it locked by a thread it does not have
    // (a read's check outside HDF5's lock takes it too).
    ::pthread_atfork([] { cache().mu.lock(); }, [] { cache().mu.unlock(); },
                     [] { cache().mu.unlock(); });
    return made;
  }();
  return *c;
}

}  // namespace

RemoteMetadata::RemoteMetadata(std::string path, const FileInfo& snapshot)
    : path_(std::move(path)), snapshot_(snapshot) {
  if (!etag_snapshot(snapshot_)) own_ = std::make_shared<Extents>();
}

bool RemoteMetadata::held() const {
  if (own_) return false;
  MetadataCache& c = cache();
  std::lock_guard lock(c.mu);
  return c.find(path_, snapshot_) != nullptr;
}

Status RemoteMetadata::fetch_head(const File& file, std::uint64_t size) {
  head_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(kWindow, size)));
  Status st = file.read_exact(head_.data(), head_.size(), 0);
  if (!st.is_ok()) head_.clear();
  return st;
}

bool RemoteMetadata::copy(std::uint64_t offset, std::size_t n, std::byte* out, bool raw) {
  if (raw && lent_ != nullptr && offset == lent_at_ && n == lent_size_) {
    std::memcpy(out, lent_, n);
    return true;
  }
  if (offset <= head_.size() && n <= head_.size() - offset) {
    std::memcpy(out, head_.data() + offset, n);
    if (!raw) keep(offset, out, n);
    return true;
  }
  if (raw) return false;
  if (own_) return own_->copy(offset, n, out);
  MetadataCache& c = cache();
  std::lock_guard lock(c.mu);
  const CacheEntry* e = c.find(path_, snapshot_);
  return e != nullptr && e->extents.copy(offset, n, out);
}

void RemoteMetadata::keep(std::uint64_t offset, const std::byte* bytes, std::size_t n) {
  if (own_) {
    if (own_->holding(offset, n) == nullptr && n <= kRemoteMetadataBytes - own_->bytes) {
      own_->add(offset, bytes, n);
    }
    return;
  }
  MetadataCache& c = cache();
  std::lock_guard lock(c.mu);
  CacheEntry* e = c.find(path_, snapshot_);
  if (e != nullptr && e->extents.holding(offset, n) != nullptr) return;
  // One object's metadata past the cache's size is not kept (the rest of it stays).
  if (n > kRemoteMetadataBytes || (e != nullptr && e->extents.bytes > kRemoteMetadataBytes - n)) {
    return;
  }
  if (e == nullptr) {
    // Another snapshot of the URL is stale: this one was opened after it.
    if (const auto it = c.by_path.find(path_); it != c.by_path.end()) c.drop(it);
    c.order.push_front(CacheEntry{path_, snapshot_, {}});
    c.by_path.emplace(path_, c.order.begin());
    e = &c.order.front();
  }
  c.bytes -= e->extents.bytes;
  e->extents.add(offset, bytes, n);
  c.bytes += e->extents.bytes;
  // The least recently used objects' go first, never this one's.
  while (c.bytes > kRemoteMetadataBytes && c.order.size() > 1) {
    c.drop(c.by_path.find(c.order.back().path));
  }
}

void RemoteMetadata::lend(std::uint64_t offset, const std::byte* bytes, std::size_t n) {
  lent_at_ = offset;
  lent_ = bytes;
  lent_size_ = n;
}

ReadBytes RemoteMetadata::reader(const File& file) {
  return [this, &file](std::uint64_t offset, std::size_t n, std::byte* out) {
    if (copy(offset, n, out)) return true;
    if (!file.read_exact(out, n, offset).is_ok()) return false;
    if (n < kSmallRead) keep(offset, out, n);
    return true;
  };
}

void RemoteMetadata::forget() {
  if (own_) own_ = std::make_shared<Extents>();
  MetadataCache& c = cache();
  std::lock_guard lock(c.mu);
  const auto it = c.by_path.find(path_);
  if (it != c.by_path.end() && it->second->snapshot == snapshot_) c.drop(it);
}

void RemoteMetadata::forget_url() {
  MetadataCache& c = cache();
  std::lock_guard lock(c.mu);
  if (const auto it = c.by_path.find(path_); it != c.by_path.end()) c.drop(it);
}

Result<Hid> remote_access_list(const Hdf5Api& api, const File& file, std::uint64_t size,
                               RemoteMetadata* metadata) {
  // Registered once per process (HDF5 keeps the class pointer): the first caller holds the
  // HDF5 lock, so the registration itself needs no more.
  static const H5FD_class_t cls = make_class();
  static hid_t driver = -1;
  if (driver < 0) {
    g_api = &api;
    driver = api.H5FDregister(&cls);
    if (driver < 0) {
      return Status(ErrorCode::kFormat,
                    file.path() + ": cannot register the remote file driver: " + take_error(api));
    }
  }
  Hid fapl(api.H5Pcreate(api.H5P_CLS_FILE_ACCESS_ID_g), api.H5Pclose);
  const DriverInfo info{&file, size, metadata};
  if (!fapl.valid() || api.H5Pset_driver(fapl.get(), driver, &info) < 0) {
    return Status(ErrorCode::kFormat,
                  file.path() + ": file access list for the remote driver: " + take_error(api));
  }
  return fapl;
}

Status take_remote_error() {
  Status st = std::move(t_error);
  t_error = Status::ok();
  return st;
}

}  // namespace shardload::detail::hdf5
