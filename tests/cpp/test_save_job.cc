// The one save job (engine/detail/save_job.hpp) that every front end drives: begun once, its
// units written by copies of it decoded from its bytes (as other processes take it), in any
// order, then published once; or abandoned, leaving nothing. Read back through discovery and
// host_load and compared with the array.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "engine/detail/save_job.hpp"
#include "shardload/host_load.hpp"
#include "shardload/layout.hpp"
#include "shardload/source.hpp"
#include "util.hpp"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr std::int64_t kRows = 701;
constexpr std::int64_t kCols = 3;

detail::SaveSpec npy_spec(std::vector<std::int64_t> offsets) {
  detail::SaveSpec spec;
  spec.format = SaveFormat::kNpy;
  spec.dtype = DType{DTypeKind::kInt, 4};
  spec.trailing = {kCols};
  spec.row_bytes = kCols * 4;
  spec.offsets = std::move(offsets);
  spec.data_offset.assign(static_cast<std::size_t>(spec.shards()), 0);
  spec.chunk_rows.assign(static_cast<std::size_t>(spec.shards()), 1);
  return spec;
}

std::vector<std::int32_t> load_back(const std::string& dest) {
  auto l = try_discover(Source::directory(dest), DiscoverOptions{});
  EXPECT_TRUE(l.is_ok()) << l.status().message();
  if (!l) return {};
  std::vector<std::int32_t> out(l->total_bytes() / 4);
  const auto r = host_load(*l, reinterpret_cast<std::byte*>(out.data()));
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return out;
}

bool anything_but(const std::string& dir, const std::string& name) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() != name) return true;
  }
  return false;
}

TEST(SaveJob, UnitsWrittenInAnyOrderByDecodedCopiesArePublishedOnce) {
  TempDir tmp;
  std::vector<std::int32_t> a(kRows * kCols);
  std::iota(a.begin(), a.end(), -1000);
  const std::string dest = tmp.file("out");
  auto job = detail::SaveJob::begin(dest, SaveOptions{}, npy_spec({0, 300, 301, kRows}));
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  auto units = job->units(/*writers=*/3, /*per_writer=*/2);
  ASSERT_TRUE(units.is_ok()) << units.status().message();
  ASSERT_GT(units->list.size(), 1u);
  // The units cover every row once.
  std::vector<int> covered(kRows, 0);
  for (const auto& u : units->list) {
    for (std::int64_t r = u.lo; r < u.hi; ++r) ++covered[static_cast<std::size_t>(r)];
  }
  EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), kRows);

  const std::vector<std::uint8_t> bytes = job->encode();
  std::vector<WrittenKey> own, begun;
  for (auto u = units->list.rbegin(); u != units->list.rend(); ++u) {
    auto copy = detail::SaveJob::decode(bytes);
    ASSERT_TRUE(copy.is_ok()) << copy.status().message();
    const auto* src = reinterpret_cast<const std::byte*>(a.data() + u->lo * kCols);
    const Status st = copy->write(*u, src, &own, &begun);
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_FALSE(fs::exists(dest)) << "visible before the publish";
  }
  bool published = false;
  const Status st = job->publish(&own, &published);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_TRUE(published);
  EXPECT_EQ(load_back(dest), a);
  EXPECT_FALSE(anything_but(tmp.path(), "out")) << "the staging directory was left";
}

TEST(SaveJob, AnAbandonedJobLeavesNothingAndADamagedEncodingIsRefused) {
  TempDir tmp;
  std::vector<std::int32_t> a(kRows * kCols, 7);
  const std::string dest = tmp.file("out");
  auto job = detail::SaveJob::begin(dest, SaveOptions{}, npy_spec({0, 400, kRows}));
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  auto units = job->units(2, 1);
  ASSERT_TRUE(units.is_ok()) << units.status().message();
  const auto& u = units->list.front();
  ASSERT_TRUE(
      job->write(u, reinterpret_cast<const std::byte*>(a.data() + u.lo * kCols), nullptr, nullptr)
          .is_ok());
  EXPECT_EQ(job->abandon(nullptr, nullptr, nullptr), "");
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(anything_but(tmp.path(), "")) << "the staging directory was left";

  std::vector<std::uint8_t> bytes = job->encode();
  for (const std::size_t keep : {std::size_t{0}, bytes.size() / 2, bytes.size() - 1}) {
    const std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + keep);
    EXPECT_FALSE(detail::SaveJob::decode(cut).is_ok()) << keep << " of " << bytes.size();
  }
}

}  // namespace
}  // namespace shardload
