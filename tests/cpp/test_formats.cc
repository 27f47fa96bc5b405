// The format table: every format is one descriptor, and the lookups the engine and the front
// ends use (names, extensions, default patterns, sniffing, stores, capabilities) answer from it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <set>
#include <string>

#include "shardload/formats.hpp"
#include "shardload/layout.hpp"
#include "util.hpp"

namespace shardload {
namespace {

TEST(FormatsTest, EveryFormatIsOneDescriptorFoundByItsNameAndExtensions) {
  std::set<std::string> names;
  std::set<std::string> extensions;
  for (const FormatDescriptor& d : formats()) {
    EXPECT_EQ(find_format(d.format), &d) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << "name " << d.name << " twice";
    EXPECT_STREQ(format_name(d.format), d.name.c_str());
    EXPECT_TRUE(d.make_reader) << d.name;
    if (d.format == Format::kCustom) continue;
    auto parsed = parse_format(d.name);
    ASSERT_TRUE(parsed) << parsed.status().message();
    EXPECT_EQ(*parsed, d.format);
    for (const auto& a : d.aliases) EXPECT_EQ(parse_format(a).value(), d.format) << a;
    ASSERT_FALSE(d.extensions.empty()) << d.name;
    EXPECT_EQ(default_pattern(d.format), "shard_{:04d}" + d.extensions.front());
    for (const auto& e : d.extensions) {
      EXPECT_TRUE(extensions.insert(e).second) << "extension " << e << " twice";
      EXPECT_EQ(format_from_extension("dir/shard_0001" + e), d.format) << e;
      EXPECT_NE(format_names_text().find(d.name), std::string::npos);
    }
  }
  for (const char* builtin : {"npy", "raw", "hdf5", "parquet", "arrow", "zarr", "custom"}) {
    EXPECT_EQ(names.count(builtin), 1u) << builtin;
  }
  EXPECT_EQ(find_format(Format::kAuto), nullptr);
  EXPECT_EQ(format_name(Format::kAuto), std::string("auto"));
  EXPECT_EQ(parse_format("auto").value(), Format::kAuto);
  EXPECT_EQ(format_from_extension("notes.txt"), Format::kAuto);
  EXPECT_EQ(format_from_extension("data.zarr/"), Format::kZarr);
  const auto unknown = parse_format("tiff");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "unknown format 'tiff' (expected auto, " + format_names_text() + ")");
}

// What the engine asks instead of naming formats.
TEST(FormatsTest, CapabilitiesAreTheEnginesQuestions) {
  const auto caps = [](Format f) { return find_format(f)->capabilities; };
  EXPECT_TRUE(caps(Format::kNpy).contiguous_rows);
  EXPECT_TRUE(caps(Format::kNpy).parallel_probe);
  // A sidecar's "rows" list is by position: each probe is told its shard's (probe_at).
  EXPECT_TRUE(caps(Format::kRaw).parallel_probe);
  EXPECT_EQ(caps(Format::kZarr).freshness, Freshness::kMetadataFile);
  EXPECT_EQ(caps(Format::kNpy).freshness, Freshness::kFile);
  // Each file's default columns are held to the first's by discovery (ShardProbe::shared),
  // not by one reader that saw every probe.
  EXPECT_TRUE(caps(Format::kParquet).parallel_probe);
  EXPECT_TRUE(caps(Format::kArrow).parallel_probe);
  // A tile's objects read at once, each by a reader of its own (HDF5's make their requests
  // outside the library's lock); a Zarr tile fetches its chunks ahead itself.
  for (const Format f :
       {Format::kNpy, Format::kRaw, Format::kParquet, Format::kArrow, Format::kHdf5}) {
    EXPECT_TRUE(caps(f).remote_piece_lanes) << format_name(f);
  }
  for (const Format f : {Format::kZarr, Format::kCustom}) {
    EXPECT_FALSE(caps(f).remote_piece_lanes) << format_name(f);
  }
  for (const Format f : {Format::kHdf5, Format::kParquet, Format::kArrow, Format::kCustom}) {
    EXPECT_FALSE(caps(f).contiguous_rows) << format_name(f);
    EXPECT_FALSE(caps(f).cheap_reprobe) << format_name(f);
  }
  // A remote HDF5 probe's request comes before the lock (a local one is mostly the lock's).
  EXPECT_TRUE(caps(Format::kHdf5).parallel_probe);
  EXPECT_FALSE(caps(Format::kCustom).parallel_probe);
}

// Stores and magic bytes through the descriptors; special files are never opened blocking.
TEST(FormatsTest, SniffAndStoreDetection) {
  testing::TempDir dir;
  ASSERT_EQ(::mkdir(dir.file("a.store").c_str(), 0777), 0);
  EXPECT_EQ(store_format(dir.file("a.store")), Format::kAuto);
  testing::write_file(dir.file("a.store/zarr.json"), "{}");
  EXPECT_EQ(store_format(dir.file("a.store")), Format::kZarr);
  EXPECT_EQ(sniff_format(dir.file("a.store")), Format::kZarr);
  testing::write_file(dir.file("p"), "PAR1....");
  EXPECT_EQ(sniff_format(dir.file("p")), Format::kParquet);
  testing::write_file(dir.file("a"), std::string("ARROW1\0\0rest", 12));
  EXPECT_EQ(sniff_format(dir.file("a")), Format::kArrow);
  // HDF5 after a 512-byte user block.
  testing::write_file(dir.file("h"), std::string(512, 'u') + std::string("\x89HDF\r\n\x1a\n", 8));
  EXPECT_EQ(sniff_format(dir.file("h")), Format::kHdf5);
  testing::write_file(dir.file("short"), "PA");
  EXPECT_EQ(sniff_format(dir.file("short")), Format::kAuto);
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_EQ(sniff_format(dir.file("fifo")), Format::kAuto);  // returns at once: no writer
  EXPECT_EQ(sniff_format(dir.file("missing")), Format::kAuto);
}

}  // namespace
}  // namespace shardload
