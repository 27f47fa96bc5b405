#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <string>

#include "shardload/codec.hpp"
#include "shardload/formats.hpp"

namespace shardload {
namespace {

Layout sample(int shards) {
  std::vector<Shard> v;
  for (int i = 0; i < shards; ++i) {
    Shard s;
    s.path = "/data/set/shard_" + std::to_string(i) + ".npy";
    s.rows = i % 7;
    s.data_offset = 128;
    s.byte_swap = i % 2 == 0;
    s.fortran_order = i % 3 == 0;
    s.snapshot = {static_cast<std::uint64_t>(1000 + i), -5 + 1700000000000000000LL * (i % 2),
                  i % 5 != 1, 1700000000000000001LL + i, static_cast<std::uint64_t>(i) << 40};
    if (i % 3 == 1) {
      s.linked.push_back({"/data/ext/part_" + std::to_string(i), {7, 8, true, 9, 10}});
      s.linked.push_back({"", {0, -1, false, -2, ~std::uint64_t{0}}});
    }
    s.extra = i % 4 == 0 ? std::string("\0x\xff", 3) : "";
    v.push_back(s);
  }
  FormatOptions o;
  o.dtype = *parse_dtype("complex64");
  o.big_endian = true;
  o.trailing_shape = std::vector<std::int64_t>{3, 0};
  o.header_bytes = 77;
  o.dataset = "/group/data";
  o.columns = {"a", "", "c"};
  o.fill_value = -0.5;
  return assemble_layout(Format::kNpy, o, *parse_dtype("float16"), {2, 5}, v).value();
}

void expect_equal(const Layout& a, const Layout& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.options, b.options);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.trailing_shape, b.trailing_shape);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.row_bytes, b.row_bytes);
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (std::size_t i = 0; i < a.shards.size(); ++i) {
    const auto& x = a.shards[i];
    const auto& y = b.shards[i];
    EXPECT_EQ(x.path, y.path);
    EXPECT_EQ(x.rows, y.rows);
    EXPECT_EQ(x.first_row, y.first_row);
    EXPECT_EQ(x.file_rows, y.file_rows);
    EXPECT_EQ(x.data_offset, y.data_offset);
    EXPECT_EQ(x.byte_swap, y.byte_swap);
    EXPECT_EQ(x.fortran_order, y.fortran_order);
    EXPECT_EQ(x.snapshot, y.snapshot);
    EXPECT_EQ(x.extra, y.extra);
    EXPECT_EQ(x.linked, y.linked);
  }
}

TEST(Codec, RoundTrip) {
  for (int n : {1, 2, 13, 1000}) {
    const Layout l = sample(n);
    const auto bytes = encode_layout(l);
    auto back = decode_layout(bytes);
    ASSERT_TRUE(back) << back.status().message();
    expect_equal(l, *back);
  }
}

TEST(Codec, RowViewsRoundTrip) {
  const Layout l = sample(13);
  for (auto [lo, hi] : {std::pair<std::int64_t, std::int64_t>{1, 2},
                        {3, 20},
                        {0, l.total_rows()},
                        {5, 5},
                        {l.total_rows(), l.total_rows()}}) {
    auto sub = slice_rows(l, lo, hi);
    ASSERT_TRUE(sub) << sub.status().message();
    auto back = decode_layout(encode_layout(*sub));
    ASSERT_TRUE(back) << back.status().message();
    expect_equal(*sub, *back);
  }
}

TEST(Codec, ViewsThatDoNotFitTheirFileAreRefused) {
  Layout l = sample(2);
  auto bytes = [&](std::int64_t first, std::int64_t file_rows) {
    Layout v = l;
    v.shards[1].first_row = first;
    v.shards[1].file_rows = file_rows;
    return encode_layout(v);
  };
  // shard 1 has 1 row: a view at row 3 of a 4-row file fits, at row 4 does not.
  EXPECT_TRUE(decode_layout(bytes(3, 4)));
  auto past = decode_layout(bytes(4, 4));
  ASSERT_FALSE(past);
  EXPECT_NE(past.status().message().find("does not fit the file's 4 rows"), std::string::npos)
      << past.status().message();
  // The whole file spelled as a view is another encoding of the same layout.
  auto whole = decode_layout(bytes(0, 1));
  ASSERT_FALSE(whole);
  EXPECT_NE(whole.status().message().find("a view of the whole file"), std::string::npos);
  // Another version's bytes are refused.
  auto v2 = encode_layout(l);
  v2[3] = '2';
  EXPECT_FALSE(decode_layout(v2));
}

TEST(Codec, SizeGrowsWithShardsOnlyAndSharesThePrefix) {
  const auto a = encode_layout(sample(1000)).size();
  const auto b = encode_layout(sample(2000)).size();
  // Linear in the shard count: each added shard costs its file-name suffix
  // ("1234.npy") plus a few bytes of varints and the mtime, ctime and inode.
  EXPECT_LT(b - a, 1000u * 64);
}

TEST(Codec, SharedPrefixIsStoredOnce) {
  Layout l = sample(1000);
  for (auto& s : l.shards) s.linked.clear();
  // The common directory is stored once: far less than the full paths next
  // to each shard's numbers (mtime, ctime and inode take up to 24 bytes).
  EXPECT_LT(encode_layout(l).size(), 1000u * (std::string("/data/set/shard_999.npy").size() + 24));
}

TEST(Codec, RefusesAnotherVersionAndUnknownFlags) {
  Layout l = sample(1);
  l.shards[0].linked.clear();
  auto bytes = encode_layout(l);
  ASSERT_TRUE(decode_layout(bytes));
  auto old = bytes;
  old[3] = '1';  // the version before snapshots had ctime and inode
  auto r = decode_layout(old);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("another version"), std::string::npos);
  // The shard's flags byte follows its path suffix, rows and data offset:
  // find it by setting an unknown bit on each byte in turn; at least the
  // flags byte must refuse it as flags (a varint made longer may shift it).
  int refused_as_flags = 0;
  for (std::size_t i = 4; i < bytes.size(); ++i) {
    auto c = bytes;
    c[i] |= 0x80;
    auto d = decode_layout(c);
    if (!d && d.status().message().find("unknown shard flags") != std::string::npos) {
      ++refused_as_flags;
    }
  }
  EXPECT_GE(refused_as_flags, 1);
}

TEST(Codec, AShardsDirectoriesTravelByInodeNotByDevice) {
  Layout l = sample(2);
  const auto without = encode_layout(l);
  l.shards[0].dirs = {{"", 7, 11}, {"/group/a", 7, 12}};
  const auto bytes = encode_layout(l);
  auto d = decode_layout(bytes);
  ASSERT_TRUE(d) << d.status().message();
  ASSERT_EQ(d->shards[0].dirs.size(), 2u);
  EXPECT_EQ(d->shards[0].dirs[0], (DirIdentity{"", 0, 11}));
  EXPECT_EQ(d->shards[0].dirs[1], (DirIdentity{"/group/a", 0, 12}));
  EXPECT_TRUE(d->shards[1].dirs.empty());
  EXPECT_EQ(encode_layout(*d), bytes);  // one encoding, one layout
  // A layout without directories encodes as before they were known.
  l.shards[0].dirs.clear();
  EXPECT_EQ(encode_layout(l), without);
  // A directory that is not under its shard's path is refused.
  l.shards[0].dirs = {{"elsewhere", 7, 11}};
  auto bad = decode_layout(encode_layout(l));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("not under its shard's path"), std::string::npos);
}

TEST(Codec, RejectsEveryTruncationAndCorruption) {
  const auto bytes = encode_layout(sample(5));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto r = decode_layout(std::span(bytes).first(n));
    EXPECT_FALSE(r) << "prefix of " << n << " bytes accepted";
  }
  auto extra = bytes;
  extra.push_back(0);
  EXPECT_FALSE(decode_layout(extra));
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    auto c = bytes;
    c[rng() % c.size()] ^= static_cast<std::uint8_t>(1 + rng() % 255);
    (void)decode_layout(c);  // must not crash; result may be either
  }
}

// slice_rows as it was written first, one pass over every shard: the oracle for the one that
// starts at the range's first shard.
Layout naive_slice(const Layout& layout, std::int64_t lo, std::int64_t hi) {
  std::vector<Shard> shards;
  const std::size_t n = layout.shards.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t first = layout.offsets[i];
    const std::int64_t end = layout.offsets[i + 1];
    const std::int64_t a = std::max(lo, first);
    const std::int64_t b = std::min(hi, end);
    const bool keep = a < b || (lo == hi && shards.empty() && (lo < end || i + 1 == n));
    if (!keep) continue;
    Shard s = layout.shards[i];
    const std::int64_t stored = s.stored_rows();
    s.first_row += a - first;
    s.rows = std::max<std::int64_t>(0, b - a);
    s.file_rows = stored;
    if (s.first_row == 0 && s.rows == stored) s.file_rows = -1;
    shards.push_back(std::move(s));
  }
  return assemble_layout(layout.format, layout.options, layout.dtype, layout.trailing_shape,
                         std::move(shards))
      .value();
}

TEST(Codec, SliceRowsMatchesAPassOverEveryShard) {
  // Zero-row shards (every 7th) at the start, inside and at the end of ranges; a slice of a
  // slice, whose shards are views already.
  const Layout l = sample(30);
  const Layout views = slice_rows(l, 2, l.total_rows() - 3).value();
  for (const Layout* layout : {&l, &views}) {
    const std::int64_t total = layout->total_rows();
    for (std::int64_t lo = 0; lo <= total; ++lo) {
      for (std::int64_t hi = lo; hi <= total; ++hi) {
        auto fast = slice_rows(*layout, lo, hi);
        ASSERT_TRUE(fast) << fast.status().message();
        ASSERT_EQ(encode_layout(*fast), encode_layout(naive_slice(*layout, lo, hi)))
            << "rows [" << lo << ", " << hi << ")";
      }
    }
  }
}

TEST(Codec, EachTileDecodesToItsSliceOnly) {
  Layout grid = sample(40);
  for (std::size_t i = 0; i < grid.shards.size(); ++i) grid.shards[i].decode_rows = 1 + i % 3;
  const Layout views = slice_rows(sample(40), 3, 90).value();
  for (const Layout* layout : {static_cast<const Layout*>(&grid), &views}) {
    for (std::int64_t p : {1, 2, 3}) {
      for (std::int64_t k : {1, 4, 64}) {
        const ReadPlan plan = plan_layout(*layout, p, k).value();
        auto tiles = encode_tiles(*layout, plan);
        ASSERT_TRUE(tiles) << tiles.status().message();
        ASSERT_EQ(tiles->offsets.size(), static_cast<std::size_t>(plan.tiles) + 1);
        for (std::int64_t t = 0; t < plan.tiles; ++t) {
          auto tile = decode_tile(tiles->bytes, tiles->offsets, t);
          ASSERT_TRUE(tile) << tile.status().message();
          const Layout want = slice_rows(*layout, plan.tile_begin(t), plan.tile_end(t)).value();
          expect_equal(*tile, want);
          // Only the shards with rows in the tile (zero-row shards have none).
          std::size_t covered = 0;
          for (std::size_t s = 0; s < layout->shards.size(); ++s) {
            covered += std::max(layout->offsets[s], plan.tile_begin(t)) <
                       std::min(layout->offsets[s + 1], plan.tile_end(t));
          }
          EXPECT_EQ(tile->shards.size(), covered) << "tile " << t;
        }
      }
    }
  }
}

TEST(Codec, DecodeTileRefusesWhatIsNoTileTable) {
  const Layout l = sample(20);
  const ReadPlan plan = plan_layout(l, 2, 2).value();
  const TileEncoding tiles = encode_tiles(l, plan).value();
  ASSERT_EQ(plan.tiles, 4);
  const auto refused = [&](std::span<const std::uint8_t> bytes,
                           std::span<const std::int64_t> offsets, std::int64_t t,
                           const std::string& why) {
    auto r = decode_tile(bytes, offsets, t);
    ASSERT_FALSE(r) << "tile " << t << " accepted";
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  refused(tiles.bytes, tiles.offsets, -1, "outside the table's 4 tiles");
  refused(tiles.bytes, tiles.offsets, 4, "outside the table's 4 tiles");
  refused(tiles.bytes, {}, 0, "outside the table's 0 tiles");
  refused(std::span(tiles.bytes).first(tiles.bytes.size() - 1), tiles.offsets, 3, "spans bytes");
  auto backwards = tiles.offsets;
  std::swap(backwards[1], backwards[2]);
  refused(tiles.bytes, backwards, 1, "spans bytes");
  // A table cut elsewhere than at the tiles: the bytes are no encoding.
  auto shifted = tiles.offsets;
  shifted[1] += 1;
  refused(tiles.bytes, shifted, 1, "encoded layout");
}

}  // namespace
}  // namespace shardload

namespace shardload {
namespace {

// Format options travel alone (discover_once's request) and come back equal, kAuto and a
// custom reader included; truncations, trailing bytes and a layout's encoding are refused.
TEST(Codec, FormatOptionsRoundTripAlone) {
  std::vector<FormatOptions> cases(4);
  cases[1] = sample(1).options;
  cases[1].format = Format::kParquet;
  cases[2].format = Format::kCustom;
  cases[2].reader = "rows";
  cases[2].columns = {"x"};
  cases[3].format = Format::kRaw;
  cases[3].dtype = *parse_dtype("uint16");
  cases[3].big_endian = false;
  cases[3].trailing_shape = std::vector<std::int64_t>{};
  for (const auto& o : cases) {
    const auto bytes = encode_format_options(o);
    const auto back = decode_format_options(bytes);
    ASSERT_TRUE(back) << back.status().message();
    EXPECT_EQ(*back, o);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(decode_format_options(std::span(bytes).first(n))) << n;
    }
    auto longer = bytes;
    longer.push_back(0);
    EXPECT_FALSE(decode_format_options(longer));
  }
  // Every format of the table travels, the ones added after kCustom included.
  for (const auto& d : formats()) {
    FormatOptions o;
    o.format = d.format;
    if (d.format == Format::kCustom) o.reader = "rows";  // a custom request names its reader
    const auto back = decode_format_options(encode_format_options(o));
    ASSERT_TRUE(back) << d.name << ": " << back.status().message();
    EXPECT_EQ(back->format, d.format) << d.name;
  }
  auto unknown = encode_format_options(FormatOptions{});
  unknown[4] = 0xee;  // the format code follows the magic
  EXPECT_FALSE(decode_format_options(unknown));
  const auto layout = encode_layout(sample(2));
  const auto refused = decode_format_options(layout);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("wrong magic"), std::string::npos);
  EXPECT_FALSE(decode_layout(encode_format_options(cases[1])));
}

// Options after the six that version 4 wrote (footer_bytes) travel only when set, flagged in
// the format's byte: a layout without them encodes exactly as before it, one with them comes
// back equal, and a cut anywhere in them is refused.
TEST(Codec, OptionsAfterTheFirstSixTravelOnlyWhenSet) {
  const Layout plain = sample(3);
  ASSERT_FALSE(plain.options.footer_bytes);
  const auto plain_bytes = encode_layout(plain);
  EXPECT_EQ(plain_bytes[4], static_cast<std::uint8_t>(plain.format));  // no flag

  Layout with = plain;
  with.options.footer_bytes = 4;
  const auto bytes = encode_layout(with);
  EXPECT_EQ(bytes[4], static_cast<std::uint8_t>(plain.format) | 0x80);
  const auto back = decode_layout(bytes);
  ASSERT_TRUE(back) << back.status().message();
  expect_equal(*back, with);
  EXPECT_EQ(back->options.footer_bytes, std::optional<std::uint64_t>(4));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_layout(std::span(bytes).first(n))) << n;
  }
  // The flag without a set option after it, and a set option written at its default, are
  // not encodings of any layout.
  auto flagged = plain_bytes;
  flagged[4] |= 0x80;
  EXPECT_FALSE(decode_layout(flagged));

  FormatOptions o;
  o.format = Format::kRaw;
  o.footer_bytes = 0;
  const auto alone = decode_format_options(encode_format_options(o));
  ASSERT_TRUE(alone) << alone.status().message();
  EXPECT_EQ(*alone, o);
}

// A remote Zarr store's server time at discovery (Shard::server_snapshot_s) reaches the
// process that decodes the layout (a Dask or Legate task), slices included; a layout without
// one encodes as before it was known.
TEST(Codec, AShardsServerTimeTravelsWithIt) {
  Layout l = sample(3);
  const auto without = encode_layout(l);
  l.shards[1].server_snapshot_s = 1796632801;
  const auto bytes = encode_layout(l);
  auto d = decode_layout(bytes);
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d->shards[0].server_snapshot_s, 0);
  EXPECT_EQ(d->shards[1].server_snapshot_s, 1796632801);
  EXPECT_EQ(d->shards[2].server_snapshot_s, 0);
  expect_equal(l, *d);
  EXPECT_EQ(encode_layout(*d), bytes);  // one encoding, one layout
  auto sub = slice_rows(*d, d->offsets[1], d->offsets[2]);
  ASSERT_TRUE(sub) << sub.status().message();
  auto sub_back = decode_layout(encode_layout(*sub));
  ASSERT_TRUE(sub_back) << sub_back.status().message();
  ASSERT_FALSE(sub_back->shards.empty());
  EXPECT_EQ(sub_back->shards.back().path, l.shards[1].path);
  EXPECT_EQ(sub_back->shards.back().server_snapshot_s, 1796632801);
  l.shards[1].server_snapshot_s = 0;
  EXPECT_EQ(encode_layout(l), without);
}

}  // namespace
}  // namespace shardload
