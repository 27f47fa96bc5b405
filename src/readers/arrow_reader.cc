// The Parquet and Arrow IPC (Feather v2) reader.
//
// One column gives a 1-D dataset, several give (rows, columns) rows with the
// columns interleaved in the order named; array columns (fixed-size lists,
// fixed_shape_tensor) add their value shape after that. A read touches only the row groups
// (Parquet) or record batches (IPC) that overlap the requested rows, and only
// the selected columns of them; their row counts come from the file metadata
// at probe and travel in Shard::extra.
//
// Arrow C++ reports errors through Status / Result, but Parquet's lower layers
// and the standard library can still throw: every entry point catches at the
// boundary, because the core never throws (it runs inside Legate tasks).
// Decoding stays on the calling thread (use_threads = false): the caller owns
// concurrency. Parquet pre-buffers a row group's column chunks, which issues
// their reads through Arrow's process-wide I/O pool: measured side by side it
// took a 16-column load from 1.25-1.5x to 1.1-1.26x pyarrow's to_table time,
// which reads ahead the same way.
//
// The reader is one class for both formats (detail/arrow_reader.hpp), its steps here: probing
// and reading a group or batch share their checks and their order, and differ only within
// each step. What only one format needs is in parquet_reader.cc and ipc_reader.cc; copying
// decoded columns into rows in arrow_columns.cc; reading objects in object storage in
// arrow_io.cc.
#include <arrow/api.h>
#include <arrow/io/caching.h>
#include <arrow/io/file.h>
#include <arrow/io/interfaces.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "readers/detail/arrow_columns.hpp"
#include "readers/detail/arrow_io.hpp"
#include "readers/detail/arrow_reader.hpp"
#include "readers/detail/ipc_file.hpp"
#include "readers/detail/readers.hpp"
#include "shardload/formats.hpp"
#include "shardload/location.hpp"
#include "storage/detail/fetch_ahead.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail {

namespace {

void put_u32(std::string* s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_i64(std::string* s, std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
}

std::string encode_extra(const ArrowExtra& e) {
  std::string s;
  put_u32(&s, static_cast<std::uint32_t>(e.columns.size()));
  for (const auto& c : e.columns) {
    put_u32(&s, static_cast<std::uint32_t>(c.size()));
    s += c;
  }
  put_u32(&s, static_cast<std::uint32_t>(e.group_rows.size()));
  for (const auto r : e.group_rows) put_i64(&s, r);
  return s;
}

Result<ArrowExtra> decode_extra(const Shard& shard) {
  const std::string& s = shard.extra;
  std::size_t pos = 0;
  auto take = [&](std::size_t n, std::uint64_t* v) {
    if (s.size() - pos < n) return false;
    *v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      *v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
    }
    pos += n;
    return true;
  };
  // The metadata comes from the layout (a manifest's included), and is checked where the
  // shard is read: an error of reading the shard, as a manifest's other lies are.
  auto bad = [&] {
    return Status(ErrorCode::kFormat,
                  shard.path + ": the layout's per-shard Arrow metadata is malformed");
  };
  ArrowExtra e;
  std::uint64_t n = 0;
  if (!take(4, &n)) return bad();
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t len = 0;
    if (!take(4, &len) || s.size() - pos < len) return bad();
    e.columns.push_back(s.substr(pos, len));
    pos += len;
  }
  if (!take(4, &n)) return bad();
  std::int64_t total = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t r = 0;
    if (!take(8, &r) || static_cast<std::int64_t>(r) < 0 ||
        static_cast<std::int64_t>(r) > std::numeric_limits<std::int64_t>::max() - total) {
      return bad();
    }
    e.group_rows.push_back(static_cast<std::int64_t>(r));
    total += static_cast<std::int64_t>(r);
  }
  if (pos != s.size() || e.columns.empty()) return bad();
  if (total != shard.stored_rows()) {
    return Status(ErrorCode::kChanged, shard.path + ": rows differ from the layout's: its " +
                                           std::to_string(e.group_rows.size()) +
                                           " row groups hold " + std::to_string(total) +
                                           " rows, the layout says " +
                                           std::to_string(shard.stored_rows()));
  }
  return e;
}

}  // namespace

Result<ShardProbe> ArrowReader::probe(const std::string& path) {
  const DetachKeyed detach{keyed_};
  try {
    return probe_impl(path);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kFormat, path + ": " + e.what());
  } catch (...) {
    return Status(ErrorCode::kFormat, path + ": unknown exception from Arrow");
  }
}

Status ArrowReader::read_rows(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                              std::byte* dst) {
  const DetachKeyed detach{keyed_};
  try {
    return read_impl(l, s, lo, hi, dst);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kIo, s.path + ": " + e.what());
  } catch (...) {
    return Status(ErrorCode::kIo, s.path + ": unknown exception from Arrow");
  }
}

Result<OpenFile> ArrowReader::open(const std::string& path, bool for_probe,
                                   const std::vector<int>& projection, const FileInfo* known,
                                   File* opened) {
  // Arrow opens by name with a plain open, which waits forever on a FIFO;
  // it gets a descriptor that was opened without blocking and found to be
  // a regular file instead (or, for the memory map, which only opens by
  // name, that descriptor's /proc name). A key whose descriptor is not the kernel's (an object
  // in object storage, a store's key, a file through an injected backend) is read by ranges
  // through its File instead (IoRandomAccessFile); the caller's snapshot checks around the
  // reads hold for it too.
  File file;
  FileInfo info;
  if (known != nullptr && opened != nullptr) {
    info = *known;
    file = std::move(*opened);
  } else if (known != nullptr) {
    // Opened with the snapshot the caller compares it with after the reads: an object without
    // asking its state, a local file by one open, a store's key held to its generation.
    info = *known;
    SHARDLOAD_ASSIGN_OR_RETURN(file, ctx_.source->open_known(path, *known));
  } else {
    SHARDLOAD_ASSIGN_OR_RETURN(file, ctx_.source->open_stat(path, &info));
  }
  std::shared_ptr<IoRandomAccessFile> keyed;
  if (!ctx_.source->kernel_descriptor(file)) {
    keyed = std::make_shared<IoRandomAccessFile>(std::move(file),
                                                 static_cast<std::int64_t>(info.size), ctx_.source);
    keyed_.push_back(keyed);
  }
  // Footers are kept per snapshot only where reading one again costs requests; a store's key
  // is named by its store (two stores may hold a key of one name and snapshot).
  const FileInfo* cached = ctx_.source->round_trips(path) ? known : nullptr;
  if (format_ == Format::kParquet) {
    return open_parquet(path, for_probe, cached, std::move(keyed), file);
  }
  return open_ipc_file(path, for_probe, projection, cached, std::move(keyed), file);
}

Status ArrowReader::rows_changed(const std::string& where, std::int64_t found,
                                 std::int64_t expected) {
  return Status(ErrorCode::kChanged, where + ": " + std::to_string(found) + " rows, expected " +
                                         std::to_string(expected));
}

Result<std::vector<int>> ArrowReader::select(const std::string& path, const arrow::Schema& schema,
                                             std::vector<std::string>* names,
                                             std::vector<ColumnShape>* shapes) {
  if (names->empty()) {
    for (const auto& field : schema.fields()) {
      if (is_plain_number(*field->type())) names->push_back(field->name());
    }
    if (names->empty()) {
      for (const auto& field : schema.fields()) {
        auto c = column_shape(field->type());
        if (c && !c->dims.empty()) names->push_back(field->name());
      }
    }
    if (names->empty()) {
      return Status(ErrorCode::kFormat, path + ": columns: no numeric column to read (columns: " +
                                            join_fields(schema) + ")");
    }
  }
  std::vector<int> idx;
  shapes->clear();
  for (const auto& n : *names) {
    const auto all = schema.GetAllFieldIndices(n);
    if (all.empty()) {
      return Status(ErrorCode::kFormat,
                    path + ": column '" + n + "' not found (columns: " + join_fields(schema) + ")");
    }
    if (all.size() > 1) {
      return Status(ErrorCode::kFormat, path + ": column '" + n + "' appears " +
                                            std::to_string(all.size()) + " times in the schema");
    }
    const auto& type = schema.field(all[0])->type();
    auto c = column_shape(type);
    if (!c) {
      std::string hint = "; name only numeric columns in " + option_mention("columns");
      if (format_ == Format::kParquet &&
          (type->id() == arrow::Type::LIST || type->id() == arrow::Type::LARGE_LIST)) {
        // Parquet itself has only variable-size lists; the fixed size lives in the
        // Arrow schema that Arrow writers store beside it (store_schema).
        hint +=
            " (a fixed-size list written without the stored Arrow schema reads back as a "
            "variable-size one)";
      }
      return Status(ErrorCode::kFormat,
                    path + ": column '" + n + "': " + c.status().message() + hint);
    }
    shapes->push_back(*c);
    idx.push_back(all[0]);
  }
  return idx;
}

Result<ShardProbe> ArrowReader::probe_impl(const std::string& path) {
  ShardProbe p;
  p.shard.path = path;
  // An object's open fetches its last bytes, where the footer is read from next: a Parquet
  // footer within Arrow's default footer read (64 KiB), an IPC footer within read_ipc_tail's
  // (the same), one request per probe.
  SHARDLOAD_ASSIGN_OR_RETURN(File opened,
                             ctx_.source->open_tail(path, &p.shard.snapshot, kFooterReadBytes));
  if (!p.shard.snapshot.regular) return Status(ErrorCode::kFormat, path + ": not a regular file");
  // A key read by ranges is read through this open (an object's: one request fewer); a
  // kernel's descriptor is opened again for Arrow's own file (see open).
  const bool keyed = !ctx_.source->kernel_descriptor(opened);
  const FileInfo* known = keyed ? &p.shard.snapshot : nullptr;
  SHARDLOAD_ASSIGN_OR_RETURN(OpenFile f, open(path, true, {}, known, keyed ? &opened : nullptr));
  std::vector<std::string> names = options_.columns;
  std::vector<ColumnShape> shapes;
  SHARDLOAD_ASSIGN_OR_RETURN(std::vector<int> idx, select(path, *f.schema, &names, &shapes));

  // One dtype for all columns, or the cast the options ask for; one value
  // shape for all columns (scalars, or arrays of one shape).
  for (std::size_t i = 1; i < idx.size(); ++i) {
    if (shapes[i].dims != shapes[0].dims) {
      auto what = [](const ColumnShape& c) {
        return c.dims.empty() ? std::string("a scalar column")
                              : "an array column of shape " + shape_string(c.dims);
      };
      const bool mixed = shapes[i].dims.empty() != shapes[0].dims.empty();
      return Status(ErrorCode::kFormat, path + ": columns: '" + names[i] + "' is " +
                                            what(shapes[i]) + " but '" + names[0] + "' is " +
                                            what(shapes[0]) +
                                            (mixed ? "; array and scalar columns cannot be mixed"
                                                   : "; array columns must share a shape") +
                                            " (pass " + option_mention("columns") + " to choose)");
    }
    if (shapes[i].dtype != shapes[0].dtype && !options_.dtype) {
      return Status(ErrorCode::kFormat, path + ": columns: '" + names[i] + "' is " +
                                            shapes[i].dtype.name() + " but '" + names[0] + "' is " +
                                            shapes[0].dtype.name() +
                                            "; columns must share a dtype (pass " +
                                            option_mention("astype") + " to cast)");
    }
  }
  if (f.parquet) SHARDLOAD_RETURN_IF_ERROR(check_row_groups(path, f, idx, names));
  p.dtype = options_.dtype ? *options_.dtype : shapes[0].dtype;
  if (options_.fill_value) {
    // Checked here so that discovery, not the load, reports it.
    SHARDLOAD_RETURN_IF_ERROR(check_fill(*options_.fill_value, p.dtype));
  }

  // With the default selection each file picks its own numeric columns: discovery holds
  // them to the first shard's, so that a renamed column cannot slip in.
  if (options_.columns.empty()) {
    p.shared_what = "numeric columns";
    p.shared = "(";
    for (std::size_t i = 0; i < names.size(); ++i) p.shared += (i ? ", " : "") + names[i];
    p.shared += ")";
  }

  ArrowExtra e;
  e.columns = names;
  if (f.tail) {
    SHARDLOAD_ASSIGN_OR_RETURN(e.group_rows, remote_batch_rows(path, f));
  } else if (f.ipc) {
    // Only the first selected column is decoded to learn each batch's rows (the mapping
    // makes that no read of its body).
    SHARDLOAD_ASSIGN_OR_RETURN(f, open_ipc(path, f.file, {idx[0]}));
    for (int b = 0; b < f.ipc->num_record_batches(); ++b) {
      const std::string where = path + ": record batch " + std::to_string(b);
      auto batch = f.ipc->ReadRecordBatch(b);
      if (!batch.ok()) {
        if (read_failure(batch.status()) != nullptr) {
          return arrow_error(where, batch.status(), ErrorCode::kIo);
        }
        return Status(ErrorCode::kFormat, where + ": " + batch.status().ToString());
      }
      SHARDLOAD_RETURN_IF_ERROR(check_batch(where, **batch));
      e.group_rows.push_back((*batch)->num_rows());
    }
  } else {
    e.group_rows = f.group_rows;
  }
  std::int64_t rows = 0;
  for (const auto r : e.group_rows) {
    rows += r;
    p.decode_rows = std::max(p.decode_rows, r);
  }
  // A regular grid (every group but the last of one size, what writers with a fixed row
  // group or batch size produce) travels as Shard::decode_rows for the plan and the
  // device fill; irregular groups are found from `extra` (decode_unit).
  bool regular = !e.group_rows.empty() && e.group_rows[0] > 0;
  for (std::size_t g = 0; regular && g + 1 < e.group_rows.size(); ++g) {
    regular = e.group_rows[g] == e.group_rows[0];
  }
  if (regular && e.group_rows.back() > e.group_rows[0]) regular = false;
  p.shard.decode_rows = regular ? e.group_rows[0] : 0;
  p.shard.rows = rows;
  // Several columns stack along axis 1, before the shape of their values:
  // (rows, columns, *value shape); one column gives (rows, *value shape).
  if (idx.size() > 1) p.trailing_shape = {static_cast<std::int64_t>(idx.size())};
  for (const auto d : shapes[0].dims) p.trailing_shape.push_back(d);
  p.shard.extra = encode_extra(e);
  return p;
}

Status ArrowReader::read_impl(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                              std::byte* dst) {
  SHARDLOAD_ASSIGN_OR_RETURN(ArrowExtra e, decode_extra(s));
  // Our descriptor stays open over Arrow's reads, so that the file's state
  // after them can be compared with the snapshot (a write through any path
  // moves ctime; a file renamed over the path moves the replaced one's).
  SHARDLOAD_ASSIGN_OR_RETURN(File file, open_checked(*ctx_.source, s, ctx_.check_snapshot));
  if (hi <= lo) return Status::ok();
  Status read = read_groups(l, s, e, lo, hi, dst);
  if (ctx_.check_snapshot) read = check_unchanged(file, s.snapshot, std::move(read));
  return read;
}

DecodeUnit ArrowReader::decode_unit(const Shard& s, std::int64_t row) {
  if (s.decode_rows > 0) return grid_unit(s, row);
  auto e = decode_extra(s);
  if (!e) return {};
  std::int64_t start = 0;
  for (const auto r : e->group_rows) {
    if (row < start + r) return {start, start + r};
    start += r;
  }
  return {};
}

Status ArrowReader::read_groups(const ReadSpec& l, const Shard& s, const ArrowExtra& e,
                                std::int64_t lo, std::int64_t hi, std::byte* dst) {
  const std::size_t ncols = e.columns.size();
  if (l.row_elements() % ncols != 0) {
    return Status(ErrorCode::kInvalidArgument, s.path + ": " + std::to_string(ncols) +
                                                   " columns do not fill a row of " +
                                                   std::to_string(l.row_bytes) + " bytes");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(OpenFile f, open(s.path, false, {}, &s.snapshot));
  std::vector<std::string> names = e.columns;
  std::vector<ColumnShape> shapes;
  SHARDLOAD_ASSIGN_OR_RETURN(std::vector<int> idx, select(s.path, *f.schema, &names, &shapes));
  const auto k = static_cast<std::int64_t>(l.row_elements() / ncols);  // values per column
  for (std::size_t c = 0; c < ncols; ++c) {
    if (shapes[c].elements() != k) {
      return Status(ErrorCode::kChanged, s.path + ": column '" + names[c] + "' now holds " +
                                             std::to_string(shapes[c].elements()) +
                                             " values per row, discovery found " +
                                             std::to_string(k));
    }
  }
  std::vector<int> leaves;
  if (f.parquet) {
    for (const auto& leaf : parquet_leaves(f, idx)) leaves.push_back(leaf.first);
    if (f.group_rows != e.group_rows) {
      return Status(ErrorCode::kChanged, s.path + ": row groups differ from discovery's");
    }
    // Batches small enough that one decoded batch stays in cache while it is
    // interleaved into the rows.
    f.parquet->set_batch_size(std::max<std::int64_t>(
        1024, static_cast<std::int64_t>(kBatchBytes / std::max<std::uint64_t>(l.row_bytes, 1))));
  } else {
    // The IPC reader's projection keeps schema order; columns are found by name.
    std::set<int> sorted(idx.begin(), idx.end());
    SHARDLOAD_ASSIGN_OR_RETURN(
        f, open(s.path, false, std::vector<int>(sorted.begin(), sorted.end()), &s.snapshot));
    if (f.ipc->num_record_batches() != static_cast<int>(e.group_rows.size())) {
      return Status(ErrorCode::kChanged, s.path + ": record batch count differs from discovery's");
    }
    if (ctx_.source->round_trips(s.path))
      return read_ipc_remote(l, s, e, lo, hi, names, shapes, f, dst);
  }

  // A remote Parquet file's needed row groups are fetched ahead, a window of them at once
  // (their column chunks' ranged reads in flight together on Arrow's I/O pool), so that
  // a request's latency is not paid once per group; the window bounds what is buffered.
  constexpr std::int64_t kRemoteWindowBytes = std::int64_t{64} << 20;
  const bool prefetch = f.parquet && ctx_.source->round_trips(s.path);
  std::size_t buffered_end = 0;  // groups below this are buffered (or not needed)
  std::int64_t start = 0;        // the file row of group g's first row
  for (std::size_t g = 0; g < e.group_rows.size(); ++g) {
    const std::int64_t end = start + e.group_rows[g];
    if (end <= lo || start >= hi) {
      start = end;
      continue;
    }
    if (prefetch && g >= buffered_end) {
      const auto md = f.parquet->parquet_reader()->metadata();
      std::vector<int> window;
      std::int64_t bytes = 0;
      std::int64_t first = start;  // the file row of group w's first row
      for (std::size_t w = g; w < e.group_rows.size() && first < hi; ++w) {
        std::int64_t group_bytes = 0;
        const auto rg = md->RowGroup(static_cast<int>(w));
        for (const int c : leaves) group_bytes += rg->ColumnChunk(c)->total_compressed_size();
        if (!window.empty() && bytes + group_bytes > kRemoteWindowBytes) break;
        window.push_back(static_cast<int>(w));
        bytes += group_bytes;
        first += e.group_rows[w];
      }
      f.parquet->parquet_reader()->PreBuffer(window, leaves, arrow::io::IOContext(),
                                             arrow::io::CacheOptions::Defaults());
      buffered_end = static_cast<std::size_t>(window.back()) + 1;
    }
    const std::int64_t a = std::max(lo, start) - start;  // rows [a, b) of the group
    const std::int64_t b = std::min(hi, end) - start;
    const std::string where =
        s.path + ": " + (f.parquet ? "row group " : "record batch ") + std::to_string(g);
    if (ctx_.stats != nullptr) ctx_.stats->decodes.fetch_add(1, std::memory_order_relaxed);
    if (f.parquet) {
      // Decoded batch by batch, each interleaved while it is in cache; the
      // rows after b are not decoded.
      auto batches = f.parquet->GetRecordBatchReader({static_cast<int>(g)}, leaves);
      if (!batches.ok()) return arrow_error(where, batches.status(), ErrorCode::kIo);
      std::int64_t row = 0;  // group row of the batch's first row
      while (row < b) {
        std::shared_ptr<arrow::RecordBatch> batch;
        const arrow::Status st = (*batches)->ReadNext(&batch);
        if (!st.ok()) return arrow_error(where, st, ErrorCode::kIo);
        if (!batch) break;
        SHARDLOAD_RETURN_IF_ERROR(check_batch(where, *batch));
        const std::int64_t n = batch->num_rows();
        if (row + n > a) {
          SHARDLOAD_RETURN_IF_ERROR(interleave(l, s, where, *batch, names, shapes,
                                               std::max(a, row) - row, std::min(b, row + n) - row,
                                               start + row, lo, dst));
        }
        row += n;
      }
      if (row < b) {
        // The footer's counts agree with discovery's (above) and with each other (probe):
        // the pages hold fewer rows than they say. A file changed meanwhile is told apart
        // by the snapshot check after the read.
        return Status(ErrorCode::kFormat, where + ": its pages hold " + std::to_string(row) +
                                              " rows, the footer says " +
                                              std::to_string(e.group_rows[g]));
      }
    } else {
      auto batch = f.ipc->ReadRecordBatch(static_cast<int>(g));
      if (!batch.ok()) return arrow_error(where, batch.status(), ErrorCode::kIo);
      SHARDLOAD_RETURN_IF_ERROR(check_batch(where, **batch));
      if ((*batch)->num_rows() != e.group_rows[g]) {
        return rows_changed(where, (*batch)->num_rows(), e.group_rows[g]);
      }
      SHARDLOAD_RETURN_IF_ERROR(
          interleave(l, s, where, **batch, names, shapes, a, b, start, lo, dst));
    }
    start = end;
  }
  return Status::ok();
}

Status ArrowReader::interleave(const ReadSpec& l, const Shard& s, const std::string& where,
                               const arrow::RecordBatch& batch,
                               const std::vector<std::string>& names,
                               const std::vector<ColumnShape>& shapes, std::int64_t ra,
                               std::int64_t rb, std::int64_t first, std::int64_t lo,
                               std::byte* dst) {
  const std::size_t ncols = names.size();
  const auto k = static_cast<std::int64_t>(l.row_elements() / ncols);
  const std::size_t column_bytes = static_cast<std::size_t>(k) * l.dtype.size;
  std::vector<ColumnView> views;
  std::vector<DType> types;
  std::vector<ColumnCopy> copies;
  for (std::size_t c = 0; c < ncols; ++c) {
    auto col = batch.GetColumnByName(names[c]);
    auto shape = col ? column_shape(col->type()) : Result<ColumnShape>(Status::ok());
    if (!col || !shape || shape->elements() != k) {
      return Status(ErrorCode::kChanged, where + ": column '" + names[c] +
                                             "' is missing or has another type than at discovery");
    }
    views.push_back(view_of(*col, k));
    types.push_back(shape->dtype);
    copies.push_back(
        ColumnCopy{&s.path, &names[c], first, options_.fill_value, l.dtype, &shapes[c].dims});
  }
  const std::size_t row_bytes = l.row_bytes;
  // Columns that are plain 4- or 8-byte values of the destination type, one
  // per row, without nulls: those side by side go through a register
  // transpose, the rest column by column.
  std::vector<const std::byte*> plain(ncols, nullptr);
  const bool wide = l.dtype.size == 4 || l.dtype.size == 8;
  for (std::size_t c = 0; c < ncols && wide; ++c) {
    const ColumnView& v = views[c];
    if (k == 1 && !v.any_null && types[c] == l.dtype && l.dtype.kind != DTypeKind::kComplex) {
      const arrow::Array& leaf = *v.values();
      plain[c] = leaf.data()->GetValues<std::byte>(1, 0) +
                 static_cast<std::size_t>(leaf.offset() + v.first.back()) * l.dtype.size;
    }
  }
  const std::int64_t block =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(kBlockBytes / row_bytes));
  std::byte* out = dst + static_cast<std::size_t>(first + ra - lo) * row_bytes;
  for (std::int64_t r0 = ra; r0 < rb; r0 += block) {
    const std::int64_t r1 = std::min(rb, r0 + block);
    const auto n = static_cast<std::size_t>(r1 - r0);
    std::byte* rows = out + static_cast<std::size_t>(r0 - ra) * row_bytes;
    for (std::size_t c = 0; c < ncols;) {
      const std::size_t group = l.dtype.size == 4 ? 4 : 2;
      bool fast = c + group <= ncols;
      for (std::size_t g = 0; fast && g < group; ++g) fast = plain[c + g] != nullptr;
      if (fast) {
        const auto at = static_cast<std::size_t>(r0) * l.dtype.size;
        if (group == 4) {
          transpose4x4(plain[c] + at, plain[c + 1] + at, plain[c + 2] + at, plain[c + 3] + at, n,
                       rows + c * column_bytes, row_bytes);
        } else {
          transpose2x2(plain[c] + at, plain[c + 1] + at, n, rows + c * column_bytes, row_bytes);
        }
        c += group;
        continue;
      }
      SHARDLOAD_RETURN_IF_ERROR(
          copy_values(views[c], types[c], r0, r1, rows + c * column_bytes, row_bytes, copies[c]));
      ++c;
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<ShardReader>> make_arrow_reader(Format format, const FormatOptions& options,
                                                       const ReaderContext& context) {
  const char* name = format_name(format);
  std::set<std::string> seen;
  for (const auto& c : options.columns) {
    if (!seen.insert(c).second) {
      return Status(
          ErrorCode::kInvalidArgument,
          std::string(name) + ": '" + c + "' is named twice in " + option_mention("columns"));
    }
  }
  return std::unique_ptr<ShardReader>(std::make_unique<ArrowReader>(format, options, context));
}

}  // namespace shardload::detail
