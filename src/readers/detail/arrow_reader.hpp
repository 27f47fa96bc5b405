// The Parquet and Arrow IPC reader's class, shared by its three files: arrow_reader.cc (what
// both formats do, step by step), parquet_reader.cc (what only Parquet needs) and
// ipc_reader.cc (what only IPC needs, remote objects above all). Internal to the readers
// layer; built only with SHARDLOAD_WITH_ARROW.
#pragma once

#include <arrow/api.h>
#include <arrow/io/interfaces.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "readers/detail/arrow_columns.hpp"
#include "readers/detail/arrow_io.hpp"
#include "shardload/formats.hpp"
#include "shardload/reader.hpp"

namespace shardload::detail {

// ---- Shard::extra: the resolved column names and the rows of each group -----
// Little-endian: u32 count, then per column u32 length + bytes; u32 count,
// then per row group (record batch) i64 rows.
struct ArrowExtra {
  std::vector<std::string> columns;
  std::vector<std::int64_t> group_rows;
};

// The decoded bytes of one Parquet batch (about; at least 1024 rows): small
// enough to stay in a core's cache between decode and interleave.
constexpr std::uint64_t kBatchBytes = std::uint64_t{1} << 20;
// What a remote IPC read holds fetched and not yet interleaved, at most (and the batches in
// flight): the window of fetch_ahead.
constexpr std::uint64_t kRemoteIpcWindowBytes = std::uint64_t{64} << 20;
// An object's last bytes read to find its footer in (Arrow's default for Parquet): most
// footers are within them, a larger one costs a second request.
constexpr std::size_t kFooterReadBytes = std::size_t{64} << 10;
// The destination bytes one interleave block covers (one row at least).
constexpr std::size_t kBlockBytes = std::size_t{32} << 10;

// ---- one opened file ---------------------------------------------------------
struct OpenFile {
  std::shared_ptr<arrow::Schema> schema;
  std::vector<std::int64_t> group_rows;
  std::unique_ptr<parquet::arrow::FileReader> parquet;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> ipc;
  std::shared_ptr<arrow::io::RandomAccessFile> file;  // IPC: what `ipc` reads, to open again
  std::shared_ptr<IoRandomAccessFile> remote;         // the same, for an object
  std::shared_ptr<const IpcTail> tail;                // an IPC object's
};

class ArrowReader final : public ShardReader {
 public:
  ArrowReader(Format format, const FormatOptions& options, const ReaderContext& ctx)
      : format_(format), options_(options), ctx_(ctx) {}

  Result<ShardProbe> probe(const std::string& path) override;

  Status read_rows(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override;

 private:
  const char* kind() const { return format_ == Format::kParquet ? "Parquet" : "Arrow IPC"; }

  // Opens the file's metadata. `projection`: IPC fields to decode (probe only). `known`: the
  // discovery snapshot when reading, so that an object is opened without a HEAD (the reads'
  // caller compares the object with that snapshot after them). `opened`: the object as the
  // probe opened it, with `known` its snapshot, read from instead of a new open (its first
  // bytes, which the open fetched, cost no other request).
  Result<OpenFile> open(const std::string& path, bool for_probe, const std::vector<int>& projection,
                        const FileInfo* known = nullptr, File* opened = nullptr);
  // open()'s Parquet and IPC halves (parquet_reader.cc, ipc_reader.cc), after the key is open:
  // `remote` the key read by ranges (an object, a store's key; null for a kernel's
  // descriptor), `checked` the kernel's descriptor. `known`: the snapshot its footer is kept
  // under (remote_footers), or null where none is kept.
  Result<OpenFile> open_parquet(const std::string& path, bool for_probe, const FileInfo* known,
                                std::shared_ptr<IoRandomAccessFile> remote, File& checked);
  Result<OpenFile> open_ipc_file(const std::string& path, bool for_probe,
                                 const std::vector<int>& projection, const FileInfo* known,
                                 std::shared_ptr<IoRandomAccessFile> remote, File& checked);

  // An IPC object's footer, read by the object's last kFooterReadBytes (a second request only
  // for a larger footer), and the blocks of its record batches.
  static Result<std::shared_ptr<IpcTail>> read_ipc_tail(const std::string& path,
                                                        IoRandomAccessFile& file);

  // An IPC reader of `projection` over `file`: also the probe's second reader, of the one
  // column it counts rows by, over the file its first reader opened (so that the bytes the
  // probe's open fetched serve both, and the footer costs no second request).
  Result<OpenFile> open_ipc(const std::string& path,
                            std::shared_ptr<arrow::io::RandomAccessFile> file,
                            const std::vector<int>& projection);

  // The rows of each record batch of a remote IPC object, from the batches' metadata alone
  // (no body is read): neighbouring metadata (within kMetadataGap of each other, a file of
  // small batches) comes in one request, the requests `chunks_in_flight` at once.
  Result<std::vector<std::int64_t>> remote_batch_rows(const std::string& path, const OpenFile& f);

  // A group or batch that decoded to other rows than discovery found: the file changed.
  static Status rows_changed(const std::string& where, std::int64_t found, std::int64_t expected);

  // PreBufferMetadata of `batches` (empty: all), its refusal an error naming `path`.
  static Status prebuffer_ipc_metadata(const std::string& path,
                                       arrow::ipc::RecordBatchFileReader& reader,
                                       const std::vector<int>& batches);

  // The field index and value shape of each selected column, or why one
  // cannot be used. The default selection is every numeric scalar column in
  // schema order; a file without any gives its numeric array columns instead
  // (a file of embeddings alone).
  Result<std::vector<int>> select(const std::string& path, const arrow::Schema& schema,
                                  std::vector<std::string>* names,
                                  std::vector<ColumnShape>* shapes);

  // The Parquet leaf columns under the selected fields `idx` (a list column's values), each
  // with the index in `idx` of its field.
  static std::vector<std::pair<int, std::size_t>> parquet_leaves(const OpenFile& f,
                                                                 const std::vector<int>& idx);

  // Each row group's rows against the values its selected column chunks hold. Arrow reads as
  // many rows as a row group says, whatever its chunks hold: one that says fewer would lose
  // the rest without a word, one that says more would read short. A column that is not
  // repeated holds one value (or null) per row, a list column at least one per row.
  static Status check_row_groups(const std::string& path, const OpenFile& f,
                                 const std::vector<int>& idx,
                                 const std::vector<std::string>& names);

  Result<ShardProbe> probe_impl(const std::string& path);

  Status read_impl(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst);

  DecodeUnit decode_unit(const Shard& s, std::int64_t row) override;

  Status read_groups(const ReadSpec& l, const Shard& s, const ArrowExtra& e, std::int64_t lo,
                     std::int64_t hi, std::byte* dst);

  // A remote IPC object's batches overlapping rows [lo, hi), fetched `chunks_in_flight` units
  // at once by helper threads while this thread interleaves them in order, so that a request's
  // latency is not paid once per batch. Where the selected columns are most of the batches'
  // bytes (their fixed widths against the blocks the footer lists), a unit is a run of
  // neighbouring batches fetched whole, metadata and bodies, by one request and decoded from
  // memory; otherwise it is one batch, its metadata asked for beforehand with the other
  // needed batches' and then its selected columns' buffers (Arrow coalesces neighbouring
  // ranges), so that unselected columns never travel. The helpers share the one reader: each
  // ReadRecordBatch builds its own read state (Arrow's path for batches read concurrently, as
  // its own readahead does).
  Status read_ipc_remote(const ReadSpec& l, const Shard& s, const ArrowExtra& e, std::int64_t lo,
                         std::int64_t hi, const std::vector<std::string>& names,
                         const std::vector<ColumnShape>& shapes, OpenFile& f, std::byte* dst);

  // Rows [ra, rb) of one decoded batch whose row 0 is file row `first`, into
  // the destination (file row `lo` at dst), columns interleaved. Row blocks of
  // about kBlockBytes: each block's destination stays in cache while every
  // column writes its part of it, instead of each column sweeping the tile.
  Status interleave(const ReadSpec& l, const Shard& s, const std::string& where,
                    const arrow::RecordBatch& batch, const std::vector<std::string>& names,
                    const std::vector<ColumnShape>& shapes, std::int64_t ra, std::int64_t rb,
                    std::int64_t first, std::int64_t lo, std::byte* dst);

  Format format_;
  FormatOptions options_;
  ReaderContext ctx_;
  // The keys open() read by ranges during the current probe or read, detached when it returns.
  std::vector<std::shared_ptr<IoRandomAccessFile>> keyed_;
  // Detaches keyed_ when the probe or read that made it returns.
  struct DetachKeyed {
    explicit DetachKeyed(std::vector<std::shared_ptr<IoRandomAccessFile>>& f) : files(f) {}
    std::vector<std::shared_ptr<IoRandomAccessFile>>& files;
    DetachKeyed(const DetachKeyed&) = delete;
    DetachKeyed& operator=(const DetachKeyed&) = delete;
    ~DetachKeyed() {
      for (const auto& f : files) f->detach();
      files.clear();
    }
  };
};

}  // namespace shardload::detail
