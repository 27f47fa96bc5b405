// The Parquet / Arrow IPC reader against files written here with Arrow C++:
// row ranges that cut row groups and record batches, several columns, casts,
// nulls with and without a fill value. tests/python/test_parquet.py covers the
// rest with pyarrow as the oracle.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/writer.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/shard_source.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::TempDir;

// Columns a (int32: 0, 1, ...), b (int32: 1000 + i), c (float64: i / 2), and
// d (int32 with a null at row 5).
std::shared_ptr<arrow::Table> make_table(std::int32_t first, std::int32_t n) {
  arrow::Int32Builder a, b, d;
  arrow::DoubleBuilder c;
  for (std::int32_t i = first; i < first + n; ++i) {
    EXPECT_TRUE(a.Append(i).ok());
    EXPECT_TRUE(b.Append(1000 + i).ok());
    EXPECT_TRUE(c.Append(i / 2.0).ok());
    EXPECT_TRUE((i == 5 ? d.AppendNull() : d.Append(i)).ok());
  }
  std::shared_ptr<arrow::Array> aa, bb, cc, dd;
  EXPECT_TRUE(a.Finish(&aa).ok() && b.Finish(&bb).ok() && c.Finish(&cc).ok() && d.Finish(&dd).ok());
  auto schema =
      arrow::schema({arrow::field("a", arrow::int32()), arrow::field("b", arrow::int32()),
                     arrow::field("c", arrow::float64()), arrow::field("d", arrow::int32())});
  return arrow::Table::Make(schema, {aa, bb, cc, dd});
}

void write_parquet(const std::string& path, const arrow::Table& t, std::int64_t group_rows) {
  auto out = arrow::io::FileOutputStream::Open(path);
  ASSERT_TRUE(out.ok());
  // With the Arrow schema stored, as pyarrow does: without it a fixed-size list reads back as
  // a variable-size one.
  auto arrow_props = parquet::ArrowWriterProperties::Builder().store_schema()->build();
  ASSERT_TRUE(parquet::arrow::WriteTable(t, arrow::default_memory_pool(), *out, group_rows,
                                         parquet::default_writer_properties(), arrow_props)
                  .ok());
  ASSERT_TRUE((*out)->Close().ok());
}

void write_ipc(const std::string& path, const arrow::Table& t, std::int64_t batch_rows) {
  auto out = arrow::io::FileOutputStream::Open(path);
  ASSERT_TRUE(out.ok());
  auto w = arrow::ipc::MakeFileWriter(*out, t.schema());
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->WriteTable(t, batch_rows).ok());
  ASSERT_TRUE((*w)->Close().ok());
}

template <typename T>
std::vector<T> read_all(const Layout& l, std::int64_t lo, std::int64_t hi, Status* st) {
  std::vector<T> v(static_cast<std::size_t>(hi - lo) * l.row_elements());
  *st = fill_rows(l, lo, hi, reinterpret_cast<std::byte*>(v.data()));
  return v;
}

class ArrowFormats : public ::testing::TestWithParam<Format> {
 protected:
  std::string write(const TempDir& dir, const std::string& stem, std::int32_t first, std::int32_t n,
                    std::int64_t group) {
    const bool pq = GetParam() == Format::kParquet;
    const std::string path = dir.file(stem + (pq ? ".parquet" : ".arrow"));
    auto t = make_table(first, n);
    if (pq) {
      write_parquet(path, *t, group);
    } else {
      write_ipc(path, *t, group);
    }
    return path;
  }
};

TEST_P(ArrowFormats, RowRangesCutGroupsAndShards) {
  TempDir dir;
  const std::vector<std::string> paths{write(dir, "s0", 0, 10, 3), write(dir, "s1", 10, 0, 4),
                                       write(dir, "s2", 10, 7, 2)};
  DiscoverOptions o;
  o.format.columns = {"b", "a"};
  auto l = try_discover_paths(paths, o);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->total_rows(), 17);
  EXPECT_EQ(l->trailing_shape, std::vector<std::int64_t>{2});
  EXPECT_EQ(l->dtype.name(), "int32");
  for (std::int64_t lo = 0; lo <= 17; ++lo) {
    for (std::int64_t hi = lo; hi <= 17; hi += 3) {
      Status st;
      auto v = read_all<std::int32_t>(*l, lo, hi, &st);
      ASSERT_TRUE(st.is_ok()) << st.message();
      for (std::int64_t r = lo; r < hi; ++r) {
        const auto k = static_cast<std::size_t>(r - lo);
        ASSERT_EQ(v[2 * k], 1000 + r);
        ASSERT_EQ(v[2 * k + 1], r);
      }
    }
  }
}

// Arrow reads the file through a descriptor of its own: the change lands
// right after the reader's check when it opens the file (the first stat of
// the fill) and before Arrow's reads. Writing the same bytes back with the
// mtime restored leaves data Arrow reads fine (before, nothing was noticed);
// inverting the footer makes Arrow fail (before, a plain I/O error): both are
// the change.
// The natural decode unit: the largest row group (record batch), here 4 of 4, 4, 2 rows.
TEST_P(ArrowFormats, ProbeReportsTheRowGroupRows) {
  TempDir dir;
  const std::string path = write(dir, "s", 0, 10, 4);
  FormatOptions o;
  o.columns = {"a"};
  auto reader = make_reader(GetParam(), o);
  ASSERT_TRUE(reader) << reader.status().message();
  auto probe = (*reader)->probe(path);
  ASSERT_TRUE(probe) << probe.status().message();
  EXPECT_EQ(probe->shard.rows, 10);
  EXPECT_EQ(probe->decode_rows, 4);
}

TEST_P(ArrowFormats, ChangedWhileReading) {
  for (auto how : {testing::Change::kTouchInPlace, testing::Change::kRewriteInPlace}) {
    TempDir dir;
    const auto path = write(dir, "s0", 0, 9, 4);
    DiscoverOptions o;
    o.format.columns = {"b", "a"};
    auto l = try_discover_paths({path}, o);
    ASSERT_TRUE(l.is_ok()) << l.status().message();
    testing::ChangingIo io(path, how, testing::ChangingIo::On::kStat, 1);
    FillOptions f;
    f.source = ShardSource::over(io);
    std::vector<std::int32_t> v(static_cast<std::size_t>(9 * l->row_elements()));
    Status st = fill_rows(*l, 0, 9, reinterpret_cast<std::byte*>(v.data()), f);
    EXPECT_TRUE(io.changed());
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
    EXPECT_NE(st.message().find(path + ": changed while reading"), std::string::npos)
        << st.message();
  }
}

TEST_P(ArrowFormats, MixedTypesNeedACast) {
  TempDir dir;
  const auto path = write(dir, "s0", 0, 9, 4);
  DiscoverOptions o;
  o.format.columns = {"a", "c"};
  auto l = try_discover_paths({path}, o);
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.status().message().find(path + ": columns: 'c' is float64 but 'a' is int32"),
            std::string::npos)
      << l.status().message();
  o.format.dtype = DType{DTypeKind::kFloat, 8};
  l = try_discover_paths({path}, o);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  Status st;
  auto v = read_all<double>(*l, 2, 9, &st);
  ASSERT_TRUE(st.is_ok()) << st.message();
  for (std::size_t k = 0; k < 7; ++k) {
    EXPECT_EQ(v[2 * k], static_cast<double>(k + 2));
    EXPECT_EQ(v[2 * k + 1], (k + 2) / 2.0);
  }
}

TEST_P(ArrowFormats, NullsAreAnErrorUnlessFilled) {
  TempDir dir;
  const auto path = write(dir, "s0", 0, 9, 4);
  DiscoverOptions o;
  o.format.columns = {"d"};
  auto l = try_discover_paths({path}, o);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_TRUE(l->trailing_shape.empty());
  Status st;
  read_all<std::int32_t>(*l, 0, 4, &st);  // the null is in row 5
  EXPECT_TRUE(st.is_ok()) << st.message();
  read_all<std::int32_t>(*l, 3, 9, &st);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(path + ": column 'd': row 5 is null"), std::string::npos)
      << st.message();
  o.format.fill_value = -7;
  l = try_discover_paths({path}, o);
  ASSERT_TRUE(l.is_ok());
  auto v = read_all<std::int32_t>(*l, 3, 9, &st);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(v, (std::vector<std::int32_t>{3, 4, -7, 6, 7, 8}));
}

TEST_P(ArrowFormats, MissingColumnNamesTheFile) {
  TempDir dir;
  const auto path = write(dir, "s0", 0, 3, 4);
  DiscoverOptions o;
  o.format.columns = {"zz"};
  auto l = try_discover_paths({path}, o);
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.status().message().find(path + ": column 'zz' not found"), std::string::npos)
      << l.status().message();
}

// Wide rows in large groups: Parquet decodes a group in batches of about 1 MiB (2048 rows of
// 512-byte rows) and interleaves each in blocks of 64 rows (for int64; more for the narrower
// types, whose columns go through 4 x 4 or scalar copies instead of 2 x 2 transposes), so row
// ranges here start and end inside batches and blocks, and across a batch boundary; nulls in one
// column take the per-value path beside the typed copies of the others. The oracle is the formula.
template <typename Builder, typename T>
void wide_rows_case(Format format, const std::shared_ptr<arrow::DataType>& type) {
  constexpr int kCols = 64;
  constexpr std::int64_t kRows = 5000;
  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::Array>> arrays;
  for (int c = 0; c < kCols; ++c) {
    Builder b;
    for (std::int64_t r = 0; r < kRows; ++r) {
      ASSERT_TRUE(
          (c == 5 && r % 1000 == 999 ? b.AppendNull() : b.Append(static_cast<T>(r * kCols + c)))
              .ok());
    }
    std::shared_ptr<arrow::Array> a;
    ASSERT_TRUE(b.Finish(&a).ok());
    fields.push_back(arrow::field("c" + std::to_string(c), type));
    arrays.push_back(a);
  }
  auto t = arrow::Table::Make(arrow::schema(fields), arrays);
  TempDir dir;
  const bool pq = format == Format::kParquet;
  const std::string path = dir.file(pq ? "w.parquet" : "w.arrow");
  if (pq) {
    write_parquet(path, *t, 4096);
  } else {
    write_ipc(path, *t, 4096);
  }
  DiscoverOptions o;
  o.format.fill_value = -1;
  auto l = try_discover_paths({path}, o);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->trailing_shape, std::vector<std::int64_t>{kCols});
  const std::vector<std::pair<std::int64_t, std::int64_t>> ranges{
      {0, kRows}, {1, 2}, {2047, 2049}, {100, 4097}, {4095, 4097}, {3000, 4100}, {4999, 5000}};
  for (const auto& [lo, hi] : ranges) {
    Status st;
    auto v = read_all<T>(*l, lo, hi, &st);
    ASSERT_TRUE(st.is_ok()) << st.message();
    for (std::int64_t r = lo; r < hi; ++r) {
      for (int c = 0; c < kCols; ++c) {
        const T want = c == 5 && r % 1000 == 999 ? T{-1} : static_cast<T>(r * kCols + c);
        ASSERT_EQ(v[static_cast<std::size_t>((r - lo) * kCols + c)], want)
            << "rows [" << lo << ", " << hi << "), row " << r << ", column " << c;
      }
    }
  }
}

TEST_P(ArrowFormats, WideRowsAcrossBatchesAndBlocks) {
  wide_rows_case<arrow::Int64Builder, std::int64_t>(GetParam(), arrow::int64());
  wide_rows_case<arrow::Int32Builder, std::int32_t>(GetParam(), arrow::int32());
  wide_rows_case<arrow::Int16Builder, std::int16_t>(GetParam(), arrow::int16());
}

// A FixedSizeList<FixedSizeList<float>[2]>[3] column gives rows of shape (3, 2); two such
// columns stack as (rows, 2, 3, 2) in the order named.
TEST_P(ArrowFormats, NestedFixedSizeListsStack) {
  constexpr std::int64_t kRows = 9;
  auto lists = [&](float base) {
    arrow::FloatBuilder b;
    for (std::int64_t i = 0; i < kRows * 6; ++i) EXPECT_TRUE(b.Append(base + i).ok());
    std::shared_ptr<arrow::Array> v;
    EXPECT_TRUE(b.Finish(&v).ok());
    auto inner = arrow::FixedSizeListArray::FromArrays(v, 2);
    EXPECT_TRUE(inner.ok());
    auto outer = arrow::FixedSizeListArray::FromArrays(*inner, 3);
    EXPECT_TRUE(outer.ok());
    return *outer;
  };
  auto p = lists(0), q = lists(1000);
  auto t = arrow::Table::Make(
      arrow::schema({arrow::field("p", p->type()), arrow::field("q", q->type())}), {p, q});
  TempDir dir;
  const bool pq = GetParam() == Format::kParquet;
  const std::string path = dir.file(pq ? "n.parquet" : "n.arrow");
  if (pq) {
    write_parquet(path, *t, 4);
  } else {
    write_ipc(path, *t, 4);
  }
  DiscoverOptions o;
  o.format.columns = {"q", "p"};
  auto l = try_discover_paths({path}, o);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->trailing_shape, (std::vector<std::int64_t>{2, 3, 2}));
  Status st;
  auto v = read_all<float>(*l, 3, 8, &st);
  ASSERT_TRUE(st.is_ok()) << st.message();
  for (std::int64_t r = 3; r < 8; ++r) {
    for (std::int64_t j = 0; j < 6; ++j) {
      const auto at = static_cast<std::size_t>((r - 3) * 12 + j);
      EXPECT_EQ(v[at], 1000.0f + static_cast<float>(r * 6 + j));  // q first
      EXPECT_EQ(v[at + 6], static_cast<float>(r * 6 + j));
    }
  }
}

// A fill value the dtype cannot hold is refused at discovery, naming the value and the dtype:
// a finite one that would turn inf (70000 as float16, 1e300 as float32) as a fraction for an
// integer is. One that rounds is taken, and so are inf and nan for a float dtype.
TEST_P(ArrowFormats, FillValueTheDtypeCannotHoldIsRefused) {
  TempDir dir;
  const auto path = write(dir, "s0", 0, 9, 4);  // column d: a null at row 5
  DiscoverOptions o;
  o.format.columns = {"d"};
  const auto refused = [&](double fill, DType astype, const std::string& text) {
    o.format.fill_value = fill;
    o.format.dtype = astype;
    auto l = try_discover_paths({path}, o);
    ASSERT_FALSE(l.is_ok()) << fill;
    const std::string want = text + " is not representable as " + astype.name();
    EXPECT_NE(l.status().message().find(want), std::string::npos) << l.status().message();
  };
  refused(70000, DType{DTypeKind::kFloat, 2}, "70000.0");
  refused(-65520, DType{DTypeKind::kFloat, 2}, "-65520.0");
  refused(1e300, DType{DTypeKind::kFloat, 4}, "1e+300");
  refused(1e39, DType{DTypeKind::kComplex, 8}, "1e+39");
  refused(std::numeric_limits<double>::infinity(), DType{DTypeKind::kInt, 4}, "inf");
  refused(0.5, DType{DTypeKind::kInt, 4}, "0.5");
  const auto filled = [&](double fill, DType astype) {
    o.format.fill_value = fill;
    o.format.dtype = astype;
    auto l = try_discover_paths({path}, o);
    EXPECT_TRUE(l.is_ok()) << l.status().message();
    Status st;
    auto v = read_all<double>(*l, 5, 6, &st);  // float64 only below
    EXPECT_TRUE(st.is_ok()) << st.message();
    return v[0];
  };
  EXPECT_EQ(filled(1e300, DType{DTypeKind::kFloat, 8}), 1e300);
  EXPECT_EQ(filled(-std::numeric_limits<double>::infinity(), DType{DTypeKind::kFloat, 8}),
            -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(filled(std::nan(""), DType{DTypeKind::kFloat, 8})));
  o.format.fill_value = 65519.0;  // rounds to float16's largest, 65504, as numpy rounds it
  o.format.dtype = DType{DTypeKind::kFloat, 2};
  auto l = try_discover_paths({path}, o);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  Status st;
  auto v = read_all<_Float16>(*l, 5, 6, &st);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(static_cast<float>(v[0]), 65504.0f);
}

INSTANTIATE_TEST_SUITE_P(Formats, ArrowFormats, ::testing::Values(Format::kParquet, Format::kArrow),
                         [](const auto& info) { return std::string(format_name(info.param)); });

}  // namespace
}  // namespace shardload
