// shardload._feed_core: the training feed's gather (shardload.feed). A shuffled batch's rows
// lie anywhere in the dataset; one host_load per row opens and checks a file each time, which
// costs more than the row. Here the batch's rows, sorted, become the pieces of one fill: one
// reader per thread keeps its files open, consecutive rows merge into one read, and each row
// lands straight in its place in the batch. The GIL is released while the threads read.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "gil.hpp"
#include "interrupt.hpp"
#include "shardload/fill.hpp"
#include "shardload/io.hpp"
#include "shardload/layout.hpp"
#include "shardload/location.hpp"
#include "shardload/plan.hpp"

namespace py = pybind11;
using namespace shardload;

namespace {

// The pieces that put row rows[i] at row i of the destination: sorted by row so that a reader
// moves forward through each file, rows that follow each other in the source and in the
// destination merged into one piece.
// `order` receives the destination rows sorted by their source row.
Result<std::vector<Piece>> gather_pieces(const Layout& l, const std::int64_t* rows, std::int64_t n,
                                         std::vector<std::int64_t>* order_out) {
  std::vector<std::int64_t>& order = *order_out;
  order.resize(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // A batch in order (or a fill of them) is sorted already: no sort to pay for.
  if (!std::is_sorted(rows, rows + n)) {
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t b) { return rows[a] < rows[b]; });
  }
  // Every row checked, not only each run's first: a run of consecutive rows could otherwise
  // end past the last.
  for (std::int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= l.total_rows()) {
      return Status(ErrorCode::kInvalidArgument, "gather: row " + std::to_string(rows[i]) +
                                                     " is outside the layout's " +
                                                     std::to_string(l.total_rows()) + " rows");
    }
  }
  std::vector<Piece> pieces;
  std::vector<Piece> run;
  std::int64_t i = 0;
  while (i < n) {
    const std::int64_t first = rows[order[static_cast<std::size_t>(i)]];
    const std::int64_t dst = order[static_cast<std::size_t>(i)];
    std::int64_t k = i + 1;
    while (k < n && rows[order[static_cast<std::size_t>(k)]] == first + (k - i) &&
           order[static_cast<std::size_t>(k)] == dst + (k - i)) {
      ++k;
    }
    pieces_for_rows(l.offsets, first, first + (k - i), &run);
    for (Piece p : run) {
      p.dst_row += dst;
      pieces.push_back(p);
    }
    i = k;
  }
  return pieces;
}

// The sorted pieces cut into contiguous spans of about equal rows, one reader (thread) each,
// so that each thread still reads forward through its files: as many as `threads`, but none
// of fewer than 64 pieces or 1 MiB (a thread costs more to start than that takes to read).
// A piece that straddles a cut is split there: a batch in order is one piece, and its rows
// are still read by every thread.
std::vector<std::vector<Piece>> share(const std::vector<Piece>& pieces, std::int64_t rows,
                                      std::uint64_t row_bytes, std::int64_t threads) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(rows) * row_bytes;
  const std::size_t t = std::max<std::size_t>(
      1, std::min<std::size_t>(static_cast<std::size_t>(threads),
                               std::max<std::size_t>(pieces.size() / 64, bytes >> 20)));
  std::vector<std::vector<Piece>> parts(t);
  std::size_t j = 0;
  std::int64_t done = 0;  // rows given to parts [0, j)
  for (Piece p : pieces) {
    while (p.lo < p.hi) {
      // Part j ends once it has its share, rows * (j + 1) / t; the last takes the rest.
      const std::int64_t end =
          j + 1 == t ? rows
                     : rows * static_cast<std::int64_t>(j + 1) / static_cast<std::int64_t>(t);
      const std::int64_t take = std::min(p.hi - p.lo, std::max<std::int64_t>(end - done, 0));
      if (take == 0) {
        ++j;
        continue;
      }
      parts[j].push_back({p.shard, p.lo, p.lo + take, p.dst_row});
      p.lo += take;
      p.dst_row += take;
      done += take;
    }
  }
  std::erase_if(parts, [](const std::vector<Piece>& v) { return v.empty(); });
  return parts;
}

// A gather whose rows lie close together in the source but not in the batch (a block
// shuffle's: whole blocks, their rows permuted inside a window) costs one read per row the
// direct way. There the rows, sorted, are cut into runs of rows at most `gap` rows apart
// (the rows between read and dropped), each run read with one read into a scratch buffer,
// and each row then copied to its place. A skipped row costs a copy from the page cache, a
// read a system call: a gap is worth reading through up to about 64 KiB, within a budget of
// as many skipped bytes as taken (plus 1 MiB), so that scratch stays at most about twice the
// batch whatever the rows. Runs never span a shard they take no row of, so no file is read
// that the direct way would not read.
struct Coalesced {
  std::vector<Piece> pieces;       // the runs, dst_row relative to the scratch buffer
  std::vector<std::int64_t> from;  // from[i]: the scratch row of destination row i
  std::int64_t rows = 0;           // scratch rows
};

constexpr std::uint64_t kGapBytes = 64 << 10;
constexpr std::uint64_t kSkipBudget = 1 << 20;

// The shard holding global row r (offsets: first rows, the total last).
std::size_t shard_of(const Layout& l, std::int64_t r) {
  const auto it = std::upper_bound(l.offsets.begin(), l.offsets.end(), r);
  return static_cast<std::size_t>(it - l.offsets.begin()) - 1;
}

// The coalesced plan of a gather, or nothing where it would not halve the reads of the
// direct one (`direct` pieces): a row shuffle's rows are mostly too far apart.
std::optional<Coalesced> coalesce(const Layout& l, const std::int64_t* rows,
                                  const std::vector<std::int64_t>& order, std::size_t direct) {
  const std::size_t n = order.size();
  // A few direct reads (a fill in order: one a shard it spans) are not worth a second copy.
  if (n < 2 || l.row_bytes == 0 || direct < 8) return std::nullopt;
  // A registered reader's rows cost what its own read makes them cost (a Python reader's is
  // the user's code), not a copy from the page cache: the rows skipped are read at that cost.
  // The budget's 1 MiB of 8-byte rows read a row shuffle's fill of 512 rows as every row of
  // its shards (8000), and a Ctrl-C waited for those reads.
  if (l.format == Format::kCustom) return std::nullopt;
  const auto row_at = [&](std::size_t i) { return rows[order[i]]; };
  // The gaps between sorted neighbours that could be read through (in one or two adjacent
  // shards), and the largest gap that fits the budget.
  const std::uint64_t longest = std::max<std::uint64_t>(kGapBytes / l.row_bytes, 1);
  std::vector<std::int64_t> gaps;
  gaps.reserve(n);
  for (std::size_t i = 1; i < n; ++i) {
    const std::int64_t g = row_at(i) - row_at(i - 1) - 1;
    if (g > 0 && static_cast<std::uint64_t>(g) <= longest) gaps.push_back(g);
  }
  std::sort(gaps.begin(), gaps.end());
  const std::uint64_t budget = n * l.row_bytes + kSkipBudget;
  std::uint64_t skipped = 0;
  std::int64_t gap = 0;
  for (const std::int64_t g : gaps) {
    const std::uint64_t cost = static_cast<std::uint64_t>(g) * l.row_bytes;
    if (skipped + cost > budget) break;
    skipped += cost;
    gap = g;
  }
  Coalesced c;
  c.from.resize(n);
  std::vector<Piece> run;
  std::size_t i = 0;
  std::size_t reads = 0;
  while (i < n) {
    const std::int64_t first = row_at(i);
    std::size_t k = i + 1;
    std::size_t shard = shard_of(l, first);
    while (k < n) {
      const std::int64_t g = row_at(k) - row_at(k - 1) - 1;
      if (g > gap) break;
      // Through rows of this shard or the next only.
      const std::size_t s = shard_of(l, row_at(k));
      if (g > 0 && s > shard + 1) break;
      shard = s;
      ++k;
    }
    const std::int64_t last = row_at(k - 1) + 1;
    for (std::size_t j = i; j < k; ++j) {
      c.from[static_cast<std::size_t>(order[j])] = c.rows + (row_at(j) - first);
    }
    pieces_for_rows(l.offsets, first, last, &run);
    for (Piece p : run) {
      p.dst_row += c.rows;
      c.pieces.push_back(p);
    }
    reads += run.size();
    c.rows += last - first;
    i = k;
  }
  if (reads * 2 > direct) return std::nullopt;
  return c;
}

// A coalesced gather's scratch, taken from a few kept between calls: a fresh buffer of a fill's
// size costs its page faults each time (measured: a block-shuffled fill of 4 MiB took longer
// than the row shuffle's pread per row), a kept one none. Buffers past 64 MiB are not kept.
class Scratch {
 public:
  explicit Scratch(std::size_t bytes) {
    {
      const std::lock_guard<std::mutex> hold(mutex());
      auto& kept = free_list();
      for (auto it = kept.begin(); it != kept.end(); ++it) {
        if (it->second >= bytes) {
          buf_ = std::move(it->first);
          cap_ = it->second;
          kept.erase(it);
          return;
        }
      }
    }
    buf_.reset(new std::byte[bytes]);  // not zeroed: every byte is read into before use
    cap_ = bytes;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (cap_ > kKeepBytes) return;
    const std::lock_guard<std::mutex> hold(mutex());
    auto& kept = free_list();
    if (kept.size() < kKeep) {
      kept.emplace_back(std::move(buf_), cap_);
    } else {
      // The smallest kept one goes, so that the largest fills find a buffer.
      auto smallest = std::min_element(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
        return a.second < b.second;
      });
      if (smallest->second < cap_) *smallest = {std::move(buf_), cap_};
    }
  }
  std::byte* data() { return buf_.get(); }

 private:
  static constexpr std::size_t kKeep = 4;
  static constexpr std::size_t kKeepBytes = std::size_t{64} << 20;
  using Kept = std::vector<std::pair<std::unique_ptr<std::byte[]>, std::size_t>>;
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static Kept& free_list() {
    static Kept* k = new Kept();  // never destroyed: fills may end during exit
    return *k;
  }
  std::unique_ptr<std::byte[]> buf_;
  std::size_t cap_ = 0;
};

// out[i] = src[from[i]] for every i, rows of row_bytes, on up to `threads` threads (one per
// 8 MiB: a copy from memory runs at about 10 GB/s on one core, so a thread started for less
// costs more than it saves).
void scatter(const std::byte* src, const std::int64_t* from, std::int64_t n, std::size_t row,
             std::byte* to, std::int64_t threads) {
  const auto t = static_cast<std::int64_t>(std::max<std::uint64_t>(
      1, std::min<std::uint64_t>(static_cast<std::uint64_t>(threads),
                                 static_cast<std::uint64_t>(n) * row >> 23)));
  auto part = [&](std::int64_t j) {
    for (std::int64_t i = n * j / t; i < n * (j + 1) / t; ++i) {
      std::memcpy(to + static_cast<std::size_t>(i) * row,
                  src + static_cast<std::size_t>(from[i]) * row, row);
    }
  };
  std::vector<std::thread> helpers;
  for (std::int64_t j = 1; j < t; ++j) helpers.emplace_back(part, j);
  part(0);
  for (std::thread& h : helpers) h.join();
}

// out[i] = row rows[i] of the layout for every i, on up to `threads` threads (the caller's
// one of them; fill_parts checks local npy and raw files once per call, not once per row);
// called without the GIL. Rows close together in the source read coalesced (above).
Status fill_gather(const Layout& l, const std::int64_t* rows, std::int64_t n, std::byte* dst,
                   std::int64_t threads) {
  std::vector<std::int64_t> order;
  Result<std::vector<Piece>> pieces = gather_pieces(l, rows, n, &order);
  if (!pieces) return pieces.status();
  if (std::optional<Coalesced> c = coalesce(l, rows, order, pieces->size())) {
    Scratch scratch(static_cast<std::size_t>(c->rows) * l.row_bytes);
    SHARDLOAD_RETURN_IF_ERROR(
        fill_parts(l, share(c->pieces, c->rows, l.row_bytes, threads), scratch.data()));
    scatter(scratch.data(), c->from.data(), n, l.row_bytes, dst, threads);
    return Status::ok();
  }
  return fill_parts(l, share(*pieces, n, l.row_bytes, threads), dst);
}

// astype on the fill's own threads: the rows gathered in the layout's dtype into scratch, then
// cast into the batch, for the casts numpy calls "same_kind" among bool, the ints and float32
// and float64 (what C++ converts as numpy's C loops do: ints wrap, floats round to nearest,
// a float past float32's range becomes inf, without numpy's overflow warning). Others (float
// to int, float16, complex, long double) stay with numpy in the feed's read-ahead thread.
using CastFn = void (*)(const std::byte*, std::byte*, std::size_t);

template <typename From, typename To>
void cast_elements(const std::byte* src, std::byte* dst, std::size_t count) {
  const auto* s = reinterpret_cast<const From*>(src);
  auto* d = reinterpret_cast<To*>(dst);
  for (std::size_t i = 0; i < count; ++i) d[i] = static_cast<To>(s[i]);
}

// 'b' bool, 'i' int, 'u' uint, 'f' float; 0 for a kind not cast here.
char kind_of(const DType& t) {
  switch (t.kind) {
    case DTypeKind::kBool:
      return 'b';
    case DTypeKind::kInt:
      return 'i';
    case DTypeKind::kUInt:
      return 'u';
    case DTypeKind::kFloat:
      return t.size == 4 || t.size == 8 ? 'f' : 0;
    default:
      return 0;
  }
}

template <typename To>
CastFn cast_to(char kind, int size) {
  switch (kind) {
    case 'b':
      return &cast_elements<std::uint8_t, To>;  // a bool byte is 0 or 1 (fill normalises it)
    case 'i':
      return size == 1   ? &cast_elements<std::int8_t, To>
             : size == 2 ? &cast_elements<std::int16_t, To>
             : size == 4 ? &cast_elements<std::int32_t, To>
                         : &cast_elements<std::int64_t, To>;
    case 'u':
      return size == 1   ? &cast_elements<std::uint8_t, To>
             : size == 2 ? &cast_elements<std::uint16_t, To>
             : size == 4 ? &cast_elements<std::uint32_t, To>
                         : &cast_elements<std::uint64_t, To>;
    default:
      return size == 4 ? &cast_elements<float, To> : &cast_elements<double, To>;
  }
}

// The cast from the layout's dtype to (kind, size), or nullptr where it is not one of those
// above. numpy's same_kind order: bool < uint < int < float, and uint to int of any size.
CastFn cast_fn(const DType& from, char to, int to_size) {
  const char f = kind_of(from);
  const auto rank = [](char k) { return k == 'b' ? 0 : k == 'u' ? 1 : k == 'i' ? 2 : 3; };
  const bool sized = to_size == 1 || to_size == 2 || to_size == 4 || to_size == 8;
  if (f == 0 || !sized || (to != 'i' && to != 'u' && to != 'f') || rank(f) > rank(to) ||
      (to == 'f' && to_size < 4)) {
    return nullptr;
  }
  const int fs = from.size;
  if (to == 'f') return to_size == 4 ? cast_to<float>(f, fs) : cast_to<double>(f, fs);
  if (to == 'i') {
    return to_size == 1   ? cast_to<std::int8_t>(f, fs)
           : to_size == 2 ? cast_to<std::int16_t>(f, fs)
           : to_size == 4 ? cast_to<std::int32_t>(f, fs)
                          : cast_to<std::int64_t>(f, fs);
  }
  return to_size == 1   ? cast_to<std::uint8_t>(f, fs)
         : to_size == 2 ? cast_to<std::uint16_t>(f, fs)
         : to_size == 4 ? cast_to<std::uint32_t>(f, fs)
                        : cast_to<std::uint64_t>(f, fs);
}

// The cast a gather into `out` needs: nullptr for none (out in the layout's dtype); with
// `cast` false out must be in the layout's dtype.
CastFn out_cast(const Layout& l, const py::array& out, bool cast) {
  const auto kind = out.dtype().kind();
  const auto size = static_cast<int>(out.itemsize());
  const char mine = l.dtype.kind == DTypeKind::kFloat ? 'f' : kind_of(l.dtype);
  if (!cast || (kind == mine && size == l.dtype.size)) return nullptr;
  CastFn fn = cast_fn(l.dtype, kind, size);
  if (fn == nullptr) {
    throw py::value_error("gather: no cast here from the layout's " + l.dtype.name() + " to " +
                          py::str(out.dtype()).cast<std::string>() +
                          " (same_kind casts among bool, ints, float32 and float64 only)");
  }
  return fn;
}

// ---- The orders: the keyed bijection and the block order ----------------------------------
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// One pass of the balanced Feistel network over 2h bits (shardload/_feed_order.py documents
// the construction; its tests check this against a brute-force oracle).
std::uint64_t network(std::uint64_t x, const std::vector<std::uint64_t>& keys, int h,
                      bool inverse) {
  const std::uint64_t mask = (std::uint64_t{1} << h) - 1;
  std::uint64_t left = x >> h;
  std::uint64_t right = x & mask;
  if (!inverse) {
    for (const std::uint64_t k : keys) {
      const std::uint64_t next = left ^ (mix(right ^ k) & mask);
      left = right;
      right = next;
    }
  } else {
    for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
      const std::uint64_t prev = right ^ (mix(left ^ *it) & mask);
      right = left;
      left = prev;
    }
  }
  return (left << h) | right;
}

// o[i] = the bijection of [0, n) applied to in[i], for each i: the network, walked again while
// its value is outside [0, n). One network is a chain of dependent multiplies (about 30 ns);
// kLanes elements go through it side by side, so that their chains overlap in the core, and a
// lane whose element is done takes the next one, so no lane waits for another's walk.
void permute_forward(const std::int64_t* in, std::int64_t* o, std::size_t count, std::uint64_t n,
                     const std::vector<std::uint64_t>& keys, int h) {
  constexpr std::size_t kLanes = 8;
  const std::uint64_t mask = (std::uint64_t{1} << h) - 1;
  std::uint64_t y[kLanes] = {};
  std::size_t at[kLanes] = {};
  bool live[kLanes] = {};
  std::size_t next = 0;
  std::size_t alive = 0;
  for (std::size_t j = 0; j < kLanes && next < count; ++j, ++next, ++alive) {
    y[j] = static_cast<std::uint64_t>(in[next]);
    at[j] = next;
    live[j] = true;
  }
  while (alive > 0) {
    std::uint64_t left[kLanes];
    std::uint64_t right[kLanes];
    for (std::size_t j = 0; j < kLanes; ++j) {
      left[j] = y[j] >> h;
      right[j] = y[j] & mask;
    }
    for (const std::uint64_t k : keys) {
      for (std::size_t j = 0; j < kLanes; ++j) {
        const std::uint64_t step = left[j] ^ (mix(right[j] ^ k) & mask);
        left[j] = right[j];
        right[j] = step;
      }
    }
    for (std::size_t j = 0; j < kLanes; ++j) {
      y[j] = (left[j] << h) | right[j];
      if (!live[j] || y[j] >= n) continue;
      o[at[j]] = static_cast<std::int64_t>(y[j]);
      if (next < count) {
        y[j] = static_cast<std::uint64_t>(in[next]);
        at[j] = next++;
      } else {
        live[j] = false;
        --alive;
      }
    }
  }
}

// One position of the bijection of [0, n) keyed by keys (n >= 1).
std::uint64_t permute_one(std::uint64_t x, std::uint64_t n, const std::vector<std::uint64_t>& keys,
                          bool inverse) {
  if (n <= 1) return x;
  int h = 1;
  while ((std::uint64_t{1} << (2 * h)) < n) ++h;
  std::uint64_t y = network(x, keys, h, inverse);
  while (y >= n) y = network(y, keys, h, inverse);
  return y;
}

// shardload._feed_order.round_keys: splitmix64 over (seed, epoch, stream), then `rounds` keys.
std::vector<std::uint64_t> round_keys(std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream,
                                      std::size_t rounds) {
  const auto splitmix = [](std::uint64_t x) { return mix(x + 0x9E3779B97F4A7C15ULL); };
  std::uint64_t k = splitmix(splitmix(splitmix(seed) ^ epoch) ^ stream);
  std::vector<std::uint64_t> keys(rounds);
  for (std::uint64_t& key : keys) key = k = splitmix(k);
  return keys;
}

// shardload._feed_order.Order.rows for the block order, which it documents (blocks of b rows
// in the bijection's order over blocks, then the rows of each window of w consecutive blocks
// in the window's own bijection's order), here so that a fill's rows cost no Python: the
// order took a third of a block-shuffled epoch in the loop's thread. Each window's blocks and
// keys are made once for the positions in it (a fill's positions follow each other).
class BlockOrder {
 public:
  BlockOrder(std::uint64_t n, std::uint64_t b, std::uint64_t w, std::uint64_t seed,
             std::uint64_t epoch, std::size_t rounds)
      : n_(n),
        b_(b),
        w_(w),
        seed_(seed),
        epoch_(epoch),
        rounds_(rounds),
        keys_(round_keys(seed, epoch, 0, rounds)) {
    nb_ = (n + b - 1) / b;
    short_ = n - (nb_ - 1) * b;
    spos_ = permute_one(nb_ - 1, nb_, keys_, /*inverse=*/true);
  }

  // out[i] = the row of position in[i]; a run of positions in one window goes through the
  // window's bijection together (permute_forward's lanes).
  void rows(const std::int64_t* in, std::int64_t* out, std::size_t count) {
    std::vector<std::int64_t> local;
    for (std::size_t i = 0; i < count;) {
      const std::uint64_t j = window_of(static_cast<std::uint64_t>(in[i]));
      if (j != window_) load_window(j);
      std::size_t k = i;
      local.clear();
      while (k < count && static_cast<std::uint64_t>(in[k]) >= start_ &&
             static_cast<std::uint64_t>(in[k]) < start_ + size_) {
        local.push_back(static_cast<std::int64_t>(static_cast<std::uint64_t>(in[k]) - start_));
        ++k;
      }
      if (size_ > 1) {
        int h = 1;
        while ((std::uint64_t{1} << (2 * h)) < size_) ++h;
        permute_forward(local.data(), out + i, local.size(), size_, window_keys_, h);
      } else {
        std::copy(local.begin(), local.end(), out + i);
      }
      for (std::size_t m = i; m < k; ++m) {
        const auto off = static_cast<std::uint64_t>(out[m]);
        const auto at = std::upper_bound(cum_.begin(), cum_.end(), off) - cum_.begin() - 1;
        out[m] = static_cast<std::int64_t>(firsts_[static_cast<std::size_t>(at)] +
                                           (off - cum_[static_cast<std::size_t>(at)]));
      }
      i = k;
    }
  }

 private:
  std::uint64_t window_of(std::uint64_t pos) const {
    std::uint64_t j = pos / (w_ * b_);
    if (j + 1 <= (nb_ - 1) / w_ && window_start(j + 1) <= pos) ++j;
    return j;
  }

  std::uint64_t window_start(std::uint64_t j) const {
    std::uint64_t start = j * w_ * b_;
    if (spos_ < j * w_) start -= b_ - short_;
    return start;
  }

  void load_window(std::uint64_t j) {
    window_ = j;
    start_ = window_start(j);
    firsts_.clear();
    cum_.assign(1, 0);
    for (std::uint64_t k = j * w_; k < std::min(j * w_ + w_, nb_); ++k) {
      const std::uint64_t blk = permute_one(k, nb_, keys_, false);
      firsts_.push_back(blk * b_);
      cum_.push_back(cum_.back() + (blk == nb_ - 1 ? short_ : b_));
    }
    size_ = cum_.back();
    cum_.pop_back();
    window_keys_ = round_keys(seed_, epoch_, 1 + j, rounds_);
  }

  std::uint64_t n_, b_, w_, seed_, epoch_;
  std::size_t rounds_;
  std::vector<std::uint64_t> keys_;
  std::uint64_t nb_ = 0, short_ = 0, spos_ = 0;
  std::uint64_t window_ = ~std::uint64_t{0}, start_ = 0, size_ = 0;
  std::vector<std::uint64_t> firsts_, cum_, window_keys_;
};

// A fill's rows named by its order and positions instead of listed (Gather's order=), so
// that the order is computed on the fill's own threads, each thread the rows of the part it
// copies, and the loop's thread only starts the fill and waits for it (the block order of a
// fill's positions took about 2.3 ms an epoch there). The positions are `count` batches of
// `batch` consecutive positions, the k-th from first + k * stride, each modulo n (a step
// past the end wraps, as drop_last=False pads): Feed.batch_positions of a fill's steps.
struct FillOrder {
  enum Mode { kNone = 0, kRow = 1, kBlock = 2 };
  int mode = kNone;
  std::uint64_t n = 1, block_rows = 1, window_blocks = 1, seed = 0, epoch = 0;
  std::size_t rounds = 6;
  std::uint64_t first = 0, batch = 1, stride = 0, count = 0;

  [[nodiscard]] std::uint64_t size() const { return batch * count; }

  // out[i - lo] = the row at the fill's i-th position, for i in [lo, hi).
  void rows(std::uint64_t lo, std::uint64_t hi, std::int64_t* out) const {
    std::vector<std::int64_t> pos(hi - lo);
    // Batch by batch, without a division a position: one only where a position wraps.
    std::uint64_t k = lo / batch;
    std::uint64_t j = lo % batch;
    std::uint64_t p = first + k * stride + j;
    for (std::uint64_t i = lo; i < hi; ++i) {
      pos[i - lo] = static_cast<std::int64_t>(p < n ? p : p % n);
      if (++j == batch) {
        j = 0;
        ++k;
        p = first + k * stride;
      } else {
        ++p;
      }
    }
    if (mode == kNone || n <= 1) {
      std::copy(pos.begin(), pos.end(), out);
    } else if (mode == kRow) {
      int h = 1;
      while ((std::uint64_t{1} << (2 * h)) < n) ++h;
      permute_forward(pos.data(), out, pos.size(), n, round_keys(seed, epoch, 0, rounds), h);
    } else {
      BlockOrder(n, block_rows, window_blocks, seed, epoch, rounds)
          .rows(pos.data(), out, pos.size());
    }
  }
};

// The rows of a fill: listed (`given`), or computed from `order` by the thread that needs them.
struct FillRows {
  const std::int64_t* given = nullptr;
  const FillOrder* order = nullptr;
  std::int64_t n = 0;

  // Rows [lo, hi): a pointer into `given`, or computed into *buf.
  const std::int64_t* get(std::int64_t lo, std::int64_t hi, std::vector<std::int64_t>* buf) const {
    if (given != nullptr) return given + lo;
    buf->resize(static_cast<std::size_t>(hi - lo));
    order->rows(static_cast<std::uint64_t>(lo), static_cast<std::uint64_t>(hi), buf->data());
    return buf->data();
  }
};

// ---- Mapped reads: a shuffled fill without a system call per row -----------------------------
// A shuffled fill of local npy or raw files costs a pread per row the direct way (about 1.5 us
// for 1 KiB from the page cache, most of it the system call) and two passes over the bytes the
// coalesced way. Where every shard is a local npy or raw file stored as it is served (C order,
// this host's byte order, not bool), the feed maps the files once (Maps, kept for the feed's
// life: a fresh map per fill cost its page faults, as much as the preads) and each row is
// one memcpy from the map to its place: one pass, no system call.
//
// A file truncated under a map turns a read of its lost pages into SIGBUS, which the
// preads made a ShardReadError. The copies therefore run under a guard: a SIGBUS handler
// that, on a thread inside a guarded copy, jumps out of it (siglongjmp), so that the fill
// ends with the kChanged error naming the file; on any other thread it hands the signal to
// the handler that was there before (Python's faulthandler, torch's DataLoader worker's, the
// default). Each fill installs the guard again if another handler replaced it (torch's
// worker sets its own after the fork). As with the preads, each file is checked against its
// snapshot when it is mapped and after each fill, so no byte of a changed file is taken for
// the snapshot's.
namespace guard {

struct sigaction previous;  // the handler the guard replaced
// volatile: the handler reads it, so neither store around the copies may be dropped or moved
// (the first looked dead to the compiler, a memcpy reading no such variable).
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* volatile jump = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local void* volatile fault = nullptr;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (jump != nullptr) {
    fault = info->si_addr;
    siglongjmp(*jump, 1);
  }
  // Not a guarded copy's: as if the guard were not there.
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  } else {
    // A fault happens again on return, and the default action ends the process; a SIGBUS
    // sent (kill) is sent again.
    signal(sig, SIG_DFL);
    if (info->si_code <= 0) raise(sig);
  }
}

// Installs the guard unless it is the handler now; false where it cannot be.
bool install() {
  static std::mutex m;
  const std::lock_guard<std::mutex> hold(m);
  struct sigaction now {};
  if (sigaction(SIGBUS, nullptr, &now) != 0) return false;
  if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == &on_sigbus) return true;
  struct sigaction mine {};
  mine.sa_sigaction = &on_sigbus;
  // SA_NODEFER: SIGBUS stays unblocked after the jump (sigsetjmp saves no mask, which would
  // cost a system call per copy).
  mine.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&mine.sa_mask);
  previous = now;
  return sigaction(SIGBUS, &mine, nullptr) == 0;
}

struct Copy {
  const std::byte* from;
  std::byte* to;
};

// Copies `bytes` for each of copies; the address whose read faulted, or nullptr when all
// were copied. Nothing with a destructor lives between the sigsetjmp and the copies.
[[gnu::noinline]] void* copies(const Copy* c, std::size_t count, std::size_t bytes) {
  sigjmp_buf here;
  if (sigsetjmp(here, 0) != 0) {
    jump = nullptr;
    return fault;
  }
  jump = &here;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // Each row's source is elsewhere in the maps: the first lines of the row kAhead rows on
  // are asked for before this one is copied, so that the copy does not wait for each row's
  // first misses (the hardware's prefetcher follows a row once it has begun). A prefetch
  // never faults: a truncated file still faults in the copy alone.
  constexpr std::size_t kAhead = 4;
  const std::size_t ahead = std::min<std::size_t>(bytes, 256);
  for (std::size_t i = 0; i < count; ++i) {
    if (i + kAhead < count) {
      for (std::size_t b = 0; b < ahead; b += 64) __builtin_prefetch(c[i + kAhead].from + b);
    }
    std::memcpy(c[i].to, c[i].from, bytes);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  jump = nullptr;
  return nullptr;
}

}  // namespace guard

constexpr std::uint64_t kMapBytes = std::uint64_t{8} << 30;  // the most a feed maps

// The maps of a layout's files, each made at its first use and kept until the Maps goes
// (with the feed). usable() is false where any shard is not a file mapped as served (then
// the feed reads as before), or the files hold more than kMapBytes (page tables: 2 MiB a
// GiB mapped).
class Maps {
 public:
  explicit Maps(py::object layout) : layout_(std::move(layout)) {
    const Layout& l = layout_.cast<const Layout&>();
    maps_.resize(l.shards.size());
    std::uint64_t total = 0;
    usable_ = (l.format == Format::kNpy || l.format == Format::kRaw) && l.row_bytes > 0 &&
              l.dtype.kind != DTypeKind::kBool;
    for (const Shard& sh : l.shards) {
      total += sh.snapshot.size;
      usable_ = usable_ && !sh.byte_swap && !sh.fortran_order && sh.snapshot.regular &&
                !path_traits(sh.path).round_trips;
    }
    usable_ = usable_ && total <= kMapBytes;
  }
  Maps(const Maps&) = delete;
  Maps& operator=(const Maps&) = delete;
  ~Maps() {
    for (const Map& m : maps_) {
      if (m.base != nullptr) munmap(const_cast<std::byte*>(m.base), m.length);
    }
  }

  [[nodiscard]] bool usable() const { return usable_; }
  const Layout& layout() const { return layout_.cast<const Layout&>(); }

  // The first byte of shard k's file mapped, mapping it now if need be: its open checked
  // against the snapshot (the kChanged error naming the file otherwise).
  Result<std::pair<const std::byte*, std::size_t>> file(std::size_t k, const Layout& l) {
    const std::lock_guard<std::mutex> hold(mutex_);
    Map& m = maps_[k];
    if (m.base != nullptr) return std::make_pair(m.base, m.length);
    const Shard& sh = l.shards[k];
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(File f, File::open_stat(posix_io(), sh.path, &info));
    if (info != sh.snapshot) {
      return file_error(
          ErrorCode::kChanged, sh.path,
          "changed since discovery: " + snapshot_difference(sh.path, sh.snapshot, info));
    }
    if (info.size == 0)
      return std::make_pair(static_cast<const std::byte*>(nullptr), std::size_t{0});
    void* at = mmap(nullptr, info.size, PROT_READ, MAP_SHARED, f.fd(), 0);
    if (at == MAP_FAILED) {
      return file_error(ErrorCode::kIo, sh.path, "could not map the file to read its rows", errno);
    }
    m.base = static_cast<const std::byte*>(at);
    m.length = info.size;
    return std::make_pair(m.base, m.length);
  }

  // The shard whose mapped bytes hold `address`, or -1.
  std::int64_t shard_at(const void* address) {
    const std::lock_guard<std::mutex> hold(mutex_);
    const auto* a = static_cast<const std::byte*>(address);
    for (std::size_t k = 0; k < maps_.size(); ++k) {
      if (maps_[k].base != nullptr && a >= maps_[k].base && a < maps_[k].base + maps_[k].length) {
        return static_cast<std::int64_t>(k);
      }
    }
    return -1;
  }

 private:
  struct Map {
    const std::byte* base = nullptr;
    std::size_t length = 0;
  };
  py::object layout_;
  std::vector<Map> maps_;
  std::mutex mutex_;
  bool usable_ = false;
};

// Shard k compared with its snapshot by path: the kChanged error naming it where it
// differs or is gone.
Status unchanged(const Shard& sh) {
  Result<FileInfo> now = posix_io().stat_path(sh.path);
  if (!now) return now.status();
  if (*now != sh.snapshot) {
    return file_error(ErrorCode::kChanged, sh.path,
                      "changed while reading: " + snapshot_difference(sh.path, sh.snapshot, *now));
  }
  return Status::ok();
}

// out[i] = row i of `rows`, copied from the maps on up to `threads` threads, one per 512 rows:
// from the page cache one thread would do, but a page not cached is a fault that reads it,
// and rows copied on one thread would wait for those reads one at a time (the preads of the
// direct way are on every thread). Each thread takes a contiguous part of the destination,
// computes its rows there where the fill names them by their order (FillRows), and copies
// them. Each file touched checked after the copies.
Status fill_mapped(Maps& maps, const Layout& l, const FillRows& rows, std::byte* dst,
                   std::int64_t threads) {
  if (!guard::install()) {
    return Status(ErrorCode::kIo, "gather: could not install the SIGBUS guard of mapped reads");
  }
  const std::int64_t n = rows.n;
  const auto t = std::max<std::int64_t>(1, std::min<std::int64_t>(threads, n / 512));
  struct Part {
    Status status;
    void* fault = nullptr;
    std::vector<bool> touched;
  };
  std::vector<Part> parts(static_cast<std::size_t>(t));
  auto run = [&](std::int64_t j, Part* part) -> Status {
    const std::int64_t lo = n * j / t;
    const std::int64_t hi = n * (j + 1) / t;
    std::vector<std::int64_t> buf;
    const std::int64_t* r = rows.get(lo, hi, &buf);
    std::vector<guard::Copy> work(static_cast<std::size_t>(hi - lo));
    part->touched.assign(l.shards.size(), false);
    std::vector<std::pair<const std::byte*, std::size_t>> mapped(l.shards.size());
    for (std::int64_t i = 0; i < hi - lo; ++i) {
      const std::int64_t row = r[i];
      if (row < 0 || row >= l.total_rows()) {
        return Status(ErrorCode::kInvalidArgument, "gather: row " + std::to_string(row) +
                                                       " is outside the layout's " +
                                                       std::to_string(l.total_rows()) + " rows");
      }
      const std::size_t k = shard_of(l, row);
      const Shard& sh = l.shards[k];
      if (!part->touched[k]) {
        // Each shard's map looked up once a part (under the maps' lock), not once a row.
        SHARDLOAD_ASSIGN_OR_RETURN(mapped[k], maps.file(k, l));
        part->touched[k] = true;
      }
      const auto& map = mapped[k];
      const auto file_row = static_cast<std::uint64_t>(sh.first_row + (row - l.offsets[k]));
      const std::uint64_t at = sh.data_offset + file_row * l.row_bytes;
      // A file shorter than its header says: the read a pread would find short, never a read
      // past the map (SIGSEGV, which no guard takes).
      if (at + l.row_bytes > map.second) {
        return file_error(ErrorCode::kFormat, sh.path,
                          "row " + std::to_string(file_row) + " ends at byte " +
                              std::to_string(at + l.row_bytes) + ", past the file's " +
                              std::to_string(map.second) + " bytes");
      }
      work[static_cast<std::size_t>(i)] = {map.first + at,
                                           dst + static_cast<std::size_t>(lo + i) * l.row_bytes};
    }
    part->fault = guard::copies(work.data(), work.size(), l.row_bytes);
    return Status::ok();
  };
  auto part = [&](std::int64_t j) {
    Part& p = parts[static_cast<std::size_t>(j)];
    p.status = run(j, &p);
  };
  std::vector<std::thread> helpers;
  for (std::int64_t j = 1; j < t; ++j) helpers.emplace_back(part, j);
  part(0);
  for (std::thread& h : helpers) h.join();
  for (const Part& p : parts) SHARDLOAD_RETURN_IF_ERROR(p.status);
  // A file changed is the fill's error ahead of a fault it caused, as fill_parts' check.
  for (std::size_t k = 0; k < l.shards.size(); ++k) {
    const bool touched =
        std::any_of(parts.begin(), parts.end(), [k](const Part& p) { return p.touched[k]; });
    if (touched) SHARDLOAD_RETURN_IF_ERROR(unchanged(l.shards[k]));
  }
  for (const Part& p : parts) {
    if (p.fault == nullptr) continue;
    const std::int64_t k = maps.shard_at(p.fault);
    const std::string path = k >= 0 ? l.shards[static_cast<std::size_t>(k)].path : "a shard";
    return file_error(ErrorCode::kChanged, path,
                      "changed while reading: its mapped bytes are gone (truncated)");
  }
  return Status::ok();
}

// fill_gather (or fill_mapped, with usable maps) into out, through scratch and `fn` where the
// batch is in another dtype. Rows named by their order are computed on the mapped fill's
// threads, or here, on the fill's thread, for fill_gather (which sorts them all).
Status fill_gather_cast(const Layout& l, const FillRows& rows, std::byte* dst, std::int64_t threads,
                        CastFn fn, Maps* maps) {
  const std::int64_t n = rows.n;
  auto fill = [&](std::byte* to) -> Status {
    if (maps != nullptr && maps->usable()) return fill_mapped(*maps, l, rows, to, threads);
    std::vector<std::int64_t> buf;
    return fill_gather(l, rows.get(0, n, &buf), n, to, threads);
  };
  if (fn == nullptr) return fill(dst);
  Scratch raw(static_cast<std::size_t>(n) * l.row_bytes);
  SHARDLOAD_RETURN_IF_ERROR(fill(raw.data()));
  fn(raw.data(), dst, static_cast<std::size_t>(n) * l.row_bytes / l.dtype.size);
  return Status::ok();
}

// The maps argument: None, or a Maps of this very layout object.
Maps* maps_arg(const py::object& maps, const Layout& l) {
  if (maps.is_none()) return nullptr;
  Maps* m = maps.cast<Maps*>();
  if (&m->layout() != &l) {
    throw py::value_error("gather: maps: expected the Maps of this layout");
  }
  return m;
}

// The cast into out (nullptr: none) once the arguments are checked: `count` rows (`one_d`:
// given as a 1-D array, or named by a FillOrder) into out.
CastFn check_gather_args(const Layout& l, py::ssize_t count, bool one_d, const py::array& out,
                         std::int64_t threads, bool cast) {
  const auto want = static_cast<py::ssize_t>(count * static_cast<py::ssize_t>(l.row_bytes));
  CastFn fn = out_cast(l, out, cast);
  const py::ssize_t size = fn == nullptr ? l.dtype.size : out.itemsize();
  const py::ssize_t bytes = want / l.dtype.size * size;
  if (!one_d || (out.flags() & py::array::c_style) == 0 || !out.writeable() ||
      out.nbytes() != bytes || out.itemsize() != size) {
    throw py::value_error("gather: expected 1-D rows and a writable C-contiguous array of " +
                          std::to_string(bytes) + " bytes in the layout's dtype" +
                          (cast ? " or the one cast to" : ""));
  }
  if (threads < 1 || threads > 4096) {
    throw py::value_error("gather: threads: expected 1 to 4096, found " + std::to_string(threads));
  }
  return fn;
}

// A gather that runs on a thread of its own from its construction: the feed's read-ahead,
// which the loop then waits for with result(). A Python thread pool ran it before, and each
// fill then waited for the GIL twice (to start, and to hand over its result) behind the
// training loop's own Python: about a third of an in-order epoch. The fill holds the layout,
// and the output array, so neither goes while its thread writes; the rows are copied, or,
// given as a FillOrder, computed on the fill's threads. Dropping an unfinished fill waits for
// its reads (without the GIL). SIGINT ends its remote requests, as gather's do, for as long
// as it runs.
class AsyncGather {
 public:
  AsyncGather(py::object layout, const py::object& rows, py::array out, std::int64_t threads,
              bool cast, py::object maps)
      : layout_(std::move(layout)), out_(std::move(out)), maps_(std::move(maps)) {
    const Layout& l = layout_.cast<const Layout&>();
    FillRows fill;
    CastFn fn = nullptr;
    by_order_ = py::isinstance<FillOrder>(rows);
    if (by_order_) {
      order_ = rows.cast<FillOrder>();
      fn = check_gather_args(l, static_cast<py::ssize_t>(order_.size()), true, out_, threads, cast);
      fill.n = static_cast<std::int64_t>(order_.size());
    } else {
      const auto given = rows.cast<py::array_t<std::int64_t, py::array::c_style>>();
      fn = check_gather_args(l, given.size(), given.ndim() == 1, out_, threads, cast);
      rows_.assign(given.data(), given.data() + given.size());
      fill.n = static_cast<std::int64_t>(rows_.size());
    }
    Maps* m = maps_arg(maps_, l);
    wait_ = std::make_unique<InterruptibleWait>(python::sigint_raises_keyboard_interrupt());
    auto* dst = static_cast<std::byte*>(out_.mutable_data());
    thread_ = std::thread([this, &l, fill, dst, threads, fn, m]() mutable {
      if (by_order_) {
        fill.order = &order_;
      } else {
        fill.given = rows_.data();
      }
      status_ = fill_gather_cast(l, fill, dst, threads, fn, m);
      {
        std::lock_guard lock(mu_);
        finished_.store(true, std::memory_order_release);
      }
      finished_cv_.notify_all();
    });
  }
  AsyncGather(const AsyncGather&) = delete;
  AsyncGather& operator=(const AsyncGather&) = delete;
  ~AsyncGather() {
    if (thread_.joinable()) {
      // Destroyed by Python, with the GIL: its reads need none, and others may run meanwhile.
      if (PyGILState_Check() != 0) {
        shardload::python::GilReleased release;
        thread_.join();
      } else {
        thread_.join();
      }
    }
  }

  // The output array once the rows are in it; the fill's error (ShardReadError naming the
  // file, ...) otherwise, on each call.
  py::array result() {
    if (thread_.joinable()) {
      std::optional<py::error_already_set> raised;
      {
        shardload::python::GilReleased release;
        // A Ctrl-C leaves Python's signal pending until the main thread looks, and meanwhile
        // the fill's threads that call a Python reader run starved (each of their instructions
        // asks for the signal, which only the main thread handles): a fill hung for minutes.
        // So the wait looks once the interrupt came, takes the KeyboardInterrupt then, and
        // raises it after the join. It blocks until the fill ends, waking every kSignalLook to
        // look for an interrupt (a signal handler cannot wake a condition variable) until it
        // has taken one.
        std::unique_lock lock(mu_);
        const auto finished = [this] { return finished_.load(std::memory_order_acquire); };
        while (!finished()) {
          if (raised) {
            finished_cv_.wait(lock, finished);
            break;
          }
          if (wait_->interrupted()) {
            lock.unlock();
            {
              shardload::python::GilAcquired gil;
              if (PyErr_CheckSignals() != 0) raised.emplace();
            }
            lock.lock();
            if (raised) continue;
          }
          finished_cv_.wait_for(lock, kSignalLook, finished);
        }
        lock.unlock();
        thread_.join();
      }
      if (raised) {
        wait_.reset();
        throw *raised;
      }
      python::raise_if_interrupted(*wait_);
      wait_.reset();
    }
    if (!status_.is_ok()) throw_status(status_, ErrorSite::kRead);
    return out_;
  }

  bool done() const { return finished_.load(std::memory_order_acquire); }

 private:
  py::object layout_;
  py::array out_;
  py::object maps_;  // held, as the layout, while the thread reads through them
  std::vector<std::int64_t> rows_;
  FillOrder order_;
  bool by_order_ = false;
  // How often result()'s wait looks for a Ctrl-C: a delay no one notices, and a hundred
  // wake-ups a second at most.
  static constexpr std::chrono::milliseconds kSignalLook{10};

  std::unique_ptr<InterruptibleWait> wait_;
  Status status_;
  std::mutex mu_;  // finished_'s changes to false -> true, for finished_cv_
  std::condition_variable finished_cv_;
  std::atomic<bool> finished_{false};
  std::thread thread_;  // last: started once everything it uses is built
};

}  // namespace

PYBIND11_MODULE(_feed_core, m) {
  m.doc() = "Private binding of the training feed's gather (shardload.feed).";
  python::register_error_translator();

  // out[i] = row rows[i] of the layout, for every i; `threads` readers share the pieces; with
  // `cast`, out may be in a dtype the layout's casts to here (cast_fn).
  m.def(
      "gather",
      [](const Layout& l, const py::array_t<std::int64_t, py::array::c_style>& rows,
         const py::array& out, std::int64_t threads, bool cast, const py::object& maps) {
        CastFn fn = check_gather_args(l, rows.size(), rows.ndim() == 1, out, threads, cast);
        Maps* m = maps_arg(maps, l);
        auto* dst = static_cast<std::byte*>(const_cast<void*>(out.data()));
        FillRows fill;
        fill.given = rows.data();
        fill.n = rows.size();
        Status st = python::interruptible(
            [&]() -> Status { return fill_gather_cast(l, fill, dst, threads, fn, m); });
        if (!st.is_ok()) throw_status(st, ErrorSite::kRead);
      },
      py::arg("layout"), py::arg("rows"), py::arg("out"), py::arg("threads") = 1,
      py::arg("cast") = false, py::arg("maps") = py::none());

  // A fill's rows named by the order (Order.spec()) and the fill's positions: `count` batches
  // of `batch` positions, the k-th from first + k * stride, modulo n. Gather computes them on
  // its threads; rows() here, for the tests.
  py::class_<FillOrder>(m, "FillOrder")
      .def(py::init([](const std::string& mode, std::int64_t n, std::int64_t block_rows,
                       std::int64_t window_blocks, std::uint64_t seed, std::uint64_t epoch,
                       std::int64_t rounds, std::int64_t first, std::int64_t batch,
                       std::int64_t stride, std::int64_t count) {
             constexpr std::int64_t kMax = std::int64_t{1} << 62;
             FillOrder o;
             o.mode = mode == "none"    ? FillOrder::kNone
                      : mode == "row"   ? FillOrder::kRow
                      : mode == "block" ? FillOrder::kBlock
                                        : -1;
             const bool sizes =
                 n >= 1 && n <= kMax && block_rows >= 1 && block_rows <= n && window_blocks >= 1 &&
                 window_blocks <= (n + block_rows - 1) / block_rows && rounds >= 1 && rounds <= 64;
             // The last position before the modulo, first + (count - 1) * stride + batch,
             // stays under 2**63; a fill holds at most 2**40 rows.
             const bool span =
                 first >= 0 && first <= kMax && batch >= 1 && stride >= 0 && stride <= kMax &&
                 count >= 0 && batch <= (std::int64_t{1} << 40) &&
                 (count == 0 || ((count - 1 <= kMax / std::max<std::int64_t>(stride, 1)) &&
                                 (count - 1) * stride <= kMax - first &&
                                 batch <= (std::int64_t{1} << 40) / count));
             if (o.mode < 0 || !sizes || !span) {
               throw py::value_error(
                   "FillOrder: expected mode none, row or block, 1 <= n <= 2**62, 1 <= "
                   "block_rows <= n, 1 <= window_blocks <= the blocks, 1 to 64 rounds, first, "
                   "stride >= 0 below 2**62, batch >= 1, count >= 0 and at most 2**40 rows");
             }
             o.n = static_cast<std::uint64_t>(n);
             o.block_rows = static_cast<std::uint64_t>(block_rows);
             o.window_blocks = static_cast<std::uint64_t>(window_blocks);
             o.seed = seed;
             o.epoch = epoch;
             o.rounds = static_cast<std::size_t>(rounds);
             o.first = static_cast<std::uint64_t>(first);
             o.batch = static_cast<std::uint64_t>(batch);
             o.stride = static_cast<std::uint64_t>(stride);
             o.count = static_cast<std::uint64_t>(count);
             return o;
           }),
           py::arg("mode"), py::arg("n"), py::arg("block_rows"), py::arg("window_blocks"),
           py::arg("seed"), py::arg("epoch"), py::arg("rounds"), py::arg("first"), py::arg("batch"),
           py::arg("stride"), py::arg("count"))
      .def_property_readonly("size", [](const FillOrder& o) { return o.size(); })
      .def("rows", [](const FillOrder& o) {
        py::array_t<std::int64_t> out(static_cast<py::ssize_t>(o.size()));
        std::int64_t* to = out.mutable_data();
        {
          shardload::python::GilReleased release;
          o.rows(0, o.size(), to);
        }
        return out;
      });

  // gather(layout, rows, out, threads) started on a thread of its own; result() waits for it.
  py::class_<AsyncGather>(m, "Gather")
      .def(py::init<py::object, const py::object&, py::array, std::int64_t, bool, py::object>(),
           py::arg("layout"), py::arg("rows"), py::arg("out"), py::arg("threads") = 1,
           py::arg("cast") = false, py::arg("maps") = py::none())
      .def("result", &AsyncGather::result)
      .def("done", &AsyncGather::done)
      // As a running future's: a started fill cannot be called off (dropping it waits).
      .def("cancel", [](const AsyncGather&) { return false; });

  // A layout's local npy / raw files mapped for gathers (Gather's maps=): usable is false where
  // the layout is not one (the gathers then read as without).
  py::class_<Maps>(m, "Maps")
      .def(py::init<py::object>(), py::arg("layout"))
      .def_property_readonly("usable", &Maps::usable);

  // What the ranks of a job compare before they share one stream (shardload.feed): each
  // shard's path, first file row, rows, size and modification time, and an object's version.
  // A local file's change time and inode are left out: a copy of the dataset on each node's
  // own disk keeps the rest. An object (http(s)://, s3://) has no modification time in its
  // snapshot; its identity (the inode field: the hash of its ETag, else of its Last-Modified)
  // is what tells a rewrite of the same size, and every rank reads the one object.
  m.def(
      "shard_states",
      [](const Layout& l) {
        py::list out;
        for (const Shard& s : l.shards) {
          const std::uint64_t version = path_traits(s.path).kernel_files ? 0 : s.snapshot.inode;
          out.append(py::make_tuple(py::bytes(s.path), s.first_row, s.rows, s.snapshot.size,
                                    s.snapshot.mtime_ns, version));
        }
        return out;
      },
      py::arg("layout"));

  // The keyed bijection of [0, n) (or its inverse) applied to each of xs, by cycle-walking the
  // network over the smallest 4**h >= n: a value at or past n is passed through again.
  m.def(
      "permute",
      [](const py::array_t<std::int64_t, py::array::c_style>& xs, std::int64_t n,
         const std::vector<std::uint64_t>& keys, bool inverse) {
        if (xs.ndim() != 1 || n < 0 || n > (std::int64_t{1} << 62)) {
          throw py::value_error("permute: expected 1-D positions and 0 <= n <= 2**62");
        }
        py::array_t<std::int64_t> out(xs.size());
        const std::int64_t* in = xs.data();
        std::int64_t* o = out.mutable_data();
        const auto count = static_cast<std::size_t>(xs.size());
        for (std::size_t i = 0; i < count; ++i) {
          if (in[i] < 0 || in[i] >= std::max<std::int64_t>(n, 1)) {
            throw py::value_error("permute: position " + std::to_string(in[i]) +
                                  " is outside [0, " + std::to_string(n) + ")");
          }
        }
        if (n <= 1) {
          std::copy(in, in + count, o);
          return out;
        }
        int h = 1;
        while ((std::uint64_t{1} << (2 * h)) < static_cast<std::uint64_t>(n)) ++h;
        const auto un = static_cast<std::uint64_t>(n);
        if (!inverse) {
          permute_forward(in, o, count, un, keys, h);
          return out;
        }
        for (std::size_t i = 0; i < count; ++i) {
          std::uint64_t y = network(static_cast<std::uint64_t>(in[i]), keys, h, inverse);
          while (y >= un) y = network(y, keys, h, inverse);
          o[i] = static_cast<std::int64_t>(y);
        }
        return out;
      },
      py::arg("xs"), py::arg("n"), py::arg("keys"), py::arg("inverse") = false);

  // The block order's rows of each of positions (Order.rows for mode "block").
  m.def(
      "block_order_rows",
      [](const py::array_t<std::int64_t, py::array::c_style>& positions, std::int64_t n,
         std::int64_t block_rows, std::int64_t window_blocks, std::uint64_t seed,
         std::uint64_t epoch, std::int64_t rounds) {
        if (positions.ndim() != 1 || n < 1 || n > (std::int64_t{1} << 62) || block_rows < 1 ||
            block_rows > n || window_blocks < 1 ||
            window_blocks > (n + block_rows - 1) / block_rows || rounds < 1 || rounds > 64) {
          throw py::value_error(
              "block_order_rows: expected 1-D positions, 1 <= n <= 2**62, 1 <= block_rows <= n, "
              "1 <= window_blocks <= the blocks and 1 to 64 rounds");
        }
        const std::int64_t* in = positions.data();
        const auto count = static_cast<std::size_t>(positions.size());
        for (std::size_t i = 0; i < count; ++i) {
          if (in[i] < 0 || in[i] >= n) {
            throw py::value_error("block_order_rows: position " + std::to_string(in[i]) +
                                  " is outside [0, " + std::to_string(n) + ")");
          }
        }
        py::array_t<std::int64_t> out(positions.size());
        std::int64_t* o = out.mutable_data();
        {
          shardload::python::GilReleased release;
          BlockOrder order(static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(block_rows),
                           static_cast<std::uint64_t>(window_blocks), seed, epoch,
                           static_cast<std::size_t>(rounds));
          order.rows(in, o, count);
        }
        return out;
      },
      py::arg("positions"), py::arg("n"), py::arg("block_rows"), py::arg("window_blocks"),
      py::arg("seed"), py::arg("epoch"), py::arg("rounds"));
}
