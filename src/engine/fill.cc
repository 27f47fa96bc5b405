#include "shardload/fill.hpp"
#include "shardload/shard_source.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/detail/lanes.hpp"
#include "shardload/formats.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"

namespace shardload {

namespace {

std::string range_string(std::int64_t lo, std::int64_t hi) {
  return "reading rows [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

Status fill_with(ShardReader& reader, const Layout& layout, const std::vector<Piece>& pieces,
                 std::byte* dst) {
  for (const auto& p : pieces) {
    // A Ctrl-C (a front end's interrupt) ends the fill before its next piece: a row shuffle's
    // fill is a read per row, hundreds of them, which a Python reader's reads or a slow local
    // file system kept going long after the interrupt (the requests it ends are remote only).
    if (interrupt_requested()) {
      return Status(ErrorCode::kIo, "read stopped: interrupted").with_errno(ECANCELED);
    }
    if (p.shard < 0 || static_cast<std::size_t>(p.shard) >= layout.shards.size() || p.lo < 0 ||
        p.hi < p.lo || p.hi > layout.shards[static_cast<std::size_t>(p.shard)].rows) {
      return {ErrorCode::kInvalidArgument, "piece outside its shard"};
    }
    std::byte* out = dst + static_cast<std::size_t>(p.dst_row) * layout.row_bytes;
    const Shard& s = layout.shards[static_cast<std::size_t>(p.shard)];
    // Pieces count rows of the shard's view; the reader reads rows of the file, and the error
    // names those: a view cut at a tile's first row (Legate's tiles, a row_range) counts from
    // its cut, where the damaged chunk is not.
    const std::int64_t lo = s.first_row + p.lo;
    const std::int64_t hi = s.first_row + p.hi;
    Status st = reader.read_rows(layout, s, lo, hi, out);
    if (!st.is_ok()) return st.with_context(range_string(lo, hi));
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

// Pieces of a tile that are objects in object storage (of a format with
// remote_piece_lanes: npy, raw and contiguous HDF5, each piece one ranged GET; Parquet and
// Arrow, each piece a footer and its column chunks; chunked HDF5, its first bytes, then its
// chunks under HDF5's lock) are read this many at once: each piece costs at least a round trip
// of the store's latency, which one after another a tile would pay once per object, and a decoded
// format's pieces decode meanwhile. A store's own limit on one GET (requests_in_flight) splits a
// large piece further.
constexpr std::size_t kRemotePiecesInFlight = 4;

std::size_t piece_lanes(const Layout& layout, const std::vector<Piece>& pieces) {
  const FormatDescriptor* d = find_format(layout.format, layout.options.reader);
  if (pieces.size() < 2 || d == nullptr || !d->capabilities.remote_piece_lanes) {
    return 1;
  }
  for (const Piece& p : pieces) {
    if (p.shard < 0 || static_cast<std::size_t>(p.shard) >= layout.shards.size() ||
        !path_traits(layout.shards[static_cast<std::size_t>(p.shard)].path).round_trips) {
      return 1;
    }
  }
  return std::min(pieces.size(), kRemotePiecesInFlight);
}

// The pieces on `lanes` threads (the caller's one of them), each with a reader of its own
// (a reader keeps the objects it opened), taking the next piece in order; the error of the
// first failing piece in order is the fill's, as one after another.
Status fill_in_lanes(const Layout& layout, const std::vector<Piece>& pieces, std::byte* dst,
                     const FillOptions& options, std::size_t lanes) {
  std::vector<std::unique_ptr<ShardReader>> readers;
  for (std::size_t i = 0; i < lanes; ++i) {
    SHARDLOAD_ASSIGN_OR_RETURN(auto r, make_reader(layout.format, layout.options, options));
    readers.push_back(std::move(r));
  }
  return detail::first_failure_in_lanes(pieces.size(), lanes, [&](std::size_t lane, std::size_t i) {
    return fill_with(*readers[lane], layout, {pieces[i]}, dst);
  });
}

Status fill_pieces(const Layout& layout, const std::vector<Piece>& pieces, std::byte* dst,
                   const FillOptions& options) {
  if (pieces.empty()) return Status::ok();
  if (const std::size_t lanes = piece_lanes(layout, pieces); lanes > 1) {
    return fill_in_lanes(layout, pieces, dst, options, lanes);
  }
  SHARDLOAD_ASSIGN_OR_RETURN(auto reader, make_reader(layout.format, layout.options, options));
  return fill_with(*reader, layout, pieces, dst);
}

Status fill_parts(const Layout& layout, const std::vector<std::vector<Piece>>& parts,
                  std::byte* dst, const FillOptions& options) {
  // The shards the parts read, each once, and whether the check can wait for the end: only
  // the npy and raw readers leave it to their caller, and only their shards are one file
  // each, the file the snapshot is of.
  std::vector<bool> read(layout.shards.size(), false);
  bool deferred =
      options.check_snapshot && (layout.format == Format::kNpy || layout.format == Format::kRaw);
  for (const auto& part : parts) {
    for (const Piece& p : part) {
      if (p.shard < 0 || static_cast<std::size_t>(p.shard) >= layout.shards.size()) {
        return {ErrorCode::kInvalidArgument, "piece outside its shard"};
      }
      const auto k = static_cast<std::size_t>(p.shard);
      if (p.hi <= p.lo || read[k]) continue;
      read[k] = true;
      deferred = deferred && !path_traits(layout.shards[k].path).round_trips;
    }
  }
  FillOptions o = options;
  o.check_each_read = options.check_each_read && !deferred;
  // Each part a lane of its own (a thread that cannot start leaves its part to the others).
  Status filled = detail::first_failure_in_lanes(
      parts.size(), parts.size(),
      [&](std::size_t, std::size_t j) { return fill_pieces(layout, parts[j], dst, o); });
  if (deferred) {
    ShardSource& source = options.source != nullptr ? *options.source : *ShardSource::files();
    for (std::size_t k = 0; k < read.size(); ++k) {
      if (!read[k]) continue;
      const Shard& s = layout.shards[k];
      Result<FileInfo> now = source.stat(s.path);
      if (!now) return now.status();
      if (*now != s.snapshot) {
        return file_error(
            ErrorCode::kChanged, s.path,
            "changed while reading: " + snapshot_difference(s.path, s.snapshot, *now));
      }
    }
  }
  return filled;
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
