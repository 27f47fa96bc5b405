// The Parquet and Arrow IPC (Feather v2) reader.
//
// One column gives a 1-D dataset, several give (rows, columns) rows with the
// columns interleaved in the order named. A read touches only the row groups
// (Parquet) or record batches (IPC) that overlap the requested rows, and only
// the selected columns of them; their row counts come from the file metadata
// at probe and travel in Shard::extra.
//
// Arrow C++ reports errors through Status / Result, but Parquet's lower layers
// and the standard library can still throw: every entry point catches at the
// boundary, because the core never throws (it runs inside Legate tasks).
// Arrow's own thread pools are kept out (use_threads = false, no pre-buffer):
// the caller owns concurrency.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "readers/detail/readers.hpp"

namespace shardload::detail {

namespace {

// ---- Shard::extra: the resolved column names and the rows of each group -----
// Little-endian: u32 count, then per column u32 length + bytes; u32 count,
// then per row group (record batch) i64 rows.
struct ArrowExtra {
  std::vector<std::string> columns;
  std::vector<std::int64_t> group_rows;
};

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
  auto bad = [&] {
    return Status(ErrorCode::kInvalidArgument,
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
    if (!take(8, &r) || static_cast<std::int64_t>(r) < 0) return bad();
    e.group_rows.push_back(static_cast<std::int64_t>(r));
    total += static_cast<std::int64_t>(r);
  }
  if (pos != s.size() || e.columns.empty() || total != shard.stored_rows()) return bad();
  return e;
}

// ---- types -------------------------------------------------------------------
Result<DType> dtype_of(const arrow::DataType& t) {
  switch (t.id()) {
    case arrow::Type::BOOL:
      return DType{DTypeKind::kBool, 1};
    case arrow::Type::INT8:
      return DType{DTypeKind::kInt, 1};
    case arrow::Type::INT16:
      return DType{DTypeKind::kInt, 2};
    case arrow::Type::INT32:
      return DType{DTypeKind::kInt, 4};
    case arrow::Type::INT64:
      return DType{DTypeKind::kInt, 8};
    case arrow::Type::UINT8:
      return DType{DTypeKind::kUInt, 1};
    case arrow::Type::UINT16:
      return DType{DTypeKind::kUInt, 2};
    case arrow::Type::UINT32:
      return DType{DTypeKind::kUInt, 4};
    case arrow::Type::UINT64:
      return DType{DTypeKind::kUInt, 8};
    case arrow::Type::HALF_FLOAT:
      return DType{DTypeKind::kFloat, 2};
    case arrow::Type::FLOAT:
      return DType{DTypeKind::kFloat, 4};
    case arrow::Type::DOUBLE:
      return DType{DTypeKind::kFloat, 8};
    default:
      return Status(
          ErrorCode::kFormat,
          "type " + t.ToString() + " is not supported (expected bool, integers or floats)");
  }
}

bool is_plain_number(const arrow::DataType& t) {
  auto d = dtype_of(t);
  return d.is_ok() && d->kind != DTypeKind::kBool;
}

template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, _Float16>;
template <typename T>
inline constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T>
struct IsComplex : std::false_type {};
template <typename T>
struct IsComplex<std::complex<T>> : std::true_type {};

// Converts one value the way Arrow's safe cast does: integers and bools must
// arrive exactly (no overflow, no fraction, no NaN); floats may round.
template <typename D, typename S>
bool cast_value(S v, D* out) {
  if constexpr (IsComplex<D>::value) {
    typename D::value_type re{};
    if (!cast_value(v, &re)) return false;
    *out = D(re, 0);
    return true;
  } else if constexpr (kIsFloat<D>) {
    if constexpr (std::is_same_v<S, _Float16>) {
      *out = static_cast<D>(static_cast<float>(v));
    } else {
      *out = static_cast<D>(v);
    }
    return true;
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (std::is_same_v<S, bool>) {
      *out = v;
      return true;
    } else {
      const double x = static_cast<double>(v);
      if (x != 0.0 && x != 1.0) return false;
      *out = x == 1.0;
      return true;
    }
  } else {  // D integral
    if constexpr (std::is_same_v<S, bool>) {
      *out = static_cast<D>(v ? 1 : 0);
      return true;
    } else if constexpr (kIsInt<S>) {
      if (!std::in_range<D>(v)) return false;
      *out = static_cast<D>(v);
      return true;
    } else {
      const double x = static_cast<double>(v);
      const double hi = std::ldexp(1.0, std::numeric_limits<D>::digits);
      const double lo = std::is_signed_v<D> ? -hi : 0.0;
      if (!std::isfinite(x) || std::trunc(x) != x || x < lo || x >= hi) return false;
      *out = static_cast<D>(x);
      return true;
    }
  }
}

template <typename S>
std::string value_string(S v) {
  if constexpr (std::is_same_v<S, bool>) {
    return v ? "true" : "false";
  } else if constexpr (kIsInt<S>) {
    return std::to_string(v);
  } else {
    std::string s = std::to_string(static_cast<double>(v));
    return s;
  }
}

// Where rows come from and go to, for one column of one group.
struct ColumnCopy {
  const std::string* path;
  const std::string* column;
  std::int64_t first_file_row;  // the file row of the chunk's element 0
  std::byte* out;               // the destination of element `begin`
  std::size_t stride;           // bytes between consecutive rows' values
  std::optional<double> fill;
  DType dtype;
};

template <typename D, typename S>
Status convert(const arrow::Array& a, std::int64_t begin, std::int64_t end, const ColumnCopy& c) {
  D fill{};
  if (c.fill && !cast_value(*c.fill, &fill)) {
    return Status(ErrorCode::kInvalidArgument, "fill_value " + value_string(*c.fill) +
                                                   " is not representable as " + c.dtype.name());
  }
  const S* values = nullptr;
  const auto* bools = dynamic_cast<const arrow::BooleanArray*>(&a);
  if constexpr (!std::is_same_v<S, bool>) {
    // The values buffer, already offset to the array's first element; for
    // half floats Arrow stores the raw 16-bit patterns.
    values = reinterpret_cast<const S*>(a.data()->GetValues<std::uint8_t>(1, 0)) + a.offset();
  }
  const bool any_null = a.null_count() > 0;
  for (std::int64_t i = begin; i < end; ++i) {
    D d{};
    if (any_null && a.IsNull(i)) {
      if (!c.fill) {
        return Status(ErrorCode::kFormat, *c.path + ": column '" + *c.column + "': row " +
                                              std::to_string(c.first_file_row + i) +
                                              " is null (the first null read; pass fill_value= "
                                              "to replace nulls)");
      }
      d = fill;
    } else {
      S v{};
      if constexpr (std::is_same_v<S, bool>) {
        v = bools->Value(i);
      } else {
        std::memcpy(&v, values + i, sizeof(S));
      }
      if constexpr (std::is_same_v<D, S>) {
        d = v;
      } else if (!cast_value(v, &d)) {
        return Status(ErrorCode::kFormat, *c.path + ": column '" + *c.column + "': row " +
                                              std::to_string(c.first_file_row + i) + ": value " +
                                              value_string(v) + " cannot be cast exactly to " +
                                              c.dtype.name());
      }
    }
    std::memcpy(c.out + static_cast<std::size_t>(i - begin) * c.stride, &d, sizeof(D));
  }
  return Status::ok();
}

template <typename D>
Status convert_from(const arrow::Array& a, std::int64_t b, std::int64_t e, const ColumnCopy& c) {
  switch (a.type_id()) {
    case arrow::Type::BOOL:
      return convert<D, bool>(a, b, e, c);
    case arrow::Type::INT8:
      return convert<D, std::int8_t>(a, b, e, c);
    case arrow::Type::INT16:
      return convert<D, std::int16_t>(a, b, e, c);
    case arrow::Type::INT32:
      return convert<D, std::int32_t>(a, b, e, c);
    case arrow::Type::INT64:
      return convert<D, std::int64_t>(a, b, e, c);
    case arrow::Type::UINT8:
      return convert<D, std::uint8_t>(a, b, e, c);
    case arrow::Type::UINT16:
      return convert<D, std::uint16_t>(a, b, e, c);
    case arrow::Type::UINT32:
      return convert<D, std::uint32_t>(a, b, e, c);
    case arrow::Type::UINT64:
      return convert<D, std::uint64_t>(a, b, e, c);
    case arrow::Type::HALF_FLOAT:
      return convert<D, _Float16>(a, b, e, c);
    case arrow::Type::FLOAT:
      return convert<D, float>(a, b, e, c);
    case arrow::Type::DOUBLE:
      return convert<D, double>(a, b, e, c);
    default:
      break;
  }
  return Status(ErrorCode::kFormat, *c.path + ": column '" + *c.column + "': type " +
                                        a.type()->ToString() + " is not supported");
}

// Copies elements [b, e) of one chunk into the destination, casting as needed.
Status copy_values(const arrow::Array& a, std::int64_t b, std::int64_t e, const ColumnCopy& c) {
  const DType d = c.dtype;
  switch (d.kind) {
    case DTypeKind::kBool:
      return convert_from<bool>(a, b, e, c);
    case DTypeKind::kInt:
      if (d.size == 1) return convert_from<std::int8_t>(a, b, e, c);
      if (d.size == 2) return convert_from<std::int16_t>(a, b, e, c);
      if (d.size == 4) return convert_from<std::int32_t>(a, b, e, c);
      return convert_from<std::int64_t>(a, b, e, c);
    case DTypeKind::kUInt:
      if (d.size == 1) return convert_from<std::uint8_t>(a, b, e, c);
      if (d.size == 2) return convert_from<std::uint16_t>(a, b, e, c);
      if (d.size == 4) return convert_from<std::uint32_t>(a, b, e, c);
      return convert_from<std::uint64_t>(a, b, e, c);
    case DTypeKind::kFloat:
      if (d.size == 2) return convert_from<_Float16>(a, b, e, c);
      if (d.size == 4) return convert_from<float>(a, b, e, c);
      return convert_from<double>(a, b, e, c);
    case DTypeKind::kComplex:
      if (d.size == 8) return convert_from<std::complex<float>>(a, b, e, c);
      return convert_from<std::complex<double>>(a, b, e, c);
  }
  return Status(ErrorCode::kInvalidArgument, "unknown dtype");
}

Status arrow_error(const std::string& path, const arrow::Status& st, ErrorCode code) {
  return Status(code, path + ": " + st.ToString());
}

std::string join_fields(const arrow::Schema& s) {
  std::string out;
  for (int i = 0; i < s.num_fields(); ++i) {
    out += (i ? ", " : "") + s.field(i)->name() + ": " + s.field(i)->type()->ToString();
  }
  return out.empty() ? "none" : out;
}

// ---- one opened file ---------------------------------------------------------
struct OpenFile {
  std::shared_ptr<arrow::Schema> schema;
  std::vector<std::int64_t> group_rows;
  std::unique_ptr<parquet::arrow::FileReader> parquet;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> ipc;
};

class ArrowReader final : public ShardReader {
 public:
  ArrowReader(Format format, const FormatOptions& options, const ReaderContext& ctx)
      : format_(format), options_(options), ctx_(ctx) {}

  Result<ShardProbe> probe(const std::string& path) override {
    try {
      return probe_impl(path);
    } catch (const std::exception& e) {
      return Status(ErrorCode::kFormat, path + ": " + e.what());
    } catch (...) {
      return Status(ErrorCode::kFormat, path + ": unknown exception from Arrow");
    }
  }

  Status read_rows(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override {
    try {
      return read_impl(l, s, lo, hi, dst);
    } catch (const std::exception& e) {
      return Status(ErrorCode::kIo, s.path + ": " + e.what());
    } catch (...) {
      return Status(ErrorCode::kIo, s.path + ": unknown exception from Arrow");
    }
  }

 private:
  const char* kind() const { return format_ == Format::kParquet ? "Parquet" : "Arrow IPC"; }

  // Opens the file's metadata. `projection`: IPC fields to decode (probe only).
  Result<OpenFile> open(const std::string& path, bool for_probe,
                        const std::vector<int>& projection) {
    OpenFile f;
    // Arrow opens by name with a plain open, which waits forever on a FIFO;
    // it gets a descriptor that was opened without blocking and found to be
    // a regular file instead (or, for the memory map, which only opens by
    // name, that descriptor's /proc name). Always the kernel's descriptor,
    // whatever IoBackend the context injects: Arrow reads it itself.
    SHARDLOAD_ASSIGN_OR_RETURN(File checked, File::open(posix_io(), path));
    if (format_ == Format::kParquet) {
      auto file = arrow::io::ReadableFile::Open(checked.release());
      if (!file.ok()) return arrow_error(path, file.status(), ErrorCode::kIo);
      parquet::ArrowReaderProperties props;
      props.set_use_threads(false);
      props.set_pre_buffer(false);
      parquet::arrow::FileReaderBuilder builder;
      arrow::Status st = builder.Open(*file);
      if (!st.ok()) {
        return Status(ErrorCode::kFormat, path + ": not a readable Parquet file: " + st.ToString());
      }
      builder.properties(props);
      auto reader = builder.Build();
      if (!reader.ok()) {
        return Status(ErrorCode::kFormat,
                      path + ": not a readable Parquet file: " + reader.status().ToString());
      }
      f.parquet = std::move(*reader);
      st = f.parquet->GetSchema(&f.schema);
      if (!st.ok()) return Status(ErrorCode::kFormat, path + ": schema: " + st.ToString());
      const auto md = f.parquet->parquet_reader()->metadata();
      for (int g = 0; g < md->num_row_groups(); ++g)
        f.group_rows.push_back(md->RowGroup(g)->num_rows());
      return f;
    }
    // IPC: probing maps the file so that a batch's row count costs no read of
    // its body (uncompressed buffers are zero-copy slices of the mapping);
    // reads use positional reads of only the needed batches and columns.
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    if (for_probe) {
      auto m = arrow::io::MemoryMappedFile::Open(descriptor_path(checked.fd(), path),
                                                 arrow::io::FileMode::READ);
      if (!m.ok()) return arrow_error(path, m.status(), ErrorCode::kIo);
      file = *m;
    } else {
      auto r = arrow::io::ReadableFile::Open(checked.release());
      if (!r.ok()) return arrow_error(path, r.status(), ErrorCode::kIo);
      file = *r;
    }
    auto opts = arrow::ipc::IpcReadOptions::Defaults();
    opts.use_threads = false;
    opts.included_fields = projection;
    auto reader = arrow::ipc::RecordBatchFileReader::Open(file, opts);
    if (!reader.ok()) {
      return Status(ErrorCode::kFormat, path + ": not a readable Arrow IPC file (Feather v2): " +
                                            reader.status().ToString());
    }
    f.ipc = *reader;
    f.schema = f.ipc->schema();
    return f;
  }

  // The field index of each selected column, or why one cannot be used.
  Result<std::vector<int>> select(const std::string& path, const arrow::Schema& schema,
                                  std::vector<std::string>* names) {
    if (names->empty()) {
      for (const auto& field : schema.fields()) {
        if (is_plain_number(*field->type())) names->push_back(field->name());
      }
      if (names->empty()) {
        return Status(ErrorCode::kFormat, path + ": columns: no numeric column to read (columns: " +
                                              join_fields(schema) + ")");
      }
    }
    std::vector<int> idx;
    for (const auto& n : *names) {
      const auto all = schema.GetAllFieldIndices(n);
      if (all.empty()) {
        return Status(ErrorCode::kFormat, path + ": column '" + n +
                                              "' not found (columns: " + join_fields(schema) + ")");
      }
      if (all.size() > 1) {
        return Status(ErrorCode::kFormat, path + ": column '" + n + "' appears " +
                                              std::to_string(all.size()) + " times in the schema");
      }
      auto d = dtype_of(*schema.field(all[0])->type());
      if (!d) return d.status().with_context(path + ": column '" + n + "'");
      idx.push_back(all[0]);
    }
    return idx;
  }

  Result<ShardProbe> probe_impl(const std::string& path) {
    ShardProbe p;
    p.shard.path = path;
    {
      SHARDLOAD_ASSIGN_OR_RETURN(File f, File::open(*ctx_.io, path));
      SHARDLOAD_ASSIGN_OR_RETURN(p.shard.snapshot, f.stat());
      if (!p.shard.snapshot.regular)
        return Status(ErrorCode::kFormat, path + ": not a regular file");
    }
    SHARDLOAD_ASSIGN_OR_RETURN(OpenFile f, open(path, true, {}));
    std::vector<std::string> names = options_.columns;
    SHARDLOAD_ASSIGN_OR_RETURN(std::vector<int> idx, select(path, *f.schema, &names));

    // One dtype for all columns, or the cast the options ask for.
    DType common{};
    for (std::size_t i = 0; i < idx.size(); ++i) {
      const DType d = *dtype_of(*f.schema->field(idx[i])->type());
      if (i == 0) {
        common = d;
      } else if (d != common && !options_.dtype) {
        return Status(ErrorCode::kFormat, path + ": columns: '" + names[i] + "' is " + d.name() +
                                              " but '" + names[0] + "' is " + common.name() +
                                              "; columns must share a dtype (pass dtype= to cast)");
      }
    }
    p.dtype = options_.dtype ? *options_.dtype : common;
    if (options_.fill_value) {
      // Checked here so that discovery, not the load, reports it.
      std::byte scratch[16];
      ColumnCopy c{&path, &names[0], 0, scratch, 0, options_.fill_value, p.dtype};
      auto empty = arrow::MakeArrayOfNull(arrow::float64(), 0);
      if (empty.ok()) SHARDLOAD_RETURN_IF_ERROR(copy_values(**empty, 0, 0, c));
    }

    // With the default selection each file picks its own numeric columns: the
    // first shard's names bind the rest, so a renamed column cannot slip in.
    if (options_.columns.empty()) {
      if (first_names_.empty()) {
        first_names_ = names;
        first_path_ = path;
      } else if (names != first_names_) {
        auto list = [](const std::vector<std::string>& v) {
          std::string s;
          for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
          return "(" + s + ")";
        };
        return Status(ErrorCode::kFormat, path + ": numeric columns " + list(names) +
                                              " differ from " + list(first_names_) + " of " +
                                              first_path_);
      }
    }

    ArrowExtra e;
    e.columns = names;
    if (f.ipc) {
      // Only the first selected column is decoded to learn each batch's rows.
      SHARDLOAD_ASSIGN_OR_RETURN(f, open(path, true, {idx[0]}));
      for (int b = 0; b < f.ipc->num_record_batches(); ++b) {
        auto batch = f.ipc->ReadRecordBatch(b);
        if (!batch.ok()) {
          return Status(ErrorCode::kFormat, path + ": record batch " + std::to_string(b) + ": " +
                                                batch.status().ToString());
        }
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
    if (idx.size() > 1) p.trailing_shape = {static_cast<std::int64_t>(idx.size())};
    p.shard.extra = encode_extra(e);
    return p;
  }

  Status read_impl(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) {
    SHARDLOAD_ASSIGN_OR_RETURN(ArrowExtra e, decode_extra(s));
    // Our descriptor stays open over Arrow's reads, so that the file's state
    // after them can be compared with the snapshot (a write through any path
    // moves ctime; a file renamed over the path moves the replaced one's).
    SHARDLOAD_ASSIGN_OR_RETURN(File file, File::open(*ctx_.io, s.path));
    if (ctx_.check_snapshot) SHARDLOAD_RETURN_IF_ERROR(check_snapshot(file, s));
    if (hi <= lo) return Status::ok();
    Status read = read_groups(l, s, e, lo, hi, dst);
    if (ctx_.check_snapshot) read = check_unchanged(file, s.snapshot, std::move(read));
    return read;
  }

  DecodeUnit decode_unit(const Shard& s, std::int64_t row) override {
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

  Status read_groups(const ReadSpec& l, const Shard& s, const ArrowExtra& e, std::int64_t lo,
                     std::int64_t hi, std::byte* dst) {
    const std::size_t ncols = e.columns.size();
    if (l.row_bytes != ncols * l.dtype.size) {
      return Status(ErrorCode::kInvalidArgument, s.path + ": " + std::to_string(ncols) +
                                                     " columns do not fill a row of " +
                                                     std::to_string(l.row_bytes) + " bytes");
    }
    SHARDLOAD_ASSIGN_OR_RETURN(OpenFile f, open(s.path, false, {}));
    std::vector<std::string> names = e.columns;
    SHARDLOAD_ASSIGN_OR_RETURN(std::vector<int> idx, select(s.path, *f.schema, &names));
    std::vector<int> leaves;
    if (f.parquet) {
      const auto* schema = f.parquet->parquet_reader()->metadata()->schema();
      for (const auto& n : names) leaves.push_back(schema->ColumnIndex(n));
      if (f.group_rows != e.group_rows) {
        return Status(ErrorCode::kChanged, s.path + ": row groups differ from discovery's");
      }
    } else {
      // The IPC reader's projection keeps schema order; columns are found by name.
      std::set<int> sorted(idx.begin(), idx.end());
      SHARDLOAD_ASSIGN_OR_RETURN(
          f, open(s.path, false, std::vector<int>(sorted.begin(), sorted.end())));
      if (f.ipc->num_record_batches() != static_cast<int>(e.group_rows.size())) {
        return Status(ErrorCode::kChanged,
                      s.path + ": record batch count differs from discovery's");
      }
    }

    std::int64_t start = 0;  // the file row of group g's first row
    for (std::size_t g = 0; g < e.group_rows.size(); ++g) {
      const std::int64_t end = start + e.group_rows[g];
      if (end <= lo || start >= hi) {
        start = end;
        continue;
      }
      const std::int64_t a = std::max(lo, start) - start;  // rows [a, b) of the group
      const std::int64_t b = std::min(hi, end) - start;
      std::vector<std::shared_ptr<arrow::ChunkedArray>> cols(ncols);
      const std::string where =
          s.path + ": " + (f.parquet ? "row group " : "record batch ") + std::to_string(g);
      if (ctx_.stats != nullptr) ctx_.stats->decodes.fetch_add(1, std::memory_order_relaxed);
      if (f.parquet) {
        auto t = f.parquet->ReadRowGroup(static_cast<int>(g), leaves);
        if (!t.ok()) return arrow_error(where, t.status(), ErrorCode::kIo);
        for (std::size_t c = 0; c < ncols; ++c) cols[c] = (*t)->GetColumnByName(names[c]);
      } else {
        auto batch = f.ipc->ReadRecordBatch(static_cast<int>(g));
        if (!batch.ok()) return arrow_error(where, batch.status(), ErrorCode::kIo);
        for (std::size_t c = 0; c < ncols; ++c) {
          auto col = (*batch)->GetColumnByName(names[c]);
          if (col) cols[c] = std::make_shared<arrow::ChunkedArray>(col);
        }
      }
      for (std::size_t c = 0; c < ncols; ++c) {
        if (!cols[c] || cols[c]->length() != e.group_rows[g]) {
          return Status(ErrorCode::kChanged,
                        where + ": column '" + names[c] + "' is missing or has " +
                            (cols[c] ? std::to_string(cols[c]->length()) : "no") +
                            " rows, expected " + std::to_string(e.group_rows[g]));
        }
        std::int64_t chunk_start = 0;  // group row of the chunk's element 0
        for (const auto& chunk : cols[c]->chunks()) {
          const std::int64_t cb = std::max(a, chunk_start) - chunk_start;
          const std::int64_t ce = std::min(b, chunk_start + chunk->length()) - chunk_start;
          if (cb < ce) {
            const auto row = static_cast<std::size_t>(start + chunk_start + cb - lo);
            ColumnCopy copy{&s.path,
                            &names[c],
                            start + chunk_start,
                            dst + row * l.row_bytes + c * l.dtype.size,
                            static_cast<std::size_t>(l.row_bytes),
                            options_.fill_value,
                            l.dtype};
            SHARDLOAD_RETURN_IF_ERROR(copy_values(*chunk, cb, ce, copy));
          }
          chunk_start += chunk->length();
        }
      }
      start = end;
    }
    return Status::ok();
  }

  Format format_;
  FormatOptions options_;
  ReaderContext ctx_;
  std::vector<std::string> first_names_;  // probe: the first shard's default columns
  std::string first_path_;
};

}  // namespace

Result<std::unique_ptr<ShardReader>> make_arrow_reader(Format format, const FormatOptions& options,
                                                       const ReaderContext& context) {
  const char* name = format_name(format);
  if (options.trailing_shape || options.header_bytes || !options.dataset.empty()) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string(name) +
                      ": the schema gives the shape; options for other formats "
                      "(trailing shape, header bytes, dataset) do not apply");
  }
  std::set<std::string> seen;
  for (const auto& c : options.columns) {
    if (!seen.insert(c).second) {
      return Status(ErrorCode::kInvalidArgument,
                    std::string(name) + ": columns: '" + c + "' is named twice");
    }
  }
  return std::unique_ptr<ShardReader>(std::make_unique<ArrowReader>(format, options, context));
}

}  // namespace shardload::detail
