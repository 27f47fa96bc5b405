// The command line's reading of _meta.json (what `shardload read` verifies
// against): bounded like every metadata file, errors naming it.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/commands.hpp"
#include "util.hpp"

namespace shardload {
namespace {

TEST(WriteMeta, SeedAndDtypeOrNothing) {
  testing::TempDir dir;
  auto m = cli::read_write_meta(dir.path());
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_FALSE(m->seed);
  testing::write_file(dir.file("_meta.json"),
                      R"({"seed": -7, "dtype": "int16", "shape": [4], "num_shards": 1, )"
                      R"("rows": [4]})");
  m = cli::read_write_meta(dir.path());
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_FALSE(m->foreign);
  EXPECT_EQ(m->seed, -7);
  EXPECT_EQ(m->dtype, "int16");
}

// Only shardload write's exact keys make its _meta.json: another tool's file (the seed
// recipe's script writes one) is foreign and none of its values is taken, not even a
// seed that would otherwise be refused.
TEST(WriteMeta, AnotherToolsFileIsForeign) {
  testing::TempDir dir;
  for (const char* text :
       {R"({"seed": -7, "dtype": "int16", "shape": [4], "rows": [4]})",
        R"({"seed": 1, "dtype": "int16", "shape": [4], "num_shards": 1, "rows": [4], )"
        R"("generator": "numpy"})",
        R"({"seed": "not an int", "rows_per_shard": [4]})", "{}"}) {
    testing::write_file(dir.file("_meta.json"), text);
    auto m = cli::read_write_meta(dir.path());
    ASSERT_TRUE(m) << text << ": " << m.status().message();
    EXPECT_TRUE(m->foreign) << text;
    EXPECT_FALSE(m->seed) << text;
  }
}

// Deep nesting, a huge file and a seed that is no int64 are errors naming the
// file, never a crash (the old regex scan recursed per character, and a
// too-long seed threw out of std::stoll).
TEST(WriteMeta, MalformedFilesAreErrorsNamingThem) {
  testing::TempDir dir;
  const std::string file = dir.file("_meta.json");
  const auto error = [&](const std::string& text) {
    testing::write_file(file, text);
    auto m = cli::read_write_meta(dir.path());
    EXPECT_FALSE(m);
    return m ? std::string() : m.status().message();
  };
  EXPECT_EQ(
      error(R"({"seed": 1, "x": )" + std::string(100000, '[') + std::string(100000, ']') + "}"),
      file + ": JSON nesting deeper than 64 levels");
  // Errors in a file with shardload write's keys; a damaged one (not JSON) is an error too.
  EXPECT_EQ(
      error(R"({"seed": 99999999999999999999999)" +
            std::string(R"(, "dtype": "int16", "shape": [4], "num_shards": 1, "rows": [4]})")),
      file + ": seed: expected an integer that fits int64, found 9.999999999999999e+22");
  EXPECT_EQ(
      error(R"({"seed": 18446744073709551615)" +
            std::string(R"(, "dtype": "int16", "shape": [4], "num_shards": 1, "rows": [4]})")),
      file + ": seed: expected an integer that fits int64, found 18446744073709551615");
  EXPECT_EQ(
      error(R"({"seed": "3")" +
            std::string(R"(, "dtype": "int16", "shape": [4], "num_shards": 1, "rows": [4]})")),
      file +
          ": seed: expected an integer that fits int64, "
          "found \"3\"");
  EXPECT_EQ(error(R"({"seed": 1, "dtype": "int16"  )" + std::string(1000000, ' ')),
            file + ": not valid JSON");
  testing::write_file(file, "{}");
  std::filesystem::resize_file(file, std::uint64_t{10} << 30);
  auto m = cli::read_write_meta(dir.path());
  ASSERT_FALSE(m);
  EXPECT_EQ(m.status().message().rfind(file + ": size: 10737418240 bytes is more than", 0), 0u)
      << m.status().message();
}

}  // namespace
}  // namespace shardload
