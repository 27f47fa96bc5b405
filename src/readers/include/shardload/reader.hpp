// The contract every format reader fulfils.
//
//   probe(path)                  -> rows, dtype, trailing shape, and what the
//                                   reader needs later (data offset, byte
//                                   order, memory order, format-specific
//                                   bytes in `extra`), plus the file snapshot;
//   read_rows(shard, lo, hi, dst) -> exactly (hi - lo) rows, native-endian,
//                                   C order, reading only what those rows need;
//                                   lo and hi are rows of the file (a view's
//                                   callers add Shard::first_row).
//
// A reader never throws and never reads a whole file to serve a slice. One
// reader object serves one thread; it may keep scratch buffers between calls.
//
// Contract: make_reader returns an owned reader; a reader is used by one thread at a time
// and shares ReaderContext::source (and borrows what that source was made over, which must
// outlive it). Shards and ReadSpecs are values the
// caller keeps alive for the call. Errors are Status naming the file (its path also as data);
// readers never throw (make_reader's wrapper turns a stray exception into a Status).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardload/format.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/shard_source.hpp"
#include "shardload/status.hpp"

namespace shardload {

// A file other than the shard's own that its data is read from (an HDF5
// dataset's external storage), with its snapshot from discovery.
struct LinkedFile {
  std::string path;
  FileInfo snapshot;
  friend bool operator==(const LinkedFile&, const LinkedFile&) = default;
};

// A directory a shard's reads resolve through (a Zarr store's own, its array's in a group),
// known by its identity as the probe found it: a read that finds another directory at that
// path (one renamed into place, a hard-linked copy made with `cp -al`, whose files keep their
// inodes and times) is kChanged. The directory is Shard::path + `below` ("" the shard's own
// path, "/a/b" one under it), so that it travels with the path. `device` is this process's
// st_dev and does not travel (another machine numbers its mounts otherwise): 0, not
// compared; `inode` travels as a snapshot's does.
struct DirIdentity {
  std::string below;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  friend bool operator==(const DirIdentity&, const DirIdentity&) = default;
};

struct Shard {
  std::string path;
  // The rows this shard contributes to its layout: all of the file's, or a
  // view of them (slice_rows) that starts at file row first_row.
  std::int64_t rows = 0;
  std::int64_t first_row = 0;
  // The file's own row count, as probe found it, when the shard is a view;
  // -1 when it is the whole file (then rows). Readers check a file against
  // this, never against the view.
  std::int64_t file_rows = -1;
  std::uint64_t data_offset = 0;   // npy / raw: bytes before the first row
  bool byte_swap = false;          // stored in the other byte order than this host's
  bool fortran_order = false;      // npy: stored column-major
  FileInfo snapshot;               // the file as discovery saw it
  std::string extra;               // format-specific, opaque outside its reader
  std::vector<LinkedFile> linked;  // other files the data comes from
  std::vector<DirIdentity> dirs;   // local directories the reads resolve through
  // The decode unit as a regular grid of file rows: the units are rows [j * decode_rows,
  // (j + 1) * decode_rows) of the file (the last one cut at its end), the least a reader
  // decodes to serve any row in them (an HDF5 or Zarr chunk's extent along axis 0, a
  // Parquet row group or Arrow record batch when all but the file's last have the same
  // rows). 0 when rows are read directly, or when the units are irregular: then
  // ShardReader::decode_unit knows them from `extra`. The plan and the device fill align
  // their cuts to this grid; it counts rows of the file, so a view keeps it unchanged.
  std::int64_t decode_rows = 0;
  // A remote Zarr store's: the server's clock (its Date, seconds since the epoch) when discovery
  // read the store's metadata (FileInfo::answered_s). A chunk or shard object whose
  // Last-Modified is later was written since discovery, and is kChanged. 0: not known (a local
  // store, a server that sends no Date, a layout from a trusted manifest), nothing compared.
  // Kept by slice_rows and the layout's encoding; not written into a manifest.
  std::int64_t server_snapshot_s = 0;

  [[nodiscard]] std::int64_t stored_rows() const { return file_rows < 0 ? rows : file_rows; }
  [[nodiscard]] bool is_view() const { return file_rows >= 0; }
};

struct ShardProbe {
  Shard shard;
  DType dtype;
  std::vector<std::int64_t> trailing_shape;
  // Rows along axis 0 of the format's natural decode unit, the least a reader decodes to
  // serve any row in it: an HDF5 chunk, a Parquet row group or Arrow record batch (the
  // largest in the file), a Zarr chunk (the inner chunk when sharded). 0 when rows are read
  // directly (npy, raw, contiguous HDF5).
  std::int64_t decode_rows = 0;
  // What every shard must share besides dtype and trailing shape that only the format can
  // tell, as `shared_what` (words, "numeric columns") and its value here ("(a, b)"): Parquet's
  // and Arrow's default selection of columns, which each file makes itself. Discovery compares
  // it with the first shard's, so that probes on several threads need not see each other.
  std::string shared_what;
  std::string shared;
};

// The file rows [lo, hi) of one decode unit; {-1, -1} when rows are read directly.
struct DecodeUnit {
  std::int64_t lo = -1;
  std::int64_t hi = -1;
  [[nodiscard]] bool none() const { return lo < 0; }
};

// The unit of `shard` holding file row `row` on its regular grid (Shard::decode_rows), cut
// at the file's end; none when the shard has no grid.
DecodeUnit grid_unit(const Shard& shard, std::int64_t row);

// What a reader needs of the dataset besides the shard itself: the element
// type, the shape of one row and its size. The engine's Layout is one.
struct ReadSpec {
  FormatOptions options;  // as given to make_reader
  DType dtype;
  std::vector<std::int64_t> trailing_shape;  // shape[1:], identical in every shard
  std::uint64_t row_bytes = 0;               // itemsize * product(trailing_shape)
  // When discovery began (CLOCK_REALTIME, ns since the epoch), for the files that discovery
  // does not snapshot one by one: a local Zarr chunk or shard file whose change time is later,
  // or a missing one whose directory changed later, is kChanged (the chunk was rewritten or
  // deleted since discovery). 0: not known (a layout rebuilt from its encoding, made by hand),
  // nothing compared. Set by discover(); kept by slice_rows; not part of the encoding.
  std::int64_t discovered_ns = 0;

  // Elements in one row (product of the trailing shape; 1 for 1-D data).
  [[nodiscard]] std::uint64_t row_elements() const { return row_bytes / dtype.size; }
};

class ShardReader {
 public:
  virtual ~ShardReader() = default;
  virtual Result<ShardProbe> probe(const std::string& path) = 0;
  // probe(path) of the discovery's shard that is number `position` (from 0) among its
  // shards in the same directory, for a format whose metadata beside the shards lists them
  // by position (raw's sidecar "rows"): probes on several threads, each reader given some
  // of the shards, then need no order. By default probe(path).
  virtual Result<ShardProbe> probe_at(const std::string& path, std::size_t /*position*/) {
    return probe(path);
  }
  // A reader for another thread of the same discovery that shares what this one keeps for
  // every shard alike (raw's sidecars: fetched once, not once per thread); nullptr (the
  // default): the caller makes a reader of its own.
  virtual std::unique_ptr<ShardReader> sibling() { return nullptr; }
  // dst holds (hi - lo) * spec.row_bytes bytes. Errors name the file.
  virtual Status read_rows(const ReadSpec& spec, const Shard& shard, std::int64_t lo,
                           std::int64_t hi, std::byte* dst) = 0;
  // The decode unit holding file row `row` (0 <= row < stored rows), from what the shard
  // carries (no I/O): grid_unit by default; readers with irregular units (Parquet row
  // groups, Arrow batches) answer from Shard::extra.
  virtual DecodeUnit decode_unit(const Shard& shard, std::int64_t row) {
    return grid_unit(shard, row);
  }
  // The files besides the shard's own and Shard::linked that a read of it reads, as the shard
  // says now (an HDF5 virtual dataset's source files, which HDF5 opens itself): for a check
  // that must know every file a load reads (numpy.load's out= mapping). None by default.
  virtual Result<std::vector<std::string>> other_files_read(const Shard& /*shard*/) {
    return std::vector<std::string>{};
  }
};

// Counts kept by the readers of a ReaderContext, from any thread. `decodes` is the decode
// units a reader decoded itself: HDF5 chunks inflated (or read by H5Dread box by box on
// the direct path), Zarr chunks decoded, Parquet row groups and Arrow record batches read.
// Tests and benchmarks read it to check that each unit is decoded once; `unit_cache_hits`
// counts reads served from the unit cache instead.
struct ReaderStats {
  std::atomic<std::uint64_t> decodes{0};
  std::atomic<std::uint64_t> unit_cache_hits{0};
};

// The default bound of the unit cache, per reader (see ReaderContext::unit_cache_bytes).
inline constexpr std::size_t kDefaultUnitCacheBytes = std::size_t{128} << 20;

struct ReaderContext {
  // What the readers open their shards from: a shard's path is a key of it (ShardSource), the
  // one way a reader reads. nullptr: ShardSource::files(). A caller that injects a backend (the
  // engine's options, the tests: one that fails or counts its calls) gives
  // ShardSource::over(io).
  std::shared_ptr<ShardSource> source;
  // Scratch for re-ordering or decoding; with unit_cache_bytes, the most
  // extra memory a reader keeps, whatever the tile size.
  std::size_t scratch_bytes = std::size_t{4} << 20;
  // Compare each opened file with the discovery snapshot, and again after
  // the last read from it.
  bool check_snapshot = true;
  // With check_snapshot, the npy and raw readers compare the file again after each read,
  // as they cannot tell which read is the last. False leaves that check to the caller, who
  // must compare every file it read with its snapshot once its reads are done (the open is
  // still checked): the training feed's gather reads thousands of single rows per call, and
  // an fstat after each cost about as much as the row's pread.
  bool check_each_read = true;
  // The unit cache: a read that covers only part of a decode unit decodes the whole unit
  // once into this reader's cache and serves that part, and the next reads of the same
  // unit, from it; reads of whole units go straight to the destination. At most one unit
  // is kept, so a reader holds at most this many bytes more (allocated on first use). A
  // unit larger than this is read as before, part by part, each part decoding it again;
  // 0 turns the cache off.
  std::size_t unit_cache_bytes = kDefaultUnitCacheBytes;
  // Where the readers count their work; nullptr: not counted.
  ReaderStats* stats = nullptr;
};

// A reader for one resolved format (not kAuto). kInvalidArgument when the
// options do not fit the format; kUnsupported-format errors name the format.
Result<std::unique_ptr<ShardReader>> make_reader(Format format, const FormatOptions& options,
                                                 const ReaderContext& context = {});

// snapshot_difference (the fields in which two snapshots differ): shardload/location.hpp.

// kChanged "PATH: changed since discovery: ..." when the open file differs
// from the snapshot. Called once a file is opened, before reading it.
Status check_snapshot(const File& file, const FileInfo& snapshot);
inline Status check_snapshot(const File& file, const Shard& shard) {
  return check_snapshot(file, shard.snapshot);
}

// Opens the shard's file and, when `check`, compares it with the discovery snapshot as
// check_snapshot does (the same kChanged error), from the stat the open itself made
// (ShardSource::open_stat): for a file read in one piece, one system call in five. An object in
// object storage is opened without a request for its state (ShardSource::open_known) and is
// compared only by the check_unchanged that every caller makes after its reads: that check
// sees any change since discovery, and a HEAD at the open would only repeat it.
Result<File> open_checked(ShardSource& source, const Shard& shard, bool check);

// Called after the last read from an open file that check_snapshot passed:
// kChanged "PATH: changed while reading: ..." when the file now differs from
// the snapshot, else `read` (the reads' own status). The change wins over a
// failed read: a read that came up short because the file shrank under it
// is reported as the change it was. A write during the reads moves ctime
// whatever else it restores, so equal snapshots mean the bytes read were
// the snapshot's; a rewrite within the file system's timestamp granularity
// of discovery, keeping size and inode, is the one change no snapshot sees.
Status check_unchanged(const File& file, const FileInfo& snapshot, Status read);

// The file a reader read last, kept open for its next read of the same shard: a reader reading
// many pieces of one file (a gather of scattered rows, a tile met in bounded chunks) opens it
// once instead of once per piece (open, its stat and close are most of a small read's system
// calls). What stays the same: the open is open_checked's (the snapshot compared at the first
// open) and every read is followed by check_unchanged, so a file written while it is read is
// still an error; a file replaced by a rename after the open keeps being read as the snapshot's
// file it was. Objects in object storage are not kept (each piece opens its own request).
// One thread at a time, as the reader that owns it.
class OpenShardFile {
 public:
  // The open file of `shard`, opened (and checked when `check`) unless it is the one kept.
  Result<const File*> get(ShardSource& source, const Shard& shard, bool check);
  // Closes the kept file: after a failed read, so that the next read opens afresh.
  void reset() { file_ = File(); }

 private:
  File file_;
  std::string path_;
  FileInfo snapshot_;
};

}  // namespace shardload
