// shardload's public C++ API over Legate: discover a sharded dataset and
// load it into a distributed legate::LogicalArray with one manual launch.
//
//   auto layout = shardload::discover("data/");           // throws LayoutError
//   legate::LogicalArray a = shardload::load(layout);      // throws ShardReadError
//
// The Legate runtime must be started (legate::start()) before load().
// Errors are typed exceptions here; the core under it returns Status.
//
// Contract: Layouts are values; load() returns a LogicalArray the caller owns (Legate frees
// its storage when the last handle goes). Calls are not meant to race: issue them from one
// thread, the one that drives the Legate program (shardload.load refuses other threads), and
// under control replication alike on every rank. Errors are the exceptions of
// shardload/errors.hpp (thrown by throw_status, each carrying its Status).
#pragma once

#include <legate.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardload/errors.hpp"
#include "shardload/layout.hpp"

namespace shardload {

// Discovers a dataset from a directory, numbered pattern, glob or file (see
// Source::parse), or from an ordered list of paths. Throws LayoutError.
Layout discover(const std::string& source, const std::string& pattern = {},
                const FormatOptions& format = {});
Layout discover(const std::vector<std::string>& paths, const FormatOptions& format = {});
// The same with every discovery option (trust_manifest, use_manifest, probe_threads, io): the
// throwing form of try_discover (shardload/layout.hpp). The string is read as Source::parse
// reads it, without a pattern.
Layout discover(const Source& source, const DiscoverOptions& options = {});
Layout discover(const std::string& source, const DiscoverOptions& options);

struct LoadOptions {
  std::int64_t overdecompose = 1;  // K: tiles = about K x processors
};

// What a load did: the processors it was sized for, its plan, and where its
// time went.
struct LoadInfo {
  std::string target;           // "GPU", "OMP" or "CPU"
  std::int64_t processors = 0;  // P
  std::int64_t tile_rows = 0;
  std::int64_t tiles = 0;  // the launch domain
  // From the call to the launch: planning, the memory check, creating the
  // array and cutting the layout at the tiles.
  double launch_seconds = 0;
  // From the launch until every point task has finished: load reads the
  // points' error records back, which waits for them.
  double fill_seconds = 0;
  // Requests to object storage that were retried (after a 5xx, a SlowDown, a reset or a
  // timeout) while the tiles were filled, by the tasks of this process.
  std::uint64_t remote_retries = 0;
};

// Allocates the output once (final shape and dtype, no zero fill), tiles it
// along axis 0 by the read plan for the processors of the kind the load runs
// on (GPU if any, else OMP, else CPU), and fills it with one manual launch of
// the load task. Returns once the launch has completed; any failure found
// while reading is thrown as ShardReadError naming the file and row range
// (where several tiles fail, the lowest tile's failure, on every rank). A dataset larger than the
// memory Legate has for those processors (all system memory for CPUs, each GPU's framebuffer for
// its share of the tiles) throws OutOfMemoryError before anything is allocated; memory that other
// live arrays already hold is not counted, so a load that fits the total can still exhaust it, and
// Legate then ends the process.
legate::LogicalArray load(const Layout& layout, const LoadOptions& options = {},
                          LoadInfo* info = nullptr);

// The memory check of load() for an array filled by other tasks (the Python readers'):
// throws OutOfMemoryError when `rows` rows of `row_bytes` bytes, tiled as make_plan tiles them
// for `processors` processors of `target` ("GPU" or "CPU") and K = overdecompose, do not fit
// the memory Legate has for those processors.
void check_load_memory(std::int64_t rows, std::uint64_t row_bytes, const std::string& target,
                       std::int64_t processors, std::int64_t overdecompose);

// The most dimensions a Legate array can have in the Legate shardload is built with
// (LEGATE_MAX_DIM: 6 in the wheels). Data of more dimensions is discovered and read on the host
// (fill_rows; Python's Layout.read) like any other, but cannot be loaded, batched or saved.
inline constexpr std::size_t kMaxLegateDims = LEGATE_MAX_DIM;

// The check of that limit, made by load(), Batches and save() before anything is created
// (Legate refuses a store of more dimensions with an exception that ends the process) and by
// the Python package before the runtime starts. Throws unless `shape` has at most
// kMaxLegateDims dimensions: `what` names the array in the message ("the dataset"); the site
// picks the exception: kWrite an ArgumentError (the caller's array), otherwise a LayoutError.
void check_legate_dims(std::span<const std::int64_t> shape, const std::string& what,
                       ErrorSite site = ErrorSite::kDiscover);
// The same for a layout to load (a LayoutError naming its first shard) and for an array to
// write (an ArgumentError naming `what`, "save: the array").
void check_legate_dims(const Layout& layout);
void check_legate_dims(const legate::LogicalArray& array, const std::string& what);

// The Legate library "shardload" with its tasks registered (once per process).
legate::Library library();

// The Legate type of a shardload dtype, and the dtype of a Legate type (the inverse; throws
// ArgumentError for a type shardload does not hold: strings, structs, lists, ...).
legate::Type legate_type(DType dtype);
DType dtype_of(const legate::Type& type);

}  // namespace shardload
