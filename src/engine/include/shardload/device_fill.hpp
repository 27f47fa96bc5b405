// The device side of the I/O engine: fills a tile's device memory from its
// pieces through a bounded pool of staging buffers, on a caller's stream.
//
//   reader threads:  pread (or ShardReader::read_rows) -> staging buffer i
//                    copy_async(dst + offset, buffer i, stream); record fence i
//   next use of i:   wait fence i first, so a buffer is never overwritten
//                    while its copy may still be reading it
//
// Reads of one chunk overlap the copies of the others (double buffering with
// one reader, more with several), and the staging memory is the pool's,
// whatever the tile size. Everything the device does goes through a
// CopyBackend: CudaCopyBackend (shardload/cuda_backend.hpp, CUDA builds only)
// in production, HostCopyBackend (shardload/host_copy_backend.hpp) in tests
// that run without a GPU. This header includes no CUDA header.
//
// Never throws: it runs inside Legate tasks.
//
// Contract: the caller owns the device memory, the stream and the CopyBackend, and keeps them
// alive until fill_device returns (it waits for its own copies). One fill per stream at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shardload/io.hpp"
#include "shardload/layout.hpp"
#include "shardload/plan.hpp"
#include "shardload/status.hpp"

namespace shardload {

// Host-to-device copies as the pipeline needs them. Streams and fences are
// opaque: a cudaStream_t and a cudaEvent_t for CUDA. Every call may come from
// any reader thread at the same time; implementations are thread-safe.
class CopyBackend {
 public:
  using Fence = void*;

  virtual ~CopyBackend() = default;
  [[nodiscard]] virtual const char* name() const = 0;

  // Staging memory the device can copy from asynchronously (page-locked for
  // CUDA). Allocation is slow; StagingPool does it once.
  virtual Result<void*> alloc_staging(std::size_t bytes) = 0;
  virtual void free_staging(void* p) noexcept = 0;

  virtual Result<Fence> create_fence() = 0;
  virtual void destroy_fence(Fence f) noexcept = 0;

  // Enqueues a copy of `bytes` from staging memory `src` to device memory
  // `dst` on `stream`. Errors found later (a failed transfer) surface in
  // wait() or synchronize().
  virtual Status copy_async(void* dst, const void* src, std::size_t bytes, void* stream) = 0;
  // Marks the point after the work enqueued so far on `stream`.
  virtual Status record(Fence f, void* stream) = 0;
  // Blocks until the work before the last record(f) has run; reports its error.
  virtual Status wait(Fence f) = 0;
  virtual Status synchronize(void* stream) = 0;

  // Optional reads from a file straight into device memory (GPUDirect
  // Storage). Synchronous: the bytes are in place when direct_read returns.
  // direct_open gives nullptr, not an error, for a file the backend declines
  // (one cuFile refuses to register, on a file system it does not serve):
  // the fill then stages that file's chunks; an error is a file that cannot
  // be opened.
  [[nodiscard]] virtual bool has_direct_reads() const { return false; }
  virtual Result<void*> direct_open(const std::string& path);
  virtual void direct_close(void* handle) noexcept;
  virtual Status direct_read(void* handle, std::uint64_t offset, std::size_t bytes, void* dst);
};

struct StagingOptions {
  // 8 MiB x 16: large enough that one copy runs at the link's speed (the
  // pinned ceiling flattens from a few MiB per cudaMemcpyAsync), and two
  // buffers per default reader, so that one can be read while the other's
  // copy is in flight; 128 MiB whatever the tile size. Not yet measured on
  // an H200: bench/device_check sweeps these.
  std::size_t buffer_bytes = std::size_t{8} << 20;
  int buffers = 16;
};

// kInvalidArgument naming the field: buffer_bytes in [1, 4 GiB], buffers in
// [2, 1024] (two at least, so that a read can overlap a copy), total <= 64 GiB.
Status validate(const StagingOptions& options);

// Overrides the defaults with SHARDLOAD_STAGING_BYTES and
// SHARDLOAD_STAGING_BUFFERS when set; a malformed value is kInvalidArgument
// naming the variable and the value.
Status staging_options_from_env(StagingOptions* options);

// What a fill does with direct (GPUDirect Storage) reads.
enum class DirectReads : std::uint8_t {
  kOff,   // always stage through pinned host memory
  kAuto,  // measure both on the pool's first eligible chunk, then keep the faster
  kOn,    // use them for every eligible chunk (native-endian C-order .npy)
};

// The staging buffers of one device, with one fence each. Allocated once
// through the backend and reused by every fill; its total bytes are fixed at
// creation. Create one per process and device (for Legate: per GPU
// processor) with that device current, and keep it for the process's life.
// Fills that share a pool run one after the other (the pool serializes
// them). The backend must outlive the pool; the destructor waits for copies
// still in flight before freeing.
class StagingPool {
 public:
  static Result<std::unique_ptr<StagingPool>> create(CopyBackend& backend,
                                                     const StagingOptions& options = {});
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  ~StagingPool();

  [[nodiscard]] CopyBackend& backend() const { return *backend_; }
  [[nodiscard]] std::size_t buffer_bytes() const { return buffer_bytes_; }
  [[nodiscard]] int buffers() const { return static_cast<int>(slots_.size()); }
  [[nodiscard]] std::size_t total_bytes() const { return buffer_bytes_ * slots_.size(); }

  // Internal to fill_device.
  struct Slot {
    std::byte* data = nullptr;
    CopyBackend::Fence fence = nullptr;
    bool pending = false;  // a copy from `data` may still be in flight
  };
  [[nodiscard]] std::vector<Slot>& slots() { return slots_; }
  [[nodiscard]] std::mutex& in_use() { return in_use_; }
  // The outcome of DirectReads::kAuto's measurement: 0 not yet measured,
  // 1 direct reads are faster, -1 they are not.
  std::atomic<int> direct_choice{0};

 private:
  explicit StagingPool(CopyBackend& backend) : backend_(&backend) {}
  CopyBackend* backend_;
  std::size_t buffer_bytes_ = 0;
  std::vector<Slot> slots_;
  std::mutex in_use_;
};

// A fixed set of threads that read chunks for fills. Created once (per
// process or per device) by whoever owns the fills and injected through
// DeviceFillOptions::readers; a fill without one runs its readers on the process's work pool
// (storage/detail/context.hpp).
// Fills sharing one ReaderThreads take turns (run() calls are serialized).
//
// Each thread's CPU affinity is set, never inherited: on `cpus` when given, else on the CPUs of
// the process as started (its main thread's), so that threads created inside a task, whose
// thread Realm pins to one core, do not all share that core.
class ReaderThreads {
 public:
  // kInvalidArgument unless 1 <= count <= 256 and every CPU is in [0, CPU_SETSIZE); kIo when a
  // thread cannot start. Where the system refuses the affinity, the threads run where they
  // started (cpus() == 0).
  static Result<std::unique_ptr<ReaderThreads>> create(int count, std::span<const int> cpus = {});
  // The CPUs each thread may run on, as set; 0 where setting it failed.
  [[nodiscard]] int cpus() const { return cpus_; }
  ReaderThreads(const ReaderThreads&) = delete;
  ReaderThreads& operator=(const ReaderThreads&) = delete;
  ~ReaderThreads();  // joins

  [[nodiscard]] int size() const { return static_cast<int>(threads_.size()); }
  // Runs fn(i) on thread i for i in [0, n), n <= size(), and returns once all
  // have returned. fn must not throw.
  void run(int n, const std::function<void(int)>& fn);

 private:
  ReaderThreads() = default;
  void loop(int index);
  std::vector<std::thread> threads_;
  std::mutex run_mu_;  // one run() at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int job_threads_ = 0;
  std::uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  int cpus_ = 0;
};

struct DeviceFillOptions {
  IoBackend* io = nullptr;  // nullptr: posix_io()
  // Scratch of each reader for Fortran-order shards and decoding formats.
  std::size_t scratch_bytes = std::size_t{4} << 20;
  bool check_snapshot = true;
  // Threads that read; nullptr: `reader_threads` readers on the process's work pool.
  // A page-cache pread runs at 6-10 GB/s per thread, a PCIe Gen5 link at
  // about 55, so several readers are what reaches the copy ceiling. At most
  // one reader per staging buffer is used.
  ReaderThreads* readers = nullptr;
  int reader_threads = 8;
  DirectReads direct = DirectReads::kOff;
  // Each reader's unit cache (ReaderContext::unit_cache_bytes): a decode unit larger than a
  // staging buffer is decoded once into it and staged from there, so a fill holds at most
  // the readers used x this many bytes more, only while such units are read. Units larger
  // than this are decoded once per buffer they fill, as without the cache.
  std::size_t unit_cache_bytes = kDefaultUnitCacheBytes;
  ReaderStats* stats = nullptr;  // the readers' counts (decodes), for tests and benchmarks
};

// Overrides reader_threads with SHARDLOAD_READER_THREADS when set.
Status device_fill_options_from_env(DeviceFillOptions* options);

// Fills device memory `device_dst` (dst_bytes long) with the pieces of one
// tile (dst_row relative to device_dst) on `stream`, through `pool`.
//
// Pieces are read in chunks of whole rows that fit a staging buffer, cut on the shard's
// decode unit grid (Shard::decode_rows) so that each unit is read by one reader thread
// and decoded once (a unit larger than a buffer through that reader's unit cache); a row
// larger than a buffer is split by bytes for native-endian C-order .npy
// shards and is kInvalidArgument otherwise. Consecutive pieces of one chunk each whose
// destinations are adjacent and that fit one buffer together are staged together (one copy
// and one fence), unless direct reads may serve them. Returns once every copy it
// enqueued has completed (so its status covers them and later work on the
// stream sees the data); staging memory is never released to another fill
// with a copy in flight, on error paths too. Errors name the file and rows
// (from the readers), or the backend call and its error, with
// "device fill rows [lo, hi) of SHARD" in front.
Status fill_device(const Layout& layout, const std::vector<Piece>& pieces, void* device_dst,
                   std::uint64_t dst_bytes, void* stream, StagingPool& pool,
                   const DeviceFillOptions& options = {});

// Fills device memory that is not dense C-order (a transposed or sliced store's piece) with
// rows [lo, hi) of the layout: row r's element i goes to device_dst + (r - lo) * strides[0] +
// sum(i_k * strides[k]) (extents in elements, strides in bytes, extents[0] == hi - lo). Whole
// rows are read, as many as fit, into the pool's staging buffers in turn and scattered with one
// copy per contiguous run; while one buffer's copies run the next is read, and a buffer is
// reused only after its fence. A row larger than a buffer goes through one staging allocation
// of its size, freed before returning. Returns once every copy has completed, on errors too;
// never throws (an exception inside is an error, with nothing left in flight or allocated).
// The reads run on the calling thread (options.readers is not used).
Status fill_device_strided(const Layout& layout, std::int64_t lo, std::int64_t hi,
                           std::span<const std::int64_t> extents,
                           std::span<const std::size_t> strides, void* device_dst, void* stream,
                           StagingPool& pool, const DeviceFillOptions& options = {});

// One device's fill resources, the process's for its life: its copy backend, its staging pool
// (StagingOptions from SHARDLOAD_STAGING_BYTES / _BUFFERS) and the options its fills run with
// (SHARDLOAD_READER_THREADS readers on the process's work pool: options.readers is null). Owned
// by the resource owner (storage/detail/context.hpp), never destroyed.
struct DeviceResources {
  std::unique_ptr<CopyBackend> backend;
  std::unique_ptr<StagingPool> pool;
  DeviceFillOptions options;
};

// The resources of `device` (a name, "cuda:0"), made at the first call for it, with the backend
// make_backend returns (called then only, with the device current), the same object for every
// later call from any thread. Errors: make_backend's; kInvalidArgument naming an environment
// variable that is malformed; the staging pool's (validate, an allocation). A failed call makes
// nothing, and the next one tries again.
Result<DeviceResources*> device_resources(
    const std::string& device,
    const std::function<Result<std::unique_ptr<CopyBackend>>()>& make_backend);

}  // namespace shardload
