#include "shardload/fill.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace shardload {

namespace {

template <typename T, typename Swap>
void swap_all(std::byte* data, std::size_t count, Swap swap) {
  for (std::size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    v = swap(v);
    std::memcpy(data + i * sizeof(T), &v, sizeof(T));
  }
}

std::string range_string(std::int64_t lo, std::int64_t hi) {
  return "reading rows [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

Status check_snapshot(const File& f, const Shard& s) {
  SHARDLOAD_ASSIGN_OR_RETURN(FileInfo now, f.stat());
  if (now.size != s.snapshot.size || now.mtime_ns != s.snapshot.mtime_ns) {
    return {ErrorCode::kChanged,
            s.path + ": changed since discovery: size " + std::to_string(s.snapshot.size) +
                " -> " + std::to_string(now.size) + " bytes, mtime " +
                std::to_string(s.snapshot.mtime_ns) + " -> " + std::to_string(now.mtime_ns) +
                " ns"};
  }
  return Status::ok();
}

// Reads shard rows [lo, hi) of a Fortran-ordered shard and writes them in
// C order. In the file, each trailing element index m (Fortran-flat) owns a
// run of `rows` consecutive values; rows [lo, hi) of it are contiguous.
Status read_fortran(const File& f, const Layout& l, const Shard& s, std::int64_t lo,
                    std::int64_t hi, std::byte* dst, std::size_t scratch_bytes) {
  const std::size_t item = l.dtype.size;
  const std::uint64_t T = l.row_elements();
  const auto R = static_cast<std::uint64_t>(s.rows);
  const auto n = static_cast<std::uint64_t>(hi - lo);
  const std::size_t scratch = std::max<std::size_t>(scratch_bytes, item);
  const std::uint64_t rows_per_chunk = std::max<std::uint64_t>(1, scratch / item);
  auto buf = std::unique_ptr<std::byte[]>(new (std::nothrow) std::byte[scratch]);
  if (!buf) return {ErrorCode::kIo, "cannot allocate " + std::to_string(scratch) + " bytes"};

  // C-order strides of the trailing dimensions, in elements.
  const auto& dims = l.trailing_shape;
  std::vector<std::uint64_t> cstride(dims.size(), 1);
  for (std::size_t k = dims.size(); k-- > 1;) {
    cstride[k - 1] = cstride[k] * static_cast<std::uint64_t>(dims[k]);
  }
  std::vector<std::uint64_t> idx(dims.size(), 0);  // Fortran odometer: first index fastest
  std::uint64_t c = 0;                              // C-flat index of idx
  for (std::uint64_t m = 0; m < T; ++m) {
    for (std::uint64_t r0 = 0; r0 < n; r0 += rows_per_chunk) {
      const std::uint64_t cnt = std::min(rows_per_chunk, n - r0);
      const std::uint64_t off = s.data_offset + (m * R + static_cast<std::uint64_t>(lo) + r0) * item;
      SHARDLOAD_RETURN_IF_ERROR(f.read_exact(buf.get(), cnt * item, off));
      std::byte* out = dst + ((r0 * T) + c) * item;
      const std::size_t step = T * item;
      switch (item) {
        case 1:
          for (std::uint64_t r = 0; r < cnt; ++r) out[r * step] = buf[r];
          break;
        default:
          for (std::uint64_t r = 0; r < cnt; ++r) std::memcpy(out + r * step, &buf[r * item], item);
      }
    }
    for (std::size_t k = 0; k < dims.size(); ++k) {
      if (++idx[k] < static_cast<std::uint64_t>(dims[k])) {
        c += cstride[k];
        break;
      }
      c -= (idx[k] - 1) * cstride[k];
      idx[k] = 0;
    }
  }
  return Status::ok();
}

Status read_piece(IoBackend& io, const Layout& l, const Piece& p, std::byte* dst,
                  const FillOptions& o) {
  const Shard& s = l.shards[static_cast<std::size_t>(p.shard)];
  SHARDLOAD_ASSIGN_OR_RETURN(File f, File::open(io, s.path));
  if (o.check_snapshot) SHARDLOAD_RETURN_IF_ERROR(check_snapshot(f, s));
  const std::size_t bytes = static_cast<std::size_t>(p.hi - p.lo) * l.row_bytes;
  if (s.fortran_order) {
    SHARDLOAD_RETURN_IF_ERROR(read_fortran(f, l, s, p.lo, p.hi, dst, o.scratch_bytes));
  } else {
    const std::uint64_t off = s.data_offset + static_cast<std::uint64_t>(p.lo) * l.row_bytes;
    SHARDLOAD_RETURN_IF_ERROR(f.read_exact(dst, bytes, off));
  }
  if (s.byte_swap) byte_swap(dst, bytes / l.dtype.swap_unit(), l.dtype.swap_unit());
  return Status::ok();
}

}  // namespace

void byte_swap(std::byte* data, std::size_t count, std::size_t unit) {
  switch (unit) {
    case 2: swap_all<std::uint16_t>(data, count, [](std::uint16_t v) { return __builtin_bswap16(v); }); break;
    case 4: swap_all<std::uint32_t>(data, count, [](std::uint32_t v) { return __builtin_bswap32(v); }); break;
    case 8: swap_all<std::uint64_t>(data, count, [](std::uint64_t v) { return __builtin_bswap64(v); }); break;
    default: break;  // one-byte units have no order
  }
}

Status fill_pieces(const Layout& layout, const std::vector<Piece>& pieces, std::byte* dst,
                   const FillOptions& options) {
  IoBackend& io = options.io != nullptr ? *options.io : posix_io();
  for (const auto& p : pieces) {
    if (p.shard < 0 || static_cast<std::size_t>(p.shard) >= layout.shards.size() || p.lo < 0 ||
        p.hi < p.lo || p.hi > layout.shards[static_cast<std::size_t>(p.shard)].rows) {
      return {ErrorCode::kInvalidArgument, "piece outside its shard"};
    }
    std::byte* out = dst + static_cast<std::size_t>(p.dst_row) * layout.row_bytes;
    Status st = read_piece(io, layout, p, out, options);
    if (!st.is_ok()) {
      return st.with_context(range_string(p.lo, p.hi));
    }
  }
  return Status::ok();
}

Status fill_rows(const Layout& layout, std::int64_t lo, std::int64_t hi, std::byte* dst,
                 const FillOptions& options) {
  if (lo < 0 || hi < lo || hi > layout.total_rows()) {
    return {ErrorCode::kInvalidArgument,
            "rows [" + std::to_string(lo) + ", " + std::to_string(hi) + ") outside the dataset's " +
                std::to_string(layout.total_rows()) + " rows"};
  }
  std::vector<Piece> pieces;
  pieces_for_rows(layout.offsets, lo, hi, &pieces);
  return fill_pieces(layout, pieces, dst, options);
}

}  // namespace shardload
