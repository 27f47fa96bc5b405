// The column side of the Parquet and IPC readers (arrow_columns.cc): what both formats use to
// map Arrow types to dtypes, describe a column's value shape, and copy decoded batches into
// row-major rows. Internal to the readers layer; built only with SHARDLOAD_WITH_ARROW.
#pragma once

#include <arrow/api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

// A number other than bool (dtype_of maps it).
bool is_plain_number(const arrow::DataType& t);

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

// The dtype and value shape of a column's type; kFormat naming what is not supported.
Result<ColumnShape> column_shape(const std::shared_ptr<arrow::DataType>& type);

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

// Column `column` of a decoded batch as a view, k values per row.
ColumnView view_of(const arrow::Array& column, std::int64_t k);

// Where one column's values go, and what to say about them.
struct ColumnCopy {
  const std::string* path;
  const std::string* column;
  std::int64_t first_file_row;  // the file row of the view's row 0
  std::optional<double> fill;
  DType dtype;
  const std::vector<std::int64_t>* dims;  // the column's value shape (empty: scalar)
};

// Four columns of n 4-byte values into n rows (16 bytes each, `stride`
// apart): 4 x 4 register transposes, 16 values per 4 loads and 4 stores.
void transpose4x4(const std::byte* a, const std::byte* b, const std::byte* c, const std::byte* d,
                  std::size_t n, std::byte* out, std::size_t stride);
// Two columns of n 8-byte values into n rows (16 bytes each, `stride` apart).
void transpose2x2(const std::byte* a, const std::byte* b, std::size_t n, std::byte* out,
                  std::size_t stride);

// Copies rows [b, e) of one column view, stored as `source`, into `out` as c.dtype, rows
// `stride` bytes apart.
Status copy_values(const ColumnView& v, DType source, std::int64_t b, std::int64_t e,
                   std::byte* out, std::size_t stride, const ColumnCopy& c);

// kInvalidArgument when fill_value does not fit `dtype`.
Status check_fill(double fill, DType dtype);

// kFormat where a decoded batch's row counts disagree with its buffers (see the definition).
Status check_batch(const std::string& where, const arrow::RecordBatch& batch);

// An Arrow error as a Status naming the file.
Status arrow_error(const std::string& path, const arrow::Status& st, ErrorCode code);

// A schema's fields as "name: type, ..." ("none" for none), for messages.
std::string join_fields(const arrow::Schema& s);

}  // namespace shardload::detail
