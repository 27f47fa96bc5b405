// The device fill's pipeline: a tile's pieces cut into chunks, read by the reader threads into
// the staging pool's buffers (or straight into device memory) and copied to the destination
// on the stream. The pool is staging_pool.cc, the threads reader_threads.cc, the fill of a
// destination that is not dense device_fill_strided.cc.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "engine/detail/device_fill.hpp"
#include "shardload/device_fill.hpp"
#include "shardload/fill.hpp"
#include "shardload/reader.hpp"
#include "shardload/shard_source.hpp"
#include "storage/detail/context.hpp"

namespace shardload {

namespace {

using detail::rows_string;
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
        format_(find_format(layout.format, layout.options.reader)) {}

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
  // Says which shards store their rows as one byte range (FormatCapabilities::contiguous_rows
  // for all of a format's, FormatDescriptor::contiguous_shard for some): those that are plain
  // are read straight into the staging buffers. nullptr for an unknown format.
  const FormatDescriptor* format_;
  // What shards are read from: the options' backend's, else the paths' (files()).
  std::shared_ptr<ShardSource> source_;

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
  source_ = options_.io != nullptr ? ShardSource::over(*options_.io) : ShardSource::files();
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
    cut.raw = format_ != nullptr &&
              (format_->capabilities.contiguous_rows ||
               (format_->contiguous_shard && format_->contiguous_shard(s))) &&
              !s.byte_swap && !s.fortran_order;
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
  SHARDLOAD_ASSIGN_OR_RETURN(st.file, open_checked(*source_, s, options_.check_snapshot));
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
    ctx.source = source_;
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
      // The context's pool; a reader that no thread takes runs here after reader 0 and finds
      // no chunk left.
      detail::StorageContext::process().pool().run(
          static_cast<std::size_t>(n), [&](std::size_t t) { job(static_cast<int>(t)); });
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

}  // namespace shardload
