// The CPU variant of the save task: each point writes its unit of the save's job (save_job.hpp)
// straight from its piece of the store (no copy) when the piece is dense C-order, else through
// one bounded buffer.
#include <cstring>
#include <memory>
#include <new>

#include "engine/detail/save_job.hpp"
#include "engine/detail/strided.hpp"
#include "legate/detail/load_body.hpp"
#include "legate/detail/tasks.hpp"

namespace shardload::detail {

namespace {

// Output 0: this point's slot of the keys its upload finished and the one it began without an
// answer (encode_written), which the launcher reads back for the commit and any clean-up, also
// after a failure.
void write_written(legate::TaskContext& context, const std::vector<WrittenKey>& keys,
                   const std::vector<WrittenKey>& begun) noexcept {
  try {
    legate::PhysicalStore store = context.output(0).data();
    const legate::Domain dom = store.domain();
    const std::size_t size = dom.get_volume();
    for (int d = 1; d < dom.get_dim(); ++d) {
      if (dom.hi()[d] != dom.lo()[d]) return;
    }
    if (size == 0) return;
    const legate::InlineAllocation alloc = store.get_inline_allocation();
    if (!alloc.strides.empty() && alloc.strides[0] != 1) return;
    encode_written(keys, static_cast<std::byte*>(alloc.ptr), size, begun);
  } catch (...) {  // the keys are then not known: the commit refuses what it cannot place
  }
}

// Scalars: the job (SaveJob::encode), the tile's rows, and, for a one-point launch over one
// unit's slice of the array, the unit's shard.
Status save_point(legate::TaskContext& context, std::vector<WrittenKey>* keys,
                  std::vector<WrittenKey>* begun) {
  const auto job_bytes = context.scalar(0).values<std::uint8_t>();
  SHARDLOAD_ASSIGN_OR_RETURN(const SaveJob job,
                             SaveJob::decode(std::span(job_bytes.data(), job_bytes.size())));
  const SaveSpec& spec = job.spec();
  const auto tile_rows = context.scalar(1).value<std::int64_t>();
  // A third scalar names the one shard of a one-point launch over that shard's slice of the
  // array (shards of chosen rows to object storage): its rows are the slice's, counted from 0.
  const bool one_shard = context.num_scalars() > 2;
  const std::int64_t t =
      one_shard ? context.scalar(2).value<std::int64_t>() : context.get_task_index()[0];
  if (one_shard && (t < 0 || t >= spec.shards())) {
    return {ErrorCode::kInvalidArgument, "save task: no shard " + std::to_string(t)};
  }
  const SaveUnit unit = one_shard ? SaveUnit{spec.offsets[static_cast<std::size_t>(t)],
                                             spec.offsets[static_cast<std::size_t>(t) + 1], t}
                                  : job.tile_unit(tile_rows, t);
  const std::int64_t lo = unit.lo;
  const std::int64_t hi = unit.hi;
  const auto context_of = [&](const Status& st) {
    return st.with_context("save " + std::string(one_shard ? "shard " : "tile ") +
                           std::to_string(t) + " (rows [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "))");
  };

  legate::PhysicalStore store = context.input(0).data();
  const legate::Domain dom = store.domain();
  const auto dim = static_cast<std::size_t>(dom.get_dim());
  if (dim != spec.trailing.size() + 1) {
    return {ErrorCode::kInvalidArgument, "save task: the store has " + std::to_string(dim) +
                                             " dimensions, the spec " +
                                             std::to_string(spec.trailing.size() + 1)};
  }
  // The tiling gives this point rows [lo, hi) with full trailing extents; a store Legate
  // cannot tile that way (a broadcast view: its promoted axis) hands each point more, which is
  // fine as long as the piece holds the tile: the tile is addressed inside it.
  std::vector<std::int64_t> extents;
  std::vector<std::int64_t> skip;
  for (std::size_t d = 0; d < dim; ++d) {
    const std::int64_t got_lo = dom.lo()[static_cast<int>(d)];
    const std::int64_t got_hi = dom.hi()[static_cast<int>(d)] + 1;
    // A shard's slice of the array counts its rows from 0 (a slice of a view whose axis 0 is
    // promoted, every row the same storage, holds the whole axis around them).
    const std::int64_t first = one_shard ? 0 : lo;
    const std::int64_t want_lo = d == 0 ? first : 0;
    const std::int64_t want_hi = d == 0 ? first + (hi - lo) : spec.trailing[d - 1];
    if (hi > lo && (got_lo > want_lo || got_hi < want_hi)) {
      return {ErrorCode::kInvalidArgument,
              "save task: the store's piece spans [" + std::to_string(got_lo) + ", " +
                  std::to_string(got_hi) + ") in dimension " + std::to_string(d) +
                  ", which does not hold the tile's [" + std::to_string(want_lo) + ", " +
                  std::to_string(want_hi) + ")"};
    }
    extents.push_back(want_hi - want_lo);
    skip.push_back(want_lo - got_lo);
  }
  if (hi <= lo || spec.row_bytes == 0) return Status::ok();
  // The unit's writer (an upload of a whole shard is completed as it fills; one not completed
  // is aborted).
  auto opened = job.open(unit);
  if (!opened) return context_of(opened.status());
  const std::unique_ptr<SaveUnitWriter> writer = std::move(*opened);
  // What the writer finished, whatever way this point ends.
  struct Finished {
    const SaveUnitWriter& writer;
    std::vector<WrittenKey>* keys;
    std::vector<WrittenKey>* begun;
    ~Finished() {
      *keys = writer.written();
      *begun = writer.begun();
    }
  } finished{*writer, keys, begun};
  const legate::InlineAllocation alloc = store.get_inline_allocation();
  auto* ptr = static_cast<std::byte*>(alloc.ptr);
  for (std::size_t d = 0; d < dim; ++d) {
    ptr += static_cast<std::size_t>(skip[d]) * alloc.strides[d];
  }
  if (is_dense_c_order(extents, alloc.strides, spec.dtype.size)) {
    Status st = writer->append(ptr, hi - lo);
    if (st) st = writer->finish();
    return st ? st : context_of(st);
  }
  // Not dense C-order (a transposed or sliced view): gather bounded chunks of rows into dense
  // rows, then write them. scatter_rows walks the strided side; its copy runs the other way.
  constexpr std::size_t kChunkBytes = std::size_t{4} << 20;
  const auto chunk_rows =
      static_cast<std::int64_t>(std::max<std::size_t>(1, kChunkBytes / spec.row_bytes));
  std::unique_ptr<std::byte[]> buf(
      new (std::nothrow) std::byte[static_cast<std::size_t>(chunk_rows) * spec.row_bytes]);
  if (!buf) return context_of({ErrorCode::kNoMemory, "cannot allocate the gather buffer"});
  const RunCopy gather = [](std::byte* strided, const std::byte* dense, std::size_t n) {
    std::memcpy(const_cast<std::byte*>(dense), strided, n);
    return true;
  };
  for (std::int64_t a = 0; a < hi - lo; a += chunk_rows) {
    const std::int64_t b = std::min(hi - lo, a + chunk_rows);
    scatter_rows(buf.get(), b - a, extents, alloc.strides, spec.dtype.size,
                 ptr + static_cast<std::size_t>(a) * alloc.strides[0], gather);
    const Status st = writer->append(buf.get(), b - a);
    if (!st) return context_of(st);
  }
  const Status st = writer->finish();
  return st ? st : context_of(st);
}

}  // namespace

void SaveTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    std::vector<WrittenKey> keys;
    std::vector<WrittenKey> begun;
    const Status st = save_point(context, &keys, &begun);
    write_written(context, keys, begun);
    if (!st) throw_task_error(st);
  });
}

}  // namespace shardload::detail
