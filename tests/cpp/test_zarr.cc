// The Zarr reader on hand-made stores: chunk selection, edge chunks, missing
// chunks, F order, v3 keys and byte order, sharding, corrupt data; plus the
// metadata encoding that travels in Shard::extra.
#include <blosc.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "readers/detail/zarr.hpp"
#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/shard_source.hpp"
#include "storage/detail/fetch_ahead.hpp"
#include "storage/detail/server_time.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using Value = std::function<std::int32_t(std::int64_t, std::int64_t)>;

// One chunk of a 2-D int32 array: element (r, c) of the array is v(r, c);
// cells past the array's edge hold junk, as Zarr allows.
std::string chunk2d(std::int64_t ci, std::int64_t cj, std::int64_t c0, std::int64_t c1,
                    std::int64_t s0, std::int64_t s1, const Value& v, bool fortran = false,
                    bool big = false) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(c0 * c1));
  for (std::int64_t a = 0; a < c0; ++a) {
    for (std::int64_t b = 0; b < c1; ++b) {
      const std::int64_t r = ci * c0 + a;
      const std::int64_t c = cj * c1 + b;
      std::int32_t x = (r < s0 && c < s1) ? v(r, c) : 0x5A5A5A5A;
      if (big) x = static_cast<std::int32_t>(__builtin_bswap32(static_cast<std::uint32_t>(x)));
      out[static_cast<std::size_t>(fortran ? a + b * c0 : a * c1 + b)] = x;
    }
  }
  return testing::raw(out);
}

std::string zlib_compress(const std::string& in) {
  uLongf n = compressBound(static_cast<uLong>(in.size()));
  std::string out(n, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &n,
                      reinterpret_cast<const Bytef*>(in.data()), static_cast<uLong>(in.size()), 6),
            Z_OK);
  out.resize(n);
  return out;
}

std::int32_t value(std::int64_t r, std::int64_t c) { return static_cast<std::int32_t>(r * 3 + c); }

class ZarrTest : public ::testing::Test {
 protected:
  std::string store(int i) { return dir_.file(NumberPattern{"shard_", 4, ".zarr"}.format(i)); }
  void put(const std::string& path, const std::string& bytes) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    testing::write_file(path, bytes);
  }
  // A v2 store of shape (rows, 3) int32, chunks (3, 2).
  void v2_store(int i, std::int64_t rows, const std::string& compressor, bool fortran,
                const std::vector<std::string>& skip = {}) {
    const std::string s = store(i);
    std::filesystem::create_directories(s);
    put(s + "/.zarray", R"({"zarr_format": 2, "shape": [)" + std::to_string(rows) +
                            R"(, 3], "chunks": [3, 2], "dtype": "<i4", "fill_value": -1,
                "order": ")" +
                            (fortran ? "F" : "C") + R"(", "filters": null, "compressor": )" +
                            compressor + "}");
    const Value v = [rows0 = offset_](std::int64_t r, std::int64_t c) {
      return value(r + rows0, c);
    };
    for (std::int64_t a = 0; a * 3 < rows; ++a) {
      for (std::int64_t b = 0; b < 2; ++b) {
        const std::string key = std::to_string(a) + "." + std::to_string(b);
        if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
        std::string bytes = chunk2d(a, b, 3, 2, rows, 3, v, fortran);
        if (compressor != "null") bytes = zlib_compress(bytes);
        put(s + "/" + key, bytes);
      }
    }
    offset_ += rows;
  }
  Layout layout() {
    DiscoverOptions d;
    d.format.format = Format::kZarr;
    auto l = try_discover(Source::directory(dir_.path()), d);
    EXPECT_TRUE(l) << l.status().message();
    return l.value();
  }
  std::string read_error(const Layout& l, std::int64_t lo, std::int64_t hi) {
    std::vector<std::int32_t> out(static_cast<std::size_t>((hi - lo) * 3));
    Status st = fill_rows(l, lo, hi, reinterpret_cast<std::byte*>(out.data()));
    EXPECT_FALSE(st);
    return st.message();
  }
  // Every row range; `fill` says which global cells hold the fill value -1.
  static void expect_values(const Layout& l,
                            const std::function<bool(std::int64_t, std::int64_t)>& fill) {
    const std::int64_t n = l.total_rows();
    for (std::int64_t lo = 0; lo <= n; ++lo) {
      for (std::int64_t hi = lo; hi <= n; ++hi) {
        std::vector<std::int32_t> out(static_cast<std::size_t>((hi - lo) * 3), 77);
        Status st = fill_rows(l, lo, hi, reinterpret_cast<std::byte*>(out.data()));
        ASSERT_TRUE(st) << st.message();
        for (std::int64_t r = lo; r < hi; ++r) {
          for (std::int64_t c = 0; c < 3; ++c) {
            const std::int32_t want = fill(r, c) ? -1 : value(r, c);
            ASSERT_EQ(out[static_cast<std::size_t>((r - lo) * 3 + c)], want)
                << "rows [" << lo << ", " << hi << ") cell " << r << "," << c;
          }
        }
      }
    }
  }
  testing::TempDir dir_;
  std::int64_t offset_ = 0;
};

TEST_F(ZarrTest, V2UncompressedRaggedStoresWithMissingChunks) {
  v2_store(0, 7, "null", false, {"1.1"});  // rows 3-5, column 2 missing
  v2_store(1, 0, "null", false);
  v2_store(2, 5, "null", false, {"0.0"});  // global rows 7-9, columns 0-1 missing
  const Layout l = layout();
  EXPECT_EQ(l.rows(), (std::vector<std::int64_t>{7, 0, 5}));
  expect_values(l, [](std::int64_t r, std::int64_t c) {
    return (r >= 3 && r < 6 && c == 2) || (r >= 7 && r < 10 && c < 2);
  });
}

// Chunk files are not snapshotted at discovery; each is compared with itself
// from its opening to its last read. An uncompressed chunk rewritten in the
// middle of its read (size and mtime put back) would otherwise give half
// old, half new values; a compressed one truncated would be a decode error.
TEST_F(ZarrTest, ChunkChangedWhileReading) {
  for (const std::string compressor : {"null", R"({"id": "zlib", "level": 1})"}) {
    offset_ = 0;
    v2_store(0, 6, compressor, false);
    const Layout l = layout();
    const std::string chunk = store(0) + "/1.0";
    const auto how =
        compressor == "null" ? testing::Change::kRewriteInPlace : testing::Change::kTruncate;
    testing::ChangingIo io(chunk, how, testing::ChangingIo::On::kPread, 2, 4);
    FillOptions o;
    o.source = ShardSource::over(io);
    std::vector<std::int32_t> out(9);
    // Rows [3, 6) lie in chunks 1.0 and 1.1 only: pread 1 and 2 are 1.0's.
    Status st = fill_rows(l, 3, 6, reinterpret_cast<std::byte*>(out.data()), o);
    EXPECT_TRUE(io.changed());
    ASSERT_FALSE(st);
    EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
    EXPECT_NE(st.message().find(chunk + ": changed while reading"), std::string::npos)
        << st.message();
  }
}

// A store exchanged with a copy (renameat2 RENAME_EXCHANGE) just before one chunk's open and
// exchanged back just after it: a check of the store directory's identity before or after the
// chunks sees the store each time, so only chunks opened below the directory whose identity
// was checked keep the copy's rows out. The copy differs in chunk 1.0 only and was made before
// discovery (its files are no newer than the store's).
class SwappingIo final : public IoBackend {
 public:
  SwappingIo(std::string a, std::string b, std::string key)
      : a_(std::move(a)), b_(std::move(b)), key_(std::move(key)) {}
  Result<int> open(const std::string& p) override {
    const bool hit =
        p.size() > key_.size() && p.compare(p.size() - key_.size(), key_.size(), key_) == 0;
    if (hit) exchange();
    auto fd = posix_io().open(p);
    if (hit) exchange();
    return fd;
  }
  Result<FileInfo> stat(int fd, const std::string& p) override { return posix_io().stat(fd, p); }
  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t off) override {
    return posix_io().pread(fd, buf, n, off);
  }
  void close(int fd) override { posix_io().close(fd); }
  std::atomic<int> swaps{0};

 private:
  void exchange() {
    constexpr unsigned kExchange = 2;  // RENAME_EXCHANGE
    ASSERT_EQ(::syscall(SYS_renameat2, AT_FDCWD, a_.c_str(), AT_FDCWD, b_.c_str(), kExchange), 0)
        << std::strerror(errno);
    ++swaps;
  }
  std::string a_, b_, key_;
};

TEST_F(ZarrTest, StoreSwappedWithACopyAndBackAroundAChunkOpenIsNeverRead) {
  v2_store(0, 6, "null", false);
  testing::TempDir other;
  const std::string copy = other.file("copy.zarr");
  std::filesystem::copy(store(0), copy, std::filesystem::copy_options::recursive);
  testing::write_file(copy + "/1.0", std::string(3 * 2 * sizeof(std::int32_t), '\x11'));
  const Layout l = layout();
  SwappingIo io(store(0), copy, "/1.0");
  FillOptions o;
  o.source = ShardSource::over(io);
  std::vector<std::int32_t> out(6 * 3, 77);
  Status st = fill_rows(l, 0, 6, reinterpret_cast<std::byte*>(out.data()), o);
  EXPECT_EQ(io.swaps.load(), 2);
  if (!st) {
    EXPECT_EQ(st.code(), ErrorCode::kChanged) << st.message();
    EXPECT_EQ(st.message().find("/proc/"), std::string::npos) << st.message();
    return;
  }
  for (std::int64_t r = 0; r < 6; ++r) {
    for (std::int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(out[static_cast<std::size_t>(r * 3 + c)], value(r, c)) << "cell " << r << "," << c;
    }
  }
}

TEST_F(ZarrTest, V2ZlibFortranOrder) {
  v2_store(0, 8, R"({"id": "zlib", "level": 6})", true);
  v2_store(1, 4, R"({"id": "zlib", "level": 6})", true, {"1.0"});
  expect_values(layout(), [](std::int64_t r, std::int64_t c) {
    return r >= 11 && c < 2;  // store 1 rows 3 (global 11), chunk 1.0
  });
}

// One reader serving row after row (as a tile split into staging chunks is
// served) reuses the chunk it decoded last; the values must not change.
TEST_F(ZarrTest, OneReaderRowByRowReusesTheDecodedChunk) {
  v2_store(0, 8, R"({"id": "zlib"})", true, {"1.1"});
  v2_store(1, 5, "null", false);
  const Layout l = layout();
  auto reader = make_reader(Format::kZarr, l.options);
  ASSERT_TRUE(reader) << reader.status().message();
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t sh = 0; sh < l.shards.size(); ++sh) {
      for (std::int64_t r = 0; r < l.shards[sh].rows; ++r) {
        std::vector<std::int32_t> out(3, 77);
        Status st = (*reader)->read_rows(l, l.shards[sh], r, r + 1,
                                         reinterpret_cast<std::byte*>(out.data()));
        ASSERT_TRUE(st) << st.message();
        const std::int64_t g = l.offsets[sh] + r;
        for (std::int64_t c = 0; c < 3; ++c) {
          const bool fill = sh == 0 && r >= 3 && r < 6 && c == 2;
          EXPECT_EQ(out[static_cast<std::size_t>(c)], fill ? -1 : value(g, c)) << g << "," << c;
        }
      }
    }
  }
}

TEST_F(ZarrTest, V3DefaultKeysBigEndianWholeRowChunksDecodedInPlace) {
  const std::string s = store(0);
  put(s + "/zarr.json", R"({"zarr_format": 3, "node_type": "array", "shape": [10, 3],
    "data_type": "int32", "fill_value": -1, "attributes": {"x": [1, 2]},
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
    "chunk_key_encoding": {"name": "default"},
    "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}]})");
  put(s + "/c/0/0", chunk2d(0, 0, 4, 3, 10, 3, value, false, true));
  put(s + "/c/2/0", chunk2d(2, 0, 4, 3, 10, 3, value, false, true));
  expect_values(layout(), [](std::int64_t r, std::int64_t) { return r >= 4 && r < 8; });
  // The natural decode unit the probe reports: one chunk, 4 rows.
  auto reader = make_reader(Format::kZarr, {});
  ASSERT_TRUE(reader) << reader.status().message();
  auto probe = (*reader)->probe(s);
  ASSERT_TRUE(probe) << probe.status().message();
  EXPECT_EQ(probe->decode_rows, 4);
}

// The store's arrays are named when its root is no array, decided on what the parser found,
// not on the message: a store whose path holds "node_type" and whose metadata fails on
// another field gets that error alone.
TEST_F(ZarrTest, ArraysAreNamedOnlyWhenTheRootIsNoArray) {
  const std::string array = R"({"zarr_format": 3, "node_type": "array", "shape": [4, 3],
    "data_type": "int32", "fill_value": 0,
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
    "chunk_key_encoding": {"name": "default"},
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]})";
  auto reader = make_reader(Format::kZarr, {});
  ASSERT_TRUE(reader) << reader.status().message();

  const std::string group = dir_.file("group.zarr");
  put(group + "/zarr.json", R"({"zarr_format": 3, "node_type": "group"})");
  put(group + "/inner/zarr.json", array);
  auto probe = (*reader)->probe(group);
  ASSERT_FALSE(probe);
  EXPECT_EQ(probe.status().code(), ErrorCode::kFormat);
  EXPECT_NE(probe.status().message().find("; arrays in the store: inner"), std::string::npos)
      << probe.status().message();

  const std::string odd = dir_.file("node_type.zarr");
  std::string bad_type = array;
  bad_type.replace(bad_type.find("\"int32\""), 7, "\"int99\"");
  put(odd + "/zarr.json", bad_type);
  put(odd + "/inner/zarr.json", array);
  probe = (*reader)->probe(odd);
  ASSERT_FALSE(probe);
  EXPECT_EQ(probe.status().code(), ErrorCode::kFormat);
  EXPECT_NE(probe.status().message().find("data_type"), std::string::npos)
      << probe.status().message();
  EXPECT_EQ(probe.status().message().find("arrays:"), std::string::npos)
      << probe.status().message();
}

TEST_F(ZarrTest, V3ShardingWithChecksummedIndex) {
  // Shape (10, 3), shards (4, 3) of inner chunks (2, 3); index at the end.
  const std::string s = store(0);
  put(s + "/zarr.json", R"({"zarr_format": 3, "node_type": "array", "shape": [10, 3],
    "data_type": "int32", "fill_value": -1,
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}},
    "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 3],
      "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
      "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "crc32c"}], "index_location": "end"}}]})");
  for (std::int64_t sh = 0; sh < 3; ++sh) {
    std::string data;
    std::string index;
    for (std::int64_t in = 0; in < 2; ++in) {
      const std::int64_t inner = sh * 2 + in;  // global inner-chunk row index
      std::uint64_t off = data.size();
      std::uint64_t n = 24;
      if (inner == 1 || inner * 2 >= 10) {  // inner chunk 1 and the ones past the edge: absent
        off = n = ~std::uint64_t{0};
      } else {
        data += chunk2d(inner, 0, 2, 3, 10, 3, value);
      }
      index += testing::raw(std::vector<std::uint64_t>{off, n});
    }
    const std::uint32_t crc =
        detail::crc32c(reinterpret_cast<const std::byte*>(index.data()), index.size());
    put(s + "/c." + std::to_string(sh) + ".0",
        data + index + testing::raw(std::vector<std::uint32_t>{crc}));
  }
  const Layout l = layout();
  expect_values(l, [](std::int64_t r, std::int64_t) { return r >= 2 && r < 4; });
  // Sharded: the decode unit is the inner chunk (2 rows), not the shard (4).
  {
    auto reader = make_reader(Format::kZarr, {});
    ASSERT_TRUE(reader) << reader.status().message();
    auto probe = (*reader)->probe(s);
    ASSERT_TRUE(probe) << probe.status().message();
    EXPECT_EQ(probe->decode_rows, 2);
  }

  // A damaged index is caught by its checksum, and names the shard file.
  std::string shard1;
  {
    std::ifstream f(s + "/c.1.0", std::ios::binary);
    shard1.assign(std::istreambuf_iterator<char>(f), {});
  }
  shard1[shard1.size() - 10] ^= 1;
  put(s + "/c.1.0", shard1);
  // Discovered again: a shard written after discovery began is the changed error instead.
  EXPECT_EQ(read_error(layout(), 4, 5), "reading rows [4, 5): " + s +
                                            "/c.1.0: shard index: crc32c checksum mismatch "
                                            "(corrupt shard)");
}

TEST_F(ZarrTest, CorruptCompressedChunkNamesTheFile) {
  v2_store(0, 6, R"({"id": "zlib"})", false);
  std::string bytes(40, '\x11');
  put(store(0) + "/1.0", bytes);
  const Layout l = layout();
  const std::string msg = read_error(l, 0, 6);
  EXPECT_EQ(msg.rfind("reading rows [0, 6): " + store(0) + "/1.0: zlib: corrupt chunk (", 0), 0u)
      << msg;
  // Rows whose chunks are intact still read: only overlapping chunks are touched.
  std::vector<std::int32_t> out(9);
  EXPECT_TRUE(fill_rows(l, 0, 3, reinterpret_cast<std::byte*>(out.data())));
}

// z5py (a C++ Zarr writer) leaves 16 bytes after each blosc frame; numcodecs decodes the
// frame its header's cbytes delimits and ignores the rest. A frame cut short stays an error.
TEST(ZarrCodecTest, BloscBytesAfterTheFrameAreIgnoredACutFrameIsRefused) {
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f - 7.0f;
  const std::size_t bytes = v.size() * sizeof(float);
  std::vector<std::byte> frame(bytes + BLOSC_MAX_OVERHEAD);
  const int c = blosc_compress_ctx(5, BLOSC_SHUFFLE, sizeof(float), bytes, v.data(), frame.data(),
                                   frame.size(), "lz4", 0, 1);
  ASSERT_GT(c, 0);
  frame.resize(static_cast<std::size_t>(c));
  std::vector<std::byte> padded = frame;
  padded.insert(padded.end(), 16, std::byte{0xA7});
  std::vector<float> out(v.size());
  Status st = detail::zarr_decode_exact(detail::ZarrCodec::kBlosc, padded.data(), padded.size(),
                                        reinterpret_cast<std::byte*>(out.data()), bytes);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(out, v);
  std::vector<std::byte> grown;
  st = detail::zarr_decode_grow(detail::ZarrCodec::kBlosc, padded.data(), padded.size(), &grown,
                                bytes);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(std::memcmp(grown.data(), v.data(), bytes), 0);
  // The frame less its last byte: the header promises more than the chunk holds.
  st = detail::zarr_decode_exact(detail::ZarrCodec::kBlosc, frame.data(), frame.size() - 1,
                                 reinterpret_cast<std::byte*>(out.data()), bytes);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.message(), "blosc: corrupt chunk (its header says " + std::to_string(c) +
                              " compressed bytes, found " + std::to_string(c - 1) + ")");
  // Less than a header.
  st = detail::zarr_decode_exact(detail::ZarrCodec::kBlosc, frame.data(), 15,
                                 reinterpret_cast<std::byte*>(out.data()), bytes);
  EXPECT_FALSE(st);
}

TEST_F(ZarrTest, MetadataErrorsNameTheFileAndField) {
  put(store(0) + "/.zarray", R"({"zarr_format": 2, "shape": [4, 3], "chunks": [2, 2],
      "dtype": "<i4", "fill_value": 0, "compressor": {"id": "bz2"}})");
  DiscoverOptions d;
  d.format.format = Format::kZarr;
  auto l = try_discover(Source::directory(dir_.path()), d);
  ASSERT_FALSE(l);
  EXPECT_EQ(l.status().message(),
            store(0) +
                "/.zarray: compressor.id: unsupported codec 'bz2' (supported: zlib, "
                "gzip, zstd, lz4 or blosc)");
  std::filesystem::remove(store(0) + "/.zarray");
  l = try_discover(Source::directory(dir_.path()), d);
  ASSERT_FALSE(l);
  EXPECT_EQ(l.status().message(), store(0) + ": no Zarr array metadata (neither " + store(0) +
                                      "/.zarray nor " + store(0) + "/zarr.json exists)");
}

// Discovery names the store's metadata file for nesting too deep, and refuses
// a metadata file too large from its size: a sparse 10 GB .zarray or
// zarr.json is neither read nor allocated.
TEST_F(ZarrTest, DeepOrHugeMetadataIsRefusedNamingTheFile) {
  DiscoverOptions d;
  d.format.format = Format::kZarr;
  for (const std::string meta : {"/.zarray", "/zarr.json"}) {
    std::filesystem::remove_all(store(0));
    std::filesystem::create_directories(store(0));
    put(store(0) + meta, std::string(100000, '[') + std::string(100000, ']'));
    auto l = try_discover(Source::directory(dir_.path()), d);
    ASSERT_FALSE(l);
    EXPECT_EQ(l.status().message(), store(0) + meta + ": JSON nesting deeper than 64 levels");
    std::filesystem::resize_file(store(0) + meta, std::uint64_t{10} << 30);
    l = try_discover(Source::directory(dir_.path()), d);
    ASSERT_FALSE(l);
    EXPECT_EQ(l.status().message().rfind(
                  store(0) + meta + ": size: 10737418240 bytes is more than the ", 0),
              0u)
        << l.status().message();
  }
}

TEST(ZarrMetaTest, ExtraRoundTripsAndRejectsGarbage) {
  auto m = detail::parse_zarr_metadata("z.json", R"({"zarr_format": 3, "node_type": "array",
    "shape": [5, 4], "data_type": "float16", "fill_value": "NaN",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
    "chunk_key_encoding": {"name": "v2"},
    "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2],
      "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip"}],
      "index_codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
      "index_location": "start"}}]})",
                                       3);
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_TRUE(m->sharded && m->big_endian && m->index_big_endian && !m->index_at_end);
  EXPECT_EQ(m->codecs, (std::vector<detail::ZarrCodec>{detail::ZarrCodec::kGzip}));
  const std::string extra = detail::encode_zarr_meta(*m);
  auto back = detail::decode_zarr_meta(extra, "s");
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(*back, *m);
  for (std::size_t cut = 0; cut < extra.size(); ++cut) {
    EXPECT_FALSE(detail::decode_zarr_meta(extra.substr(0, cut), "s")) << cut;
  }
  EXPECT_EQ(detail::zarr_chunk_key(*m, {1, 0}), "1.0");
}

TEST(ZarrMetaTest, DuplicateKeysAreRefused) {
  auto m = detail::parse_zarr_metadata(".zarray", R"({"zarr_format": 2, "shape": [4],
      "shape": [5], "chunks": [2], "dtype": "<i4", "fill_value": 0, "compressor": null})",
                                       2);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.status().message(), ".zarray: duplicate key 'shape'");
}

// Both metadata versions stop at the 65th level wherever the nesting is:
// the whole document, a known field, or attributes the reader ignores.
TEST(ZarrMetaTest, DeeplyNestedMetadataIsRefusedByDepth) {
  const auto arrays = [](std::size_t n) { return std::string(n, '[') + std::string(n, ']'); };
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += R"({"a":)";
  objects += "1" + std::string(100000, '}');
  for (const int version : {2, 3}) {
    const std::string file = version == 2 ? ".zarray" : "zarr.json";
    const std::string deep = file + ": JSON nesting deeper than 64 levels";
    const std::string head =
        version == 2 ? R"({"zarr_format": 2, "shape": )" : R"({"zarr_format": 3, "attributes": )";
    for (const std::string& text :
         {arrays(100000), objects, std::string(100000, '['), head + arrays(100000) + "}",
          head + objects + "}", head + arrays(64) + "}"}) {
      auto m = detail::parse_zarr_metadata(file, text, version);
      ASSERT_FALSE(m);
      EXPECT_EQ(m.status().message(), deep);
    }
    // 64 levels parse; the error is then about the content.
    auto m = detail::parse_zarr_metadata(file, head + arrays(63) + "}", version);
    ASSERT_FALSE(m);
    EXPECT_EQ(m.status().message().find("nesting"), std::string::npos) << m.status().message();
  }
}

TEST(ZarrMetaTest, Crc32cAndHalfFloats) {
  const std::string check = "123456789";
  EXPECT_EQ(detail::crc32c(reinterpret_cast<const std::byte*>(check.data()), check.size()),
            0xE3069283U);
  EXPECT_EQ(detail::double_to_half(1.0), 0x3C00);
  EXPECT_EQ(detail::double_to_half(-2.5), 0xC100);
  EXPECT_EQ(detail::double_to_half(65504.0), 0x7BFF);
  EXPECT_EQ(detail::double_to_half(65520.0), 0x7C00);
  EXPECT_EQ(detail::double_to_half(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(detail::double_to_half(std::ldexp(1.0, -14)), 0x0400);
  EXPECT_EQ(detail::double_to_half(0.1), 0x2E66);
  EXPECT_EQ(detail::double_to_half(-INFINITY), 0xFC00);
  EXPECT_EQ(detail::double_to_half(NAN) & 0x7E00, 0x7E00);
}

// fetch_ahead: items consumed in order, at most in_flight fetched at once, a fetch started only
// below the window (so what waits stays within window + in_flight items), the first failure in
// order returned and nothing fetched long after it.
struct FetchProbe {
  std::mutex m;
  int running = 0, most_running = 0;
  std::uint64_t waiting = 0, most_waiting = 0;
  std::vector<std::size_t> consumed;
  std::atomic<std::size_t> fetched{0}, highest{0};
};

TEST(FetchAhead, InOrderBoundedAndWithinTheWindow) {
  for (const std::size_t in_flight : {std::size_t{1}, std::size_t{3}, std::size_t{8}}) {
    FetchProbe p;
    constexpr std::uint64_t kItem = 10;
    const Status st = detail::fetch_ahead(
        40, in_flight, 25,
        [&](std::size_t i) -> Result<std::uint64_t> {
          {
            std::lock_guard lock(p.m);
            p.most_running = std::max(p.most_running, ++p.running);
          }
          std::this_thread::sleep_for(std::chrono::microseconds(200 * (i % 3)));
          std::lock_guard lock(p.m);
          --p.running;
          p.waiting += kItem;
          p.most_waiting = std::max(p.most_waiting, p.waiting);
          return kItem;
        },
        [&](std::size_t i) {
          std::lock_guard lock(p.m);
          p.consumed.push_back(i);
          p.waiting -= kItem;
          return Status::ok();
        });
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(p.consumed.size(), 40u);
    for (std::size_t i = 0; i < 40; ++i) EXPECT_EQ(p.consumed[i], i);
    EXPECT_LE(p.most_running, static_cast<int>(in_flight));
    // A fetch starts below 25 bytes waiting: at most two items waiting then, plus those in
    // flight.
    EXPECT_LE(p.most_waiting, (2 + in_flight) * kItem) << in_flight;
  }
}

TEST(FetchAhead, FirstFailureInOrderStopsTheFetches) {
  for (const bool in_consume : {false, true}) {
    FetchProbe p;
    const Status st = detail::fetch_ahead(
        200, 4, 3,
        [&](std::size_t i) -> Result<std::uint64_t> {
          p.fetched.fetch_add(1);
          std::size_t h = p.highest.load();
          while (i > h && !p.highest.compare_exchange_weak(h, i)) {
          }
          if (!in_consume && (i == 7 || i == 9)) {
            return Status(ErrorCode::kIo, "item " + std::to_string(i));
          }
          return std::uint64_t{1};
        },
        [&](std::size_t i) {
          p.consumed.push_back(i);
          return i == 7 && in_consume ? Status(ErrorCode::kFormat, "bad 7") : Status::ok();
        });
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.message(), in_consume ? "bad 7" : "item 7");
    EXPECT_EQ(p.consumed.size(), in_consume ? 8u : 7u);
    // Item j is claimed only with fewer than 3 items waiting and at most 3 others in flight,
    // so j <= consumed + 5; no claim once the failure at 7 is known (consumed <= 7 until then).
    EXPECT_LE(p.highest.load(), 12u);
    EXPECT_LE(p.fetched.load(), 13u);
  }
}

// A chunk object's Last-Modified against the server's Date when discovery read its store's
// metadata (Shard::server_snapshot_s): later is written since; the same second or earlier is
// read; nothing is judged without both times, nor by a Last-Modified ahead of its own answer's
// Date (another clock stamped it).
TEST(ZarrServerTime, AChunkIsWrittenSinceOnlyWhenItsLastModifiedIsLaterThanTheSnapshot) {
  constexpr std::int64_t kSnapshot = 1796632801;  // Mon, 07 Dec 2026 08:40:01 GMT
  const auto chunk = [](std::int64_t modified, std::int64_t answered) {
    FileInfo info;
    info.size = 96;
    info.regular = true;
    info.modified_s = modified;
    info.answered_s = answered;
    return info;
  };
  const std::string later = detail::written_after(kSnapshot, chunk(kSnapshot + 1, kSnapshot + 3));
  EXPECT_EQ(later,
            "its Last-Modified (Mon, 07 Dec 2026 08:40:02 GMT) is later than the server's Date "
            "when discovery read the store's metadata (Mon, 07 Dec 2026 08:40:01 GMT): the "
            "object was written since");
  // The answer's own Date may be missing (a server without a clock): the Last-Modified alone.
  EXPECT_NE(detail::written_after(kSnapshot, chunk(kSnapshot + 2, 0)), "");
  EXPECT_EQ(detail::written_after(kSnapshot, chunk(kSnapshot + 2, kSnapshot + 2)).empty(), false);
  // Within the snapshot's second, or before it: read.
  EXPECT_EQ(detail::written_after(kSnapshot, chunk(kSnapshot, kSnapshot + 9)), "");
  EXPECT_EQ(detail::written_after(kSnapshot, chunk(kSnapshot - 3600, kSnapshot + 9)), "");
  // Nothing to compare: no snapshot time, no Last-Modified.
  EXPECT_EQ(detail::written_after(0, chunk(kSnapshot + 5, kSnapshot + 9)), "");
  EXPECT_EQ(detail::written_after(kSnapshot, chunk(0, kSnapshot + 9)), "");
  // A Last-Modified ahead of the answer's Date was stamped by another clock: not judged.
  EXPECT_EQ(detail::written_after(kSnapshot, chunk(kSnapshot + 10, kSnapshot + 9)), "");
}

TEST(ZarrServerTime, AServersTimesAreNoPartOfASnapshotsIdentity) {
  FileInfo a;
  a.size = 10;
  a.regular = true;
  a.inode = 77;
  FileInfo b = a;
  b.modified_s = 1796632801;
  b.answered_s = 1796632805;
  EXPECT_EQ(a, b);
  b.inode = 78;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace shardload
