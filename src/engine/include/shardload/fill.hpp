// The host side of the I/O engine: fills a caller's buffer with global rows
// [lo, hi) of a layout, as native-endian C-order rows.
//
// Native C-order data is read with positional reads straight into the
// destination; big-endian data is byte-swapped in place afterwards;
// Fortran-order shards go through a bounded scratch buffer. Every read's
// byte count is checked, and each file is compared with its discovery
// snapshot (size, mtime, ctime, inode) when it is opened and again after the
// last read from it, so that a file written while it is read is an error,
// never a mix of old and new bytes. Never throws: it runs inside Legate
// tasks.
//
// Contract: the caller owns dst and the Layout and keeps both alive for the call; each call
// makes its own readers, so concurrent calls (on disjoint dst) are safe. Errors are Status
// naming the file and rows; nothing throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "shardload/byte_order.hpp"
#include "shardload/io.hpp"
#include "shardload/layout.hpp"
#include "shardload/plan.hpp"
#include "shardload/reader.hpp"
#include "shardload/status.hpp"

namespace shardload {

// A fill's options are exactly what its readers need: the source they read from (`source`;
// ShardSource::over(io) for an injected backend, files() where none is given), the
// bounded scratch and unit cache (the only extra memory a fill uses, whatever
// the tile size), whether opened files are checked against their snapshots,
// and where the readers count their decodes.
using FillOptions = ReaderContext;

// Fills dst (exactly (hi - lo) * layout.row_bytes bytes) with rows [lo, hi).
// Errors are kIo, kFormat or kChanged and name the file and row range.
Status fill_rows(const Layout& layout, std::int64_t lo, std::int64_t hi, std::byte* dst,
                 const FillOptions& options = {});

// Fills from precomputed pieces whose dst_row is relative to dst.
Status fill_pieces(const Layout& layout, const std::vector<Piece>& pieces, std::byte* dst,
                   const FillOptions& options = {});

// Fills each of `parts` (pieces whose dst_row is relative to dst) on a thread of its own (the
// caller's the first): a gather of scattered rows, as the training feed's. Where the layout is
// npy or raw files on a local file system, each file is compared with its snapshot when a part
// opens it and once more after every part is done (ReaderContext::check_each_read off), instead
// of after each read: for 1 KiB rows that fstat cost as much as the row's pread. A file changed
// then is the call's error, ahead of any read error (as check_unchanged's), so no byte of a
// changed file is taken for the snapshot's. Otherwise each part is fill_pieces. The first
// failing part's error is the call's.
Status fill_parts(const Layout& layout, const std::vector<std::vector<Piece>>& parts,
                  std::byte* dst, const FillOptions& options = {});

// Fills rows of one layout in several calls through one reader, so that a decode unit
// met by several calls (a tile filled a bounded buffer at a time) is decoded once: the
// reader's unit cache (ReaderContext::unit_cache_bytes, one unit at most) keeps it between
// calls. fill_rows makes a reader per call, and each call decodes the units it meets.
// The filler borrows the layout, which must outlive it; one thread at a time.
class RowFiller {
 public:
  static Result<std::unique_ptr<RowFiller>> create(const Layout& layout,
                                                   const FillOptions& options = {});
  // As fill_rows.
  Status fill(std::int64_t lo, std::int64_t hi, std::byte* dst);

 private:
  RowFiller(const Layout& layout, std::unique_ptr<ShardReader> reader)
      : layout_(layout), reader_(std::move(reader)) {}
  const Layout& layout_;
  std::unique_ptr<ShardReader> reader_;
  std::vector<Piece> pieces_;
};

}  // namespace shardload
