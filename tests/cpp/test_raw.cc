// The raw binary reader: sidecar and options, exact sizes, byte order.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/shard_source.hpp"
#include "util.hpp"

namespace shardload {
namespace {

class RawTest : public ::testing::Test {
 protected:
  // Shard i: `rows` rows of 3 int16 values counting up from `base`.
  void shard(int i, std::int16_t base, std::int64_t rows, bool big = false,
             const std::string& header = "") {
    std::vector<std::int16_t> v(static_cast<std::size_t>(rows * 3));
    std::iota(v.begin(), v.end(), base);
    std::string bytes = testing::raw(v);
    if (big) {
      for (std::size_t k = 0; k + 1 < bytes.size(); k += 2) std::swap(bytes[k], bytes[k + 1]);
    }
    testing::write_file(dir_.file(NumberPattern{"shard_", 4, ".bin"}.format(i)), header + bytes);
  }
  void sidecar(const std::string& json) { testing::write_file(dir_.file("shardload.json"), json); }
  Result<Layout> discover_raw(FormatOptions o = {}) {
    o.format = Format::kRaw;
    DiscoverOptions d;
    d.format = o;
    return try_discover(Source::directory(dir_.path()), d);
  }
  std::string error(FormatOptions o = {}) {
    auto l = discover_raw(std::move(o));
    EXPECT_FALSE(l);
    return spell_options(l.status().message(), OptionSpelling::kNeutral);  // as C++ shows it
  }
  static void expect_counting(const Layout& l) {
    for (std::int64_t lo = 0; lo <= l.total_rows(); ++lo) {
      for (std::int64_t hi = lo; hi <= l.total_rows(); ++hi) {
        std::vector<std::int16_t> out(static_cast<std::size_t>((hi - lo) * 3), -1);
        Status st = fill_rows(l, lo, hi, reinterpret_cast<std::byte*>(out.data()));
        ASSERT_TRUE(st) << st.message();
        for (std::size_t k = 0; k < out.size(); ++k) ASSERT_EQ(out[k], lo * 3 + std::int64_t(k));
      }
    }
  }
  testing::TempDir dir_;
};

TEST_F(RawTest, ChangedWhileReading) {
  for (testing::Change how : {testing::Change::kRewriteInPlace, testing::Change::kTruncate}) {
    shard(0, 0, 10);
    FormatOptions o;
    o.dtype = *parse_dtype("int16");
    o.trailing_shape = std::vector<std::int64_t>{3};
    auto l = discover_raw(o);
    ASSERT_TRUE(l) << l.status().message();
    const std::string path = dir_.file("shard_0000.bin");
    testing::ChangingIo io(path, how, testing::ChangingIo::On::kPread, 2, 6);
    FillOptions f;
    f.source = ShardSource::over(io);
    std::vector<std::int16_t> out(30);
    Status st = fill_rows(*l, 0, 10, reinterpret_cast<std::byte*>(out.data()), f);
    EXPECT_TRUE(io.changed());
    ASSERT_FALSE(st);
    EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
    EXPECT_NE(st.message().find(path + ": changed while reading"), std::string::npos)
        << st.message();
  }
}

TEST_F(RawTest, SidecarGivesDtypeShapeHeaderRows) {
  shard(0, 0, 4, false, "HDR!");
  shard(1, 12, 0, false, "HDR!");
  shard(2, 12, 5, true, "HDR!");  // byte order is per dataset, so make it consistent below
  shard(2, 12, 5, false, "HDR!");
  sidecar(R"({"dtype": "<i2", "shape": [3], "header_bytes": 4, "rows": [4, 0, 5]})");
  auto l = discover_raw();
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->format, Format::kRaw);
  EXPECT_EQ(l->rows(), (std::vector<std::int64_t>{4, 0, 5}));
  EXPECT_EQ(l->trailing_shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(l->shards[0].data_offset, 4u);
  expect_counting(*l);
}

TEST_F(RawTest, BigEndianFromTheSidecar) {
  shard(0, 0, 3, true);
  shard(1, 9, 6, true);
  sidecar(R"({"dtype": ">i2", "shape": [3]})");
  auto l = discover_raw();
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->shards[0].byte_swap, host_is_little_endian());
  expect_counting(*l);
}

TEST_F(RawTest, OptionsWithoutSidecar) {
  shard(0, 0, 7);
  shard(1, 21, 2);
  FormatOptions o;
  o.dtype = DType{DTypeKind::kInt, 2};
  o.trailing_shape = std::vector<std::int64_t>{3};
  auto l = discover_raw(o);
  ASSERT_TRUE(l) << l.status().message();
  expect_counting(*l);
}

TEST_F(RawTest, TrailingBytesAreAnErrorNeverDropped) {
  shard(0, 0, 4);
  testing::write_file(dir_.file("shard_0001.bin"), std::string(6 * 2 + 1, '\0'));
  sidecar(R"({"dtype": "int16", "shape": [3]})");
  EXPECT_EQ(error(), dir_.file("shard_0001.bin") +
                         ": size: 13 bytes is not header 0 + rows of 6 bytes (int16 "
                         "(little-endian), row shape (3,)): 2 whole rows and 1 bytes left over "
                         "(truncated, or the wrong dtype, shape or header)");
}

TEST_F(RawTest, OptionAndSidecarMustAgree) {
  shard(0, 0, 4);
  sidecar(R"({"dtype": "int16", "shape": [3]})");
  FormatOptions o;
  o.trailing_shape = std::vector<std::int64_t>{2};
  EXPECT_EQ(error(o), dir_.file("shardload.json") +
                          ": shape: (3,) differs from the trailing shape option (2,)");
}

TEST_F(RawTest, MalformedSidecarNamesFileAndField) {
  shard(0, 0, 4);
  sidecar(R"({"dtype": "int16", "shape": [3, "x"]})");
  EXPECT_EQ(error(), dir_.file("shardload.json") +
                         ": shape[1]: expected a non-negative integer, found \"x\"");
  sidecar(R"({"dtype": "int16", "shape": [3])");
  EXPECT_EQ(error(), dir_.file("shardload.json") + ": not valid JSON");
}

// Nesting at the limit parses (and fails on the unknown field); one level more,
// or 100,000 of them, is refused before any deep tree exists to overflow the
// stack of the recursive code that copies or prints it.
TEST_F(RawTest, DeeplyNestedSidecarIsRefusedByDepth) {
  shard(0, 0, 4);
  const std::string head = R"({"dtype": "int16", "shape": [3], "x": )";
  const auto arrays = [](std::size_t n) { return std::string(n, '[') + std::string(n, ']'); };
  sidecar(head + arrays(63) + "}");  // 64 levels with the top-level object
  EXPECT_NE(error().find("unknown field 'x'"), std::string::npos) << error();
  const std::string deep = dir_.file("shardload.json") + ": JSON nesting deeper than 64 levels";
  sidecar(head + arrays(64) + "}");
  EXPECT_EQ(error(), deep);
  sidecar(head + arrays(100000) + "}");
  EXPECT_EQ(error(), deep);
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += R"({"a":)";
  sidecar(objects + "1" + std::string(100000, '}'));
  EXPECT_EQ(error(), deep);
  sidecar(std::string(100000, '['));  // unterminated: the depth is found first
  EXPECT_EQ(error(), deep);
}

// A sidecar too large for metadata is refused from its size: a sparse 10 GB
// file is neither read nor allocated.
TEST_F(RawTest, HugeSidecarIsRefusedBySize) {
  shard(0, 0, 4);
  sidecar("{}");
  std::filesystem::resize_file(dir_.file("shardload.json"), std::uint64_t{10} << 30);
  const std::string msg = error();
  EXPECT_EQ(msg.rfind(dir_.file("shardload.json") + ": size: 10737418240 bytes is more than", 0),
            0u)
      << msg;
}

TEST_F(RawTest, SidecarRowsMustMatchTheSize) {
  shard(0, 0, 4);
  sidecar(R"({"dtype": "int16", "shape": [3], "rows": {"shard_0000.bin": 5}})");
  const std::string msg = error();
  EXPECT_NE(msg.find("shard_0000.bin: rows: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("says 5 rows, but the file's size 24 holds 4"), std::string::npos) << msg;
}

TEST_F(RawTest, OptionsOfOtherFormatsAreRefused) {
  FormatOptions o;
  o.dataset = "x";
  auto r = make_reader(Format::kRaw, o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(spell_options(r.status().message(), OptionSpelling::kCli)
                .rfind("raw: --dataset does "
                       "not apply",
                       0),
            0u)
      << r.status().message();
}

// footer_bytes: a trailer after each file's rows (the record length that ends a Fortran
// unformatted record) is skipped, as header_bytes skips the start; the rows still follow
// exactly from the size, and a file too short for both is an error naming it.
TEST_F(RawTest, FooterBytesAreSkippedAtTheEndOfEachFile) {
  const std::string footer("\x07\x00\xff\x10\x01", 5);
  const std::int64_t rows[] = {4, 0, 7};
  std::int16_t base = 0;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::int16_t> v(static_cast<std::size_t>(rows[i] * 3));
    std::iota(v.begin(), v.end(), base);
    base = static_cast<std::int16_t>(base + rows[i] * 3);
    testing::write_file(dir_.file(NumberPattern{"shard_", 4, ".bin"}.format(i)),
                        "HDR" + testing::raw(v) + footer);
  }
  FormatOptions o;
  o.dtype = *parse_dtype("int16");
  o.trailing_shape = std::vector<std::int64_t>{3};
  o.header_bytes = 3;
  o.footer_bytes = 5;
  auto l = discover_raw(o);
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->rows(), (std::vector<std::int64_t>{4, 0, 7}));
  expect_counting(*l);

  // Without the option the footer is bytes left over: an error, never dropped.
  FormatOptions without = o;
  without.footer_bytes.reset();
  EXPECT_NE(error(without).find("bytes left over"), std::string::npos);
  // A footer the file cannot hold.
  FormatOptions too_long = o;
  too_long.footer_bytes = 100;
  const std::string e = error(too_long);
  EXPECT_NE(e.find("shard_0000.bin: size: 32 bytes is shorter than the header of 3 bytes and "
                   "the footer of 100 bytes (truncated)"),
            std::string::npos)
      << e;
}

// An option the table gives to other formats is refused by the reader of one it does not
// apply to, naming the option and the formats it is for.
TEST_F(RawTest, FooterBytesApplyToRawOnly) {
  FormatOptions o;
  o.footer_bytes = 4;
  for (const Format f : {Format::kNpy, Format::kHdf5, Format::kParquet, Format::kZarr}) {
    auto r = make_reader(f, o);
    ASSERT_FALSE(r) << format_name(f);
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    const std::string message = spell_options(r.status().message(), OptionSpelling::kNeutral);
    EXPECT_NE(message.find("the footer bytes option does not apply (it is for raw)"),
              std::string::npos)
        << message;
  }
  EXPECT_TRUE(make_reader(Format::kRaw, o));
}

}  // namespace
}  // namespace shardload
