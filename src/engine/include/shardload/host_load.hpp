// The host load: a layout's rows filled into one caller buffer by several threads at once,
// the way a Legate launch fills its tiles, with no runtime. The NumPy, JAX and Dask front
// ends and `shardload read` without Legate go through it.
//
// The rows are cut by the same plan as a launch (plan_layout with P = threads), so tiles
// meet decode units (Zarr/HDF5 chunks, Parquet row groups) as a launch's do, and each tile
// is filled by fill_pieces with a reader of its own: positional reads straight into the
// buffer, remote pieces in lanes. Threads take the next tile in order; a failure stops
// further tiles from starting, and the error of the first failing tile in order is the
// load's, named with its tile and rows, whatever the timing.
//
// Contract: the caller owns dst (exactly layout.total_bytes() bytes, C order) and the layout
// and keeps both alive for the call. Never throws. A SIGINT that shardload::InterruptibleWait
// turned into an interrupt request stops further tiles (kIo with errno ECANCELED).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/plan.hpp"
#include "shardload/status.hpp"

namespace shardload {

struct HostLoadOptions {
  // Threads that fill tiles (the calling thread is one of them); 0: the machine's cores.
  std::int64_t threads = 0;
  // Tiles per thread (K of the plan): more balance the threads when shards differ in cost.
  std::int64_t overdecompose = 4;
  // Called after each tile is filled, with the tiles filled so far, the plan's tiles and the
  // rows filled so far, from the thread that filled it (one call at a time). Returning false stops
  // the load (kIo with errno ECANCELED).
  std::function<bool(std::int64_t tiles_done, std::int64_t tiles, std::int64_t rows_done)> on_tile;
  FillOptions fill;
};

struct HostLoadStats {
  ReadPlan plan;
  std::int64_t threads = 1;  // the threads that ran
  double fill_s = 0;         // wall seconds of the fill
};

// Threads for HostLoadOptions::threads == 0: the cores this process may run on.
std::int64_t default_host_threads();

Result<HostLoadStats> host_load(const Layout& layout, std::byte* dst,
                                const HostLoadOptions& options = {});

}  // namespace shardload
