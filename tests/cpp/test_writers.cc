// The format writers save uses sit beside their readers behind the descriptor: what each
// writes, its reader reads back byte for byte, and the metadata text is written from the
// structures the readers parse.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "engine/detail/save_files.hpp"
#include "readers/detail/zarr.hpp"
#include "shardload/byte_order.hpp"
#include "shardload/fill.hpp"
#include "shardload/formats.hpp"
#include "shardload/layout.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::TempDir;

std::vector<const FormatDescriptor*> writable_formats() {
  std::vector<const FormatDescriptor*> out;
  for (const auto& d : formats()) {
    if (d.writer) out.push_back(&d);
  }
  return out;
}

TEST(WritersTest, SaveWritesNpyRawAndZarrAndNothingElse) {
  std::vector<std::string> names;
  for (const auto* d : writable_formats()) names.push_back(d->name);
  EXPECT_EQ(names, (std::vector<std::string>{"npy", "raw", "zarr"}));
  EXPECT_EQ(writable_format_names_text(), "npy, raw or zarr");
  for (const Format f : {Format::kHdf5, Format::kParquet, Format::kArrow, Format::kCustom}) {
    EXPECT_EQ(find_format(f)->writer, nullptr) << format_name(f);
  }
  EXPECT_TRUE(find_format(Format::kZarr)->writer->writes_directories());
  EXPECT_FALSE(find_format(Format::kNpy)->writer->writes_directories());
}

// Every format save writes, through the save's one writer (each shard's keys through the
// store's sinks), awkward dtypes and shapes (empty shards, zero-width rows, one byte and
// sixteen byte elements), rows written in two disjoint pieces out of order: the format's
// own reader, through discovery and a fill, gives back exactly the bytes written.
TEST(WritersTest, EveryWriterRoundTripsThroughItsReader) {
  const std::vector<DType> dtypes{{DTypeKind::kBool, 1},  {DTypeKind::kInt, 1},
                                  {DTypeKind::kUInt, 2},  {DTypeKind::kFloat, 2},
                                  {DTypeKind::kFloat, 8}, {DTypeKind::kComplex, 16},
                                  {DTypeKind::kInt, 8}};
  const std::vector<std::vector<std::int64_t>> trailings{{}, {3, 2}, {0}};
  const std::vector<std::int64_t> shard_rows{5, 0, 3, 1};
  for (const FormatDescriptor* d : writable_formats()) {
    for (const DType& dtype : dtypes) {
      for (const auto& trailing : trailings) {
        SCOPED_TRACE(d->name + " " + dtype.name() + " " + std::to_string(trailing.size()));
        TempDir dir;
        detail::SaveSpec spec;
        spec.format = d->format;
        spec.dtype = dtype;
        spec.trailing = trailing;
        spec.row_bytes = dtype.size;
        for (const auto e : trailing) spec.row_bytes *= static_cast<std::size_t>(e);
        spec.offsets = {0};
        for (const auto r : shard_rows) spec.offsets.push_back(spec.offsets.back() + r);
        const std::int64_t total = spec.offsets.back();
        ASSERT_TRUE(detail::create_shard_files(dir.path(), &spec));
        // Valid elements of the dtype (bool: 0 or 1), different in every row.
        std::vector<std::byte> data(static_cast<std::size_t>(total) * spec.row_bytes);
        for (std::size_t i = 0; i < data.size(); ++i) {
          data[i] = static_cast<std::byte>(dtype.kind == DTypeKind::kBool ? i % 2 : i * 7 % 251);
        }
        const auto rb = static_cast<std::int64_t>(spec.row_bytes);
        for (std::size_t s = 0; s < shard_rows.size(); ++s) {
          const std::int64_t first = spec.offsets[s];
          const std::int64_t mid = first + shard_rows[s] / 2, end = spec.offsets[s + 1];
          ASSERT_TRUE(detail::write_rows(dir.path(), spec, mid, end, data.data() + mid * rb));
          ASSERT_TRUE(detail::write_rows(dir.path(), spec, first, mid, data.data() + first * rb));
        }
        ASSERT_TRUE(detail::write_metadata(dir.path(), spec));

        DiscoverOptions opts;
        opts.use_manifest = false;
        opts.format.format = d->format;
        auto layout = try_discover(Source::directory(dir.path()), opts);
        ASSERT_TRUE(layout) << layout.status().message();
        EXPECT_EQ(layout->dtype, dtype);
        EXPECT_EQ(layout->trailing_shape, trailing);
        ASSERT_EQ(layout->total_rows(), total);
        std::vector<std::byte> back(data.size());
        ASSERT_TRUE(fill_rows(*layout, 0, total, back.data()));
        EXPECT_EQ(back, data);
      }
    }
  }
}

// The .zarray the writer writes is the text of a ZarrMeta that the reader's parser reads
// back as the same ZarrMeta.
TEST(WritersTest, ZarrMetadataTextParsesBackToItsMeta) {
  for (const DType dtype :
       {DType{DTypeKind::kBool, 1}, DType{DTypeKind::kUInt, 1}, DType{DTypeKind::kInt, 4},
        DType{DTypeKind::kFloat, 2}, DType{DTypeKind::kComplex, 8}}) {
    for (const bool big : {false, true}) {
      detail::ZarrMeta m;
      m.dtype = dtype;
      m.big_endian = big && dtype.size > 1;
      m.shape = {7, 0, 3};
      m.chunks = {4, 1, 3};
      m.fill.assign(dtype.size, '\0');
      auto text = detail::zarr_v2_metadata_text(m);
      ASSERT_TRUE(text) << text.status().message();
      auto parsed = detail::parse_zarr_metadata("x/.zarray", *text, 2);
      ASSERT_TRUE(parsed) << parsed.status().message() << "\n" << *text;
      EXPECT_EQ(*parsed, m) << *text;
    }
  }
  // What it has no spelling for is refused, not written as something else.
  detail::ZarrMeta m;
  m.shape = {4};
  m.chunks = {4};
  m.fill = std::string(1, '\0');
  m.codecs = {detail::ZarrCodec::kZstd};
  EXPECT_EQ(detail::zarr_v2_metadata_text(m).status().code(), ErrorCode::kInvalidArgument);
  m.codecs.clear();
  m.fill = std::string(1, '\x01');
  EXPECT_EQ(detail::zarr_v2_metadata_text(m).status().code(), ErrorCode::kInvalidArgument);
}

// An overwrite keeps a store only while it holds the writer's metadata and chunk keys.
TEST(WritersTest, ZarrWriterKnowsItsChunkKeys) {
  const ShardWriter& w = *find_format(Format::kZarr)->writer;
  EXPECT_EQ(w.store_metadata_name(), ".zarray");
  EXPECT_TRUE(w.is_chunk_entry("0.0", 2, 1));
  EXPECT_TRUE(w.is_chunk_entry("12.0.0", 3, -1));
  EXPECT_TRUE(w.is_chunk_entry("3", 0, -1));
  EXPECT_FALSE(w.is_chunk_entry("3.0", 2, 3));    // past the last chunk
  EXPECT_FALSE(w.is_chunk_entry("03.0", 2, -1));  // not how a number is written
  EXPECT_FALSE(w.is_chunk_entry("1.0", 3, -1));   // the wrong number of axes
  EXPECT_FALSE(w.is_chunk_entry("1.1", 2, -1));
  EXPECT_FALSE(w.is_chunk_entry(".zarray", 2, -1));
  EXPECT_EQ(find_format(Format::kRaw)->writer->metadata_names(),
            std::vector<std::string>{"shardload.json"});
}

}  // namespace
}  // namespace shardload
