// shardload._feed_core: the training feed's gather (shardload.feed). A shuffled batch's rows
// lie anywhere in the dataset; one host_load per row opens and checks a file each time, which
// costs more than the row. Here the batch's rows, sorted, become the pieces of one fill: one
// reader per thread keeps its files open, consecutive rows merge into one read, and each row
// lands straight in its place in the batch. The GIL is released while the threads read.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "interrupt.hpp"
#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/plan.hpp"

namespace py = pybind11;
using namespace shardload;

namespace {

// The pieces that put row rows[i] at row i of the destination: sorted by row so that a reader
// moves forward through each file, rows that follow each other in the source and in the
// destination merged into one piece.
Result<std::vector<Piece>> gather_pieces(const Layout& l, const std::int64_t* rows,
                                         std::int64_t n) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // A batch in order (or a fill of them) is sorted already: no sort to pay for.
  if (!std::is_sorted(rows, rows + n)) {
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t b) { return rows[a] < rows[b]; });
  }
  std::vector<Piece> pieces;
  std::vector<Piece> run;
  std::int64_t i = 0;
  while (i < n) {
    const std::int64_t first = rows[order[static_cast<std::size_t>(i)]];
    const std::int64_t dst = order[static_cast<std::size_t>(i)];
    if (first < 0 || first >= l.total_rows()) {
      return Status(ErrorCode::kInvalidArgument, "gather: row " + std::to_string(first) +
                                                     " is outside the layout's " +
                                                     std::to_string(l.total_rows()) + " rows");
    }
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

// out[i] = row rows[i] of the layout for every i, on up to `threads` threads (the caller's
// one of them; fill_parts checks local npy and raw files once per call, not once per row);
// called without the GIL.
Status fill_gather(const Layout& l, const std::int64_t* rows, std::int64_t n, std::byte* dst,
                   std::int64_t threads) {
  Result<std::vector<Piece>> pieces = gather_pieces(l, rows, n);
  if (!pieces) return pieces.status();
  return fill_parts(l, share(*pieces, n, l.row_bytes, threads), dst);
}

void check_gather_args(const Layout& l, const py::array_t<std::int64_t, py::array::c_style>& rows,
                       const py::array& out, std::int64_t threads) {
  const auto want = static_cast<py::ssize_t>(rows.size() * static_cast<py::ssize_t>(l.row_bytes));
  if (rows.ndim() != 1 || (out.flags() & py::array::c_style) == 0 || !out.writeable() ||
      out.nbytes() != want || out.itemsize() != static_cast<py::ssize_t>(l.dtype.size)) {
    throw py::value_error("gather: expected 1-D rows and a writable C-contiguous array of " +
                          std::to_string(want) + " bytes in the layout's dtype");
  }
  if (threads < 1 || threads > 4096) {
    throw py::value_error("gather: threads: expected 1 to 4096, found " + std::to_string(threads));
  }
}

// A gather that runs on a thread of its own from its construction: the feed's read-ahead,
// which the loop then waits for with result(). A Python thread pool ran it before, and each
// fill then waited for the GIL twice (to start, and to hand over its result) behind the
// training loop's own Python: about a third of an in-order epoch. The fill holds the layout,
// and the output array, so neither goes while its thread writes; the rows are copied.
// Dropping an unfinished fill waits for its reads (without the GIL). SIGINT ends its remote
// requests, as gather's do, for as long as it runs.
class AsyncGather {
 public:
  AsyncGather(py::object layout, const py::array_t<std::int64_t, py::array::c_style>& rows,
              py::array out, std::int64_t threads)
      : layout_(std::move(layout)), out_(std::move(out)) {
    const Layout& l = layout_.cast<const Layout&>();
    check_gather_args(l, rows, out_, threads);
    rows_.assign(rows.data(), rows.data() + rows.size());
    wait_ = std::make_unique<InterruptibleWait>(python::sigint_raises_keyboard_interrupt());
    auto* dst = static_cast<std::byte*>(out_.mutable_data());
    thread_ = std::thread([this, &l, dst, threads] {
      status_ = fill_gather(l, rows_.data(), static_cast<std::int64_t>(rows_.size()), dst, threads);
      finished_.store(true, std::memory_order_release);
    });
  }
  AsyncGather(const AsyncGather&) = delete;
  AsyncGather& operator=(const AsyncGather&) = delete;
  ~AsyncGather() {
    if (thread_.joinable()) {
      // Destroyed by Python, with the GIL: its reads need none, and others may run meanwhile.
      if (PyGILState_Check() != 0) {
        py::gil_scoped_release release;
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
      {
        py::gil_scoped_release release;
        thread_.join();
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
  std::vector<std::int64_t> rows_;
  std::unique_ptr<InterruptibleWait> wait_;
  Status status_;
  std::atomic<bool> finished_{false};
  std::thread thread_;  // last: started once everything it uses is built
};

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

}  // namespace

PYBIND11_MODULE(_feed_core, m) {
  m.doc() = "Private binding of the training feed's gather (shardload.feed).";
  python::register_error_translator();

  // out[i] = row rows[i] of the layout, for every i; `threads` readers share the pieces.
  m.def(
      "gather",
      [](const Layout& l, const py::array_t<std::int64_t, py::array::c_style>& rows,
         const py::array& out, std::int64_t threads) {
        check_gather_args(l, rows, out, threads);
        auto* dst = static_cast<std::byte*>(const_cast<void*>(out.data()));
        const std::int64_t* r = rows.data();
        const std::int64_t n = rows.size();
        Status st =
            python::interruptible([&]() -> Status { return fill_gather(l, r, n, dst, threads); });
        if (!st.is_ok()) throw_status(st, ErrorSite::kRead);
      },
      py::arg("layout"), py::arg("rows"), py::arg("out"), py::arg("threads") = 1);

  // gather(layout, rows, out, threads) started on a thread of its own; result() waits for it.
  py::class_<AsyncGather>(m, "Gather")
      .def(py::init<py::object, const py::array_t<std::int64_t, py::array::c_style>&, py::array,
                    std::int64_t>(),
           py::arg("layout"), py::arg("rows"), py::arg("out"), py::arg("threads") = 1)
      .def("result", &AsyncGather::result)
      .def("done", &AsyncGather::done)
      // As a running future's: a started fill cannot be called off (dropping it waits).
      .def("cancel", [](const AsyncGather&) { return false; });

  // out[i] = src[rows[i]] for every i, rows of src's bytes per row, on up to `threads`
  // threads (one per 8 MiB: a copy from memory runs at about 10 GB/s on one core, so a
  // thread started for less costs more than it saves) with the GIL released: the block
  // shuffle's copy of a batch out of its window, which np.take would do holding the GIL,
  // stalling the training loop.
  m.def(
      "take",
      [](const py::array& src, const py::array_t<std::int64_t, py::array::c_style>& rows,
         const py::array& out, std::int64_t threads) {
        const std::int64_t n = rows.size();
        const py::ssize_t have = src.ndim() > 0 ? src.shape(0) : 0;
        if (rows.ndim() != 1 || src.ndim() < 1 || (src.flags() & py::array::c_style) == 0 ||
            (out.flags() & py::array::c_style) == 0 || !out.writeable() ||
            out.ndim() != src.ndim() || out.shape(0) != n || out.dtype().not_equal(src.dtype()) ||
            (have > 0 && src.nbytes() / have * n != out.nbytes()) || threads < 1 ||
            threads > 4096) {
          throw py::value_error(
              "take: expected 1-D rows, C-contiguous arrays of one dtype and row shape, out "
              "writable with a row per index, 1 to 4096 threads");
        }
        const std::size_t row = have > 0 ? static_cast<std::size_t>(src.nbytes() / have) : 0;
        const std::int64_t* r = rows.data();
        for (std::int64_t i = 0; i < n; ++i) {
          if (r[i] < 0 || r[i] >= have) {
            throw py::value_error("take: row " + std::to_string(r[i]) + " is outside [0, " +
                                  std::to_string(have) + ")");
          }
        }
        const auto* from = static_cast<const std::byte*>(src.data());
        auto* to = static_cast<std::byte*>(const_cast<void*>(out.data()));
        py::gil_scoped_release release;
        const auto t = static_cast<std::int64_t>(std::max<std::uint64_t>(
            1, std::min<std::uint64_t>(static_cast<std::uint64_t>(threads),
                                       static_cast<std::uint64_t>(n) * row >> 23)));
        auto part = [&](std::int64_t j) {
          for (std::int64_t i = n * j / t; i < n * (j + 1) / t; ++i) {
            std::memcpy(to + static_cast<std::size_t>(i) * row,
                        from + static_cast<std::size_t>(r[i]) * row, row);
          }
        };
        std::vector<std::thread> helpers;
        for (std::int64_t j = 1; j < t; ++j) helpers.emplace_back(part, j);
        part(0);
        for (std::thread& h : helpers) h.join();
      },
      py::arg("src"), py::arg("rows"), py::arg("out"), py::arg("threads") = 1);

  // What the ranks of a job compare before they share one stream (shardload.feed): each
  // shard's path, first file row, rows, size and modification time. The change time and
  // inode are left out: a copy of the dataset on each node's own disk keeps the rest.
  m.def(
      "shard_states",
      [](const Layout& l) {
        py::list out;
        for (const Shard& s : l.shards) {
          out.append(py::make_tuple(py::bytes(s.path), s.first_row, s.rows, s.snapshot.size,
                                    s.snapshot.mtime_ns));
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
        for (std::size_t i = 0; i < count; ++i) {
          std::uint64_t y = network(static_cast<std::uint64_t>(in[i]), keys, h, inverse);
          while (y >= un) y = network(y, keys, h, inverse);
          o[i] = static_cast<std::int64_t>(y);
        }
        return out;
      },
      py::arg("xs"), py::arg("n"), py::arg("keys"), py::arg("inverse") = false);
}
