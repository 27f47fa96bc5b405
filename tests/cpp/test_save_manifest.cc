// shardload::save writes the dataset's manifest last: discovering the destination takes it
// (the snapshots survive the rename) and gets exactly the probed layout; checksums and the
// option's refusals. Runs in legate_tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "shardload/codec.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"
#include "shardload/save.hpp"
#include "shardload/synth_array.hpp"

namespace shardload {
namespace {

namespace fs = std::filesystem;

class LegateSaveManifest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardload-savemf-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

Layout discovered(const std::string& dest, bool use_manifest) {
  DiscoverOptions opts;
  opts.use_manifest = use_manifest;
  auto l = try_discover(Source::directory(dest), opts);
  EXPECT_TRUE(static_cast<bool>(l)) << l.status().message();
  return l ? *l : Layout{};
}

TEST_F(LegateSaveManifest, DiscoveryOfTheDestinationUsesIt) {
  const auto array = make_synth_array(DType{DTypeKind::kFloat, 4}, {301, 2}, 3);
  for (const auto& [name, format] :
       {std::pair{"npy", SaveFormat::kNpy}, std::pair{"raw", SaveFormat::kRaw},
        std::pair{"zarr", SaveFormat::kZarr}}) {
    SCOPED_TRACE(name);
    SaveOptions opts;
    opts.format = format;
    opts.shard_rows = {100, 0, 201};
    const std::string dest = (dir_ / name).string();
    save(array, dest, opts);
    ASSERT_TRUE(fs::is_regular_file(manifest_path(dest)));
    const Layout used = discovered(dest, true);
    EXPECT_EQ(used.manifest_status.rfind("manifest: used (3 shards", 0), 0u)
        << used.manifest_status;
    EXPECT_EQ(encode_layout(used), encode_layout(discovered(dest, false)));
  }
}

TEST_F(LegateSaveManifest, ChecksumsAndOptions) {
  const auto array = make_synth_array(DType{DTypeKind::kInt, 2}, {50}, 1);
  SaveOptions opts;
  opts.num_shards = 2;
  opts.checksum = Checksum::kXxh3;
  const std::string dest = (dir_ / "c").string();
  save(array, dest, opts);
  auto m = read_manifest(manifest_path(dest));
  ASSERT_TRUE(static_cast<bool>(m)) << m.status().message();
  EXPECT_EQ(m->checksum, Checksum::kXxh3);
  auto bad = verify_range(*m, 0, 2, posix_io());
  ASSERT_TRUE(static_cast<bool>(bad));
  EXPECT_TRUE(bad->empty());

  SaveOptions none;
  none.manifest = false;
  save(array, (dir_ / "n").string(), none);
  EXPECT_FALSE(fs::exists(manifest_path((dir_ / "n").string())));

  SaveOptions zarr = opts;
  zarr.format = SaveFormat::kZarr;
  EXPECT_THROW(save(array, (dir_ / "z").string(), zarr), ArgumentError);
  SaveOptions without = opts;
  without.manifest = false;
  EXPECT_THROW(save(array, (dir_ / "w").string(), without), ArgumentError);
  EXPECT_FALSE(fs::exists(dir_ / "z"));
  EXPECT_FALSE(fs::exists(dir_ / "w"));
}

}  // namespace
}  // namespace shardload
