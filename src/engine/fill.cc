#include "shardload/fill.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace shardload {

namespace {

std::string range_string(std::int64_t lo, std::int64_t hi) {
  return "reading rows [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

Status fill_with(ShardReader& reader, const Layout& layout, const std::vector<Piece>& pieces,
                 std::byte* dst) {
  for (const auto& p : pieces) {
    if (p.shard < 0 || static_cast<std::size_t>(p.shard) >= layout.shards.size() || p.lo < 0 ||
        p.hi < p.lo || p.hi > layout.shards[static_cast<std::size_t>(p.shard)].rows) {
      return {ErrorCode::kInvalidArgument, "piece outside its shard"};
    }
    std::byte* out = dst + static_cast<std::size_t>(p.dst_row) * layout.row_bytes;
    const Shard& s = layout.shards[static_cast<std::size_t>(p.shard)];
    // Pieces count rows of the shard's view; the reader reads rows of the file.
    Status st = reader.read_rows(layout, s, s.first_row + p.lo, s.first_row + p.hi, out);
    if (!st.is_ok()) return st.with_context(range_string(p.lo, p.hi));
    if (layout.dtype.kind == DTypeKind::kBool) {
      normalize_bools(out, static_cast<std::size_t>(p.hi - p.lo) * layout.row_bytes);
    }
  }
  return Status::ok();
}

Status check_rows(const Layout& layout, std::int64_t lo, std::int64_t hi) {
  if (lo < 0 || hi < lo || hi > layout.total_rows()) {
    return {ErrorCode::kInvalidArgument, "rows [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                             ") outside the dataset's " +
                                             std::to_string(layout.total_rows()) + " rows"};
  }
  return Status::ok();
}

}  // namespace

Status fill_pieces(const Layout& layout, const std::vector<Piece>& pieces, std::byte* dst,
                   const FillOptions& options) {
  if (pieces.empty()) return Status::ok();
  SHARDLOAD_ASSIGN_OR_RETURN(auto reader, make_reader(layout.format, layout.options, options));
  return fill_with(*reader, layout, pieces, dst);
}

Result<std::unique_ptr<RowFiller>> RowFiller::create(const Layout& layout,
                                                     const FillOptions& options) {
  SHARDLOAD_ASSIGN_OR_RETURN(auto reader, make_reader(layout.format, layout.options, options));
  return std::unique_ptr<RowFiller>(new RowFiller(layout, std::move(reader)));
}

Status RowFiller::fill(std::int64_t lo, std::int64_t hi, std::byte* dst) {
  SHARDLOAD_RETURN_IF_ERROR(check_rows(layout_, lo, hi));
  pieces_for_rows(layout_.offsets, lo, hi, &pieces_);
  return fill_with(*reader_, layout_, pieces_, dst);
}

Status fill_rows(const Layout& layout, std::int64_t lo, std::int64_t hi, std::byte* dst,
                 const FillOptions& options) {
  SHARDLOAD_RETURN_IF_ERROR(check_rows(layout, lo, hi));
  std::vector<Piece> pieces;
  pieces_for_rows(layout.offsets, lo, hi, &pieces);
  return fill_pieces(layout, pieces, dst, options);
}

}  // namespace shardload
