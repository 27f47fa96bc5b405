// The formats shardload reads, each one registered descriptor: its names, extensions, how
// its files and stores are recognised, what the engine may do with its shards, and its
// reader. The engine, the manifest and the front ends ask these questions here and never
// name a format: a new format is its reader, its descriptor and one line in the table
// (src/readers/formats.cc).
//
// Contract: the table is built once, on first use, and never changes or is destroyed, so a
// descriptor pointer stays valid for the process; every function here is thread-safe.
// A reader registered by name (shardload/reader_registry.hpp) has a descriptor of its own
// (its name, extensions and capabilities; Format::kCustom), made at its registration and
// found by name or extension; the table's kCustom descriptor stands for "some registered
// reader" and its factory looks the name up.
//
// A format that save can write has a ShardWriter beside its reader; save asks the
// descriptor for it and names no format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/format.hpp"
#include "shardload/io.hpp"
#include "shardload/reader.hpp"
#include "shardload/status.hpp"

namespace shardload {

class ShardSource;

// What tells that a shard is unchanged since discovery.
enum class Freshness : std::uint8_t {
  kFile,          // the shard is a regular file, its snapshot that file's
  kMetadataFile,  // the shard is a directory (a store), its snapshot its metadata file's
};

// What the engine may do with a format's shards besides asking its reader.
struct FormatCapabilities {
  // Rows lie at Shard::data_offset as one contiguous range of C-order rows when the shard
  // is neither byte-swapped nor Fortran-ordered, so the device fill may read them straight
  // into its staging buffers (and through GPUDirect Storage).
  bool contiguous_rows = false;
  // A probe is an open, an fstat and one small read: many shards are worth probing on
  // several threads.
  bool parallel_probe = false;
  Freshness freshness = Freshness::kFile;
  // A probe is cheap enough to repeat at every checked discovery from a manifest (a small
  // header or metadata file); otherwise the manifest's snapshot stands for the metadata.
  bool cheap_reprobe = false;
  // The reader reads through its ShardSource (positional reads), so its shards may be objects
  // in object storage ("s3://"): discovery refuses a remote source of a format without it.
  bool remote_reads = false;
  // A tile's pieces in different objects may be read at once, each by a reader of its own
  // (a request's wait paid once for several objects): a reader needs nothing of another
  // shard's, and reading one costs no request that every reader would repeat.
  bool remote_piece_lanes = false;
};

// What every shard of a save holds: rows of `dtype` with `trailing` shape, C order, in this
// host's byte order.
struct WriteSpec {
  DType dtype;
  std::vector<std::int64_t> trailing;
  std::size_t row_bytes = 0;  // dtype.size * product(trailing)
};

// Where a shard's rows go, as its writer's create decided; travels with the save's spec to
// the processes that write the rows.
struct ShardPlacement {
  std::int64_t data_offset = 0;  // bytes before row 0 in a file (the .npy header)
  std::int64_t chunk_rows = 1;   // rows per chunk object of a store
};

// One shard of a finished save, for the writer's metadata.
struct WrittenShard {
  std::string name;  // its file or store name in the dataset directory
  std::int64_t rows = 0;
  ShardPlacement placement;
};

// What a format that save can write says of the names it writes, so that an overwrite knows
// a saved dataset's entries. The bytes themselves are written by the engine's one writer over
// the store's sinks (engine/detail/save_files.hpp), from the format's shard layout
// (readers/detail/object_layout.hpp: its header, chunking and metadata). Stateless.
class ShardWriter {
 public:
  virtual ~ShardWriter() = default;

  // Whether a shard is a directory (a store) rather than one regular file.
  [[nodiscard]] virtual bool writes_directories() const = 0;

  // The files the format's metadata puts into the dataset directory ("shardload.json"), so that an
  // overwrite knows them as a save's.
  [[nodiscard]] virtual std::vector<std::string> metadata_names() const { return {}; }

  // For a writer of stores: the metadata file inside each store (".zarray"), and whether
  // `entry` inside a store is a chunk this writer writes for an array of `dims` dimensions
  // (0: any) and `chunks` chunks along axis 0 (negative: any count).
  [[nodiscard]] virtual std::string store_metadata_name() const { return {}; }
  [[nodiscard]] virtual bool is_chunk_entry(std::string_view /*entry*/, std::size_t /*dims*/,
                                            std::int64_t /*chunks*/) const {
    return false;
  }
};

using ReaderMaker = std::function<Result<std::unique_ptr<ShardReader>>(
    const FormatOptions& options, const ReaderContext& context)>;

struct FormatDescriptor {
  Format format = Format::kAuto;
  std::string name;                     // "hdf5": messages, parse_format, the codec's text
  std::vector<std::string> aliases;     // other names parse_format accepts ("h5")
  std::vector<std::string> extensions;  // ".h5"; the first names the default pattern
  // Whether a regular file (`size` bytes, open as `file`) starts with this format's magic
  // bytes; a few positional reads. Empty: the format has none (raw).
  std::function<bool(const File& file, std::uint64_t size)> sniff;
  // Whether a directory is itself one shard of this format (a Zarr store). Empty: never.
  std::function<bool(const std::string& directory)> is_store;
  FormatCapabilities capabilities;
  // For a format whose shards differ in where their rows lie (HDF5: a contiguous dataset's
  // rows are one byte range, a chunked one's are not): whether this shard's rows lie at
  // Shard::data_offset as capabilities.contiguous_rows says of every shard of a format that
  // sets it. The device fill then reads them as it reads a .npy's. Empty: no shard's do,
  // unless the capability says all do.
  std::function<bool(const Shard& shard)> contiguous_shard;
  // The reader, before make_reader's wrapper. kInvalidArgument when the options do not fit.
  ReaderMaker make_reader;
  // What save writes this format with; null: save cannot write it.
  std::shared_ptr<const ShardWriter> writer;
  // A reader registered by name (Format::kCustom): FormatOptions::reader carries `name` to
  // the codec and to wherever the data is read, and its probe is a user's, which discovery
  // runs on one thread after opening each file itself.
  bool registered = false;
};

// The descriptor of a format (kCustom included); nullptr for kAuto and unknown values.
const FormatDescriptor* find_format(Format f);

// The descriptor of `format`, or for kCustom that of the reader registered as `reader`
// (nullptr where none is): what the engine asks a layout's capabilities of.
const FormatDescriptor* find_format(Format format, std::string_view reader);

// The descriptor of the reader registered as `name`, or of the one registered for the
// path's extension (a trailing '/' ignored); nullptr where none is. Valid for the process.
const FormatDescriptor* find_registered_format(std::string_view name);
const FormatDescriptor* registered_format_for_path(std::string_view path);

// The descriptor of `options`' format: find_format(options.format, options.reader).
const FormatDescriptor* find_format(const FormatOptions& options);

// Selects `d` in `options`: its format and, for a registered reader, its name; the other
// options stay as they are.
void select_format(const FormatDescriptor& d, FormatOptions* options);

// Every descriptor in table order (kCustom last).
const std::vector<FormatDescriptor>& formats();

// The formats that have a writer, in table order: "npy, raw or zarr", for messages.
std::string writable_format_names_text();

// "npy", ...; "auto" for kAuto, "unknown" for a value with no descriptor.
const char* format_name(Format f);

// A format's name or alias, or "auto". kInvalidArgument listing the names otherwise.
Result<Format> parse_format(std::string_view name);

// "npy, raw, hdf5, parquet, arrow or zarr": the built-in formats, for messages.
std::string format_names_text();

// The built-in format a path's extension names (a trailing '/' ignored), or kAuto.
Format format_from_extension(std::string_view path);

// The default file pattern of a directory source in a built-in format ("shard_{:04d}.h5");
// the .npy one for kAuto.
std::string default_pattern(Format f);

// "shard_{:04d}" + the descriptor's first extension; the .npy one for a descriptor without
// extensions.
std::string default_pattern(const FormatDescriptor& d);

// The default file pattern of a directory source read with `options`: a built-in format's
// as above, a registered reader's as registered_default_pattern (kInvalidArgument for a name
// not registered or registered without extensions).
Result<std::string> default_pattern(const FormatOptions& options);

// The format of a directory that is itself a store, or kAuto.
Format store_format(const std::string& directory);

// What a path holds, from its content alone: a store (store_format), or a regular file
// whose first bytes some format's sniff recognises; kAuto otherwise. Opens the file as a key
// of `source` (ShardSource::files() without one: never blocks on a FIFO or device, those are
// no regular files), so that discovery through an injected backend sniffs through it too.
// A store is recognised by its directory's metadata names, which no IoBackend lists.
Format sniff_format(const std::string& path);
Format sniff_format(const std::string& path, ShardSource& source);

}  // namespace shardload
