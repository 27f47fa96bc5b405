#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/format.hpp"

namespace shardload {
namespace {

TEST(DType, ParsesNamesAndCodes) {
  for (const char* name : {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                           "uint64", "float16", "float32", "float64", "complex64", "complex128"}) {
    auto d = parse_dtype(name);
    ASSERT_TRUE(d) << name;
    EXPECT_EQ(d->name(), name);
    auto again = parse_dtype("<" + d->code());
    ASSERT_TRUE(again) << d->code();
    EXPECT_EQ(*again, *d);
  }
}

TEST(DType, ByteOrder) {
  bool big = false;
  ASSERT_TRUE(parse_dtype(">f8", &big));
  EXPECT_TRUE(big);
  ASSERT_TRUE(parse_dtype("<i4", &big));
  EXPECT_FALSE(big);
  ASSERT_TRUE(parse_dtype("|u1", &big));
  EXPECT_FALSE(big);
  ASSERT_TRUE(parse_dtype(">u1", &big));
  EXPECT_FALSE(big) << "one-byte types have no byte order";
  EXPECT_FALSE(parse_dtype("|f4")) << "'|' is only for one-byte types";
}

TEST(DType, SwapUnitSplitsComplex) {
  EXPECT_EQ(parse_dtype("complex64")->swap_unit(), 4);
  EXPECT_EQ(parse_dtype("complex128")->swap_unit(), 8);
  EXPECT_EQ(parse_dtype("float16")->swap_unit(), 2);
}

TEST(DType, RejectsUnknown) {
  for (const char* bad :
       {"", "f", "f3", "i16", "float128", "c4", "O", "<U8", "S5", "M8", "f4x", "int", "<"}) {
    auto d = parse_dtype(bad);
    ASSERT_FALSE(d) << bad;
    EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("unsupported dtype"), std::string::npos);
  }
}

// The one parser of a stored-type option (CLI --dtype, Python dtype=, discover_once): an order
// travels only when the text spells one.
TEST(DType, DtypeOptionKeepsOnlyASpelledByteOrder) {
  FormatOptions o;
  ASSERT_TRUE(set_dtype_option("float32", &o));
  EXPECT_EQ(o.dtype, *parse_dtype("float32"));
  EXPECT_FALSE(o.big_endian.has_value());
  ASSERT_TRUE(set_dtype_option(">i2", &o));
  EXPECT_EQ(o.dtype, *parse_dtype("int16"));
  EXPECT_EQ(o.big_endian, std::optional<bool>(true));
  ASSERT_TRUE(set_dtype_option("<f8", &o));
  EXPECT_EQ(o.big_endian, std::optional<bool>(false));
  const FormatOptions before = o;
  const Status bad = set_dtype_option("float31", &o);
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("float31"), std::string::npos) << bad.message();
  EXPECT_EQ(o, before);
}

// A message names an option by a mark, which each front end spells its own way: every row of
// the table and the options outside it, as a name and as set to a value.
TEST(OptionMention, EachFrontEndSpellsEveryOptionItsOwnWay) {
  std::vector<std::string> names = {"format", "pattern", "astype"};
  for (const auto& row : format_option_table()) names.emplace_back(row.name);
  for (const auto& name : names) {
    std::string flag = name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    const std::string message = "x: pass " + option_mention(name) + " or " +
                                option_mention(name, true) + "'v' (and " + option_mention(name) +
                                ")";
    EXPECT_EQ(spell_options(message, OptionSpelling::kPython),
              "x: pass " + name + "= or " + name + "='v' (and " + name + "=)");
    EXPECT_EQ(spell_options(message, OptionSpelling::kCli),
              "x: pass --" + flag + " or --" + flag + "='v' (and --" + flag + ")");
    const std::string neutral = spell_options(message, OptionSpelling::kNeutral);
    EXPECT_EQ(neutral.find('='), std::string::npos) << neutral;
    EXPECT_EQ(neutral.find("--"), std::string::npos) << neutral;
    EXPECT_EQ(neutral.find('\x1f'), std::string::npos) << neutral;
  }
  EXPECT_EQ(spell_options("pass " + option_mention("trailing_shape"), OptionSpelling::kNeutral),
            "pass the trailing shape option");
}

// Text that is no mark of a known option is the message's own (a file name may hold any byte
// but NUL and '/'): left as it is.
TEST(OptionMention, TextThatIsNoMarkIsLeftAlone) {
  const std::string m(1, '\x1f');
  for (const std::string& text : {"a" + m, m + m, "a" + m + "not_an_option" + m + " b", m + "dtype",
                                  m + "dtype=x" + m, std::string("plain")}) {
    for (const auto s : {OptionSpelling::kNeutral, OptionSpelling::kPython, OptionSpelling::kCli}) {
      EXPECT_EQ(spell_options(text, s), text);
    }
  }
  // A stray mark before a real one: the stray one stays, the real one is spelled.
  EXPECT_EQ(spell_options(m + m + "dtype" + m, OptionSpelling::kCli), m + "--dtype");
}

}  // namespace
}  // namespace shardload
