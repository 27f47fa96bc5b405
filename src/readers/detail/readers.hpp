// Constructors of the format readers, one per format; make_reader picks.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "shardload/formats.hpp"
#include "shardload/reader.hpp"

namespace shardload::detail {

// How many names a message lists of what a file holds (HDF5's datasets, an archive's arrays, a
// store's arrays) before it counts the rest.
inline constexpr std::size_t kListedNames = 10;

// The one rule for those lists: the names in natural order (d2 before d10), the first `shown`
// of them, then "... and K more"; "none" for none. Unbounded, a file of 100,000 datasets made
// an error of megabytes, in every traceback and log that carries it.
std::string listed_names(std::vector<std::string> names, std::size_t shown = kListedNames);

Result<std::unique_ptr<ShardReader>> make_npy_reader(const FormatOptions& options,
                                                     const ReaderContext& context);
Result<std::unique_ptr<ShardReader>> make_raw_reader(const FormatOptions& options,
                                                     const ReaderContext& context);
Result<std::unique_ptr<ShardReader>> make_zarr_reader(const FormatOptions& options,
                                                      const ReaderContext& context);

// The writers of the formats save writes, beside their readers (npy_reader.cc,
// raw_reader.cc, zarr_writer.cc).
std::shared_ptr<const ShardWriter> npy_writer();
std::shared_ptr<const ShardWriter> raw_writer();
std::shared_ptr<const ShardWriter> zarr_writer();

// numpy's .npz archives (npz_reader.cc): the descriptor, reader included.
FormatDescriptor npz_format();

// Built only with SHARDLOAD_WITH_HDF5 (src/readers/hdf5_reader.cc).
// Whether an HDF5 shard's rows lie at its data_offset as one byte range: its probe found a
// contiguous dataset stored in the array's own type (no external storage), as its reader's
// read_rows reads it without HDF5.
bool hdf5_rows_at_offset(const Shard& shard);
Result<std::unique_ptr<ShardReader>> make_hdf5_reader(const FormatOptions& options,
                                                      const ReaderContext& context);

// Parquet and Arrow IPC / Feather; built only with SHARDLOAD_WITH_ARROW
// (src/readers/arrow_reader.cc).
Result<std::unique_ptr<ShardReader>> make_arrow_reader(Format format, const FormatOptions& options,
                                                       const ReaderContext& context);

// The reader registered as options.reader (reader_registry.cc); kInvalidArgument naming
// the name when this process has none by that name.
Result<std::unique_ptr<ShardReader>> make_registered_reader(const FormatOptions& options,
                                                            const ReaderContext& context);

}  // namespace shardload::detail
