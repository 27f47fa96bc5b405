// The manifest: round trip, freshness checks, trust without file operations, damaged and
// hostile containers, checksums, and the atomic write.
#include <sys/stat.h>
#include <xxhash.h>

#include <filesystem>
#include <functional>

#include "shardload/codec.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"
#include "util.hpp"

namespace shardload::testing {
namespace {

std::vector<std::uint8_t> enc(const Layout& l) { return encode_layout(l); }

Layout probe(const std::string& dir) {
  DiscoverOptions o;
  o.use_manifest = false;
  auto l = try_discover(Source::directory(dir), o);
  EXPECT_TRUE(l) << l.status().message();
  return l ? *l : Layout{};
}

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 5; ++i) write_iota_shard(dir, i, i * 1000, 3 + i);
  }
  std::string shard(int i) const { return dir.file(NumberPattern{"shard_", 4, ".npy"}.format(i)); }
  std::string index(Checksum c = Checksum::kNone) {
    ManifestOptions o;
    o.checksum = c;
    auto p = write_manifest(probe(dir.path()), dir.path(), o);
    EXPECT_TRUE(p) << p.status().message();
    return p ? *p : std::string();
  }
  Result<Layout> discover_dir(bool trust = false, IoBackend* io = nullptr) {
    DiscoverOptions o;
    o.trust_manifest = trust;
    o.io = io;
    return try_discover(Source::directory(dir.path()), o);
  }
  std::vector<std::string> leftovers() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      const std::string n = e.path().filename().string();
      if (n.rfind(".shardload.manifest", 0) == 0) names.push_back(n);
    }
    return names;
  }
  TempDir dir;
};

TEST_F(ManifestTest, RoundTripEqualsDiscover) {
  const Layout direct = probe(dir.path());
  const std::string path = index();
  EXPECT_EQ(path, dir.file("shardload.manifest"));
  auto m = read_manifest(path);
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ(enc(m->layout), enc(direct));
  EXPECT_EQ(m->pattern, "shard_{:04d}.npy");
  EXPECT_EQ(m->checksum, Checksum::kNone);
  auto l = discover_dir();
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(enc(*l), enc(direct));
  EXPECT_EQ(l->manifest_status, "manifest: used (5 shards unchanged since indexing)");
  EXPECT_EQ(l->manifest_state, ManifestState::kUsed);
  EXPECT_EQ(l->offsets, direct.offsets);
  // Not consulted: the state says so, whatever the directory holds.
  DiscoverOptions ignore;
  ignore.use_manifest = false;
  l = try_discover(Source::directory(dir.path()), ignore);
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->manifest_state, ManifestState::kNone);
  EXPECT_EQ(l->manifest_status, "");
}

TEST_F(ManifestTest, AbsentSaysSo) {
  auto l = discover_dir();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->manifest_status, "manifest: absent");
  EXPECT_EQ(l->manifest_state, ManifestState::kAbsent);
}

TEST(ManifestState, NamesRoundTrip) {
  for (const auto s :
       {ManifestState::kNone, ManifestState::kAbsent, ManifestState::kUsed, ManifestState::kTrusted,
        ManifestState::kStale, ManifestState::kOtherOptions, ManifestState::kOtherPattern}) {
    EXPECT_EQ(parse_manifest_state(manifest_state_name(s)), s) << manifest_state_name(s);
  }
  EXPECT_EQ(parse_manifest_state("used "), std::nullopt);
  EXPECT_EQ(parse_manifest_state(""), std::nullopt);
}

TEST_F(ManifestTest, FreshCheckReadsEachHeaderOnceAndListsNothingElse) {
  index();
  CountingIo io;
  auto l = discover_dir(false, &io);
  ASSERT_TRUE(l) << l.status().message();
  // Per .npy shard the header probe: one open, one fstat, one read of the header; the
  // snapshot comes from the fstat, so no stat by path.
  EXPECT_EQ(io.opens, 5);
  EXPECT_EQ(io.stats, 5);
  EXPECT_EQ(io.preads, 5);
  EXPECT_EQ(io.path_stats, 0);
}

TEST_F(ManifestTest, TrustDoesNoFileOperation) {
  const Layout direct = probe(dir.path());
  index();
  // The shards need not even exist: nothing looks at them.
  for (int i = 0; i < 5; ++i) std::filesystem::remove(shard(i));
  CountingIo io;
  auto l = discover_dir(true, &io);
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(io.total(), 0);
  EXPECT_EQ(enc(*l), enc(direct));
  EXPECT_NE(l->manifest_status.find("trusted"), std::string::npos);
  EXPECT_EQ(l->manifest_state, ManifestState::kTrusted);
}

void expect_stale(ManifestTest* t, Result<Layout> l, const std::string& needle) {
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->manifest_status.rfind("manifest: stale because ", 0), 0u) << l->manifest_status;
  EXPECT_EQ(l->manifest_state, ManifestState::kStale);
  EXPECT_NE(l->manifest_status.find(needle), std::string::npos) << l->manifest_status;
  (void)t;
}

TEST_F(ManifestTest, StaleAfterTouchFallsBackAndSaysWhy) {
  index();
  const struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, shard(3).c_str(), times, 0), 0);
  auto l = discover_dir();
  expect_stale(this, l, shard(3) + ": ");
  EXPECT_NE(l->manifest_status.find("mtime"), std::string::npos) << l->manifest_status;
  EXPECT_EQ(enc(*l), enc(probe(dir.path())));
}

TEST_F(ManifestTest, StaleAfterResize) {
  index();
  write_iota_shard(dir, 2, 2000, 9);
  auto l = discover_dir();
  expect_stale(this, l, shard(2) + ": size");
  EXPECT_EQ(l->rows()[2], 9);  // probed: the new rows, not the manifest's
}

TEST_F(ManifestTest, StaleAfterDelete) {
  index();
  std::filesystem::remove(shard(4));
  auto l = discover_dir();
  expect_stale(this, l, shard(4));
  EXPECT_EQ(l->shards.size(), 4u);
}

TEST_F(ManifestTest, StaleAfterAdd) {
  index();
  write_iota_shard(dir, 5, 5000, 2);
  auto l = discover_dir();
  expect_stale(this, l, shard(5) + " is new");
  EXPECT_EQ(l->shards.size(), 6u);
}

TEST_F(ManifestTest, OtherPatternOrOptionsDoNotUseIt) {
  index();
  auto l = try_discover(Source::directory(dir.path(), "shard_{}.npy"));
  EXPECT_FALSE(l);  // probed: that pattern matches nothing here
  DiscoverOptions o;
  o.format.dtype = DType{DTypeKind::kFloat, 8};
  o.format.format = Format::kRaw;
  l = try_discover(Source::directory(dir.path(), "shard_{:04d}.npy"), o);
  // raw with a dtype: probed, not taken from the npy manifest.
  if (l) EXPECT_EQ(l->manifest_state, ManifestState::kOtherOptions) << l->manifest_status;
  o.trust_manifest = true;
  l = try_discover(Source::directory(dir.path(), "shard_{:04d}.npy"), o);
  ASSERT_FALSE(l);
  EXPECT_NE(l.status().message().find("cannot be trusted"), std::string::npos)
      << l.status().message();
}

// A request without a pattern stands for what probing finds: the default naming wins over
// another numbered group, so a manifest indexed under that group's pattern is not used.
TEST_F(ManifestTest, APlainRequestGetsTheFilesProbingFindsNotAnotherPatterns) {
  const Layout shards = probe(dir.path());
  for (int i = 0; i < 2; ++i) {
    std::filesystem::copy_file(shard(i), dir.file("part_" + std::to_string(i) + ".npy"));
  }
  DiscoverOptions o;
  o.use_manifest = false;
  auto parts = try_discover(Source::directory(dir.path(), "part_{}.npy"), o);
  ASSERT_TRUE(parts) << parts.status().message();
  ManifestOptions mo;
  mo.pattern = "part_{}.npy";
  ASSERT_TRUE(write_manifest(*parts, dir.path(), mo));
  auto l = discover_dir();
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->manifest_status,
            "manifest: not used: it was indexed with pattern 'part_{}.npy', and without a "
            "pattern the directory's shards are those of 'shard_{:04d}.npy'");
  EXPECT_EQ(l->manifest_state, ManifestState::kOtherPattern);
  EXPECT_EQ(enc(*l), enc(shards));
  // With its pattern it is used; trusted without one it is taken as recorded (no listing).
  l = try_discover(Source::directory(dir.path(), "part_{}.npy"));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->manifest_status, "manifest: used (2 shards unchanged since indexing)");
  l = discover_dir(true);
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->shards.size(), 2u);
}

// --- damaged and hostile containers ----------------------------------------------------

std::string container(const std::string& body, std::uint32_t kind = 0,
                      std::uint64_t declared = UINT64_MAX) {
  std::string out("SLMANIF\n", 8);
  auto put = [&](std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  };
  put(1, 4);
  put(kind, 4);
  put(declared == UINT64_MAX ? body.size() : declared, 8);
  out += body;
  put(XXH3_64bits(out.data(), out.size()), 8);
  return out;
}

std::string varstr(const std::string& s) {
  std::string out;
  std::uint64_t v = s.size();
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out + s;
}

std::string layout_body(const Layout& l) {
  const auto e = encode_layout(l);
  return varstr("") + varstr(std::string(e.begin(), e.end()));
}

// A manifest describes what the files hold with the options it was made with; a request
// with other options (a plain one included) must get what those options give, not the
// manifest's: it probes, and says why.
TEST(ManifestOptionsTest, OnlyTheOptionsItWasIndexedWithUseIt) {
  TempDir dir;
  std::vector<float> v(12);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) + 0.5f;
  for (int i = 0; i < 3; ++i)
    write_file(dir.file("shard_000" + std::to_string(i) + ".bin"), raw(v));
  DiscoverOptions with;
  with.use_manifest = false;
  with.format.format = Format::kRaw;
  with.format.dtype = DType{DTypeKind::kFloat, 4};
  with.format.trailing_shape = std::vector<std::int64_t>{};
  auto indexed = try_discover(Source::directory(dir.path()), with);
  ASSERT_TRUE(indexed) << indexed.status().message();
  ASSERT_TRUE(write_manifest(*indexed, dir.path()));
  with.use_manifest = true;
  auto same = try_discover(Source::directory(dir.path()), with);
  ASSERT_TRUE(same) << same.status().message();
  EXPECT_EQ(same->manifest_status, "manifest: used (3 shards unchanged since indexing)");
  // Plain: the .bin files without a sidecar have no dtype; the manifest's float32 must not
  // be taken for it.
  auto plain = try_discover(Source::directory(dir.path()));
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.status().message().find("dtype"), std::string::npos) << plain.status().message();
  // Another dtype: probed as asked, and the status says why the manifest was not used.
  DiscoverOptions other = with;
  other.format.dtype = DType{DTypeKind::kInt, 4};
  auto l = try_discover(Source::directory(dir.path()), other);
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->dtype, (DType{DTypeKind::kInt, 4}));
  EXPECT_EQ(l->manifest_status,
            "manifest: not used: it was indexed with other format options (format raw, dtype "
            "float32, shape ()) than asked (format raw, dtype int32, shape ())");
  EXPECT_EQ(l->manifest_state, ManifestState::kOtherOptions);
  // Trusted, a plain request that does not match is an error, not the manifest's options.
  DiscoverOptions trusted;
  trusted.trust_manifest = true;
  plain = try_discover(Source::directory(dir.path()), trusted);
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.status().message().find("cannot be trusted for this request: it was indexed "
                                          "with other format options (format raw, dtype "
                                          "float32, shape ()) than asked (format raw)"),
            std::string::npos)
      << plain.status().message();
}

// A manifest with a valid container checksum but another header than the files': without
// trust_manifest, discovery compares each file's own header with it.
TEST_F(ManifestTest, ACraftedHeaderInTheManifestIsNotTrustedOverTheFiles) {
  const Layout direct = probe(dir.path());
  const std::string path = dir.file("shardload.manifest");
  // As write_manifest stores them: relative to the directory.
  const auto relative = [&](std::vector<Shard> shards) {
    for (auto& s : shards) s.path.erase(0, dir.path().size() + 1);
    return shards;
  };
  struct Craft {
    std::function<void(Layout&)> change;
    std::string says;
  };
  const std::vector<Craft> crafts = {
      {[](Layout& l) {
         l.dtype = DType{DTypeKind::kFloat, 4};
       },
       "the file says dtype int32, the manifest float32"},
      {[](Layout& l) {
         l.trailing_shape = {2, 3};
       },
       "the file says trailing shape (3, 2), the manifest (2, 3)"},
      {[](Layout& l) { l.shards[1].data_offset += 8; },
       "the file says data offset 128, the manifest 136"},
      {[](Layout& l) { l.shards[2].fortran_order = true; },
       "the file says Fortran order false, the manifest true"},
      {[](Layout& l) { l.shards[3].byte_swap = true; },
       "the file says byte swap false, the manifest true"},
  };
  for (const auto& c : crafts) {
    Layout h = direct;
    c.change(h);
    auto rebuilt =
        assemble_layout(h.format, h.options, h.dtype, h.trailing_shape, relative(h.shards));
    ASSERT_TRUE(rebuilt) << rebuilt.status().message();
    write_file(path, container(layout_body(*rebuilt)));
    ASSERT_TRUE(read_manifest(path)) << c.says;  // a valid container
    auto l = discover_dir();
    ASSERT_TRUE(l) << l.status().message();
    EXPECT_EQ(l->manifest_status.rfind("manifest: stale because ", 0), 0u) << l->manifest_status;
    EXPECT_NE(l->manifest_status.find(c.says), std::string::npos) << l->manifest_status;
    EXPECT_EQ(enc(*l), enc(direct)) << c.says;  // the files' own layout
  }
  // Rows: a view of a file where discovery lists whole files.
  Layout h = direct;
  h.shards[4].file_rows = h.shards[4].rows;
  h.shards[4].rows -= 1;
  auto rebuilt =
      assemble_layout(h.format, h.options, h.dtype, h.trailing_shape, relative(h.shards));
  ASSERT_TRUE(rebuilt) << rebuilt.status().message();
  write_file(path, container(layout_body(*rebuilt)));
  auto l = discover_dir();
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_NE(l->manifest_status.find(shard(4) + ": the file says rows 7, the manifest a view"),
            std::string::npos)
      << l->manifest_status;
}

// A raw dataset's sidecar is what its dtype comes from: a sidecar rewritten after indexing
// (keeping the shards' sizes) is seen by the checked discovery.
TEST(ManifestRawTest, ASidecarChangedAfterIndexingIsSeen) {
  TempDir dir;
  std::vector<std::int32_t> v(8, 7);
  for (int i = 0; i < 2; ++i)
    write_file(dir.file("shard_000" + std::to_string(i) + ".bin"), raw(v));
  write_file(dir.file("shardload.json"), R"({"dtype": "<i4", "shape": []})");
  DiscoverOptions o;
  o.use_manifest = false;
  auto indexed = try_discover(Source::directory(dir.path()), o);
  ASSERT_TRUE(indexed) << indexed.status().message();
  ASSERT_TRUE(write_manifest(*indexed, dir.path()));
  write_file(dir.file("shardload.json"), R"({"dtype": "<f4", "shape": []})");
  auto l = try_discover(Source::directory(dir.path()));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->dtype, (DType{DTypeKind::kFloat, 4}));
  EXPECT_NE(l->manifest_status.find("the file says dtype float32, the manifest int32"),
            std::string::npos)
      << l->manifest_status;
}

TEST_F(ManifestTest, TruncatedAtEveryLengthIsAnErrorNamingIt) {
  const std::string path = index();
  std::string whole;
  read_whole(path, &whole);
  for (std::size_t n = 0; n < whole.size(); n += (n < 64 ? 1 : 7)) {
    write_file(path, whole.substr(0, n));
    auto m = read_manifest(path);
    ASSERT_FALSE(m) << n;
    EXPECT_EQ(m.status().message().rfind(path + ": manifest: ", 0), 0u) << m.status().message();
    auto l = discover_dir();
    ASSERT_FALSE(l) << n;
    EXPECT_NE(l.status().message().find(path), std::string::npos);
  }
}

TEST_F(ManifestTest, EveryFlippedByteIsAnError) {
  const std::string path = index();
  std::string whole;
  read_whole(path, &whole);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    std::string bad = whole;
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    write_file(path, bad);
    auto m = read_manifest(path);
    EXPECT_FALSE(m) << "byte " << i;
  }
}

TEST_F(ManifestTest, HostilePathsAreRefused) {
  Layout l = probe(dir.path());
  const std::vector<std::string> hostile = {"../outside.npy",
                                            "/etc/passwd",
                                            "a/../../b.npy",
                                            "./x.npy",
                                            "a//b.npy",
                                            "",
                                            std::string("sh\0ard.npy", 9)};
  for (const auto& p : hostile) {
    Layout h = l;
    for (auto& s : h.shards) s.path = p;
    write_file(dir.file("shardload.manifest"), container(layout_body(h)));
    auto m = read_manifest(dir.file("shardload.manifest"));
    ASSERT_FALSE(m) << p;
    EXPECT_NE(m.status().message().find("shard"), std::string::npos) << m.status().message();
  }
}

TEST_F(ManifestTest, HostileCountsAndLengthsAreRefusedWithoutAllocating) {
  const std::string path = dir.file("shardload.manifest");
  // A body length that does not match the file.
  write_file(path, container(layout_body(probe(dir.path())), 0, std::uint64_t{1} << 62));
  auto m = read_manifest(path);
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("truncated or extended"), std::string::npos)
      << m.status().message();
  // A layout length and a shard count far past the bytes there.
  write_file(path, container(varstr("") + "\xff\xff\xff\xff\xff\xff\xff\xff\x7f"));
  EXPECT_FALSE(read_manifest(path));
  auto e = encode_layout(probe(dir.path()));
  std::string body = varstr("") + varstr(std::string(e.begin(), e.end()));
  write_file(path, container(body, 1));  // says xxh3 but holds no checksums
  m = read_manifest(path);
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("8 per shard"), std::string::npos) << m.status().message();
  write_file(path, container(body, 7));
  EXPECT_FALSE(read_manifest(path));
  // No shards at all.
  Layout empty = probe(dir.path());
  empty.shards.clear();
  write_file(path, container(layout_body(empty)));
  m = read_manifest(path);
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("lists no shards"), std::string::npos)
      << m.status().message();
  // Another version.
  std::string v2 = container(body);
  v2[8] = 2;
  write_file(path, v2);
  m = read_manifest(path);
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("version 2"), std::string::npos) << m.status().message();
}

TEST_F(ManifestTest, FifoOrDirectoryAtTheManifestPathIsAnErrorNotAHang) {
  ASSERT_EQ(::mkfifo(dir.file("shardload.manifest").c_str(), 0644), 0);
  auto l = discover_dir();
  ASSERT_FALSE(l);
  EXPECT_NE(l.status().message().find("not a regular file"), std::string::npos)
      << l.status().message();
  std::filesystem::remove(dir.file("shardload.manifest"));
  std::filesystem::create_directory(dir.file("shardload.manifest"));
  auto w = write_manifest(probe(dir.path()), dir.path());
  ASSERT_FALSE(w);
  EXPECT_NE(w.status().message().find(dir.file("shardload.manifest")), std::string::npos)
      << w.status().message();
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(ManifestTest, WriteIntoAMissingDirectoryFailsCleanly) {
  Layout l = probe(dir.path());
  auto w = write_manifest(l, dir.file("missing"));
  ASSERT_FALSE(w);  // the shards are not under it
  for (auto& s : l.shards) s.path = dir.file("missing/" + s.path.substr(dir.path().size() + 1));
  w = write_manifest(l, dir.file("missing"));
  ASSERT_FALSE(w);
  EXPECT_NE(w.status().message().find("temporary file"), std::string::npos) << w.status().message();
}

TEST_F(ManifestTest, AFileChangedBeforeItsChecksumKeepsTheOldManifest) {
  const std::string path = index();
  std::string before;
  read_whole(path, &before);
  Layout l = probe(dir.path());
  change_file(shard(1), Change::kAppend);
  ManifestOptions o;
  o.checksum = Checksum::kXxh3;
  auto w = write_manifest(l, dir.path(), o);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.status().code(), ErrorCode::kChanged);
  std::string after;
  read_whole(path, &after);
  EXPECT_EQ(after, before);
  EXPECT_TRUE(leftovers().empty());
}

// An index whose listing was taken before the directory changed (an overwrite with more
// shards, between the listing and the write): the manifest would list part of the dataset, and
// a trusted load would return those shards only. Nothing is written, with or without a
// pattern, and the error names the directory and the shard the listing lacks.
TEST_F(ManifestTest, AListingOlderThanTheDirectoryWritesNoManifest) {
  const std::string path = index();
  std::string before;
  read_whole(path, &before);
  const Layout l = probe(dir.path());
  write_iota_shard(dir, 5, 5000, 2);
  for (const std::string pattern : {"", "shard_{:04d}.npy"}) {
    ManifestOptions o;
    o.pattern = pattern;
    auto w = write_manifest(l, dir.path(), o);
    ASSERT_FALSE(w) << pattern;
    EXPECT_EQ(w.status().code(), ErrorCode::kLayout);
    EXPECT_NE(w.status().message().find(dir.path() + ": changed while indexing: " + shard(5) +
                                        " is not in the listing indexed"),
              std::string::npos)
        << w.status().message();
    std::string after;
    read_whole(path, &after);
    EXPECT_EQ(after, before);
    EXPECT_TRUE(leftovers().empty());
  }
  // A shard rewritten since discovery stops the write; a file of another naming beside the
  // shards does not (the layout of them all is written).
  std::filesystem::remove(shard(5));
  write_iota_shard(dir, 0, 0, 2);
  std::filesystem::copy_file(shard(1), dir.file("part_0.npy"));
  auto w = write_manifest(l, dir.path());
  ASSERT_FALSE(w);
  EXPECT_NE(w.status().message().find(shard(0) + ": "), std::string::npos) << w.status().message();
  ASSERT_TRUE(write_manifest(probe(dir.path()), dir.path()));
}

// A shard replaced by another file after discovery (an overwrite keeping the shard count): the
// snapshots say so without checksums too.
TEST_F(ManifestTest, AShardReplacedAfterDiscoveryWritesNoManifest) {
  const Layout l = probe(dir.path());
  change_file(shard(2), Change::kRenameOver);
  auto w = write_manifest(l, dir.path());
  ASSERT_FALSE(w);
  EXPECT_EQ(w.status().code(), ErrorCode::kLayout);
  EXPECT_NE(w.status().message().find("changed while indexing: " + shard(2) + ": "),
            std::string::npos)
      << w.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir.file("shardload.manifest")));
  EXPECT_TRUE(leftovers().empty());
}

// verify compares the directory's listing with the manifest, as discovery's check does: a
// shard added after indexing is named (it has no checksum to fail), a shard gone is named once.
TEST_F(ManifestTest, VerifyNamesAShardAddedAfterIndexing) {
  const std::string path = index(Checksum::kXxh3);
  write_iota_shard(dir, 5, 5000, 2);
  auto m = read_manifest(path);
  ASSERT_TRUE(m) << m.status().message();
  auto found = verify_range(*m, 0, 5, posix_io());
  ASSERT_TRUE(found);
  EXPECT_TRUE(found->empty());
  auto added = add_listing_mismatches(*m, &*found);
  ASSERT_TRUE(added) << added.status().message();
  EXPECT_EQ(*added, 1u);
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].shard, 5u);
  EXPECT_EQ((*found)[0].path, shard(5));
  EXPECT_NE((*found)[0].what.find("not in the manifest"), std::string::npos) << (*found)[0].what;
  auto l = discover_dir();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->manifest_state, ManifestState::kStale);  // discovery agrees
  std::filesystem::remove(shard(5));
  std::filesystem::remove(shard(4));
  found = verify_range(*m, 0, 5, posix_io());
  ASSERT_TRUE(found);
  added = add_listing_mismatches(*m, &*found);
  ASSERT_TRUE(added) << added.status().message();
  EXPECT_EQ(*added, 0u);
  ASSERT_EQ(found->size(), 1u);  // the failed read names it; the listing adds nothing
  EXPECT_EQ((*found)[0].shard, 4u);
}

TEST_F(ManifestTest, VerifyNamesEveryCorruptedFile) {
  const std::string path = index(Checksum::kXxh3);
  auto m = read_manifest(path);
  ASSERT_TRUE(m) << m.status().message();
  ASSERT_EQ(m->checksums.size(), 5u);
  auto clean = verify_range(*m, 0, 5, posix_io());
  ASSERT_TRUE(clean);
  EXPECT_TRUE(clean->empty());
  change_file(shard(1), Change::kRewriteInPlace);
  change_file(shard(3), Change::kRewriteInPlace);
  auto bad = verify_range(*m, 0, 5, posix_io());
  ASSERT_TRUE(bad);
  ASSERT_EQ(bad->size(), 2u);
  EXPECT_EQ((*bad)[0].path, shard(1));
  EXPECT_EQ((*bad)[1].path, shard(3));
  EXPECT_NE((*bad)[0].what.find("expected, found"), std::string::npos);
  std::filesystem::remove(shard(4));
  bad = verify_range(*m, 2, 5, posix_io());
  ASSERT_TRUE(bad);
  ASSERT_EQ(bad->size(), 2u);
  EXPECT_NE((*bad)[1].what.find("cannot open"), std::string::npos) << (*bad)[1].what;
  EXPECT_FALSE(verify_range(*m, 3, 9, posix_io()));
}

TEST_F(ManifestTest, ChecksumNames) {
  EXPECT_EQ(*parse_checksum("xxh3"), Checksum::kXxh3);
  EXPECT_EQ(*parse_checksum("none"), Checksum::kNone);
  auto c = parse_checksum("crc32c");
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("not available"), std::string::npos);
  EXPECT_FALSE(parse_checksum("md5"));
}

TEST_F(ManifestTest, RelativePathsSurviveAMove) {
  index();
  const std::string moved = dir.path() + "-moved";
  std::filesystem::rename(dir.path(), moved);
  auto l = [&] {
    DiscoverOptions o;
    o.trust_manifest = true;
    return try_discover(Source::directory(moved), o);
  }();
  std::filesystem::rename(moved, dir.path());
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->shards[0].path, moved + "/shard_0000.npy");
}

}  // namespace
}  // namespace shardload::testing
