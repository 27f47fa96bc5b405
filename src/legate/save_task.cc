// The CPU variant of the save task: each point writes the rows of its piece of the store
// straight from the store into the shard files (positional writes, no copy) when the piece is
// dense C-order, else through one bounded buffer.
#include <cstring>
#include <memory>
#include <new>

#include "engine/detail/save_files.hpp"
#include "engine/detail/save_remote.hpp"
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

Status save_point(legate::TaskContext& context, std::vector<WrittenKey>* keys,
                  std::vector<WrittenKey>* begun) {
  const auto dir_bytes = context.scalar(0).values<std::uint8_t>();
  const std::string dir(reinterpret_cast<const char*>(dir_bytes.data()), dir_bytes.size());
  const auto ints = context.scalar(1).values<std::int64_t>();
  SHARDLOAD_ASSIGN_OR_RETURN(const SaveSpec spec,
                             SaveSpec::decode(std::span(ints.data(), ints.size())));
  const auto tile_rows = context.scalar(2).value<std::int64_t>();
  const std::int64_t total = spec.offsets.back();
  // A fourth scalar names the one shard of a one-point launch over that shard's slice of the
  // array (shards of chosen rows to object storage): its rows are the slice's, counted from 0.
  const bool one_shard = context.num_scalars() > 3;
  const std::int64_t t =
      one_shard ? context.scalar(3).value<std::int64_t>() : context.get_task_index()[0];
  if (one_shard && (t < 0 || t >= spec.shards())) {
    return {ErrorCode::kInvalidArgument, "save task: no shard " + std::to_string(t)};
  }
  const std::int64_t lo = one_shard ? spec.offsets[static_cast<std::size_t>(t)] : t * tile_rows;
  const std::int64_t hi =
      one_shard ? spec.offsets[static_cast<std::size_t>(t) + 1] : std::min(total, lo + tile_rows);
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
  // To object storage, tile t is shard t, which this point uploads whole: its rows in order,
  // each object completed as it fills (an upload not completed is aborted).
  std::unique_ptr<ShardUpload> upload;
  if (is_object_dest(dir)) {
    if (t + 1 >= static_cast<std::int64_t>(spec.offsets.size()) ||
        spec.offsets[static_cast<std::size_t>(t)] != lo ||
        spec.offsets[static_cast<std::size_t>(t) + 1] != hi) {
      return context_of({ErrorCode::kInvalidArgument, "save task: the tile is not one shard"});
    }
    auto opened = open_shard_upload(dir, spec, t);
    if (!opened) return context_of(opened.status());
    upload = std::move(*opened);
  }
  // What the upload finished, whatever way this point ends.
  struct Finished {
    const std::unique_ptr<ShardUpload>& upload;
    std::vector<WrittenKey>* keys;
    std::vector<WrittenKey>* begun;
    ~Finished() {
      if (upload) {
        *keys = upload->written();
        *begun = upload->begun();
      }
    }
  } finished{upload, keys, begun};
  const auto put = [&](std::int64_t a, std::int64_t b, const std::byte* src) {
    return upload ? upload->append(src, b - a) : write_rows(dir, spec, a, b, src);
  };
  const auto done = [&]() { return upload ? upload->commit() : Status::ok(); };
  const legate::InlineAllocation alloc = store.get_inline_allocation();
  auto* ptr = static_cast<std::byte*>(alloc.ptr);
  for (std::size_t d = 0; d < dim; ++d) {
    ptr += static_cast<std::size_t>(skip[d]) * alloc.strides[d];
  }
  if (is_dense_c_order(extents, alloc.strides, spec.dtype.size)) {
    Status st = put(lo, hi, ptr);
    if (st) st = done();
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
    const Status st = put(lo + a, lo + b, buf.get());
    if (!st) return context_of(st);
  }
  const Status st = done();
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
