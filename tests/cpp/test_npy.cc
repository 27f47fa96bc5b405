#include <gtest/gtest.h>

#include "shardload/io.hpp"
#include "shardload/npy.hpp"
#include "shardload/shard_source.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::npy_bytes;
using testing::npy_dict;

Result<NpyHeader> parse(const std::string& bytes) {
  std::span<const std::byte> s(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
  auto total = npy_header_size(s);
  if (!total) return total.status();
  return parse_npy_header(s.first(std::min<std::size_t>(*total, s.size())));
}

TEST(NpyHeader, ParsesCommonForms) {
  auto h = parse(npy_bytes(npy_dict("<f4", false, "(3, 4)"), ""));
  ASSERT_TRUE(h) << h.status().message();
  EXPECT_EQ(h->dtype.name(), "float32");
  EXPECT_EQ(h->shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_FALSE(h->fortran_order);
  EXPECT_EQ(h->data_bytes, 48u);
  EXPECT_EQ(h->data_offset % 64, 0u);
}

TEST(NpyHeader, KeysInAnyOrderSpacingAndTrailingComma) {
  for (const std::string dict : {"{'shape': (5,), 'descr': '>i2', 'fortran_order': True}",
                                 "{ \"fortran_order\" :True ,'shape':( 5 , ),'descr':'>i2' , }",
                                 "{'fortran_order': True, 'descr': '>i2', 'shape': (5L,)}"}) {
    auto h = parse(npy_bytes(dict, ""));
    ASSERT_TRUE(h) << dict << ": " << h.status().message();
    EXPECT_EQ(h->shape, std::vector<std::int64_t>{5});
    EXPECT_TRUE(h->big_endian);
    EXPECT_TRUE(h->fortran_order);
    EXPECT_EQ(h->dtype.name(), "int16");
  }
}

TEST(NpyHeader, Versions) {
  for (int v : {1, 2, 3}) {
    auto h = parse(npy_bytes(npy_dict("|b1", false, "(7,)"), "", v));
    ASSERT_TRUE(h) << v << ": " << h.status().message();
    EXPECT_EQ(h->major, v);
    EXPECT_EQ(h->data_offset % 64, 0u);
  }
  std::string four = npy_bytes(npy_dict("|b1", false, "(7,)"), "", 2);
  four[6] = 4;
  auto h = parse(four);
  ASSERT_FALSE(h);
  EXPECT_NE(h.status().message().find("version 4.0"), std::string::npos);
}

void expect_error(const std::string& bytes, const std::string& needle) {
  auto h = parse(bytes);
  ASSERT_FALSE(h) << "accepted: " << bytes.substr(10);
  EXPECT_EQ(h.status().code(), ErrorCode::kFormat);
  EXPECT_NE(h.status().message().find(needle), std::string::npos) << h.status().message();
}

TEST(NpyHeader, RejectsUnsupportedDtypes) {
  expect_error(npy_bytes(npy_dict("|O", false, "(3,)"), ""), "object dtype");
  expect_error(npy_bytes(npy_dict("<U5", false, "(3,)"), ""), "string dtype");
  expect_error(npy_bytes(npy_dict("|S5", false, "(3,)"), ""), "string dtype");
  expect_error(npy_bytes(npy_dict("<M8[ns]", false, "(3,)"), ""), "datetime");
  expect_error(npy_bytes(npy_dict("|V8", false, "(3,)"), ""), "structured");
  expect_error(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}", ""),
               "structured");
  expect_error(npy_bytes(npy_dict("<f16", false, "(3,)"), ""), "descr");
  expect_error(npy_bytes(npy_dict("f4", false, "(3,)"), ""), "byte-order");
}

TEST(NpyHeader, RejectsBadShapes) {
  expect_error(npy_bytes(npy_dict("<f4", false, "()"), ""), "0-d");
  expect_error(npy_bytes(npy_dict("<f4", false, "(5)"), ""), "not a tuple");
  expect_error(npy_bytes(npy_dict("<f4", false, "(-5,)"), ""), "shape");
  expect_error(npy_bytes(npy_dict("<f4", false, "(99999999999999999999,)"), ""), "int64");
  expect_error(npy_bytes(npy_dict("<f4", false, "(4294967296, 4294967296)"), ""), "overflows");
  expect_error(npy_bytes(npy_dict("<f8", false, "(1152921504606846976, 2)"), ""), "overflows");
}

TEST(NpyHeader, RejectsMalformedDicts) {
  expect_error("not numpy at all", "magic");
  expect_error(npy_bytes("{'descr': '<f4', 'shape': (3,)}", ""), "missing key 'fortran_order'");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False}", ""), "missing key 'shape'");
  expect_error(npy_bytes("{'fortran_order': False, 'shape': (3,)}", ""), "missing key 'descr'");
  expect_error(
      npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", ""),
      "twice");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", ""),
               "fortran_order");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", ""),
               "unexpected key 'x'");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} junk", ""),
               "after the header dict");
  expect_error(npy_bytes("'descr': '<f4'", ""), "expected '{'");
  // The header must end with a newline; replace it.
  std::string b = npy_bytes(npy_dict("<f4", false, "(3,)"), "");
  b.back() = ' ';
  expect_error(b, "newline");
  // Oversized declared header.
  std::string big("\x93NUMPY\x02\x00\xff\xff\xff\x0f", 12);
  expect_error(big, "exceeds the limit");
}

// The header tokenizer is iterative: 100,000 nested tuples, dicts or lists
// are an error, not a stack overflow.
TEST(NpyHeader, DeepNestingIsAnErrorNotARecursion) {
  const std::string deep_tuple = std::string(100000, '(') + std::string(100000, ')');
  expect_error(npy_bytes(npy_dict("<f4", false, deep_tuple), "", 2), "shape: expected");
  expect_error(npy_bytes(std::string(100000, '{'), "", 2), "expected a quoted key");
  expect_error(npy_bytes("{'descr': " + std::string(100000, '[') +
                             "], 'fortran_order': False, "
                             "'shape': (3,)}",
                         "", 2),
               "structured");
}

class NpyProbe : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(NpyProbe, ExactSizeRequired) {
  const std::string data(12 * 4, 'x');
  const std::string good = npy_bytes(npy_dict("<f4", false, "(3, 4)"), data);
  testing::write_file(dir_.file("good.npy"), good);
  FileInfo info;
  auto h = probe_npy(*ShardSource::files(), dir_.file("good.npy"), &info);
  ASSERT_TRUE(h) << h.status().message();
  EXPECT_EQ(info.size, good.size());

  testing::write_file(dir_.file("short.npy"), good.substr(0, good.size() - 1));
  h = probe_npy(*ShardSource::files(), dir_.file("short.npy"), &info);
  ASSERT_FALSE(h);
  EXPECT_NE(h.status().message().find(dir_.file("short.npy")), std::string::npos);
  EXPECT_NE(h.status().message().find("truncated"), std::string::npos) << h.status().message();

  testing::write_file(dir_.file("long.npy"), good + "z");
  h = probe_npy(*ShardSource::files(), dir_.file("long.npy"), &info);
  ASSERT_FALSE(h);
  EXPECT_NE(h.status().message().find("trailing bytes"), std::string::npos);

  testing::write_file(dir_.file("tiny.npy"), good.substr(0, 9));
  h = probe_npy(*ShardSource::files(), dir_.file("tiny.npy"), &info);
  ASSERT_FALSE(h);
  EXPECT_NE(h.status().message().find(dir_.file("tiny.npy")), std::string::npos);

  testing::write_file(dir_.file("cut-header.npy"), good.substr(0, 40));
  h = probe_npy(*ShardSource::files(), dir_.file("cut-header.npy"), &info);
  ASSERT_FALSE(h);
  EXPECT_NE(h.status().message().find("ends inside the header"), std::string::npos)
      << h.status().message();
}

TEST_F(NpyProbe, LongHeaderNeedsSecondRead) {
  // A header longer than the first 4 KiB read (legal in version 2.0).
  std::string dict = npy_dict("<i8", false, "(2,)");
  dict.insert(dict.size() - 1, std::string(6000, ' '));
  testing::write_file(dir_.file("long-header.npy"), npy_bytes(dict, std::string(16, '\1'), 2));
  FileInfo info;
  auto h = probe_npy(*ShardSource::files(), dir_.file("long-header.npy"), &info);
  ASSERT_TRUE(h) << h.status().message();
  EXPECT_GT(h->data_offset, 6000u);
}

}  // namespace
}  // namespace shardload
