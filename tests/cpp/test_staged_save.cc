// The staged save (shardload/staged_save.hpp): begun in one process, its rows written by
// several processes (forked children, each with its own copy of the StagedSave), committed
// or aborted once. Read back through discovery and host_load and compared with the array.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "shardload/host_load.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"
#include "shardload/source.hpp"
#include "shardload/staged_save.hpp"
#include "util.hpp"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const DType kI32{DTypeKind::kInt, 4};

bool staging_left(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".shardload-tmp-") != std::string::npos) return true;
  }
  return false;
}

std::vector<std::int32_t> load_back(const std::string& dest, Format format,
                                    std::vector<std::int64_t>* shard_rows = nullptr) {
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
  return out;
}

// Writes rows [lo, hi) of `a` (rows of 3 int32) in a forked child; true where it succeeded.
pid_t write_in_child(const StagedSave& s, const std::vector<std::int32_t>& a, std::int64_t lo,
                     std::int64_t hi) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::vector<std::int64_t> trailing{3};
    const Status st = staged_save_write(s, lo, hi, kI32, trailing,
                                        reinterpret_cast<const std::byte*>(a.data() + lo * 3),
                                        static_cast<std::size_t>(hi - lo) * 12);
    ::_exit(st.is_ok() ? 0 : 1);
  }
  return pid;
}

bool child_ok(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(StagedSave, TwoProcessesFillOneSaveThatIsCommittedOnce) {
  TempDir tmp;
  std::vector<std::int32_t> a(701 * 3);
  std::iota(a.begin(), a.end(), 0);
  const std::vector<std::int64_t> shape{701, 3};
  for (const auto& [name, format] :
       {std::tuple{"npy", Format::kNpy}, std::tuple{"raw", Format::kRaw},
        std::tuple{"zarr", Format::kZarr}}) {
    SCOPED_TRACE(name);
    const std::string dest = tmp.file(name);
    SaveOptions o;
    o.format = format;
    o.shard_rows = {300, 0, 400, 1};
    auto s = staged_save_begin(shape, kI32, dest, o);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_FALSE(fs::exists(dest));  // nothing visible before the commit
    EXPECT_TRUE(staging_left(tmp.path()));
    // One child per half, cutting a shard: positional writes from two processes.
    const pid_t first = write_in_child(*s, a, 0, 350);
    const pid_t second = write_in_child(*s, a, 350, 701);
    ASSERT_TRUE(child_ok(first));
    ASSERT_TRUE(child_ok(second));
    EXPECT_FALSE(fs::exists(dest));
    const Status committed = staged_save_commit(*s);
    ASSERT_TRUE(committed.is_ok()) << committed.message();
    std::vector<std::int64_t> rows;
    EXPECT_EQ(load_back(dest, format, &rows), a);
    EXPECT_EQ(rows, (std::vector<std::int64_t>{300, 0, 400, 1}));
    EXPECT_TRUE(fs::exists(dest + "/" + std::string(kManifestName)));
    EXPECT_FALSE(staging_left(tmp.path()));
    staged_save_abort(*s);  // after the commit: nothing to do, the dataset stays
    EXPECT_EQ(load_back(dest, format), a);
  }
}

TEST(StagedSave, AbortRemovesTheStagingAndIsIdempotent) {
  TempDir tmp;
  const std::string dest = tmp.file("d");
  const std::vector<std::int64_t> shape{10, 3};
  SaveOptions o;
  o.shard_rows = {5, 5};
  auto s = staged_save_begin(shape, kI32, dest, o);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  staged_save_abort(*s);
  staged_save_abort(*s);
  EXPECT_FALSE(staging_left(tmp.path()));
  EXPECT_FALSE(fs::exists(dest));
  // A write or a commit after the abort fails; nothing is published.
  const std::vector<std::int32_t> a(30, 7);
  const std::vector<std::int64_t> trailing{3};
  EXPECT_FALSE(staged_save_write(*s, 0, 10, kI32, trailing,
                                 reinterpret_cast<const std::byte*>(a.data()), 120)
                   .is_ok());
  EXPECT_FALSE(staged_save_commit(*s).is_ok());
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(staging_left(tmp.path()));
}

TEST(StagedSave, WritesThatDoNotMatchTheSaveAreRefused) {
  TempDir tmp;
  const std::string dest = tmp.file("d");
  const std::vector<std::int64_t> shape{10, 3};
  SaveOptions o;
  o.shard_rows = {10};
  auto s = staged_save_begin(shape, kI32, dest, o);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const std::vector<std::int32_t> a(30, 7);
  const auto* data = reinterpret_cast<const std::byte*>(a.data());
  const std::vector<std::int64_t> three{3};
  const std::vector<std::int64_t> two{2};
  const auto refused = [](const Status& st, const std::string& want) {
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
  };
  refused(staged_save_write(*s, 5, 11, kI32, three, data, 72),
          "expected a range within the save's 10 rows");
  refused(staged_save_write(*s, -1, 2, kI32, three, data, 36), "expected a range");
  refused(staged_save_write(*s, 0, 10, DType{DTypeKind::kFloat, 4}, three, data, 120),
          "expected int32, found float32");
  refused(staged_save_write(*s, 0, 10, kI32, two, data, 80),
          "expected rows of shape (3,), found (2,)");
  refused(staged_save_write(*s, 0, 10, kI32, three, data, 60), "expected 120 bytes, found 60");
  // A damaged handle: a staging path that is no staging directory, a spec that does not
  // decode. Nothing is written or removed there.
  StagedSave other = *s;
  other.staging = tmp.path();
  refused(staged_save_write(other, 0, 10, kI32, three, data, 120),
          "expected the staging directory of a staged save");
  staged_save_abort(other);
  EXPECT_TRUE(fs::exists(tmp.path()));
  other = *s;
  other.spec.resize(3);
  refused(staged_save_write(other, 0, 10, kI32, three, data, 120), "malformed spec");
  staged_save_abort(*s);
  EXPECT_FALSE(staging_left(tmp.path()));
}

TEST(StagedSave, BeginChecksAsHostSaveDoes) {
  TempDir tmp;
  const std::vector<std::int64_t> shape{4};
  SaveOptions o;
  o.shard_rows = {1, 2};
  auto r = staged_save_begin(shape, kI32, tmp.file("d"), o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("the shard rows add up to 3, but the array has 4 rows"),
            std::string::npos)
      << r.status().message();
  o.shard_rows = {4};
  r = staged_save_begin(shape, kI32, "s3://bucket/prefix/", o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("directory only"), std::string::npos) << r.status().message();
  // A taken destination: EEXIST, nothing staged; with overwrite, replaced at the commit.
  const std::string dest = tmp.file("taken");
  fs::create_directory(dest);
  testing::write_file(dest + "/notes.txt", "mine");
  r = staged_save_begin(shape, kI32, dest, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().sys_errno(), EEXIST) << r.status().message();
  EXPECT_FALSE(staging_left(tmp.path()));
}

}  // namespace
}  // namespace shardload
