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
#include <charconv>
#include <cmath>
#include <complex>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include "readers/detail/fetch_ahead.hpp"
#include "readers/detail/ipc_file.hpp"
#include "readers/detail/json.hpp"
#include "readers/detail/readers.hpp"
#include "readers/detail/store_options.hpp"
#include "shardload/formats.hpp"

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

// A fill value as Python shows a float ("70000.0", "1e+300", "inf"): the shortest digits that
// read back as the same double, positional for exponents in [-4, 16).
std::string fill_string(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[400];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  const int exponent = std::stoi(s.substr(s.find('e') + 1));
  if (exponent < -4 || exponent >= 16) return s;
  r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  s.assign(buf, r.ptr);
  return s.find('.') == std::string::npos ? s + ".0" : s;
}

// fill_value as a D, false where D cannot hold it: an integer or bool must take it exactly
// (cast_value); a float may round it, but a finite value must stay finite, or the nulls would
// read as inf (1e300 as float32, 70000 as float16). inf and nan, which a user writes only on
// purpose, fill a float dtype as they are.
template <typename D>
bool fill_as(double fill, D* out) {
  if (!cast_value(fill, out)) return false;
  if (!std::isfinite(fill)) return true;
  if constexpr (IsComplex<D>::value) {
    return std::isfinite(static_cast<double>(out->real()));
  } else if constexpr (kIsFloat<D>) {
    return std::isfinite(static_cast<double>(*out));
  } else {
    return true;
  }
}

// ---- column shapes: scalars, fixed-size lists, fixed_shape_tensor -------------
// A column's element type and the shape of its value in one row: empty for a
// scalar column, the list sizes outermost first for (nested) FixedSizeLists,
// the tensor shape for Arrow's canonical fixed_shape_tensor extension.
struct ColumnShape {
  DType dtype;
  std::shared_ptr<arrow::DataType> leaf;  // the scalar type of the values
  std::vector<std::int64_t> dims;
  [[nodiscard]] std::int64_t elements() const {
    std::int64_t n = 1;
    for (const auto d : dims) n *= d;
    return n;
  }
  friend bool operator==(const ColumnShape& a, const ColumnShape& b) {
    return a.dtype == b.dtype && a.dims == b.dims;
  }
};

std::string shape_string(const std::vector<std::int64_t>& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

constexpr const char* kTensorName = "arrow.fixed_shape_tensor";

// The shape a fixed_shape_tensor type declares, from its serialized metadata
// ({"shape": [...], "permutation": [...], "dim_names": [...]}).
Result<std::vector<std::int64_t>> tensor_dims(const arrow::ExtensionType& ext) {
  const std::string where = std::string(kTensorName) + " metadata";
  SHARDLOAD_ASSIGN_OR_RETURN(Json j, parse_json_object(where, ext.Serialize()));
  if (!j.contains("shape")) return Status(ErrorCode::kFormat, where + ": no 'shape'");
  SHARDLOAD_ASSIGN_OR_RETURN(auto dims, json_shape(where, "shape", j["shape"]));
  if (j.contains("permutation") && !j["permutation"].is_null()) {
    SHARDLOAD_ASSIGN_OR_RETURN(auto perm, json_shape(where, "permutation", j["permutation"]));
    for (std::size_t i = 0; i < perm.size(); ++i) {
      if (perm[i] != static_cast<std::int64_t>(i)) {
        return Status(ErrorCode::kFormat,
                      "fixed_shape_tensor with permutation " + shape_string(perm) +
                          " is not supported (only the row-major layout, no permutation)");
      }
    }
  }
  return dims;
}

Result<ColumnShape> column_shape(const std::shared_ptr<arrow::DataType>& type) {
  ColumnShape out;
  std::shared_ptr<arrow::DataType> t = type;
  std::int64_t tensor_elements = -1;
  if (t->id() == arrow::Type::EXTENSION) {
    const auto& ext = static_cast<const arrow::ExtensionType&>(*t);
    if (ext.extension_name() != kTensorName) {
      return Status(ErrorCode::kFormat, "extension type " + ext.extension_name() +
                                            " is not supported (expected numbers, fixed-size "
                                            "lists of them or " +
                                            kTensorName + ")");
    }
    SHARDLOAD_ASSIGN_OR_RETURN(out.dims, tensor_dims(ext));
    tensor_elements = out.elements();
    t = ext.storage_type();
    if (t->id() != arrow::Type::FIXED_SIZE_LIST) {
      return Status(ErrorCode::kFormat, std::string(kTensorName) + " stored as " + t->ToString() +
                                            " (expected a fixed-size list)");
    }
    const auto& l = static_cast<const arrow::FixedSizeListType&>(*t);
    if (l.list_size() != tensor_elements) {
      return Status(ErrorCode::kFormat, std::string(kTensorName) + " of shape " +
                                            shape_string(out.dims) + " stored in lists of " +
                                            std::to_string(l.list_size()));
    }
    t = l.value_type();
  }
  while (t->id() == arrow::Type::FIXED_SIZE_LIST) {
    const auto& l = static_cast<const arrow::FixedSizeListType&>(*t);
    if (l.list_size() <= 0) {
      return Status(ErrorCode::kFormat,
                    "type " + type->ToString() + ": fixed-size lists of size 0 are not supported");
    }
    out.dims.push_back(l.list_size());
    t = l.value_type();
  }
  auto d = dtype_of(*t);
  if (!d) {
    std::string why = "type " + type->ToString() +
                      " is not supported (expected bool, integers, "
                      "floats, fixed-size lists of them or " +
                      kTensorName + ")";
    if (t->id() == arrow::Type::LIST || t->id() == arrow::Type::LARGE_LIST ||
        t->id() == arrow::Type::LIST_VIEW || t->id() == arrow::Type::LARGE_LIST_VIEW) {
      why += "; variable-size lists cannot give one trailing shape";
    }
    return Status(ErrorCode::kFormat, why);
  }
  if (!out.dims.empty() && d->kind == DTypeKind::kBool) {
    // Bits inside lists would need a bit-level copy per row; no one stores arrays so.
    return Status(ErrorCode::kFormat, "type " + type->ToString() +
                                          " is not supported (lists of bool; expected lists of "
                                          "integers or floats)");
  }
  out.dtype = *d;
  out.leaf = t;
  return out;
}

// ---- copying a column into row-major rows ------------------------------------
// One column of one decoded batch, seen through its list levels down to the
// scalar values: levels[L] is the array at nesting level L (levels[0] the
// column itself, the last one the values), first[L] the index in levels[L] of
// row 0's first element, per[L] the values per element of levels[L].
// FixedSizeList children are not sliced with their parent: the child index of
// parent element p is (parent offset + p) * list size.
struct ColumnView {
  std::vector<const arrow::Array*> levels;
  std::vector<std::int64_t> first;
  std::vector<std::int64_t> per;
  std::int64_t k = 1;  // values per row
  bool any_null = false;
  const arrow::Array* values() const { return levels.back(); }
};

ColumnView view_of(const arrow::Array& column, std::int64_t k) {
  ColumnView v;
  v.k = k;
  const arrow::Array* a = &column;
  if (a->type_id() == arrow::Type::EXTENSION) {
    v.any_null = a->null_count() > 0;  // the extension array's own validity
    a = static_cast<const arrow::ExtensionArray*>(a)->storage().get();
  }
  std::int64_t index = 0;
  std::int64_t per = k;
  while (a->type_id() == arrow::Type::FIXED_SIZE_LIST) {
    const auto* l = static_cast<const arrow::FixedSizeListArray*>(a);
    v.levels.push_back(a);
    v.first.push_back(index);
    v.per.push_back(per);
    v.any_null = v.any_null || a->null_count() > 0;
    const std::int64_t n = l->list_type()->list_size();
    index = l->value_offset(index);
    per /= n;
    a = l->values().get();
  }
  v.levels.push_back(a);
  v.first.push_back(index);
  v.per.push_back(1);
  v.any_null = v.any_null || a->null_count() > 0;
  return v;
}

// Where one column's values go, and what to say about them.
struct ColumnCopy {
  const std::string* path;
  const std::string* column;
  std::int64_t first_file_row;  // the file row of the view's row 0
  std::optional<double> fill;
  DType dtype;
  const std::vector<std::int64_t>* dims;  // the column's value shape (empty: scalar)
};

std::string element_string(std::int64_t j, const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> idx(dims.size());
  for (std::size_t d = dims.size(); d-- > 0;) {
    idx[d] = j % dims[d];
    j /= dims[d];
  }
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

// Rows [b, e) of the view into `out` (row b's first value), rows `stride`
// bytes apart, casting as needed. The common case, same type and no nulls, is
// a plain typed copy per row with nothing else in the loop.
template <typename D, typename S>
Status copy_rows(const ColumnView& v, std::int64_t b, std::int64_t e, std::byte* out,
                 std::size_t stride, const ColumnCopy& c) {
  const arrow::Array& leaf = *v.values();
  const std::int64_t k = v.k;
  const S* values = nullptr;
  if constexpr (!std::is_same_v<S, bool>) {
    // The values buffer, already offset to the array's first element; for
    // half floats Arrow stores the raw 16-bit patterns.
    values = reinterpret_cast<const S*>(leaf.data()->template GetValues<std::uint8_t>(1, 0)) +
             leaf.offset() + v.first.back();
  }
  if constexpr (std::is_same_v<D, S> && !std::is_same_v<S, bool>) {
    if (!v.any_null) {
      const S* src = values + b * k;
      const auto n = static_cast<std::size_t>(e - b);
      if (stride == static_cast<std::size_t>(k) * sizeof(S)) {
        std::memcpy(out, src, n * stride);
      } else if (k == 1) {
        for (std::size_t i = 0; i < n; ++i) std::memcpy(out + i * stride, src + i, sizeof(S));
      } else {
        const std::size_t row = static_cast<std::size_t>(k) * sizeof(S);
        for (std::size_t i = 0; i < n; ++i) std::memcpy(out + i * stride, src + i * k, row);
      }
      return Status::ok();
    }
  }
  D fill{};
  if (c.fill && !fill_as(*c.fill, &fill)) {
    return Status(ErrorCode::kInvalidArgument, option_mention("fill_value", true) +
                                                   fill_string(*c.fill) +
                                                   " is not representable as " + c.dtype.name());
  }
  // Only a bool column's leaf is a BooleanArray: cast it there alone (a downcast of another
  // array's address is undefined even if never used).
  const arrow::BooleanArray* bools = nullptr;
  if constexpr (std::is_same_v<S, bool>) bools = static_cast<const arrow::BooleanArray*>(&leaf);
  const std::size_t levels = v.levels.size();
  for (std::int64_t i = b; i < e; ++i) {
    std::byte* row = out + static_cast<std::size_t>(i - b) * stride;
    for (std::int64_t j = 0; j < k; ++j) {
      // The element's index at each level; a null at any level nulls it.
      bool null = false;
      std::size_t level = 0;
      for (; v.any_null && level < levels; ++level) {
        const arrow::Array& a = *v.levels[level];
        const std::int64_t per = v.per[level];
        if (a.null_count() > 0 && a.IsNull(v.first[level] + i * (k / per) + j / per)) {
          null = true;
          break;
        }
      }
      D d{};
      if (null) {
        if (!c.fill) {
          const std::string what = (level == 0 || c.dims->empty())
                                       ? "row " + std::to_string(c.first_file_row + i) + " is null"
                                       : "row " + std::to_string(c.first_file_row + i) +
                                             ": element " + element_string(j, *c.dims) + " is null";
          return Status(ErrorCode::kFormat, *c.path + ": column '" + *c.column + "': " + what +
                                                " (the first null read; pass " +
                                                option_mention("fill_value") +
                                                " to replace nulls)");
        }
        d = fill;
      } else {
        S s{};
        if constexpr (std::is_same_v<S, bool>) {
          s = bools->Value(v.first.back() + i * k + j);
        } else {
          std::memcpy(&s, values + i * k + j, sizeof(S));
        }
        if constexpr (std::is_same_v<D, S>) {
          d = s;
        } else if (!cast_value(s, &d)) {
          std::string where = "row " + std::to_string(c.first_file_row + i);
          if (!c.dims->empty()) where += ", element " + element_string(j, *c.dims);
          return Status(ErrorCode::kFormat, *c.path + ": column '" + *c.column + "': " + where +
                                                ": value " + value_string(s) +
                                                " cannot be cast exactly to " + c.dtype.name());
        }
      }
      std::memcpy(row + static_cast<std::size_t>(j) * sizeof(D), &d, sizeof(D));
    }
  }
  return Status::ok();
}

// Four columns of n 4-byte values into n rows (16 bytes each, `stride`
// apart): 4 x 4 register transposes, 16 values per 4 loads and 4 stores.
void transpose4x4(const std::byte* a, const std::byte* b, const std::byte* c, const std::byte* d,
                  std::size_t n, std::byte* out, std::size_t stride) {
  std::size_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) {
    // Moves of bits only (loads, shuffles, stores): no value is converted.
    __m128 r0 = _mm_loadu_ps(reinterpret_cast<const float*>(a + i * 4));
    __m128 r1 = _mm_loadu_ps(reinterpret_cast<const float*>(b + i * 4));
    __m128 r2 = _mm_loadu_ps(reinterpret_cast<const float*>(c + i * 4));
    __m128 r3 = _mm_loadu_ps(reinterpret_cast<const float*>(d + i * 4));
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(reinterpret_cast<float*>(out + i * stride), r0);
    _mm_storeu_ps(reinterpret_cast<float*>(out + (i + 1) * stride), r1);
    _mm_storeu_ps(reinterpret_cast<float*>(out + (i + 2) * stride), r2);
    _mm_storeu_ps(reinterpret_cast<float*>(out + (i + 3) * stride), r3);
  }
#endif
  for (; i < n; ++i) {
    std::byte* row = out + i * stride;
    std::memcpy(row, a + i * 4, 4);
    std::memcpy(row + 4, b + i * 4, 4);
    std::memcpy(row + 8, c + i * 4, 4);
    std::memcpy(row + 12, d + i * 4, 4);
  }
}

// Two columns of n 8-byte values into n rows (16 bytes each, `stride` apart).
void transpose2x2(const std::byte* a, const std::byte* b, std::size_t n, std::byte* out,
                  std::size_t stride) {
  std::size_t i = 0;
#if defined(__SSE2__)
  for (; i + 2 <= n; i += 2) {
    const __m128d r0 = _mm_loadu_pd(reinterpret_cast<const double*>(a + i * 8));
    const __m128d r1 = _mm_loadu_pd(reinterpret_cast<const double*>(b + i * 8));
    _mm_storeu_pd(reinterpret_cast<double*>(out + i * stride), _mm_unpacklo_pd(r0, r1));
    _mm_storeu_pd(reinterpret_cast<double*>(out + (i + 1) * stride), _mm_unpackhi_pd(r0, r1));
  }
#endif
  for (; i < n; ++i) {
    std::memcpy(out + i * stride, a + i * 8, 8);
    std::memcpy(out + i * stride + 8, b + i * 8, 8);
  }
}

// Calls f.template operator()<T>() with T the C++ type of `d`.
template <typename F>
Status visit_dtype(DType d, F&& f) {
  switch (d.kind) {
    case DTypeKind::kBool:
      return f.template operator()<bool>();
    case DTypeKind::kInt:
      if (d.size == 1) return f.template operator()<std::int8_t>();
      if (d.size == 2) return f.template operator()<std::int16_t>();
      if (d.size == 4) return f.template operator()<std::int32_t>();
      return f.template operator()<std::int64_t>();
    case DTypeKind::kUInt:
      if (d.size == 1) return f.template operator()<std::uint8_t>();
      if (d.size == 2) return f.template operator()<std::uint16_t>();
      if (d.size == 4) return f.template operator()<std::uint32_t>();
      return f.template operator()<std::uint64_t>();
    case DTypeKind::kFloat:
      if (d.size == 2) return f.template operator()<_Float16>();
      if (d.size == 4) return f.template operator()<float>();
      return f.template operator()<double>();
    case DTypeKind::kComplex:
      if (d.size == 8) return f.template operator()<std::complex<float>>();
      return f.template operator()<std::complex<double>>();
  }
  return Status(ErrorCode::kInvalidArgument, "unknown dtype");
}

// Copies rows [b, e) of one column view, dispatching on the stored and the
// wanted type once per call (a block of rows), not per value.
Status copy_values(const ColumnView& v, DType source, std::int64_t b, std::int64_t e,
                   std::byte* out, std::size_t stride, const ColumnCopy& c) {
  return visit_dtype(c.dtype, [&]<typename D>() {
    return visit_dtype(source, [&]<typename S>() -> Status {
      if constexpr (IsComplex<S>::value) {
        return Status(ErrorCode::kFormat, *c.path + ": column '" + *c.column +
                                              "': complex values cannot be stored in Arrow");
      } else {
        return copy_rows<D, S>(v, b, e, out, stride, c);
      }
    });
  });
}

// kInvalidArgument when fill_value does not fit `dtype` (fill_as).
Status check_fill(double fill, DType dtype) {
  return visit_dtype(dtype, [&]<typename D>() {
    D d{};
    if (!fill_as(fill, &d)) {
      return Status(ErrorCode::kInvalidArgument, option_mention("fill_value", true) +
                                                     fill_string(fill) +
                                                     " is not representable as " + dtype.name());
    }
    return Status::ok();
  });
}

// A decoded batch checked against its buffers before a byte of it is read. Arrow's IPC reader
// takes a batch's length and its columns' lengths from the metadata as written and checks only
// that they agree, so a batch whose counts all claim more rows than its buffers hold would be
// read past their end. Validate compares each buffer's size with what the lengths need
// (per column, no pass over the values).
Status check_batch(const std::string& where, const arrow::RecordBatch& batch) {
  const arrow::Status st = batch.Validate();
  if (st.ok()) return Status::ok();
  return Status(ErrorCode::kFormat, where + ": its metadata (" + std::to_string(batch.num_rows()) +
                                        " rows) disagrees with its buffers: " + st.ToString());
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

// ---- an object in object storage as Arrow's random-access file -----------------
// Parquet and IPC read a remote shard through this: each ReadAt is the IoBackend's ranged
// read (its retries included), so the footer and only the needed column chunks or batch
// buffers travel, never the whole object. Thread-safe: Parquet's pre-buffering issues its
// reads from Arrow's I/O pool, and File serves concurrent positional reads.
class IoRandomAccessFile final : public arrow::io::RandomAccessFile {
 public:
  IoRandomAccessFile(File file, std::int64_t size) : file_(std::move(file)), size_(size) {}

  // The object stays open until the last reference goes: a read Arrow issued in the
  // background may still hold one after its reader closed the file.
  arrow::Status Close() override {
    closed_ = true;
    return arrow::Status::OK();
  }
  bool closed() const override { return closed_; }
  arrow::Result<std::int64_t> Tell() const override {
    std::lock_guard lock(mu_);
    return pos_;
  }
  arrow::Status Seek(std::int64_t position) override {
    if (position < 0) return arrow::Status::Invalid("negative position");
    std::lock_guard lock(mu_);
    pos_ = position;
    return arrow::Status::OK();
  }
  arrow::Result<std::int64_t> GetSize() override { return size_; }

  arrow::Result<std::int64_t> Read(std::int64_t nbytes, void* out) override {
    std::int64_t at = 0;
    {
      std::lock_guard lock(mu_);
      at = pos_;
    }
    ARROW_ASSIGN_OR_RAISE(const std::int64_t got, ReadAt(at, nbytes, out));
    std::lock_guard lock(mu_);
    pos_ = at + got;
    return got;
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(std::int64_t nbytes) override {
    ARROW_ASSIGN_OR_RAISE(auto buf, arrow::AllocateResizableBuffer(
                                        std::max<std::int64_t>(0, std::min(nbytes, size_))));
    ARROW_ASSIGN_OR_RAISE(const std::int64_t got, Read(nbytes, buf->mutable_data()));
    ARROW_RETURN_NOT_OK(buf->Resize(got, /*shrink_to_fit=*/false));
    return std::shared_ptr<arrow::Buffer>(std::move(buf));
  }

  arrow::Result<std::int64_t> ReadAt(std::int64_t position, std::int64_t nbytes,
                                     void* out) override {
    if (position < 0 || nbytes < 0) return arrow::Status::Invalid("negative read range");
    // Clipped at the end as a file read is: the snapshot's size is the object's.
    const std::int64_t n = std::max<std::int64_t>(0, std::min(nbytes, size_ - position));
    if (n == 0) return 0;
    if (const auto held = find_held(position, n)) {
      std::memcpy(out, held->data(), static_cast<std::size_t>(n));
      return n;
    }
    const Status st =
        file_.read_exact(out, static_cast<std::size_t>(n), static_cast<std::uint64_t>(position));
    if (!st.is_ok()) return arrow::Status::IOError(st.message());
    return n;
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(std::int64_t position,
                                                       std::int64_t nbytes) override {
    if (position < 0 || nbytes < 0) return arrow::Status::Invalid("negative read range");
    const std::int64_t n = std::max<std::int64_t>(0, std::min(nbytes, size_ - position));
    if (n > 0) {
      if (auto held = find_held(position, n)) return held;
    }
    ARROW_ASSIGN_OR_RAISE(auto buf, arrow::AllocateBuffer(n));
    ARROW_ASSIGN_OR_RAISE(const std::int64_t got, ReadAt(position, n, buf->mutable_data()));
    (void)got;
    return std::shared_ptr<arrow::Buffer>(std::move(buf));
  }

  // Bytes [at, at + size) fetched already (by one request for a range Arrow would read in
  // many): reads within them are served from memory, zero-copy, until drop(at).
  void hold(std::int64_t at, std::shared_ptr<arrow::Buffer> bytes) {
    std::lock_guard lock(mu_);
    held_[at] = std::move(bytes);
  }
  void drop(std::int64_t at) {
    std::lock_guard lock(mu_);
    held_.erase(at);
  }

 private:
  // The held bytes [position, position + n) as a slice, or null where no one hold has them.
  std::shared_ptr<arrow::Buffer> find_held(std::int64_t position, std::int64_t n) const {
    std::lock_guard lock(mu_);
    auto it = held_.upper_bound(position);
    if (it == held_.begin()) return nullptr;
    --it;
    const std::int64_t start = it->first;
    if (position + n > start + it->second->size()) return nullptr;
    return arrow::SliceBuffer(it->second, position - start, n);
  }

  mutable std::mutex mu_;  // guards pos_ and held_; reads from the store need no lock
  std::atomic<bool> closed_{false};
  const File file_;
  const std::int64_t size_;
  std::int64_t pos_ = 0;
  std::map<std::int64_t, std::shared_ptr<arrow::Buffer>> held_;
};

// ---- one opened file ---------------------------------------------------------
// Parsed footers of remote objects (Parquet's FileMetaData, an IPC file's footer bytes and
// batch blocks), by URL and snapshot, for this process. Each piece of a load opens its object
// again, and without this it fetched the footer again: a request's round trip per piece
// before its row groups or batches could be asked for, and the footer's bytes (MBs for a
// wide table of many groups) once per piece instead of once. The probe that took the
// snapshot, or the first piece read on a rank, parses it; later opens of that snapshot take
// it (a footer is only read, never changed, once parsed); a probe always reads its object's
// own (discovery validates the files as they are). A piece's reads are checked against
// the same snapshot (the ETag), so a footer kept for it never describes other bytes. Bounded
// by the footers' serialized bytes; the oldest go first.
template <typename T>
class FooterCache {
 public:
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 20;
  static constexpr std::size_t kMaxEntries = 4096;

  std::shared_ptr<T> find(const std::string& path, const FileInfo& snap) {
    const std::string k = key(path, snap);
    std::lock_guard lock(mu_);
    const auto it = entries_.find(k);
    return it == entries_.end() ? nullptr : it->second;
  }

  void put(const std::string& path, const FileInfo& snap, std::shared_ptr<T> value,
           std::size_t bytes) {
    if (bytes > kMaxBytes / 4) return;  // a footer this large would push out the rest
    std::string k = key(path, snap);
    std::lock_guard lock(mu_);
    if (!entries_.emplace(k, std::move(value)).second) return;
    order_.emplace_back(std::move(k), bytes);
    bytes_ += bytes;
    while (bytes_ > kMaxBytes || order_.size() > kMaxEntries) {
      entries_.erase(order_.front().first);
      bytes_ -= order_.front().second;
      order_.pop_front();
    }
  }

 private:
  static std::string key(const std::string& path, const FileInfo& snap) {
    return path + '\n' + std::to_string(snap.size) + ':' + std::to_string(snap.inode) + ':' +
           std::to_string(snap.mtime_ns);
  }

  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<T>> entries_;
  std::deque<std::pair<std::string, std::size_t>> order_;
  std::size_t bytes_ = 0;
};

// An IPC file's last bytes (its footer, the footer's length and the magic), where Arrow's
// open reads them, and the record batches' blocks that footer lists.
struct IpcTail {
  std::int64_t at = 0;
  std::shared_ptr<arrow::Buffer> bytes;
  std::vector<IpcBlock> batches;
};

FooterCache<parquet::FileMetaData>& remote_footers() {
  static auto* cache = new FooterCache<parquet::FileMetaData>();  // never destroyed: tasks
  return *cache;                                                  // may run until exit
}

FooterCache<IpcTail>& remote_ipc_tails() {
  static auto* cache = new FooterCache<IpcTail>();
  return *cache;
}

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

  // Opens the file's metadata. `projection`: IPC fields to decode (probe only). `known`: the
  // discovery snapshot when reading, so that an object is opened without a HEAD (the reads'
  // caller compares the object with that snapshot after them). `opened`: the object as the
  // probe opened it, with `known` its snapshot, read from instead of a new open (its first
  // bytes, which the open fetched, cost no other request).
  Result<OpenFile> open(const std::string& path, bool for_probe, const std::vector<int>& projection,
                        const FileInfo* known = nullptr, File* opened = nullptr) {
    OpenFile f;
    // Arrow opens by name with a plain open, which waits forever on a FIFO;
    // it gets a descriptor that was opened without blocking and found to be
    // a regular file instead (or, for the memory map, which only opens by
    // name, that descriptor's /proc name). For a local file always the kernel's
    // descriptor, whatever IoBackend the context injects: Arrow reads it itself.
    // An object in object storage is read through the context's IoBackend instead, by ranges
    // (IoRandomAccessFile); the caller's snapshot checks around the reads hold for it too.
    std::shared_ptr<IoRandomAccessFile> remote;
    File checked;
    if (is_remote_url(path)) {
      FileInfo info;
      File object;
      if (known != nullptr && opened != nullptr) {
        info = *known;
        object = std::move(*opened);
      } else if (known != nullptr) {
        info = *known;
        SHARDLOAD_ASSIGN_OR_RETURN(const int fd, ctx_.io->open_known(path, *known));
        object = File(ctx_.io, fd, path);
      } else {
        SHARDLOAD_ASSIGN_OR_RETURN(object, File::open_stat(*ctx_.io, path, &info));
      }
      remote = std::make_shared<IoRandomAccessFile>(std::move(object),
                                                    static_cast<std::int64_t>(info.size));
    } else {
      SHARDLOAD_ASSIGN_OR_RETURN(checked, File::open(posix_io(), path));
    }
    if (format_ == Format::kParquet) {
      arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> file =
          std::shared_ptr<arrow::io::RandomAccessFile>(remote);
      if (!remote) file = arrow::io::ReadableFile::Open(checked.release());
      if (!file.ok()) return arrow_error(path, file.status(), ErrorCode::kIo);
      parquet::ArrowReaderProperties props;
      props.set_use_threads(false);
      // See the top of the file. A remote file's groups are pre-buffered by read_groups
      // instead, several at once (GetRecordBatchReader's would replace that buffer).
      props.set_pre_buffer(!remote);
      std::shared_ptr<parquet::FileMetaData> footer;
      if (remote && known != nullptr && !for_probe) footer = remote_footers().find(path, *known);
      parquet::arrow::FileReaderBuilder builder;
      arrow::Status st = builder.Open(*file, parquet::default_reader_properties(), footer);
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
      if (remote && known != nullptr && footer == nullptr) {
        remote_footers().put(path, *known, md, md->size());
      }
      return f;
    }
    // IPC: probing maps the file so that a batch's row count costs no read of
    // its body (uncompressed buffers are zero-copy slices of the mapping);
    // reads use positional reads of only the needed batches and columns.
    std::shared_ptr<arrow::io::RandomAccessFile> file = remote;
    std::shared_ptr<IpcTail> tail;
    if (remote) {
      // The footer, kept from an earlier open of this snapshot or read now (a probe's from the
      // last bytes its open fetched), is held by the file: Arrow's open reads it from memory.
      if (known != nullptr && !for_probe) tail = remote_ipc_tails().find(path, *known);
      if (!tail) {
        SHARDLOAD_ASSIGN_OR_RETURN(tail, read_ipc_tail(path, *remote));
        if (known != nullptr) {
          remote_ipc_tails().put(path, *known, tail,
                                 static_cast<std::size_t>(tail->bytes->size()) +
                                     tail->batches.size() * sizeof(IpcBlock));
        }
      }
      remote->hold(tail->at, tail->bytes);
    } else if (for_probe) {
      auto m = arrow::io::MemoryMappedFile::Open(descriptor_path(checked.fd(), path),
                                                 arrow::io::FileMode::READ);
      if (!m.ok()) return arrow_error(path, m.status(), ErrorCode::kIo);
      file = *m;
    } else {
      auto r = arrow::io::ReadableFile::Open(checked.release());
      if (!r.ok()) return arrow_error(path, r.status(), ErrorCode::kIo);
      file = *r;
    }
    SHARDLOAD_ASSIGN_OR_RETURN(f, open_ipc(path, std::move(file), projection));
    if (tail) {
      if (static_cast<std::size_t>(f.ipc->num_record_batches()) != tail->batches.size()) {
        return Status(ErrorCode::kFormat, path + ": the footer lists " +
                                              std::to_string(tail->batches.size()) +
                                              " record batches, Arrow's reader " +
                                              std::to_string(f.ipc->num_record_batches()));
      }
      f.remote = std::move(remote);
      f.tail = std::move(tail);
    }
    return f;
  }

  // An IPC object's footer, read by the object's last kFooterReadBytes (a second request only
  // for a larger footer), and the blocks of its record batches.
  static Result<std::shared_ptr<IpcTail>> read_ipc_tail(const std::string& path,
                                                        IoRandomAccessFile& file) {
    constexpr std::int64_t kMinFile = 8 + 10;  // leading magic and padding, length and magic
    const auto size = *file.GetSize();
    if (size < kMinFile) {
      return Status(ErrorCode::kFormat, path + ": not a readable Arrow IPC file (Feather v2): " +
                                            std::to_string(size) + " bytes");
    }
    const auto read = [&](std::int64_t at,
                          std::int64_t n) -> Result<std::shared_ptr<arrow::Buffer>> {
      auto buf = file.ReadAt(at, n);
      if (!buf.ok()) return arrow_error(path, buf.status(), ErrorCode::kIo);
      if ((*buf)->size() != n) {
        return Status(ErrorCode::kIo, path + ": read " + std::to_string((*buf)->size()) +
                                          " bytes at " + std::to_string(at) + ", expected " +
                                          std::to_string(n));
      }
      return *std::move(buf);
    };
    const std::int64_t first = std::min(size, static_cast<std::int64_t>(kFooterReadBytes));
    SHARDLOAD_ASSIGN_OR_RETURN(std::shared_ptr<arrow::Buffer> last, read(size - first, first));
    const auto bytes = [](const arrow::Buffer& b, std::int64_t at, std::int64_t n) {
      return std::span<const std::byte>(reinterpret_cast<const std::byte*>(b.data()) + at,
                                        static_cast<std::size_t>(n));
    };
    SHARDLOAD_ASSIGN_OR_RETURN(const std::int64_t len,
                               ipc_footer_length(path, bytes(*last, first - 10, 10)));
    if (len > size - kMinFile) {
      return Status(ErrorCode::kFormat, path +
                                            ": not a readable Arrow IPC file (Feather v2): "
                                            "a footer of " +
                                            std::to_string(len) + " bytes in a file of " +
                                            std::to_string(size));
    }
    auto tail = std::make_shared<IpcTail>();
    tail->at = size - 10 - len;
    if (len + 10 <= first) {
      // A copy of the footer's bytes alone: a cache entry holds no more than it counts.
      auto own = arrow::AllocateBuffer(len + 10);
      if (!own.ok()) return arrow_error(path, own.status(), ErrorCode::kIo);
      std::memcpy((*own)->mutable_data(), last->data() + (first - 10 - len),
                  static_cast<std::size_t>(len + 10));
      tail->bytes = *std::move(own);
    } else {
      SHARDLOAD_ASSIGN_OR_RETURN(tail->bytes, read(tail->at, len + 10));
    }
    SHARDLOAD_ASSIGN_OR_RETURN(tail->batches,
                               parse_ipc_footer(path, bytes(*tail->bytes, 0, len), size));
    return tail;
  }

  // An IPC reader of `projection` over `file`: also the probe's second reader, of the one
  // column it counts rows by, over the file its first reader opened (so that the bytes the
  // probe's open fetched serve both, and the footer costs no second request).
  Result<OpenFile> open_ipc(const std::string& path,
                            std::shared_ptr<arrow::io::RandomAccessFile> file,
                            const std::vector<int>& projection) {
    OpenFile f;
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
    f.file = std::move(file);
    return f;
  }

  // The rows of each record batch of a remote IPC object, from the batches' metadata alone
  // (no body is read): neighbouring metadata (within kMetadataGap of each other, a file of
  // small batches) comes in one request, the requests `chunks_in_flight` at once.
  Result<std::vector<std::int64_t>> remote_batch_rows(const std::string& path, const OpenFile& f) {
    constexpr std::int64_t kMetadataGap = std::int64_t{64} << 10;
    constexpr std::int64_t kMetadataSpan = std::int64_t{4} << 20;
    const std::vector<IpcBlock>& blocks = f.tail->batches;
    struct Span {
      std::size_t a, b;  // blocks [a, b)
      std::int64_t lo, hi;
    };
    std::vector<Span> spans;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const IpcBlock& k = blocks[i];
      if (!spans.empty()) {
        Span& last = spans.back();
        if (k.offset >= last.hi && k.offset - last.hi <= kMetadataGap &&
            k.offset + k.metadata - last.lo <= kMetadataSpan) {
          last.b = i + 1;
          last.hi = k.offset + k.metadata;
          continue;
        }
      }
      spans.push_back({i, i + 1, k.offset, k.offset + k.metadata});
    }
    std::vector<std::int64_t> rows(blocks.size(), 0);
    SHARDLOAD_ASSIGN_OR_RETURN(const std::size_t in_flight, chunks_in_flight_of(path));
    const Status st = fetch_ahead(
        spans.size(), in_flight, kRemoteIpcWindowBytes,
        [&](std::size_t i) -> Result<std::uint64_t> {
          const Span& sp = spans[i];
          auto buf = f.remote->ReadAt(sp.lo, sp.hi - sp.lo);
          if (!buf.ok()) return arrow_error(path, buf.status(), ErrorCode::kIo);
          if ((*buf)->size() != sp.hi - sp.lo) {
            return Status(ErrorCode::kIo, path + ": record batch metadata at " +
                                              std::to_string(sp.lo) + " came back short");
          }
          for (std::size_t b = sp.a; b < sp.b; ++b) {
            const auto* at =
                reinterpret_cast<const std::byte*>((*buf)->data()) + (blocks[b].offset - sp.lo);
            SHARDLOAD_ASSIGN_OR_RETURN(
                rows[b], parse_ipc_batch_rows(path + ": record batch " + std::to_string(b),
                                              {at, static_cast<std::size_t>(blocks[b].metadata)}));
          }
          return std::uint64_t{0};
        },
        [](std::size_t) { return Status::ok(); });
    if (!st.is_ok()) return st;
    return rows;
  }

  // A group or batch that decoded to other rows than discovery found: the file changed.
  static Status rows_changed(const std::string& where, std::int64_t found, std::int64_t expected) {
    return Status(ErrorCode::kChanged, where + ": " + std::to_string(found) + " rows, expected " +
                                           std::to_string(expected));
  }

  // PreBufferMetadata of `batches` (empty: all), its refusal an error naming `path`.
  static Status prebuffer_ipc_metadata(const std::string& path,
                                       arrow::ipc::RecordBatchFileReader& reader,
                                       const std::vector<int>& batches) {
    const arrow::Status st = reader.PreBufferMetadata(batches);
    if (st.ok()) return Status::ok();
    return Status(ErrorCode::kIo,
                  path + ": cannot read the record batches' metadata: " + st.ToString());
  }

  // The field index and value shape of each selected column, or why one
  // cannot be used. The default selection is every numeric scalar column in
  // schema order; a file without any gives its numeric array columns instead
  // (a file of embeddings alone).
  Result<std::vector<int>> select(const std::string& path, const arrow::Schema& schema,
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
        return Status(ErrorCode::kFormat, path + ": column '" + n +
                                              "' not found (columns: " + join_fields(schema) + ")");
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

  // The Parquet leaf columns under the selected fields `idx` (a list column's values), each
  // with the index in `idx` of its field.
  static std::vector<std::pair<int, std::size_t>> parquet_leaves(const OpenFile& f,
                                                                 const std::vector<int>& idx) {
    const auto& fields = f.parquet->manifest().schema_fields;
    std::vector<std::pair<const parquet::arrow::SchemaField*, std::size_t>> todo;
    for (std::size_t c = 0; c < idx.size(); ++c) {
      todo.emplace_back(&fields[static_cast<std::size_t>(idx[c])], c);
    }
    std::vector<std::pair<int, std::size_t>> leaves;
    while (!todo.empty()) {
      const auto [field, c] = todo.back();
      todo.pop_back();
      if (field->is_leaf()) leaves.emplace_back(field->column_index, c);
      for (const auto& child : field->children) todo.emplace_back(&child, c);
    }
    std::sort(leaves.begin(), leaves.end());  // the columns in the file's order
    return leaves;
  }

  // Each row group's rows against the values its selected column chunks hold. Arrow reads as
  // many rows as a row group says, whatever its chunks hold: one that says fewer would lose
  // the rest without a word, one that says more would read short. A column that is not
  // repeated holds one value (or null) per row, a list column at least one per row.
  static Status check_row_groups(const std::string& path, const OpenFile& f,
                                 const std::vector<int>& idx,
                                 const std::vector<std::string>& names) {
    const auto md = f.parquet->parquet_reader()->metadata();
    const auto leaves = parquet_leaves(f, idx);
    for (int g = 0; g < md->num_row_groups(); ++g) {
      const auto rg = md->RowGroup(g);
      const std::int64_t rows = rg->num_rows();
      for (const auto& [leaf, c] : leaves) {
        const std::int64_t values = rg->ColumnChunk(leaf)->num_values();
        const bool repeated = md->schema()->Column(leaf)->max_repetition_level() > 0;
        if (repeated ? values < rows : values != rows) {
          return Status(ErrorCode::kFormat,
                        path + ": row group " + std::to_string(g) + ": column '" + names[c] +
                            "' holds " + std::to_string(values) + " values, but the row group " +
                            "says " + std::to_string(rows) + " rows" +
                            (repeated ? " (a list column holds at least one per row)" : ""));
        }
      }
    }
    return Status::ok();
  }

  Result<ShardProbe> probe_impl(const std::string& path) {
    ShardProbe p;
    p.shard.path = path;
    // An object's open fetches its last bytes, where the footer is read from next: a Parquet
    // footer within Arrow's default footer read (64 KiB), an IPC footer within read_ipc_tail's
    // (the same), one request per probe.
    SHARDLOAD_ASSIGN_OR_RETURN(
        File opened, File::open_tail(*ctx_.io, path, &p.shard.snapshot, kFooterReadBytes));
    if (!p.shard.snapshot.regular) return Status(ErrorCode::kFormat, path + ": not a regular file");
    // An object is read through this open (one request fewer per object); a local file is
    // opened again by a descriptor of the kernel's (see open).
    const bool remote = is_remote_url(path);
    const FileInfo* known = remote ? &p.shard.snapshot : nullptr;
    SHARDLOAD_ASSIGN_OR_RETURN(OpenFile f, open(path, true, {}, known, remote ? &opened : nullptr));
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
        return Status(ErrorCode::kFormat,
                      path + ": columns: '" + names[i] + "' is " + what(shapes[i]) + " but '" +
                          names[0] + "' is " + what(shapes[0]) +
                          (mixed ? "; array and scalar columns cannot be mixed"
                                 : "; array columns must share a shape") +
                          " (pass " + option_mention("columns") + " to choose)");
      }
      if (shapes[i].dtype != shapes[0].dtype && !options_.dtype) {
        return Status(ErrorCode::kFormat, path + ": columns: '" + names[i] + "' is " +
                                              shapes[i].dtype.name() + " but '" + names[0] +
                                              "' is " + shapes[0].dtype.name() +
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

  Status read_impl(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) {
    SHARDLOAD_ASSIGN_OR_RETURN(ArrowExtra e, decode_extra(s));
    // Our descriptor stays open over Arrow's reads, so that the file's state
    // after them can be compared with the snapshot (a write through any path
    // moves ctime; a file renamed over the path moves the replaced one's).
    SHARDLOAD_ASSIGN_OR_RETURN(File file, open_checked(*ctx_.io, s, ctx_.check_snapshot));
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
        return Status(ErrorCode::kChanged,
                      s.path + ": record batch count differs from discovery's");
      }
      if (is_remote_url(s.path)) return read_ipc_remote(l, s, e, lo, hi, names, shapes, f, dst);
    }

    // A remote Parquet file's needed row groups are fetched ahead, a window of them at once
    // (their column chunks' ranged reads in flight together on Arrow's I/O pool), so that
    // a request's latency is not paid once per group; the window bounds what is buffered.
    constexpr std::int64_t kRemoteWindowBytes = std::int64_t{64} << 20;
    const bool prefetch = f.parquet && is_remote_url(s.path);
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
                         const std::vector<ColumnShape>& shapes, OpenFile& f, std::byte* dst) {
    struct Needed {
      int g;
      std::int64_t start;  // the file row of its first row
      std::shared_ptr<arrow::RecordBatch> batch;
    };
    struct Unit {
      std::size_t a, b;            // needed[a, b)
      std::int64_t at = 0, n = 0;  // the bytes fetched as one; none where n == 0
    };
    std::vector<Needed> needed;
    std::int64_t start = 0;
    std::int64_t needed_rows = 0;
    for (std::size_t g = 0; g < e.group_rows.size(); ++g) {
      const std::int64_t end = start + e.group_rows[g];
      if (end > lo && start < hi) {
        needed.push_back({static_cast<int>(g), start, nullptr});
        needed_rows += e.group_rows[g];
      }
      start = end;
    }
    if (needed.empty()) return Status::ok();
    SHARDLOAD_ASSIGN_OR_RETURN(const std::size_t in_flight, chunks_in_flight_of(s.path));
    const std::vector<IpcBlock>& blocks = f.tail->batches;
    const auto block = [&](std::size_t i) { return blocks[static_cast<std::size_t>(needed[i].g)]; };
    std::int64_t span = 0;      // the needed batches' metadata and bodies
    std::int64_t selected = 0;  // the selected columns' values in them
    for (std::size_t i = 0; i < needed.size(); ++i) span += block(i).metadata + block(i).body;
    for (const ColumnShape& c : shapes) {
      selected += c.elements() * static_cast<std::int64_t>(c.dtype.size);
    }
    selected *= needed_rows;
    std::vector<Unit> units;
    if (2 * selected >= span) {
      // Runs of neighbouring batches of up to request_bytes each (a larger batch alone), as
      // a piece of an npy object is one GET up to that size: measured on loopback, units of
      // 1 MiB, 8 at once, took twice as long as units of 8 MiB (each request's cost on the
      // server and the client was the bottleneck, not its latency).
      SHARDLOAD_ASSIGN_OR_RETURN(const StoreOptions store, store_options_of(s.path));
      const std::int64_t target = store.request_bytes;
      for (std::size_t i = 0; i < needed.size(); ++i) {
        const IpcBlock k = block(i);
        if (!units.empty()) {
          Unit& u = units.back();
          if (k.offset == u.at + u.n && u.n + k.metadata + k.body <= target) {
            u.b = i + 1;
            u.n += k.metadata + k.body;
            continue;
          }
        }
        units.push_back({i, i + 1, k.offset, k.metadata + k.body});
      }
    } else {
      std::vector<int> indices;
      for (std::size_t i = 0; i < needed.size(); ++i) {
        units.push_back({i, i + 1});
        indices.push_back(needed[i].g);
      }
      SHARDLOAD_RETURN_IF_ERROR(prebuffer_ipc_metadata(s.path, *f.ipc, indices));
    }
    const auto where = [&](std::size_t i) {
      return s.path + ": record batch " + std::to_string(needed[i].g);
    };
    return fetch_ahead(
        units.size(), in_flight, kRemoteIpcWindowBytes,
        [&](std::size_t u) -> Result<std::uint64_t> {
          const Unit& unit = units[u];
          if (unit.n > 0) {
            auto bytes = f.remote->ReadAt(unit.at, unit.n);
            if (!bytes.ok()) return arrow_error(where(unit.a), bytes.status(), ErrorCode::kIo);
            if ((*bytes)->size() != unit.n) {
              return Status(ErrorCode::kChanged, where(unit.a) + ": the object ends before " +
                                                     std::to_string(unit.at + unit.n));
            }
            f.remote->hold(unit.at, *std::move(bytes));
          }
          Status st;
          for (std::size_t i = unit.a; i < unit.b && st.is_ok(); ++i) {
            auto batch = f.ipc->ReadRecordBatch(needed[i].g);
            if (batch.ok()) {
              st = check_batch(where(i), **batch);
              needed[i].batch = *std::move(batch);
            } else {
              st = arrow_error(where(i), batch.status(), ErrorCode::kIo);
            }
          }
          // The decoded batches keep what they use of the unit's bytes.
          if (unit.n > 0) f.remote->drop(unit.at);
          if (!st.is_ok()) return st;
          std::int64_t rows = 0;
          for (std::size_t i = unit.a; i < unit.b; ++i) rows += e.group_rows[needed[i].g];
          return static_cast<std::uint64_t>(rows) * l.row_bytes;
        },
        [&](std::size_t u) -> Status {
          for (std::size_t i = units[u].a; i < units[u].b; ++i) {
            const std::shared_ptr<arrow::RecordBatch> batch = std::move(needed[i].batch);
            const std::int64_t rows = e.group_rows[needed[i].g];
            if (batch->num_rows() != rows) return rows_changed(where(i), batch->num_rows(), rows);
            if (ctx_.stats != nullptr) ctx_.stats->decodes.fetch_add(1, std::memory_order_relaxed);
            const std::int64_t first = needed[i].start;
            SHARDLOAD_RETURN_IF_ERROR(
                interleave(l, s, where(i), *batch, names, shapes, std::max(lo, first) - first,
                           std::min(hi, first + rows) - first, first, lo, dst));
          }
          return Status::ok();
        });
  }

  // Rows [ra, rb) of one decoded batch whose row 0 is file row `first`, into
  // the destination (file row `lo` at dst), columns interleaved. Row blocks of
  // about kBlockBytes: each block's destination stays in cache while every
  // column writes its part of it, instead of each column sweeping the tile.
  Status interleave(const ReadSpec& l, const Shard& s, const std::string& where,
                    const arrow::RecordBatch& batch, const std::vector<std::string>& names,
                    const std::vector<ColumnShape>& shapes, std::int64_t ra, std::int64_t rb,
                    std::int64_t first, std::int64_t lo, std::byte* dst) {
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
        return Status(
            ErrorCode::kChanged,
            where + ": column '" + names[c] + "' is missing or has another type than at discovery");
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

  Format format_;
  FormatOptions options_;
  ReaderContext ctx_;
};

}  // namespace

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
