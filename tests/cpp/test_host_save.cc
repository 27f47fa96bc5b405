// host_save (shardload/host_save.hpp): an array in one buffer written as shards by the
// engine's threads, no runtime. Read back through discovery and host_load, and the shards'
// bytes compared with the array's rows.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "shardload/host_load.hpp"
#include "shardload/host_save.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"
#include "shardload/source.hpp"
#include "util.hpp"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// 0, 1, 2, ... as int32: every row tells where it came from.
std::vector<std::int32_t> iota_array(std::int64_t n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

const std::byte* bytes_of(const std::vector<std::int32_t>& v) {
  return reinterpret_cast<const std::byte*>(v.data());
}

const DType kI32{DTypeKind::kInt, 4};

// Every entry of `dir` whose name holds the staging marker.
bool staging_left(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".shardload-tmp-") != std::string::npos) return true;
  }
  return false;
}

// The dataset at `dest` read back with host_load (format given, as a loader names it).
std::vector<std::int32_t> load_back(const std::string& dest, Format format,
                                    std::vector<std::int64_t>* shard_rows = nullptr,
                                    std::vector<std::int64_t>* trailing = nullptr) {
  DiscoverOptions d;
  d.format.format = format;
  auto l = try_discover(Source::directory(dest), d);
  EXPECT_TRUE(l.is_ok()) << l.status().message();
  if (!l) return {};
  std::vector<std::int32_t> out(l->total_bytes() / 4);
  const auto r = host_load(*l, reinterpret_cast<std::byte*>(out.data()));
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  if (shard_rows != nullptr) {
    shard_rows->clear();
    for (std::size_t i = 0; i + 1 < l->offsets.size(); ++i) {
      shard_rows->push_back(l->offsets[i + 1] - l->offsets[i]);
    }
  }
  if (trailing != nullptr) *trailing = l->trailing_shape;
  return out;
}

TEST(HostSave, RoundTripsEveryFormatWithRaggedAndEmptyShards) {
  TempDir tmp;
  const auto a = iota_array(1001 * 3);
  const std::vector<std::int64_t> shape{1001, 3};
  for (const auto& [name, format] :
       {std::tuple{"npy", Format::kNpy}, std::tuple{"raw", Format::kRaw},
        std::tuple{"zarr", Format::kZarr}}) {
    SCOPED_TRACE(name);
    HostSaveOptions o;
    o.save.format = format;
    o.save.shard_rows = {500, 0, 1, 0, 500};  // ragged, empty ones, tiles across shards
    o.threads = 3;
    const std::string dest = tmp.file(name);
    const auto r = host_save(bytes_of(a), shape, kI32, dest, o);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->shards, 5);
    EXPECT_EQ(r->bytes, 1001u * 12u);
    EXPECT_TRUE(fs::exists(dest + "/" + std::string(kManifestName)));
    std::vector<std::int64_t> rows;
    std::vector<std::int64_t> trailing;
    EXPECT_EQ(load_back(dest, format, &rows, &trailing), a);
    EXPECT_EQ(rows, (std::vector<std::int64_t>{500, 0, 1, 0, 500}));
    EXPECT_EQ(trailing, (std::vector<std::int64_t>{3}));
    EXPECT_FALSE(staging_left(tmp.path()));
  }
}

TEST(HostSave, SplitsAsTheLegateSaveDoesAndDefaultsToOneShardPerCore) {
  TempDir tmp;
  const auto a = iota_array(10);
  const std::vector<std::int64_t> shape{10};
  HostSaveOptions o;
  o.save.num_shards = 4;  // ceil(10 / 4) = 3: 3, 3, 3, 1
  ASSERT_TRUE(host_save(bytes_of(a), shape, kI32, tmp.file("four"), o).is_ok());
  std::vector<std::int64_t> rows;
  EXPECT_EQ(load_back(tmp.file("four"), Format::kNpy, &rows), a);
  EXPECT_EQ(rows, (std::vector<std::int64_t>{3, 3, 3, 1}));

  const auto r = host_save(bytes_of(a), shape, kI32, tmp.file("default"), {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->shards, default_host_threads());
}

TEST(HostSave, ZeroRowsAndZeroWidthRows) {
  TempDir tmp;
  const std::vector<std::int64_t> shape{0, 4};
  HostSaveOptions o;
  o.save.num_shards = 2;
  const auto r = host_save(nullptr, shape, kI32, tmp.file("empty"), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->bytes, 0u);
  std::vector<std::int64_t> rows;
  EXPECT_TRUE(load_back(tmp.file("empty"), Format::kNpy, &rows).empty());
  EXPECT_EQ(rows, (std::vector<std::int64_t>{0, 0}));
}

TEST(HostSave, RefusesBadArgumentsBeforeWritingAnything) {
  TempDir tmp;
  const auto a = iota_array(4);
  const std::vector<std::int64_t> shape{4};
  const std::string dest = tmp.file("d");
  const auto refused = [&](HostSaveOptions o, std::span<const std::int64_t> s, DType t,
                           const std::string& where, const std::string& want) {
    const auto r = host_save(bytes_of(a), s, t, where, o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  };
  HostSaveOptions o;
  refused(o, shape, kI32, "", "save: the destination is empty");
  refused(o, {}, kI32, dest, "expected an array of 1 or more dimensions, found 0");
  o.save.shard_rows = {1, 2};
  refused(o, shape, kI32, dest, "the shard rows add up to 3, but the array has 4 rows");
  o.save.shard_rows = {5};
  refused(o, shape, kI32, dest, "add up to more than the array's 4 rows");
  o.save.shard_rows = {};
  o.save.num_shards = 1000001;
  refused(o, shape, kI32, dest, "num_shards must be at most 1000000");
  o.save.num_shards = 1;
  o.save.format = Format::kHdf5;
  refused(o, shape, kI32, dest, "no writer for the hdf5 format");
  o.save.format = Format::kZarr;
  o.save.checksum = Checksum::kXxh3;
  refused(o, shape, kI32, dest, "a zarr shard is a directory");
  o.save = {};
  refused(o, shape, DType{DTypeKind::kFloat, 3}, dest, "cannot be saved");
  const std::vector<std::int64_t> huge{std::int64_t{1} << 62, 1 << 20};
  refused(o, huge, kI32, dest, "overflow");
  o.threads = -1;
  refused(o, shape, kI32, dest, "threads");
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(staging_left(tmp.path()));
}

TEST(HostSave, OverwriteRulesAreTheLegateSaves) {
  TempDir tmp;
  const std::string dest = tmp.file("d");
  const auto a = iota_array(6);
  const auto b = iota_array(9);
  const std::vector<std::int64_t> shape_a{6};
  const std::vector<std::int64_t> shape_b{9};
  HostSaveOptions o;
  o.save.num_shards = 2;
  ASSERT_TRUE(host_save(bytes_of(a), shape_a, kI32, dest, o).is_ok());
  // Taken without overwrite: refused, the old dataset whole.
  auto r = host_save(bytes_of(b), shape_b, kI32, dest, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().sys_errno(), EEXIST) << r.status().message();
  EXPECT_EQ(load_back(dest, Format::kNpy), a);
  // With overwrite: replaced in one exchange.
  o.save.overwrite = true;
  o.save.num_shards = 3;
  ASSERT_TRUE(host_save(bytes_of(b), shape_b, kI32, dest, o).is_ok());
  std::vector<std::int64_t> rows;
  EXPECT_EQ(load_back(dest, Format::kNpy, &rows), b);
  EXPECT_EQ(rows.size(), 3u);
  // A user's file in it: refused even with overwrite, nothing deleted.
  testing::write_file(dest + "/notes.txt", "mine");
  r = host_save(bytes_of(a), shape_a, kI32, dest, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("notes.txt"), std::string::npos) << r.status().message();
  EXPECT_TRUE(fs::exists(dest + "/notes.txt"));
  EXPECT_EQ(load_back(dest, Format::kNpy), b);
  EXPECT_FALSE(staging_left(tmp.path()));
}

TEST(HostSave, AnInterruptWhileWritingPublishesNothing) {
  TempDir tmp;
  const std::string dest = tmp.file("d");
  const auto a = iota_array(1000);
  const std::vector<std::int64_t> shape{1000};
  HostSaveOptions o;
  o.save.num_shards = 4;
  request_interrupt();  // seen before the first tile: after the files are made, before rows
  const auto r = host_save(bytes_of(a), shape, kI32, dest, o);
  clear_interrupt();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().sys_errno(), ECANCELED) << r.status().message();
  EXPECT_NE(r.status().message().find("saving to " + dest), std::string::npos);
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(staging_left(tmp.path()));
}

TEST(HostSave, AThrowingBeforeCommitPublishesNothingAndPassesOn) {
  TempDir tmp;
  const std::string dest = tmp.file("d");
  const auto a = iota_array(100);
  const std::vector<std::int64_t> shape{100};
  HostSaveOptions o;
  o.save.num_shards = 3;
  bool called = false;
  o.save.before_commit = [&] {
    called = true;
    throw std::runtime_error("stop");
  };
  EXPECT_THROW((void)host_save(bytes_of(a), shape, kI32, dest, o), std::runtime_error);
  EXPECT_TRUE(called);
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(staging_left(tmp.path()));
}

// A file size limit (as a full disk would): a shard cannot be made at its size. In a child,
// which the limit's SIGXFSZ would otherwise end.
TEST(HostSave, AShardThatCannotBeCreatedLeavesNothing) {
  TempDir tmp;
  const std::string dest = tmp.file("d");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{1 << 16, RLIM_INFINITY};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    const auto a = iota_array(100000);  // 400 kB: shards of 100 kB, over the 64 kiB limit
    const std::vector<std::int64_t> shape{100000};
    HostSaveOptions o;
    o.save.num_shards = 4;
    const auto r = host_save(bytes_of(a), shape, kI32, dest, o);
    const bool ok = !r.is_ok() && r.status().sys_errno() == EFBIG &&
                    r.status().message().find("shard_0000.npy") != std::string::npos;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(staging_left(tmp.path()));
}

}  // namespace
}  // namespace shardload
