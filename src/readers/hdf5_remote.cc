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
// below kSmallRead is served from a window of kWindow bytes fetched around it, so the
// superblock, the root group and a dataset's headers come in one or a few requests; larger
// reads (chunks, contiguous rows) go straight into HDF5's buffer.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "readers/detail/hdf5.hpp"

namespace shardload::detail::hdf5 {

namespace {

constexpr std::size_t kSmallRead = std::size_t{32} << 10;
constexpr std::size_t kWindow = kRemoteWindow;

// What H5Pset_driver copies into the access list: the object and its size.
struct DriverInfo {
  const File* file;
  std::uint64_t size;
  const std::vector<std::byte>* head;
};

// One open file: HDF5's part first (the driver API hands back H5FD_t pointers).
struct RemoteFile {
  H5FD_t pub;
  const File* file = nullptr;
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
  f->eof = info->size;
  if (info->head != nullptr && !info->head->empty()) {
    f->window = *info->head;  // the first window, fetched outside the lock
    f->window_at = 0;
  }
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

herr_t read(H5FD_t* h, H5FD_mem_t, hid_t, haddr_t addr, std::size_t size, void* buffer) {
  RemoteFile* f = of(h);
  auto* out = static_cast<std::byte*>(buffer);
  if (addr == HADDR_UNDEF || addr + size < addr) return -1;
  // Past the end reads as zeros, as sec2 has it (HDF5 asks for whole blocks near the end).
  const std::size_t stored =
      addr >= f->eof ? 0 : static_cast<std::size_t>(std::min<haddr_t>(size, f->eof - addr));
  std::memset(out + stored, 0, size - stored);
  if (stored == 0) return 0;
  if (stored >= kSmallRead) {
    Status st = f->file->read_exact(out, stored, addr);
    if (!st.is_ok()) {
      t_error = std::move(st);
      return -1;
    }
    return 0;
  }
  if (f->window.empty() || addr < f->window_at || addr + stored > f->window_at + f->window.size()) {
    const haddr_t at = addr;
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

}  // namespace

Result<std::vector<std::byte>> remote_head(const File& file, std::uint64_t size) {
  std::vector<std::byte> head(static_cast<std::size_t>(std::min<std::uint64_t>(kWindow, size)));
  SHARDLOAD_RETURN_IF_ERROR(file.read_exact(head.data(), head.size(), 0));
  return head;
}

Result<Hid> remote_access_list(const Hdf5Api& api, const File& file, std::uint64_t size,
                               const std::vector<std::byte>& head) {
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
  const DriverInfo info{&file, size, &head};
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
