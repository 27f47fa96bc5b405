// The shared body of the load task's variants: what a point task must know
// about its tile, and the host-side fill. Internal to the Legate adapter.
#pragma once

#include <legate.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "legate/detail/tasks.hpp"
#include "shardload/layout.hpp"
#include "shardload/plan.hpp"

namespace shardload::detail {

struct Tile {
  Layout layout;  // the tile's rows only: its row 0 is global row lo
  std::int64_t index = 0;
  std::int64_t lo = 0;  // global rows [lo, hi)
  std::int64_t hi = 0;
  std::vector<Piece> pieces;          // dst_row relative to lo
  std::byte* ptr = nullptr;           // the local piece of the output store
  std::vector<std::int64_t> extents;  // its extents (rows, trailing...)
  std::vector<std::size_t> strides;   // its byte strides
  bool dense = false;                 // dense C-order: fill through ptr directly
};

// Decodes this point's tile (its shards only), finds its pieces and checks that
// the store's local piece is exactly the tile. Never throws.
Result<Tile> prepare_tile(legate::TaskContext& context);

// Fills a host tile on the calling thread: straight into the store when it
// is dense C-order, else through a bounded buffer and a strided scatter.
Status fill_host_tile(const Tile& tile);

// Fills tile rows [lo, hi) (relative to the tile) of a dense host tile.
Status fill_tile_rows(const Tile& tile, std::int64_t lo, std::int64_t hi);

// Runs the whole body of a task that may throw (save, the manifest's). Only a legate::TaskException
// may leave a task (anything else ends the process), so whatever else it throws (an allocation that
// fails, a Legate call that refuses) becomes one, carrying a kIo status: the caller sees
// ShardReadError.
template <typename Body>
void run_task_body(Body&& body) {
  try {
    body();
  } catch (const legate::TaskException&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw_task_error({ErrorCode::kIo, "load task: out of memory (an allocation failed)"});
  } catch (const std::exception& e) {
    throw_task_error({ErrorCode::kIo, std::string("load task: ") + e.what()});
  } catch (...) {
    throw_task_error({ErrorCode::kIo, "load task: unknown exception"});
  }
}

// Adds the tile's identity to an error: "tile 3 (rows [300, 400)): ...".
Status tile_error(const Tile& tile, const Status& status);

// For the load task's variants: prepares the tile and fills it, returning a failure (with the
// tile's identity, as tile_error gives it) as a Status; never throws.
template <typename Fill>
Status run_report_body(legate::TaskContext& context, Fill&& fill) {
  try {
    Result<Tile> tile = prepare_tile(context);
    if (!tile) return tile.status();
    const Status st = fill(*tile);
    return st ? st : tile_error(*tile, st);
  } catch (const std::bad_alloc&) {
    return {ErrorCode::kIo, "load task: out of memory (an allocation failed)"};
  } catch (const std::exception& e) {
    return {ErrorCode::kIo, std::string("load task: ") + e.what()};
  } catch (...) {
    return {ErrorCode::kIo, "load task: unknown exception"};
  }
}

// This point's error record: the local piece of output 1, which the launcher tiles so that
// it is one dense record. Null (and size 0) where it is not, which the launcher never makes.
struct RecordPiece {
  std::byte* ptr = nullptr;
  std::size_t size = 0;
};
RecordPiece record_piece(legate::TaskContext& context) noexcept;

// Writes the status into this point's record in host memory. A record left unwritten could
// read as success over unfilled data, and nothing may leave the task: where there is no
// record to write, the process ends with the reason.
void write_host_record(legate::TaskContext& context, const Status& status) noexcept;

}  // namespace shardload::detail
