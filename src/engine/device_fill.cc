#include "shardload/device_fill.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <limits>
#include <string>
#include <system_error>
#include <utility>

#include "engine/detail/strided.hpp"
#include "shardload/fill.hpp"
#include "shardload/reader.hpp"

namespace shardload {

// ---- backend defaults ----------------------------------------------------------

Result<void*> CopyBackend::direct_open(const std::string& path) {
  return Status(ErrorCode::kInvalidArgument,
                std::string(name()) + " backend: no direct reads (opening " + path + ")");
}

void CopyBackend::direct_close(void* /*handle*/) noexcept {}

Status CopyBackend::direct_read(void* /*handle*/, std::uint64_t /*offset*/, std::size_t /*bytes*/,
                                void* /*dst*/) {
  return {ErrorCode::kInvalidArgument, std::string(name()) + " backend: no direct reads"};
}

// ---- options -------------------------------------------------------------------

namespace {

constexpr std::size_t kMaxBufferBytes = std::size_t{4} << 30;
constexpr std::size_t kMaxTotalBytes = std::size_t{64} << 30;

// A whole decimal number in [lo, hi] from an environment variable, if set.
Status env_number(const char* var, std::uint64_t lo, std::uint64_t hi, std::uint64_t* out) {
  const char* text = std::getenv(var);
  if (text == nullptr) return Status::ok();
  const std::string s(text);
  std::uint64_t v = 0;
  bool ok = !s.empty() && s.size() <= 19;
  for (const char c : s) {
    if (c < '0' || c > '9') ok = false;
    if (ok) v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (!ok || v < lo || v > hi) {
    return {ErrorCode::kInvalidArgument, std::string(var) + ": expected a whole number in [" +
                                             std::to_string(lo) + ", " + std::to_string(hi) +
                                             "], found '" + s + "'"};
  }
  *out = v;
  return Status::ok();
}

}  // namespace

Status validate(const StagingOptions& o) {
  if (o.buffer_bytes < 1 || o.buffer_bytes > kMaxBufferBytes) {
    return {ErrorCode::kInvalidArgument, "staging buffer_bytes: expected 1 to " +
                                             std::to_string(kMaxBufferBytes) + ", found " +
                                             std::to_string(o.buffer_bytes)};
  }
  if (o.buffers < 2 || o.buffers > 1024) {
    return {ErrorCode::kInvalidArgument,
            "staging buffers: expected 2 to 1024 (two at least, so that a read overlaps a "
            "copy), found " +
                std::to_string(o.buffers)};
  }
  if (o.buffer_bytes * static_cast<std::size_t>(o.buffers) > kMaxTotalBytes) {
    return {ErrorCode::kInvalidArgument, "staging total: " + std::to_string(o.buffers) +
                                             " buffers of " + std::to_string(o.buffer_bytes) +
                                             " bytes exceed " + std::to_string(kMaxTotalBytes) +
                                             " bytes"};
  }
  return Status::ok();
}

Status staging_options_from_env(StagingOptions* o) {
  std::uint64_t bytes = o->buffer_bytes;
  std::uint64_t count = static_cast<std::uint64_t>(o->buffers);
  SHARDLOAD_RETURN_IF_ERROR(env_number("SHARDLOAD_STAGING_BYTES", 1, kMaxBufferBytes, &bytes));
  SHARDLOAD_RETURN_IF_ERROR(env_number("SHARDLOAD_STAGING_BUFFERS", 2, 1024, &count));
  o->buffer_bytes = static_cast<std::size_t>(bytes);
  o->buffers = static_cast<int>(count);
  return validate(*o);
}

Status device_fill_options_from_env(DeviceFillOptions* o) {
  std::uint64_t n = static_cast<std::uint64_t>(std::max(o->reader_threads, 1));
  SHARDLOAD_RETURN_IF_ERROR(env_number("SHARDLOAD_READER_THREADS", 1, 256, &n));
  o->reader_threads = static_cast<int>(n);
  return Status::ok();
}

// ---- staging pool --------------------------------------------------------------

Result<std::unique_ptr<StagingPool>> StagingPool::create(CopyBackend& backend,
                                                         const StagingOptions& options) {
  SHARDLOAD_RETURN_IF_ERROR(validate(options));
  std::unique_ptr<StagingPool> pool(new (std::nothrow) StagingPool(backend));
  if (!pool) return Status(ErrorCode::kIo, "staging pool: out of host memory");
  pool->buffer_bytes_ = options.buffer_bytes;
  pool->slots_.reserve(static_cast<std::size_t>(options.buffers));
  // On failure the pool's destructor frees what was allocated so far.
  for (int i = 0; i < options.buffers; ++i) {
    auto mem = backend.alloc_staging(options.buffer_bytes);
    if (!mem) {
      return mem.status().with_context("staging pool: buffer " + std::to_string(i) + " of " +
                                       std::to_string(options.buffers) + " (" +
                                       std::to_string(options.buffer_bytes) + " bytes each)");
    }
    pool->slots_.push_back(Slot{static_cast<std::byte*>(*mem), nullptr, false});
    auto fence = backend.create_fence();
    if (!fence) return fence.status().with_context("staging pool: fence " + std::to_string(i));
    pool->slots_.back().fence = *fence;
  }
  return pool;
}

StagingPool::~StagingPool() {
  for (auto& s : slots_) {
    // A copy may still read this memory only if a failed fill could not
    // wait for it; wait here rather than free memory under a transfer.
    if (s.pending && s.fence != nullptr) (void)backend_->wait(s.fence);
    if (s.fence != nullptr) backend_->destroy_fence(s.fence);
    backend_->free_staging(s.data);
  }
}

// ---- reader threads ------------------------------------------------------------

namespace {

// The CPUs of the process as it was started (its main thread's; a Realm worker thread is pinned
// to its own core), or every CPU where that cannot be read. The kernel keeps any of them to
// what the process's cpuset allows.
cpu_set_t process_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(::getpid(), sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return set;
  CPU_ZERO(&set);
  const long n = ::sysconf(_SC_NPROCESSORS_CONF);
  for (long c = 0; c < std::min<long>(n > 0 ? n : 1, CPU_SETSIZE); ++c) CPU_SET(c, &set);
  return set;
}

}  // namespace

Result<std::unique_ptr<ReaderThreads>> ReaderThreads::create(int count, std::span<const int> cpus) {
  if (count < 1 || count > 256) {
    return Status(ErrorCode::kInvalidArgument,
                  "reader threads: expected 1 to 256, found " + std::to_string(count));
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) {
      return Status(ErrorCode::kInvalidArgument, "reader threads: CPU " + std::to_string(c) +
                                                     " out of range [0, " +
                                                     std::to_string(CPU_SETSIZE) + ")");
    }
    CPU_SET(c, &set);
  }
  if (cpus.empty()) set = process_cpus();
  std::unique_ptr<ReaderThreads> r(new (std::nothrow) ReaderThreads());
  if (!r) return Status(ErrorCode::kIo, "reader threads: out of memory");
  try {
    r->threads_.reserve(static_cast<std::size_t>(count));
    r->cpus_ = CPU_COUNT(&set);
    for (int i = 0; i < count; ++i) {
      r->threads_.emplace_back([p = r.get(), i] { p->loop(i); });
      // Set, not inherited: threads created inside a task would share its pinned core. A
      // sandbox that refuses affinity leaves them where they are (not an error).
      const int e = ::pthread_setaffinity_np(r->threads_.back().native_handle(), sizeof set, &set);
      if (e != 0) r->cpus_ = 0;
    }
  } catch (const std::exception& e) {
    // The destructor joins the threads that did start.
    return Status(ErrorCode::kIo, "reader threads: cannot start thread " +
                                      std::to_string(r->threads_.size()) + " of " +
                                      std::to_string(count) + ": " + e.what());
  }
  return r;
}

ReaderThreads::~ReaderThreads() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReaderThreads::loop(int index) {
  std::uint64_t seen = 0;
  std::unique_lock lk(mu_);
  for (;;) {
    wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= job_threads_) continue;
    const auto* job = job_;
    lk.unlock();
    (*job)(index);
    lk.lock();
    if (--running_ == 0) done_.notify_all();
  }
}

void ReaderThreads::run(int n, const std::function<void(int)>& fn) {
  n = std::clamp(n, 0, size());
  if (n == 0) return;
  std::lock_guard turn(run_mu_);
  std::unique_lock lk(mu_);
  job_ = &fn;
  job_threads_ = n;
  running_ = n;
  ++generation_;
  wake_.notify_all();
  done_.wait(lk, [&] { return running_ == 0; });
  job_ = nullptr;
}

// ---- the fill ------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

// How one piece is cut: chunks of `rows_per_chunk` rows on a grid of file rows
// starting at `origin` (the first and last chunk cut at the piece), or, when a row exceeds
// a staging buffer, `parts` byte ranges per row. For a shard with decode units the grid is
// the units' (origin a unit boundary, rows_per_chunk a whole number of units), so that no
// unit is split between chunks, which go to different reader threads; a unit larger than a
// buffer is one chunk that its thread reads in `sub_rows` pieces, the reader decoding the
// unit once into its unit cache and serving every piece from there.
struct PieceCut {
  std::int64_t rows_per_chunk = 0;  // 0: split rows by bytes
  std::int64_t origin = 0;          // file row where the grid of chunks starts
  std::int64_t sub_rows = 0;        // > 0: a chunk is a unit, staged this many rows at a time
  std::uint64_t parts_per_row = 1;
  std::uint64_t chunks = 0;
  bool raw = false;  // bytes are the file's bytes: native-endian C-order .npy
};

struct Chunk {
  std::size_t piece = 0;
  std::int64_t lo = 0, hi = 0;    // shard rows the chunk covers (byte parts: the one row)
  std::uint64_t file_offset = 0;  // raw chunks: where its bytes are in the file
  std::uint64_t dst_offset = 0;
  std::size_t bytes = 0;
  std::int64_t sub_rows = 0;  // > 0: more rows than a buffer, staged this many at a time
  bool raw = false;
  bool whole_rows = true;
};

std::string rows_string(std::int64_t lo, std::int64_t hi) {
  // Appended, not "[" + ...: GCC 12 warns falsely (-Wrestrict) on that once inlined.
  std::string s = "[";
  s += std::to_string(lo);
  s += ", ";
  s += std::to_string(hi);
  s += ")";
  return s;
}

class Fill {
 public:
  Fill(const Layout& layout, const std::vector<Piece>& pieces, std::byte* dst, void* stream,
       StagingPool& pool, const DeviceFillOptions& options)
      : layout_(layout),
        pieces_(pieces),
        dst_(dst),
        stream_(stream),
        pool_(pool),
        backend_(pool.backend()),
        options_(options),
        contiguous_rows_(
            find_format(layout.format, layout.options.reader) != nullptr &&
            find_format(layout.format, layout.options.reader)->capabilities.contiguous_rows) {}

  Status plan(std::uint64_t dst_bytes);
  Status run();

 private:
  // Per reader thread: its format reader, the file of its current raw
  // chunk, and its direct-read handle.
  struct ReaderState {
    std::unique_ptr<ShardReader> reader;
    std::int64_t file_shard = -1;
    File file;
    std::int64_t direct_shard = -1;
    void* direct = nullptr;  // nullptr with direct_shard set: the backend declined the file
  };

  Chunk chunk_at(std::uint64_t index) const;
  void work(int thread);
  Status do_chunk(const Chunk& c, ReaderState& st);
  // Reads into a free staging buffer through read(buffer, &bytes), then copies the bytes to
  // dst_offset on the stream and records the buffer's fence.
  template <class Read>
  Status staged(std::uint64_t dst_offset, Read&& read, bool wait_for_copy);
  Status staged_chunk(const Chunk& c, ReaderState& st, bool wait_for_copy);
  // Chunks [begin, end) of a coalesced group: one buffer, one copy, one fence.
  Status staged_group(std::uint64_t begin, std::uint64_t end, ReaderState& st);
  // The coalesced group chunk i begins ({i, end}), lies inside ({begin, end} with begin < i),
  // or {i, i + 1} when it is in none.
  std::pair<std::uint64_t, std::uint64_t> group_of(std::uint64_t i) const;
  // Reads straight into device memory, or stages a file the backend declines; *direct says
  // which.
  Status direct_chunk(const Chunk& c, ReaderState& st, bool* direct = nullptr);
  Status read_into(const Chunk& c, ReaderState& st, std::byte* buf);
  Status open_file(std::int64_t shard, ReaderState& st);
  // After reads of the shard's file through st.file: check_unchanged.
  Status unchanged(std::int64_t shard, const ReaderState& st, Status read) const;
  void fail(std::uint64_t chunk, Status s);
  std::string where(const Chunk& c) const;

  StagingPool::Slot* acquire();
  void release(StagingPool::Slot* s);

  const Layout& layout_;
  // The pieces in rows of the files (a view's first_row added), once plan() has run.
  std::vector<Piece> pieces_;
  std::byte* dst_;
  void* stream_;
  StagingPool& pool_;
  CopyBackend& backend_;
  const DeviceFillOptions& options_;
  // The format stores rows as one byte range (FormatCapabilities): plain shards are read
  // straight into the staging buffers.
  const bool contiguous_rows_;
  IoBackend* io_ = nullptr;

  std::vector<PieceCut> cuts_;
  std::vector<std::uint64_t> first_chunk_;  // per piece, size pieces + 1
  std::uint64_t chunks_ = 0;
  bool may_read_direct_ = false;
  // Runs of small pieces, each one chunk, with adjacent destinations and together no larger
  // than a buffer: staged together (one copy and one fence instead of one per piece). Chunk
  // ranges [first, second), in order.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> groups_;

  std::atomic<std::uint64_t> next_{0};
  std::atomic<bool> failed_{false};
  std::mutex mu_;  // guards free_, error_, error_chunk_
  std::deque<StagingPool::Slot*> free_;
  Status error_;
  std::uint64_t error_chunk_ = std::numeric_limits<std::uint64_t>::max();
};

Status Fill::plan(std::uint64_t dst_bytes) {
  io_ = options_.io != nullptr ? options_.io : &posix_io();
  const std::uint64_t row = layout_.row_bytes;
  const std::size_t buf = pool_.buffer_bytes();
  cuts_.reserve(pieces_.size());
  first_chunk_.reserve(pieces_.size() + 1);
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    Piece& p = pieces_[i];
    if (p.shard < 0 || static_cast<std::size_t>(p.shard) >= layout_.shards.size() || p.lo < 0 ||
        p.hi < p.lo || p.hi > layout_.shards[static_cast<std::size_t>(p.shard)].rows ||
        p.dst_row < 0) {
      return {ErrorCode::kInvalidArgument, "piece " + std::to_string(i) + " (shard " +
                                               std::to_string(p.shard) + ", rows " +
                                               rows_string(p.lo, p.hi) + ") outside its shard"};
    }
    std::uint64_t end = 0;
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(p.dst_row + (p.hi - p.lo)), row, &end) ||
        end > dst_bytes) {
      return {ErrorCode::kInvalidArgument,
              "piece " + std::to_string(i) + " (destination rows " +
                  rows_string(p.dst_row, p.dst_row + (p.hi - p.lo)) + " of " + std::to_string(row) +
                  " bytes) overruns the destination of " + std::to_string(dst_bytes) + " bytes"};
    }
    const Shard& s = layout_.shards[static_cast<std::size_t>(p.shard)];
    // From here on a piece counts rows of its file: chunk offsets and the
    // reader both want them.
    p.lo += s.first_row;
    p.hi += s.first_row;
    PieceCut cut;
    cut.raw = contiguous_rows_ && !s.byte_swap && !s.fortran_order;
    const auto rows = static_cast<std::uint64_t>(p.hi - p.lo);
    if (row == 0 || rows == 0) {
      cut.rows_per_chunk = 1;
      cut.chunks = 0;
    } else if (row <= buf) {
      const auto per_buffer = static_cast<std::int64_t>(buf / row);
      const std::int64_t unit = cut.raw ? 0 : s.decode_rows;
      cut.rows_per_chunk = per_buffer;
      cut.origin = p.lo;
      if (unit > 0) {
        if (unit <= per_buffer) {
          cut.rows_per_chunk = per_buffer / unit * unit;
        } else {
          cut.rows_per_chunk = unit;
          cut.sub_rows = per_buffer;
        }
        cut.origin = p.lo - p.lo % cut.rows_per_chunk;
      }
      const auto span = static_cast<std::uint64_t>(p.hi - cut.origin);
      cut.chunks = (span + static_cast<std::uint64_t>(cut.rows_per_chunk) - 1) /
                   static_cast<std::uint64_t>(cut.rows_per_chunk);
    } else if (cut.raw) {
      cut.rows_per_chunk = 0;
      cut.parts_per_row = (row + buf - 1) / buf;
      cut.chunks = rows * cut.parts_per_row;
    } else {
      return {ErrorCode::kInvalidArgument,
              s.path + ": one row is " + std::to_string(row) +
                  " bytes, more than a staging buffer of " + std::to_string(buf) +
                  " bytes, and this shard's rows must be read whole (byte-swapped, Fortran "
                  "order or not .npy); raise the staging buffer size"};
    }
    first_chunk_.push_back(chunks_);
    chunks_ += cut.chunks;
    if (cut.raw && cut.chunks > 0) may_read_direct_ = true;
    cuts_.push_back(cut);
  }
  first_chunk_.push_back(chunks_);
  if (chunks_ > 0 && dst_ == nullptr) {
    return {ErrorCode::kInvalidArgument,
            "device fill: null destination for " + std::to_string(chunks_) + " chunks"};
  }
  // Direct reads land the file's bytes on the device unseen, and bool bytes
  // must pass through normalize_bools on the host first.
  may_read_direct_ = may_read_direct_ && layout_.dtype.kind != DTypeKind::kBool &&
                     options_.direct != DirectReads::kOff && backend_.has_direct_reads() &&
                     (options_.direct == DirectReads::kOn || pool_.direct_choice.load() != -1);
  // Coalescing: staged reads only (a direct read needs no buffer, copy or fence to share).
  if (!may_read_direct_) {
    std::size_t open = 0;  // pieces in the group being built
    std::uint64_t group_bytes = 0;
    std::int64_t next_dst = -1;  // the destination row the group's next piece must start at
    std::uint64_t begin = 0;
    auto close = [&] {
      if (open >= 2) groups_.emplace_back(begin, begin + open);
      open = 0;
    };
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      const PieceCut& cut = cuts_[i];
      if (cut.chunks == 0) continue;  // no rows: it splits nothing
      const Piece& p = pieces_[i];
      const std::uint64_t bytes = static_cast<std::uint64_t>(p.hi - p.lo) * row;
      const bool small = cut.chunks == 1 && cut.rows_per_chunk > 0 && cut.sub_rows == 0;
      if (!small) {
        close();
        continue;
      }
      if (open > 0 && p.dst_row == next_dst && group_bytes + bytes <= buf) {
        ++open;
        group_bytes += bytes;
      } else {
        close();
        open = 1;
        begin = first_chunk_[i];
        group_bytes = bytes;
      }
      next_dst = p.dst_row + (p.hi - p.lo);
    }
    close();
  }
  return Status::ok();
}

std::pair<std::uint64_t, std::uint64_t> Fill::group_of(std::uint64_t i) const {
  const auto it =
      std::upper_bound(groups_.begin(), groups_.end(), i,
                       [](std::uint64_t v, const std::pair<std::uint64_t, std::uint64_t>& g) {
                         return v < g.first;
                       });
  if (it != groups_.begin() && i < std::prev(it)->second) return *std::prev(it);
  return {i, i + 1};
}

Chunk Fill::chunk_at(std::uint64_t index) const {
  // The last piece whose first chunk is <= index (pieces with no chunks
  // share their successor's first chunk and are skipped by upper_bound).
  const auto it = std::upper_bound(first_chunk_.begin(), first_chunk_.end() - 1, index);
  const auto pi = static_cast<std::size_t>(it - first_chunk_.begin()) - 1;
  const Piece& p = pieces_[pi];
  const PieceCut& cut = cuts_[pi];
  const Shard& s = layout_.shards[static_cast<std::size_t>(p.shard)];
  const std::uint64_t j = index - first_chunk_[pi];
  const std::uint64_t row = layout_.row_bytes;
  Chunk c;
  c.piece = pi;
  c.raw = cut.raw;
  if (cut.rows_per_chunk > 0) {
    const std::int64_t start = cut.origin + static_cast<std::int64_t>(j) * cut.rows_per_chunk;
    c.lo = std::max(p.lo, start);
    c.hi = std::min(p.hi, start + cut.rows_per_chunk);
    c.sub_rows = cut.sub_rows;
    c.bytes = static_cast<std::size_t>(static_cast<std::uint64_t>(c.hi - c.lo) * row);
    c.file_offset = s.data_offset + static_cast<std::uint64_t>(c.lo) * row;
    c.dst_offset = static_cast<std::uint64_t>(p.dst_row + (c.lo - p.lo)) * row;
  } else {
    const std::uint64_t r = j / cut.parts_per_row;
    const std::uint64_t part = j % cut.parts_per_row;
    const std::uint64_t skip = part * pool_.buffer_bytes();
    c.whole_rows = false;
    c.lo = p.lo + static_cast<std::int64_t>(r);
    c.hi = c.lo + 1;
    c.bytes = static_cast<std::size_t>(std::min<std::uint64_t>(pool_.buffer_bytes(), row - skip));
    c.file_offset = s.data_offset + static_cast<std::uint64_t>(c.lo) * row + skip;
    c.dst_offset = static_cast<std::uint64_t>(p.dst_row + (c.lo - p.lo)) * row + skip;
  }
  return c;
}

std::string Fill::where(const Chunk& c) const {
  const Piece& p = pieces_[c.piece];
  std::string w = "device fill rows " + rows_string(c.lo, c.hi) + " of shard " +
                  std::to_string(p.shard) + " (tile rows " +
                  rows_string(p.dst_row + (c.lo - p.lo), p.dst_row + (c.hi - p.lo)) + ")";
  if (!c.whole_rows) w += ", bytes at file offset " + std::to_string(c.file_offset);
  return w;
}

void Fill::fail(std::uint64_t chunk, Status s) {
  std::lock_guard lk(mu_);
  // Keep the earliest chunk's error, so that what is reported does not
  // depend on which thread lost the race.
  if (chunk < error_chunk_) {
    error_chunk_ = chunk;
    error_ = std::move(s);
  }
  failed_.store(true);
}

StagingPool::Slot* Fill::acquire() {
  std::lock_guard lk(mu_);
  // Never empty: each reader holds at most one slot, and there are no more
  // readers than slots.
  StagingPool::Slot* s = free_.front();
  free_.pop_front();
  return s;
}

void Fill::release(StagingPool::Slot* s) {
  std::lock_guard lk(mu_);
  // To the back: the slot whose copy was queued longest ago is reused first,
  // so its fence has most likely passed already.
  free_.push_back(s);
}

Status Fill::open_file(std::int64_t shard, ReaderState& st) {
  if (st.file_shard == shard) return Status::ok();
  st.file = File();
  st.file_shard = -1;
  const Shard& s = layout_.shards[static_cast<std::size_t>(shard)];
  SHARDLOAD_ASSIGN_OR_RETURN(st.file, open_checked(*io_, s, options_.check_snapshot));
  st.file_shard = shard;
  return Status::ok();
}

Status Fill::read_into(const Chunk& c, ReaderState& st, std::byte* buf) {
  const Piece& p = pieces_[c.piece];
  if (c.raw) {
    SHARDLOAD_RETURN_IF_ERROR(open_file(p.shard, st));
    return unchanged(p.shard, st, st.file.read_exact(buf, c.bytes, c.file_offset));
  }
  if (!st.reader) {
    ReaderContext ctx;
    ctx.io = io_;
    ctx.scratch_bytes = options_.scratch_bytes;
    ctx.check_snapshot = options_.check_snapshot;
    ctx.unit_cache_bytes = options_.unit_cache_bytes;
    ctx.stats = options_.stats;
    SHARDLOAD_ASSIGN_OR_RETURN(st.reader, make_reader(layout_.format, layout_.options, ctx));
  }
  return st.reader->read_rows(layout_, layout_.shards[static_cast<std::size_t>(p.shard)], c.lo,
                              c.hi, buf);
}

template <class Read>
Status Fill::staged(std::uint64_t dst_offset, Read&& read, bool wait_for_copy) {
  StagingPool::Slot* slot = acquire();
  if (slot->pending) {
    Status s = backend_.wait(slot->fence);
    if (!s) {
      release(slot);  // still pending: the end of the fill synchronizes the stream
      return s.with_context("waiting for an earlier copy from staging buffer");
    }
    slot->pending = false;
  }
  std::size_t bytes = 0;
  Status s = read(slot->data, &bytes);
  if (!s) {
    release(slot);
    return s;
  }
  if (layout_.dtype.kind == DTypeKind::kBool) normalize_bools(slot->data, bytes);
  // Marked pending before the calls: even a failed enqueue may have queued
  // part of the work, and waiting on a fence that never got recorded is free.
  slot->pending = true;
  s = backend_.copy_async(dst_ + dst_offset, slot->data, bytes, stream_);
  if (!s) {
    release(slot);
    return s.with_context("copying " + std::to_string(bytes) + " bytes to device offset " +
                          std::to_string(dst_offset));
  }
  s = backend_.record(slot->fence, stream_);
  if (s && wait_for_copy) {
    s = backend_.wait(slot->fence);
    if (s) slot->pending = false;
  }
  release(slot);
  return s.with_context("after the copy to device offset " + std::to_string(dst_offset));
}

Status Fill::staged_chunk(const Chunk& c, ReaderState& st, bool wait_for_copy) {
  return staged(
      c.dst_offset,
      [&](std::byte* buf, std::size_t* bytes) {
        *bytes = c.bytes;
        return read_into(c, st, buf);
      },
      wait_for_copy);
}

Status Fill::staged_group(std::uint64_t begin, std::uint64_t end, ReaderState& st) {
  const Chunk first = chunk_at(begin);
  bool read_failed = false;
  Status s = staged(
      first.dst_offset,
      [&](std::byte* buf, std::size_t* bytes) {
        for (std::uint64_t k = begin; k < end; ++k) {
          const Chunk c = chunk_at(k);
          Status r = read_into(c, st, buf + *bytes);
          if (!r) {
            read_failed = true;
            return r.with_context(where(c));
          }
          *bytes += c.bytes;
        }
        return Status::ok();
      },
      false);
  if (s || read_failed) return s;
  return s.with_context(where(first) + " and the " + std::to_string(end - begin - 1) +
                        " pieces after it, staged together");
}

Status Fill::direct_chunk(const Chunk& c, ReaderState& st, bool* direct) {
  const Piece& p = pieces_[c.piece];
  if (st.direct_shard != p.shard) {
    // The snapshot check goes through the ordinary open, as for staged reads.
    SHARDLOAD_RETURN_IF_ERROR(open_file(p.shard, st));
    if (st.direct != nullptr) backend_.direct_close(st.direct);
    st.direct = nullptr;
    st.direct_shard = -1;
    SHARDLOAD_ASSIGN_OR_RETURN(st.direct, backend_.direct_open(st.file.path()));
    st.direct_shard = p.shard;
  }
  if (direct != nullptr) *direct = st.direct != nullptr;
  // Declined (cuFile does not serve this file's file system): staged like any other chunk.
  if (st.direct == nullptr) return staged_chunk(c, st, false);
  return unchanged(p.shard, st,
                   backend_.direct_read(st.direct, c.file_offset, c.bytes, dst_ + c.dst_offset));
}

Status Fill::unchanged(std::int64_t shard, const ReaderState& st, Status read) const {
  // Every chunk, not only a file's last one: chunks of one file go to any
  // reader thread, a thread keeps its file open across chunks, and one
  // fstat per chunk of megabytes costs nothing next to the read.
  if (!options_.check_snapshot) return read;
  return check_unchanged(st.file, layout_.shards[static_cast<std::size_t>(shard)].snapshot,
                         std::move(read));
}

Status Fill::do_chunk(const Chunk& c, ReaderState& st) {
  if (c.sub_rows > 0 && c.hi - c.lo > c.sub_rows) {
    // One unit, more than a buffer: staged in turn by this thread, decoded once.
    const std::uint64_t row = layout_.row_bytes;
    for (std::int64_t a = c.lo; a < c.hi; a += c.sub_rows) {
      Chunk part = c;
      part.lo = a;
      part.hi = std::min(c.hi, a + c.sub_rows);
      part.sub_rows = 0;
      part.bytes = static_cast<std::size_t>(static_cast<std::uint64_t>(part.hi - part.lo) * row);
      part.file_offset = c.file_offset + static_cast<std::uint64_t>(a - c.lo) * row;
      part.dst_offset = c.dst_offset + static_cast<std::uint64_t>(a - c.lo) * row;
      SHARDLOAD_RETURN_IF_ERROR(staged_chunk(part, st, false));
    }
    return Status::ok();
  }
  if (!c.raw || !may_read_direct_) return staged_chunk(c, st, false);
  if (options_.direct == DirectReads::kOn) return direct_chunk(c, st);
  int choice = pool_.direct_choice.load();
  if (choice == 1) return direct_chunk(c, st);
  if (choice != 0 || !pool_.direct_choice.compare_exchange_strong(choice, 2)) {
    return staged_chunk(c, st, false);  // declined, or another reader is measuring
  }
  // Measure this chunk both ways (the same bytes land twice), once per pool.
  const auto t0 = Clock::now();
  Status s = staged_chunk(c, st, true);
  const auto t1 = Clock::now();
  if (!s) {
    pool_.direct_choice.store(0);
    return s;
  }
  bool went_direct = false;
  Status d = direct_chunk(c, st, &went_direct);
  const auto t2 = Clock::now();
  if (!went_direct) {
    // This file was declined: nothing measured; a later chunk of another file measures.
    pool_.direct_choice.store(0);
    return d;
  }
  // A failing direct read only means the pinned path is the one to use.
  pool_.direct_choice.store(d && (t2 - t1) < (t1 - t0) ? 1 : -1);
  return Status::ok();
}

void Fill::work(int /*thread*/) {
  ReaderState st;
  for (;;) {
    if (failed_.load()) break;
    const std::uint64_t i = next_.fetch_add(1);
    if (i >= chunks_) break;
    Chunk c;
    try {
      const auto [begin, end] = group_of(i);
      if (begin != i) continue;  // inside a group: its first chunk's thread stages it
      if (end > i + 1) {
        Status s = staged_group(begin, end, st);
        if (!s) {
          fail(i, std::move(s));  // the chunk that failed is named inside
          break;
        }
        continue;
      }
      c = chunk_at(i);
      Status s = do_chunk(c, st);
      if (!s) {
        fail(i, s.with_context(where(c)));
        break;
      }
    } catch (const std::exception& e) {
      // Readers do not throw; this is an allocation failing.
      fail(i, Status(ErrorCode::kIo, where(c) + ": " + e.what()));
      break;
    }
  }
  if (st.direct != nullptr) backend_.direct_close(st.direct);
}

Status Fill::run() {
  if (chunks_ == 0) return Status::ok();
  std::unique_lock pool_lock(pool_.in_use());
  for (auto& s : pool_.slots()) free_.push_back(&s);

  if (may_read_direct_) {
    // Direct reads write device memory outside the stream: let work queued
    // on it before this fill finish first.
    SHARDLOAD_RETURN_IF_ERROR(backend_.synchronize(stream_).with_context(
        "device fill: synchronizing the stream before direct reads"));
  }

  const std::uint64_t most =
      std::min<std::uint64_t>(chunks_, static_cast<std::uint64_t>(pool_.buffers()));
  const std::function<void(int)> job = [this](int t) { work(t); };
  if (options_.readers != nullptr) {
    const int n = static_cast<int>(
        std::min<std::uint64_t>(most, static_cast<std::uint64_t>(options_.readers->size())));
    if (n <= 1) {
      job(0);
    } else {
      options_.readers->run(n, job);
    }
  } else {
    const int n = static_cast<int>(std::min<std::uint64_t>(
        most, static_cast<std::uint64_t>(std::max(options_.reader_threads, 1))));
    if (n <= 1) {
      job(0);
    } else {
      auto threads = ReaderThreads::create(n);
      if (!threads) return threads.status().with_context("device fill");
      (*threads)->run(n, job);
    }
  }

  // Every copy of this fill has a fence after it; waiting on each leaves no
  // copy in flight when the pool is handed to the next fill.
  Status end;
  for (auto& s : pool_.slots()) {
    if (!s.pending) continue;
    Status w = backend_.wait(s.fence);
    if (w) {
      s.pending = false;
    } else if (end) {
      end = w.with_context("device fill: waiting for the last copies");
    }
  }
  if (failed_.load() || !end) {
    // A copy may have been queued without its fence; the stream covers it.
    Status sync = backend_.synchronize(stream_);
    if (sync) {
      for (auto& s : pool_.slots()) s.pending = false;
    } else if (end) {
      end = sync.with_context("device fill: synchronizing after an error");
    }
  }
  if (failed_.load()) return error_;
  return end;
}

}  // namespace

Status fill_device(const Layout& layout, const std::vector<Piece>& pieces, void* device_dst,
                   std::uint64_t dst_bytes, void* stream, StagingPool& pool,
                   const DeviceFillOptions& options) {
  try {
    Fill fill(layout, pieces, static_cast<std::byte*>(device_dst), stream, pool, options);
    SHARDLOAD_RETURN_IF_ERROR(fill.plan(dst_bytes));
    return fill.run();
  } catch (const std::exception& e) {
    return {ErrorCode::kIo, std::string("device fill: ") + e.what()};
  }
}

namespace {

// The staging buffers of one strided fill: each buffer's fence is waited for before the buffer
// is refilled, and every copy before the pool (or a one-off buffer) is handed back, whichever
// way the fill ends.
class StridedStaging {
 public:
  StridedStaging(StagingPool& pool, void* stream) : pool_(pool), stream_(stream) {}
  StridedStaging(const StridedStaging&) = delete;
  StridedStaging& operator=(const StridedStaging&) = delete;
  ~StridedStaging() { (void)finish(); }

  // A buffer of at least `bytes` whose earlier copies have completed.
  Result<StagingPool::Slot*> next(std::size_t bytes) {
    CopyBackend& b = pool_.backend();
    StagingPool::Slot* slot = nullptr;
    if (bytes > pool_.buffer_bytes()) {
      if (!big_) {
        SHARDLOAD_ASSIGN_OR_RETURN(void* mem, b.alloc_staging(bytes));
        big_ = std::make_unique<StagingPool::Slot>();
        big_->data = static_cast<std::byte*>(mem);
        auto fence = b.create_fence();
        if (!fence) return fence.status();
        big_->fence = *fence;
      }
      slot = big_.get();
    } else {
      slot = &pool_.slots()[turn_++ % pool_.slots().size()];
    }
    if (slot->pending) {
      SHARDLOAD_RETURN_IF_ERROR(
          b.wait(slot->fence).with_context("waiting for an earlier copy from staging buffer"));
      slot->pending = false;
    }
    return slot;
  }

  // Every copy done; the first error met doing so. Leaves nothing in flight even then.
  Status finish() noexcept {
    CopyBackend& b = pool_.backend();
    Status end;
    bool stuck = false;
    auto drain = [&](StagingPool::Slot& s) {
      if (!s.pending) return;
      Status w = b.wait(s.fence);
      if (w) {
        s.pending = false;
      } else {
        stuck = true;
        if (end) end = w.with_context("device fill: waiting for the last copies");
      }
    };
    for (auto& s : pool_.slots()) drain(s);
    if (big_) drain(*big_);
    if (stuck || unfenced_) {
      // A copy may have been queued without its fence; the stream covers it.
      Status sync = b.synchronize(stream_);
      if (sync) {
        for (auto& s : pool_.slots()) s.pending = false;
        if (big_) big_->pending = false;
      } else if (end) {
        end = sync.with_context("device fill: synchronizing after an error");
      }
      unfenced_ = false;
    }
    if (big_ && !big_->pending) {
      b.destroy_fence(big_->fence);
      b.free_staging(big_->data);
      big_.reset();
    }
    return end;
  }

  void set_unfenced() { unfenced_ = true; }
  void set_unfenced_done() { unfenced_ = false; }

 private:
  StagingPool& pool_;
  void* stream_;
  std::unique_ptr<StagingPool::Slot> big_;  // a row larger than the pool's buffers
  std::size_t turn_ = 0;
  bool unfenced_ = false;  // a copy was enqueued after the last fence of its buffer
};

Status strided_fill(const Layout& layout, std::int64_t lo, std::int64_t hi,
                    std::span<const std::int64_t> extents, std::span<const std::size_t> strides,
                    std::byte* dst, void* stream, StagingPool& pool,
                    const DeviceFillOptions& options) {
  const std::size_t row = layout.row_bytes;
  if (extents.empty() || extents.size() != strides.size() || extents[0] != hi - lo || lo < 0 ||
      hi < lo || hi > layout.total_rows()) {
    return {ErrorCode::kInvalidArgument,
            "device fill (strided): rows " + rows_string(lo, hi) + " of " +
                std::to_string(layout.total_rows()) + " do not match the destination's " +
                std::to_string(extents.empty() ? 0 : extents[0]) + " rows in " +
                std::to_string(extents.size()) + " dimensions (" + std::to_string(strides.size()) +
                " strides)"};
  }
  if (hi == lo || row == 0) return Status::ok();
  if (dst == nullptr)
    return {ErrorCode::kInvalidArgument, "device fill (strided): null destination"};
  CopyBackend& backend = pool.backend();
  std::unique_lock pool_lock(pool.in_use());
  FillOptions fo;
  fo.io = options.io;
  fo.scratch_bytes = options.scratch_bytes;
  fo.check_snapshot = options.check_snapshot;
  fo.unit_cache_bytes = options.unit_cache_bytes;
  fo.stats = options.stats;
  SHARDLOAD_ASSIGN_OR_RETURN(auto filler, RowFiller::create(layout, fo));
  const auto rows_per_buffer =
      static_cast<std::int64_t>(std::max<std::size_t>(1, pool.buffer_bytes() / row));
  StridedStaging staging(pool, stream);
  Status copy_error;
  for (std::int64_t a = lo; a < hi; a += rows_per_buffer) {
    const std::int64_t b = std::min(hi, a + rows_per_buffer);
    const std::size_t bytes = static_cast<std::size_t>(b - a) * row;
    SHARDLOAD_ASSIGN_OR_RETURN(StagingPool::Slot * slot, staging.next(bytes));
    SHARDLOAD_RETURN_IF_ERROR(filler->fill(a, b, slot->data));  // bools normalised there
    // Pending from the first enqueue on: a failed one may have queued part of the work.
    slot->pending = true;
    staging.set_unfenced();
    const detail::RunCopy copy = [&](std::byte* to, const std::byte* from, std::size_t n) {
      copy_error = backend.copy_async(to, from, n, stream);
      return copy_error.is_ok();
    };
    std::vector<std::int64_t> chunk_extents(extents.begin(), extents.end());
    chunk_extents[0] = b - a;
    if (!detail::scatter_rows(slot->data, b - a, chunk_extents, strides, layout.dtype.size,
                              dst + static_cast<std::size_t>(a - lo) * strides[0], copy)) {
      return copy_error.with_context("device fill (strided): rows " + rows_string(a, b) +
                                     ": copying to the device");
    }
    SHARDLOAD_RETURN_IF_ERROR(backend.record(slot->fence, stream)
                                  .with_context("device fill (strided): rows " + rows_string(a, b) +
                                                ": after the copies"));
    staging.set_unfenced_done();
  }
  return staging.finish();
}

}  // namespace

Status fill_device_strided(const Layout& layout, std::int64_t lo, std::int64_t hi,
                           std::span<const std::int64_t> extents,
                           std::span<const std::size_t> strides, void* device_dst, void* stream,
                           StagingPool& pool, const DeviceFillOptions& options) {
  try {
    return strided_fill(layout, lo, hi, extents, strides, static_cast<std::byte*>(device_dst),
                        stream, pool, options);
  } catch (const std::exception& e) {
    // The staging guard has waited for every copy while unwinding.
    return {ErrorCode::kIo, std::string("device fill (strided): ") + e.what()};
  }
}

}  // namespace shardload
