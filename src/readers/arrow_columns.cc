// What the Parquet and IPC readers (arrow_reader.cc) share for the columns they decode:
// the dtype an Arrow type maps to, the casts and fill values of a copy, the shape of a
// column's value in one row (scalars, fixed-size lists, fixed_shape_tensor), and copying a
// decoded batch's columns into row-major rows. Apart from the reader because it depends on
// neither format's reading: it sees one decoded column at a time.
#include "readers/detail/arrow_columns.hpp"
#include "readers/detail/arrow_io.hpp"

#include <arrow/api.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include "base/detail/json.hpp"
#include "shardload/format.hpp"

namespace shardload::detail {

namespace {

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

}  // namespace

bool is_plain_number(const arrow::DataType& t) {
  auto d = dtype_of(t);
  return d.is_ok() && d->kind != DTypeKind::kBool;
}

namespace {

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

// The value as stored: the shortest digits that read back as it ("1e-09", "1e+300", "5e-324"),
// so a value refused is never shown as one that would cast ("0.000000" for 1e-09). A half float
// is shown through float, which holds it exactly.
template <typename S>
std::string value_string(S v) {
  if constexpr (std::is_same_v<S, bool>) {
    return v ? "true" : "false";
  } else if constexpr (kIsInt<S>) {
    return std::to_string(v);
  } else {
    using W = std::conditional_t<std::is_same_v<S, double>, double, float>;
    const W w = static_cast<W>(v);
    if (std::isnan(w)) return "nan";  // a NaN's sign bit means nothing to a cast
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, w);
    return std::string(buf, r.ptr);
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

}  // namespace

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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
  // A read the File failed keeps its own code (a key changed under the read is kChanged).
  if (const Status* failed = read_failure(st)) {
    return Status(failed->code(), path + ": " + failed->message()).with_errno(failed->sys_errno());
  }
  return Status(code, path + ": " + st.ToString());
}

std::string join_fields(const arrow::Schema& s) {
  std::string out;
  for (int i = 0; i < s.num_fields(); ++i) {
    out += (i ? ", " : "") + s.field(i)->name() + ": " + s.field(i)->type()->ToString();
  }
  return out.empty() ? "none" : out;
}

}  // namespace shardload::detail
