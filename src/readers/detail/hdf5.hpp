// The HDF5 reader's internals, shared by its files: the library (hdf5_library.cc), the type
// mapping (hdf5_types.cc), direct-chunk decoding (hdf5_chunks.cc), the object header's layout
// message (hdf5_header.cc), remote files (hdf5_remote.cc) and the reader itself
// (hdf5_reader.cc). Every HDF5 call goes through the Hdf5Api table (hdf5_api.hpp says why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "readers/detail/hdf5_api.hpp"
#include "shardload/dtype.hpp"
#include "shardload/io.hpp"
#include "shardload/status.hpp"

namespace shardload::detail::hdf5 {

// The one process-wide mutex that serializes a library that is not thread-safe.
std::mutex& hdf5_mutex();

// The span of HDF5 calls of one thread (Hdf5Lock), counted for fork(): a process forked while
// another thread was inside HDF5 refuses every HDF5 call (hdf5_enter throws
// std::runtime_error, which each reader call turns into its error) instead of waiting forever
// for the lock it copied held (hdf5_library.cc says why).
void hdf5_enter();
void hdf5_leave();

// Held for the span of one reader call's HDF5 work: hdf5_mutex when the library is not
// thread-safe, and the span counted for fork() (hdf5_enter) either way; constructed inside the
// call's try block (it throws in a child forked during an HDF5 call). Declared before any
// Hid of that work, so the handles close while it is held.
class Hdf5Lock {
 public:
  explicit Hdf5Lock(const Hdf5Api& api) {
    hdf5_enter();
    if (!api.thread_safe) lock_.emplace(hdf5_mutex());
  }
  Hdf5Lock(const Hdf5Lock&) = delete;
  Hdf5Lock& operator=(const Hdf5Lock&) = delete;
  ~Hdf5Lock() {
    lock_.reset();
    hdf5_leave();
  }
  void unlock() {
    if (lock_) lock_->unlock();
  }
  void lock() {
    if (lock_) lock_->lock();
  }

 private:
  std::optional<std::unique_lock<std::mutex>> lock_;
};

// Releases an Hdf5Lock for a span without HDF5 calls (inflating a chunk),
// taking it back on every way out so the handles still close under it.
class Hdf5Unlocked {
 public:
  explicit Hdf5Unlocked(Hdf5Lock& lock) : lock_(lock) { lock_.unlock(); }
  Hdf5Unlocked(const Hdf5Unlocked&) = delete;
  Hdf5Unlocked& operator=(const Hdf5Unlocked&) = delete;
  ~Hdf5Unlocked() { lock_.lock(); }

 private:
  Hdf5Lock& lock_;
};

// An HDF5 identifier that closes itself.
class Hid {
 public:
  using Close = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Close close) : id_(id), close_(close) {}
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Hid& operator=(Hid&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  ~Hid() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
  }
  [[nodiscard]] hid_t get() const { return id_; }
  [[nodiscard]] bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  Close close_ = nullptr;
};

// The HDF5 error stack of this thread, outermost and innermost message
// ("can't read data: inflate() failed"), then cleared.
std::string take_error(const Hdf5Api& api);

// The dtype a file type reads as, or why it cannot.
Result<DType> classify(const Hdf5Api& api, hid_t t);

// The native memory type that `dtype` is read into; HDF5 converts the file's
// byte order (and the member order of a compound) on the way.
Result<Hid> memory_type(const Hdf5Api& api, DType d);

// The largest chunk the direct path decodes: zlib counts in 32-bit units, and
// the reader keeps one stored and one decoded chunk as scratch. HDF5 caps a
// chunk at 4 GiB; bigger ones than this go through H5Dread.
constexpr std::size_t kMaxDirectChunkBytes = std::size_t{1} << 30;

// How the direct path decodes one dataset's chunks.
struct DirectPlan {
  std::vector<hsize_t> chunk;   // the chunk shape, one extent per dimension
  std::size_t elem = 0;         // bytes per element
  bool shuffle = false;         // HDF5's byte shuffle ran before deflate
  std::size_t swap_unit = 0;    // 0: stored in host order; else swap units of this size
  std::size_t chunk_bytes = 0;  // decoded bytes of a chunk (edge chunks are stored whole)
  std::size_t chunk_elems = 0;
  // The chunks reaching past the extent are stored unfiltered
  // (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS), which their filter mask does not show: H5Dread,
  // which knows the flag, reads those; the others are deflated as any.
  bool edges_unfiltered = false;

  // Whether the chunk at `offset` (in elements) of a dataset of `dims` is one H5Dread must read.
  bool unfiltered_edge(const std::vector<hsize_t>& offset, const std::vector<hsize_t>& dims) const {
    if (!edges_unfiltered) return false;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (offset[i] + chunk[i] > dims[i]) return true;
    }
    return false;
  }
};

// Rows along axis 0 of a chunked dataset's chunk; 0 for contiguous or compact storage.
// Called with the lock held.
std::int64_t chunk_rows(const Hdf5Api& api, hid_t dataset, std::size_t rank);

// Whether `type` stores `dtype`'s bytes up to byte order: 0 in the host's order, else the
// size of the units to swap; nullopt for anything H5Dread must convert (padded compounds,
// VAX order, another size). Called with the lock held.
std::optional<std::size_t> stored_swap_unit(const Hdf5Api& api, hid_t type, DType dtype);

// Where a contiguous dataset's rows lie in its file, when they (stored in `type`, the
// dataset's) are `dtype`'s bytes up to byte order (stored_swap_unit) and all of them are
// allocated, inside a file of
// `file_size` bytes: its offset from the file's start, and the swap unit. nullopt for
// chunked, compact, external or unallocated storage, and for any other type. Called with the
// lock held; leaves HDF5's error stack for the caller to clear.
struct ContiguousRows {
  std::uint64_t offset = 0;
  std::size_t swap_unit = 0;
};
std::optional<ContiguousRows> contiguous_rows(const Hdf5Api& api, hid_t dataset, hid_t type,
                                              DType dtype, const std::vector<hsize_t>& dims,
                                              std::uint64_t file_size);

// Why some of a dataset's elements have no defined value: its storage is not all allocated
// (contiguous never written, chunks never written) and its fill time is "never" or its fill
// value undefined, so HDF5
// leaves those elements of the read buffer as they were (whatever memory held); ok otherwise.
// Called with the lock held; leaves HDF5's error stack for the caller to clear.
Status defined_everywhere(const Hdf5Api& api, hid_t dataset);

// Why a contiguous dataset's allocated storage (stored in `type`, the dataset's, `dims` of
// it) does not lie inside a file of `file_size` bytes ("its contiguous storage (N bytes at
// offset O) runs past the end of the file ..."), or why a compact dataset's stored bytes
// are not its elements' ("its compact storage holds N bytes, where its elements need M");
// ok for any other storage. HDF5 1.10 reads the part past the end as zeros, and past a short
// compact buffer into other memory; h5py's HDF5 refuses both. Called with the lock held;
// leaves HDF5's error stack for the caller to clear.
Status storage_in_file(const Hdf5Api& api, hid_t dataset, hid_t type,
                       const std::vector<hsize_t>& dims, std::uint64_t file_size);

// Why a chunk stored at `addr`, `size` bytes, whose first element is at `offset`, does not lie
// inside a file of `file_size` bytes; ok when it does or is not stored (HADDR_UNDEF).
Status chunk_in_file(haddr_t addr, hsize_t size, std::uint64_t file_size,
                     const std::vector<hsize_t>& offset);

// Reads `n` bytes at `offset` of the file HDF5 has open into `out`; false when it cannot.
using ReadBytes = std::function<bool(std::uint64_t offset, std::size_t n, std::byte* out)>;

// The element size the layout message of a chunked dataset records beside its chunk's
// dimensions, read from the dataset's object header (in `file`) through `read`; nullopt where
// the layout is not chunked or the header is not one this parser knows (the check is then left
// out: HDF5 opened it); an error where the header is past the parser's bounds or loops, which
// would otherwise leave the check out for a file crafted to hide its layout message.
// Called with the lock held (hdf5_header.cc).
Result<std::optional<std::uint64_t>> chunk_layout_element_size(const Hdf5Api& api, hid_t file,
                                                               hid_t dataset,
                                                               const ReadBytes& read);

// Why a chunked dataset's layout message records another element size than its type's
// ("its chunk layout records elements of N bytes, where its type's are M"): HDF5 1.10 reads
// every unfiltered chunk at the recorded size, the one next to the file's end past it as
// zeros, where h5py's HDF5 refuses the dataset. Ok for other layouts. Called with the lock
// held; leaves HDF5's error stack for the caller to clear.
Status chunk_element_size_matches(const Hdf5Api& api, hid_t file, hid_t dataset, hid_t type,
                                  const ReadBytes& read);

// Steps `at` to the next chunk coordinate of the box [first, last] (inclusive, row-major: the
// last dimension fastest); false once the box is done, with `at` back at `first`.
bool next_chunk(std::vector<hsize_t>& at, const std::vector<hsize_t>& first,
                const std::vector<hsize_t>& last);

// chunk_in_file for every stored chunk of a chunked dataset (of extents `dims`) that rows
// [lo, hi) meet; ok for other layouts, and where HDF5 cannot say where chunks lie (before
// 1.10.5). Called with the lock held; leaves HDF5's error stack for the caller to clear.
Status chunks_in_file(const Hdf5Api& api, hid_t dataset, const std::vector<hsize_t>& dims,
                      std::int64_t lo, std::int64_t hi, std::uint64_t file_size);

// Ok where HDF5 has every filter of the dataset's pipeline (asking it loads a plugin from
// HDF5_PLUGIN_PATH); else a format error naming the first filter it lacks (h5py's LZF, a
// Blosc or Zstd of hdf5plugin's) and what provides it, which H5Dread would otherwise report
// per chunk in HDF5's own words. Called with the lock held; leaves HDF5's error stack for the
// caller to clear.
Status filters_available(const Hdf5Api& api, hid_t dataset);

// The direct plan when the dataset is chunked, filtered by exactly deflate
// (optionally after shuffle), and stored in a type whose bytes are the
// destination's up to byte order; nullopt otherwise (read by H5Dread). Called with the lock
// held; leaves HDF5's error stack for the caller to clear.
std::optional<DirectPlan> direct_plan(const Hdf5Api& api, hid_t dataset, DType dtype,
                                      const std::vector<hsize_t>& dims);

// Copies the box `count` at `src_start` of a decoded chunk `raw` into `dst` (of extents
// dst_dims) at `dst_start`, unshuffling and swapping bytes as the plan says.
void copy_box(const DirectPlan& p, const std::byte* raw, const std::vector<hsize_t>& src_start,
              const std::vector<hsize_t>& dst_dims, const std::vector<hsize_t>& dst_start,
              const std::vector<hsize_t>& count, std::byte* dst);

// How many of a remote object's first bytes to fetch before HDF5 opens it (RemoteMetadata::
// fetch_head): the superblock and, in most files (h5py's among them), every object header lie
// in them, and the driver's small reads are served from a window of this size.
inline constexpr std::size_t kRemoteWindow = std::size_t{256} << 10;

// The metadata of one remote object (its URL at one snapshot) as one reader call reads it, and
// what other calls of this process read of the same snapshot. HDF5 opens the object anew for
// each read and reads its metadata again: the superblock, the object headers, and the nodes of
// a chunked dataset's chunk index, which lie among the chunks (HDF5 writes a node where the
// index grows), so that each node cost a window GET, in every read; and HDF5 1.10 walks the
// index from its first node to find one chunk's address. What a call reads of the object's
// metadata (its driver's small reads other than raw data, and the reader's own header parsing)
// is kept in a process-wide cache, keyed by the URL and the snapshot, which every call of that
// snapshot reads before it asks the store: a node is fetched once per process, not once per
// read. Raw data (chunks, contiguous rows) is never kept. A call that reads what another kept
// compares the object with its snapshot after its reads, as it does for what it fetched itself:
// the bytes were fetched before that check, from the object as it was then, so kept bytes are
// as safe as fetched ones. The cache holds at most kRemoteMetadataBytes, the least recently
// used objects' dropped first, and one snapshot of a URL (a newer one opened replaces it).
inline constexpr std::size_t kRemoteMetadataBytes = std::size_t{16} << 20;

class RemoteMetadata {
 public:
  RemoteMetadata(std::string path, const FileInfo& snapshot);
  RemoteMetadata(const RemoteMetadata&) = delete;
  RemoteMetadata& operator=(const RemoteMetadata&) = delete;

  // Whether metadata of this snapshot is kept.
  [[nodiscard]] bool held() const;
  // Fetches the first kRemoteWindow bytes of `file` (all of it when smaller), which the reads
  // below serve from; called without the HDF5 lock: fetched before the lock is taken, the
  // request of one task's open overlaps the others' instead of queuing behind their HDF5 calls.
  Status fetch_head(const File& file, std::uint64_t size);
  // Copies [offset, offset + n) into `out` from the head or the cache (keeping what the head
  // served); false where neither has all of it. `raw` (a read of raw data): from the head or
  // the lent range only, and not kept.
  bool copy(std::uint64_t offset, std::size_t n, std::byte* out, bool raw = false);
  // Keeps a metadata read fetched from the store (or the head) in the cache.
  void keep(std::uint64_t offset, const std::byte* bytes, std::size_t n);
  // The raw data range [offset, offset + n) at `bytes`, fetched by the caller: a raw read of
  // exactly it is served from there (lend(0, nullptr, 0) ends the loan). The remote chunk
  // path's check that HDF5 reads a chunk where its index says: HDF5 reading it elsewhere asks
  // the store, whose bytes then differ.
  void lend(std::uint64_t offset, const std::byte* bytes, std::size_t n);
  // Reads `n` bytes at `offset` of `file` for the reader's own parsing: from the head or the
  // cache where they are there, else from the store (kept).
  [[nodiscard]] ReadBytes reader(const File& file);
  // Drops what the cache holds of this snapshot: the check after a read found the object
  // changed.
  void forget();
  // Drops what the cache holds of this URL, whatever its snapshot: a discovery reads the object
  // as it is now. A snapshot told by a Last-Modified that a copy kept (`cp -p`) names two
  // versions alike, and the old one's chunk index read over the new bytes mixes the two.
  void forget_url();

  struct Extents;

 private:
  std::string path_;
  FileInfo snapshot_;
  // A snapshot told by no ETag (a Last-Modified, or the size alone) may name two versions alike
  // (etag_snapshot), so nothing of it is kept past this call: its own extents, not the
  // process's (an object replaced so reads as the new version, as every other format does).
  std::shared_ptr<Extents> own_;
  std::vector<std::byte> head_;
  std::uint64_t lent_at_ = 0;
  const std::byte* lent_ = nullptr;
  std::size_t lent_size_ = 0;
};

// A file-access property list whose driver reads the open remote object `file` (`size` bytes,
// its snapshot's) by ranged reads of that File (hdf5_remote.cc): HDF5 cannot open an
// object-store URL by name. `metadata` (may be null): what the driver serves reads from before
// it asks the store, and where it keeps what it read. `file` and `metadata` must stay alive
// while HDF5 has the file open. Called with the lock held.
Result<Hid> remote_access_list(const Hdf5Api& api, const File& file, std::uint64_t size,
                               RemoteMetadata* metadata);

// The error a read of that driver met during this thread's last HDF5 call (the store's words,
// naming the URL), cleared; ok() when none. HDF5 itself reports such a failure only as "read
// failed".
Status take_remote_error();

}  // namespace shardload::detail::hdf5
