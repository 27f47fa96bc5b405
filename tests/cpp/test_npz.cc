// The .npz reader on archives built here (stored and deflated members, and the damage numpy
// never writes): stored members read by byte ranges, deflated ones decoded once per unit,
// and every refusal naming the file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "shardload/codec.hpp"
#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "util.hpp"

namespace shardload {
namespace {

struct Member {
  std::string name;
  std::string data;
  bool deflate = false;
  std::uint16_t flags = 0;
};

void put16(std::string* s, std::uint32_t v) {
  s->push_back(static_cast<char>(v & 0xFF));
  s->push_back(static_cast<char>((v >> 8) & 0xFF));
}
void put32(std::string* s, std::uint32_t v) {
  put16(s, v & 0xFFFF);
  put16(s, v >> 16);
}

std::string deflated(const std::string& in) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, static_cast<uLong>(in.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// A ZIP archive as Python's zipfile writes one: local headers and data, then the central
// directory and its end record (`zip64_locator`: a ZIP64 end locator before it).
std::string zip(const std::vector<Member>& members, bool zip64_locator = false) {
  std::string out, cd;
  for (const auto& m : members) {
    const std::string stored = m.deflate ? deflated(m.data) : m.data;
    const auto crc = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(m.data.data()), static_cast<uInt>(m.data.size())));
    const auto offset = static_cast<std::uint32_t>(out.size());
    const std::uint16_t method = m.deflate ? 8 : 0;
    put32(&out, 0x04034b50);
    put16(&out, 20);
    put16(&out, m.flags);
    put16(&out, method);
    put32(&out, 0);  // time, date
    put32(&out, crc);
    put32(&out, static_cast<std::uint32_t>(stored.size()));
    put32(&out, static_cast<std::uint32_t>(m.data.size()));
    put16(&out, static_cast<std::uint32_t>(m.name.size()));
    put16(&out, 4);  // an extra field the reader must skip
    out += m.name;
    out += std::string("\xfe\xca\0\0", 4);
    out += stored;
    put32(&cd, 0x02014b50);
    put16(&cd, 20);
    put16(&cd, 20);
    put16(&cd, m.flags);
    put16(&cd, method);
    put32(&cd, 0);
    put32(&cd, crc);
    put32(&cd, static_cast<std::uint32_t>(stored.size()));
    put32(&cd, static_cast<std::uint32_t>(m.data.size()));
    put16(&cd, static_cast<std::uint32_t>(m.name.size()));
    put32(&cd, 0);  // extra and comment lengths
    put32(&cd, 0);  // disk, internal attributes
    put32(&cd, 0);  // external attributes
    put32(&cd, offset);
    cd += m.name;
  }
  const auto cd_offset = static_cast<std::uint32_t>(out.size());
  out += cd;
  if (zip64_locator) {
    put32(&out, 0x07064b50);
    out += std::string(16, '\0');
  }
  put32(&out, 0x06054b50);
  put32(&out, 0);
  put16(&out, static_cast<std::uint32_t>(members.size()));
  put16(&out, static_cast<std::uint32_t>(members.size()));
  put32(&out, static_cast<std::uint32_t>(cd.size()));
  put32(&out, cd_offset);
  put16(&out, 0);
  return out;
}

// An int32 array (rows, 3) holding base, base + 1, ... as an .npy member.
std::string iota_npy(std::int64_t rows, std::int32_t base) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(rows * 3));
  std::iota(v.begin(), v.end(), base);
  return testing::npy_bytes(testing::npy_dict("<i4", false, "(" + std::to_string(rows) + ", 3)"),
                            testing::raw(v));
}

FormatOptions npz(std::string name = {}) {
  FormatOptions o;
  o.format = Format::kNpz;
  o.dataset = std::move(name);
  return o;
}

class NpzTest : public ::testing::Test {
 protected:
  Result<Layout> discover_one(const std::string& bytes, FormatOptions o = npz()) {
    testing::write_file(dir_.file("a.npz"), bytes);
    DiscoverOptions d;
    d.format = std::move(o);
    return try_discover_paths({dir_.file("a.npz")}, d);
  }
  std::string error(const std::string& bytes, FormatOptions o = npz()) {
    auto l = discover_one(bytes, std::move(o));
    EXPECT_FALSE(l);
    if (l) return {};
    EXPECT_NE(l.status().message().find(dir_.file("a.npz")), std::string::npos)
        << l.status().message();
    return spell_options(l.status().message(), OptionSpelling::kNeutral);  // as C++ shows it
  }
  // Rows [lo, hi) of `l` through one reader, counted in `stats`.
  static std::vector<std::int32_t> read(ShardReader& r, const Layout& l, std::int64_t lo,
                                        std::int64_t hi) {
    std::vector<std::int32_t> out(static_cast<std::size_t>((hi - lo) * 3));
    const Status s = r.read_rows(l, l.shards[0], lo, hi, reinterpret_cast<std::byte*>(out.data()));
    EXPECT_TRUE(s) << s.message();
    return out;
  }
  static std::vector<std::int32_t> iota(std::int64_t lo, std::int64_t hi) {
    std::vector<std::int32_t> v(static_cast<std::size_t>((hi - lo) * 3));
    std::iota(v.begin(), v.end(), static_cast<std::int32_t>(lo * 3));
    return v;
  }
  testing::TempDir dir_;
};

TEST_F(NpzTest, StoredMemberIsReadByRangesAtItsOffset) {
  const std::string npy = iota_npy(40, 0);
  const std::string archive = zip({{"x.npy", npy}});
  auto l = discover_one(archive);
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->format, Format::kNpz);
  EXPECT_EQ(l->shape(), (std::vector<std::int64_t>{40, 3}));
  const Shard& s = l->shards[0];
  // The data of the .npy inside the archive, read in place: no unit to decode.
  EXPECT_EQ(s.data_offset, archive.find(npy) + (npy.size() - 40 * 12));
  EXPECT_EQ(s.decode_rows, 0);
  ReaderStats stats;
  ReaderContext ctx;
  ctx.stats = &stats;
  auto r = make_reader(l->format, l->options, ctx);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(read(**r, *l, 3, 17), iota(3, 17));
  EXPECT_EQ(read(**r, *l, 0, 40), iota(0, 40));
  EXPECT_EQ(stats.decodes.load(), 0u);
}

TEST_F(NpzTest, DeflatedMemberIsDecodedOncePerUnit) {
  auto l = discover_one(zip({{"y.npy", iota_npy(100, 0), true}}));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->shards[0].decode_rows, 100);  // the whole member is the unit
  ReaderStats stats;
  ReaderContext ctx;
  ctx.stats = &stats;
  auto r = make_reader(l->format, l->options, ctx);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(read(**r, *l, 0, 10), iota(0, 10));
  EXPECT_EQ(read(**r, *l, 10, 57), iota(10, 57));
  EXPECT_EQ(read(**r, *l, 57, 100), iota(57, 100));
  EXPECT_EQ(stats.decodes.load(), 1u);
  EXPECT_EQ(stats.unit_cache_hits.load(), 2u);
  // Without the cache, each part inflates from the stream's start and is still right.
  ctx.unit_cache_bytes = 0;
  auto plain = make_reader(l->format, l->options, ctx);
  ASSERT_TRUE(plain);
  EXPECT_EQ(read(**plain, *l, 33, 66), iota(33, 66));
  // The whole dataset through the fill.
  std::vector<std::int32_t> all(300);
  ASSERT_TRUE(fill_rows(*l, 0, 100, reinterpret_cast<std::byte*>(all.data())));
  EXPECT_EQ(all, iota(0, 100));
}

TEST_F(NpzTest, TheLayoutTravelsThroughTheCodec) {
  auto l =
      discover_one(zip({{"a.npy", iota_npy(5, 0)}, {"b.npy", iota_npy(9, 0), true}}), npz("b"));
  ASSERT_TRUE(l) << l.status().message();
  auto back = decode_layout(encode_layout(*l));
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->format, Format::kNpz);
  EXPECT_EQ(back->options.dataset, "b");
  EXPECT_EQ(back->shards[0].extra, l->shards[0].extra);
  std::vector<std::int32_t> rows(27);
  ASSERT_TRUE(fill_rows(*back, 0, 9, reinterpret_cast<std::byte*>(rows.data())));
  EXPECT_EQ(rows, iota(0, 9));
}

TEST_F(NpzTest, ArchivesThatAreNotWhatTheyClaimAreRefusedNamingTheFile) {
  const std::string two = zip({{"a.npy", iota_npy(2, 0)}, {"b.npy", iota_npy(2, 0)}});
  EXPECT_NE(error(two).find("array: expected exactly one array when none is named, found 2 (a, "
                            "b); name one with the dataset option"),
            std::string::npos);
  EXPECT_NE(error(two, npz("c")).find("array 'c' not found (arrays in the archive: a, b)"),
            std::string::npos);
  EXPECT_NE(error(zip({})).find("the archive holds no arrays"), std::string::npos);
  EXPECT_NE(error(zip({{"a.npy", iota_npy(2, 0)}}, true)).find("ZIP64 archives are not supported"),
            std::string::npos);
  EXPECT_NE(error(zip({{"a.npy", iota_npy(2, 0), false, 1}}))
                .find("member 'a.npy': encrypted; encrypted archives are not supported"),
            std::string::npos);
  EXPECT_NE(error("PK\x05\x06").find("not a ZIP archive (4 bytes"), std::string::npos);
  std::string truncated = zip({{"a.npy", iota_npy(50, 0), true}});
  EXPECT_NE(error(truncated.substr(0, truncated.size() - 1)).find("not a ZIP archive"),
            std::string::npos);
  // A member that is no .npy, and one whose header disagrees with its size.
  EXPECT_NE(error(zip({{"a.npy", "hello"}})).find("not a .npy file"), std::string::npos);
  std::string npy = iota_npy(4, 0);
  EXPECT_NE(error(zip({{"a.npy", npy + "xx"}})).find("size: expected"), std::string::npos);
  // Options for other formats: an option error, before any file is named.
  FormatOptions o = npz();
  o.columns = {"c"};
  auto l = discover_one(zip({{"a.npy", npy}}), o);
  ASSERT_FALSE(l);
  EXPECT_NE(spell_options(l.status().message(), OptionSpelling::kNeutral)
                .find("npz: the columns option does not apply"),
            std::string::npos)
      << l.status().message();
}

// The first row's first value of the layout's only shard.
std::int32_t first_value(const Layout& l) {
  std::vector<std::int32_t> row(3);
  EXPECT_TRUE(fill_rows(l, 0, 1, reinterpret_cast<std::byte*>(row.data())));
  return row[0];
}

TEST_F(NpzTest, AMemberListedTwiceReadsItsLastEntryAsNumpyDoes) {
  // What zipfile's append mode leaves after writing x.npy again: two entries, the stale first.
  for (const bool deflate : {false, true}) {
    const std::string archive = zip({{"x.npy", iota_npy(4, 0), deflate},
                                     {"y.npy", iota_npy(2, 0), deflate},
                                     {"x.npy", iota_npy(6, 100), deflate}});
    for (const char* name : {"x", "x.npy"}) {
      auto l = discover_one(archive, npz(name));
      ASSERT_TRUE(l) << l.status().message();
      EXPECT_EQ(l->shape(), (std::vector<std::int64_t>{6, 3}));
      EXPECT_EQ(first_value(*l), 100);
    }
    // One array listed twice is one array: no name needed.
    auto one = discover_one(zip({{"x.npy", iota_npy(4, 0)}, {"x.npy", iota_npy(5, 9), deflate}}));
    ASSERT_TRUE(one) << one.status().message();
    EXPECT_EQ(one->shape(), (std::vector<std::int64_t>{5, 3}));
    EXPECT_EQ(first_value(*one), 9);
  }
}

TEST_F(NpzTest, TheMemberOfExactlyTheNameWinsAsNumpyDoes) {
  for (const bool bare_first : {false, true}) {
    std::vector<Member> members{{"x.npy", iota_npy(2, 0)}, {"x", iota_npy(3, 50)}};
    if (bare_first) std::swap(members[0], members[1]);
    const std::string archive = zip(members);
    auto bare = discover_one(archive, npz("x"));
    ASSERT_TRUE(bare) << bare.status().message();
    EXPECT_EQ(first_value(*bare), 50);
    auto npy = discover_one(archive, npz("x.npy"));
    ASSERT_TRUE(npy) << npy.status().message();
    EXPECT_EQ(first_value(*npy), 0);
    // Listed in natural order, whatever the directory's.
    EXPECT_NE(error(archive).find("found 2 (x, x.npy)"), std::string::npos);
  }
}

TEST_F(NpzTest, NamesAreTheNamesZipfileDecodes) {
  // Code page 437 without flag bit 11 (0x82 is e-acute), UTF-8 with it; a name ends at a NUL.
  auto cp437 = discover_one(zip({{"\x82.npy", iota_npy(2, 5)}}), npz("\xc3\xa9"));
  ASSERT_TRUE(cp437) << cp437.status().message();
  EXPECT_EQ(first_value(*cp437), 5);
  auto utf8 = discover_one(zip({{"\xc3\xa9.npy", iota_npy(2, 6), false, 0x800}}), npz("\xc3\xa9"));
  ASSERT_TRUE(utf8) << utf8.status().message();
  EXPECT_EQ(first_value(*utf8), 6);
  auto nul = discover_one(zip({{std::string("x.npy\0old", 9), iota_npy(2, 7)}}), npz("x"));
  ASSERT_TRUE(nul) << nul.status().message();
  EXPECT_EQ(first_value(*nul), 7);
  EXPECT_NE(error(zip({{"\xff.npy", iota_npy(2, 0), false, 0x800}}))
                .find("central directory entry 0: the name is flagged UTF-8 and is not"),
            std::string::npos);
}

TEST_F(NpzTest, ArchivesThatReadersCouldTakeDifferentlyAreRefused) {
  const std::string x = iota_npy(4, 0);
  const std::string good = zip({{"x.npy", x}, {"y.npy", iota_npy(3, 0)}});
  const std::size_t cd = good.find(std::string("PK\x01\x02", 4));
  const std::size_t end = good.rfind(std::string("PK\x05\x06", 4));
  const auto patch = [](std::string bytes, std::size_t at, std::uint32_t v) {
    std::string le;
    put32(&le, v);
    return bytes.replace(at, 4, le);
  };
  const auto patched = [&](std::size_t at, std::uint32_t v) { return patch(good, at, v); };
  // x.npy's directory sizes reach into y.npy's local header.
  const auto longer = static_cast<std::uint32_t>(x.size() + 8);
  const std::string overlap = patch(patched(cd + 20, longer), cd + 24, longer);
  EXPECT_NE(error(overlap, npz("x"))
                .find("member 'x.npy': data (" + std::to_string(x.size() + 8) +
                      " bytes at offset 39) runs past the next member's local "
                      "header, at " +
                      std::to_string(39 + x.size()) + " (overlapping members)"),
            std::string::npos);
  // The local header names another member, or gives other sizes.
  std::string renamed = good;
  renamed[30] = 'z';
  EXPECT_NE(error(renamed, npz("x"))
                .find("member 'x.npy': the local header at offset 0 names "
                      "another member ('z.npy')"),
            std::string::npos);
  EXPECT_NE(error(patched(18, static_cast<std::uint32_t>(x.size() - 12)), npz("x"))
                .find("member 'x.npy': the local header gives " + std::to_string(x.size() - 12) +
                      " bytes"),
            std::string::npos);
  std::string method = good;
  method[8] = 8;  // the local header says deflated, the directory stored
  EXPECT_NE(error(method, npz("x"))
                .find("member 'x.npy': the local header gives compression "
                      "method 8, the central directory 0"),
            std::string::npos);
  // Bytes before the archive: zipfile would shift every offset.
  EXPECT_NE(error("#!" + good, npz("x")).find("not where the end record begins"),
            std::string::npos);
  // The end record counts one entry of two.
  std::string counted = good;
  counted[end + 8] = 1;
  counted[end + 10] = 1;
  EXPECT_NE(error(counted, npz("x")).find("central directory: 51 bytes follow its 1 entries"),
            std::string::npos);
  // A second end record signature in the comment: zipfile would take that one.
  std::string commented = good;
  const std::string comment = std::string("PK\x05\x06", 4) + "xyz";
  commented[end + 20] = static_cast<char>(comment.size());
  commented += comment;
  EXPECT_NE(error(commented, npz("x"))
                .find("a second end of central directory signature, at offset " +
                      std::to_string(good.size()) + " in the archive comment"),
            std::string::npos);
  // The archive as written reads.
  ASSERT_TRUE(discover_one(good, npz("y")));
}

TEST_F(NpzTest, DamagedDeflatedDataIsAReadErrorNamingTheFile) {
  std::string archive = zip({{"a.npy", iota_npy(2000, 7), true}});
  // The CRC in the central directory (offset 16 of its entry).
  const std::size_t cd = archive.rfind(std::string("PK\x01\x02", 4));
  archive[cd + 16] = static_cast<char>(archive[cd + 16] ^ 1);
  auto l = discover_one(archive);
  ASSERT_TRUE(l) << l.status().message();
  std::vector<std::int32_t> rows(6000);
  const Status s = fill_rows(*l, 0, 2000, reinterpret_cast<std::byte*>(rows.data()));
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find(dir_.file("a.npz") + ": member 'a.npy': CRC-32 mismatch"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.path(), dir_.file("a.npz"));
}

}  // namespace
}  // namespace shardload
