// shardload::save (the C++ API) under a running Legate runtime: round trips through every
// format, read back on the host by the engine; the destination rules. Runs in legate_tests.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "engine/detail/save_files.hpp"
#include "shardload/fill.hpp"
#include "shardload/legate.hpp"
#include "shardload/save.hpp"
#include "shardload/synth.hpp"
#include "shardload/synth_array.hpp"

namespace shardload {
namespace {

namespace fs = std::filesystem;

class LegateSave : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardload-save-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  bool staging_left() const {
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().find(".shardload-tmp-") != std::string::npos) return true;
    }
    return false;
  }

  fs::path dir_;
};

TEST_F(LegateSave, RoundTripsThroughEveryFormat) {
  const DType f32{DTypeKind::kFloat, 4};
  const std::uint64_t seed = 9;
  const auto array = make_synth_array(f32, {1001, 3, 2}, seed);
  for (const auto& [name, format, fmt] : {std::tuple{"npy", SaveFormat::kNpy, Format::kNpy},
                                          std::tuple{"raw", SaveFormat::kRaw, Format::kRaw},
                                          std::tuple{"zarr", SaveFormat::kZarr, Format::kZarr}}) {
    SCOPED_TRACE(name);
    SaveOptions opts;
    opts.format = format;
    opts.shard_rows = {500, 0, 1, 500};  // uneven, one empty, tiles cut across shards
    SaveInfo info;
    const std::string dest = (dir_ / name).string();
    save(array, dest, opts, &info);
    EXPECT_EQ(info.shards, 4);
    EXPECT_EQ(info.bytes, 1001u * 24u);
    FormatOptions fo;
    fo.format = fmt;
    const Layout layout = discover(dest, {}, fo);
    ASSERT_EQ(layout.shape(), (std::vector<std::int64_t>{1001, 3, 2}));
    ASSERT_EQ(layout.rows(), (std::vector<std::int64_t>{500, 0, 1, 500}));
    std::vector<std::byte> got(layout.total_bytes()), want(layout.total_bytes());
    ASSERT_TRUE(fill_rows(layout, 0, 1001, got.data()));
    synth_fill(f32, seed, 0, want.size() / 4, want.data());
    EXPECT_EQ(got, want);
  }
  EXPECT_FALSE(staging_left());
}

TEST_F(LegateSave, DestinationRules) {
  const auto array = make_synth_array(DType{DTypeKind::kInt, 8}, {10}, 1);
  const std::string dest = (dir_ / "o").string();
  save(array, dest);
  EXPECT_THROW(save(array, dest), DestinationExistsError);
  SaveOptions over;
  over.overwrite = true;
  over.num_shards = 1;
  save(array, dest, over);
  EXPECT_TRUE(fs::exists(dir_ / "o" / "shard_0000.npy"));
  EXPECT_FALSE(fs::exists(dir_ / "o" / "shard_0001.npy"));
  std::ofstream(dir_ / "o" / "mine.txt") << "x";
  EXPECT_THROW(save(array, dest, over), DestinationExistsError);
  EXPECT_TRUE(fs::exists(dir_ / "o" / "mine.txt"));
  EXPECT_THROW(save(array, (dir_ / "no" / "dir").string()), ShardWriteError);
  SaveOptions bad;
  bad.shard_rows = {3, 3};
  EXPECT_THROW(save(array, (dir_ / "b").string(), bad), ArgumentError);
  EXPECT_THROW(parse_save_format("hdf5"), ArgumentError);
  EXPECT_EQ(parse_save_format("raw"), Format::kRaw);
  // A format without a writer is refused by name before anything is written.
  SaveOptions unwritable;
  unwritable.format = Format::kHdf5;
  try {
    save(array, (dir_ / "b").string(), unwritable);
    ADD_FAILURE() << "saved as hdf5";
  } catch (const ArgumentError& e) {
    EXPECT_NE(
        std::string(e.what()).find("no writer for the hdf5 format (expected npy, raw or zarr)"),
        std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "b"));
  EXPECT_FALSE(staging_left());
}

// The race an overwrite's last check cannot close: between it and the swap a user replaces a
// chunk and adds a file to a store. The removal of the replaced dataset deletes only the
// files that were checked, each only while it is that file, and says something is left.
TEST_F(LegateSave, TheRemovalOfAReplacedDatasetKeepsWhatAppearedAfterTheCheck) {
  const auto array = make_synth_array(DType{DTypeKind::kFloat, 4}, {10, 2}, 3);
  SaveOptions opts;
  opts.format = SaveFormat::kZarr;
  opts.num_shards = 2;
  const std::string dest = (dir_ / "z").string();
  save(array, dest, opts);
  detail::ExistingDestination existing;
  ASSERT_TRUE(detail::check_destination(dest, true, &existing));
  EXPECT_TRUE(existing.exists);
  const fs::path store0 = dir_ / "z" / "shard_0000.zarr", store1 = dir_ / "z" / "shard_0001.zarr";
  std::ofstream(store1 / "mine") << "mine";
  fs::rename(store1 / "mine", store1 / "0");  // a new file under a checked name
  std::ofstream(store0 / "late.txt") << "late";
  EXPECT_FALSE(detail::remove_saved_entries(dest, existing.entries));
  EXPECT_TRUE(fs::exists(store0 / "late.txt"));
  EXPECT_EQ(fs::file_size(store1 / "0"), 4u);
  EXPECT_FALSE(fs::exists(store0 / ".zarray"));
  EXPECT_FALSE(fs::exists(store0 / "0"));
  EXPECT_FALSE(fs::exists(store1 / ".zarray"));
  EXPECT_FALSE(fs::exists(dir_ / "z" / "shardload.manifest"));
  // Nothing foreign: everything goes, the directory too.
  const std::string clean = (dir_ / "c").string();
  save(array, clean, opts);
  ASSERT_TRUE(detail::check_destination(clean, true, &existing));
  EXPECT_TRUE(detail::remove_saved_entries(clean, existing.entries));
  EXPECT_FALSE(fs::exists(clean));
}

// The directory a destination is in is resolved once, to its physical path: "out/../x" with
// `out` a link is the directory above the link's target, as the kernel resolves it, and the
// later steps no longer depend on the link. The last segment is kept; "." and ".." there are
// refused, and a directory that cannot be resolved is an error with its errno.
TEST_F(LegateSave, ThePhysicalDestinationResolvesTheDirectoryItIsInOnce) {
  fs::create_directories(dir_ / "a" / "deep");
  fs::create_symlink(dir_ / "a" / "deep", dir_ / "out");
  const std::string real = fs::canonical(dir_).string();
  auto p = detail::physical_destination((dir_ / "out").string() + "/../x/");
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ(*p, real + "/a/x");
  p = detail::physical_destination((dir_ / "out").string() + "/./link");
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ(*p, real + "/a/deep/link");  // a link as the last segment stays a link
  for (const char* bad : {"/x/..", "/x/.", "/x/../", "/.."}) {
    p = detail::physical_destination(dir_.string() + bad);
    ASSERT_FALSE(p) << bad;
    EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument) << p.status().message();
  }
  p = detail::physical_destination((dir_ / "no" / "such").string());
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().sys_errno(), ENOENT);
  EXPECT_NE(p.status().message().find("cannot resolve the directory it is in"), std::string::npos)
      << p.status().message();
}

// A destination whose owner or group the saving process cannot give the new directory is
// refused before anything is written. Run as another user in a child (the check touches only
// the file system), against directories root made.
TEST_F(LegateSave, ADestinationOfAnotherOwnerOrGroupIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make another user's directory";
  const fs::path mine = dir_ / "users", theirs = dir_ / "roots", group = dir_ / "group";
  for (const auto& d : {mine, theirs, group}) fs::create_directories(d);
  ASSERT_EQ(::chown(mine.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chown(group.c_str(), 65534, 0), 0);
  const auto as_nobody = [](const std::string& dest) -> std::string {
    int fds[2];
    if (::pipe(fds) != 0) return "pipe failed";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      std::string out = "cannot drop privileges";
      if (::setgid(65534) == 0 && ::setuid(65534) == 0) {
        const Status st = detail::check_destination(dest, true);
        out = st ? "ok" : std::to_string(st.sys_errno()) + " " + st.message();
      }
      (void)!::write(fds[1], out.data(), out.size());
      ::_exit(0);
    }
    ::close(fds[1]);
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, n);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return got;
  };
  EXPECT_EQ(as_nobody(mine.string()), "ok");
  const std::string refused = as_nobody(theirs.string());
  EXPECT_EQ(refused.rfind(std::to_string(EPERM) + " ", 0), 0u) << refused;
  EXPECT_NE(refused.find("belongs to user 0"), std::string::npos) << refused;
  const std::string other_group = as_nobody(group.string());
  EXPECT_NE(other_group.find("belongs to group 0"), std::string::npos) << other_group;
}

}  // namespace
}  // namespace shardload
