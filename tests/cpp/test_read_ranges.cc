// Range reads of the storage layer: coalesce_ranges's rule (merge within the hole limit, never
// past the request limit, by offset), fetch_ranges's bytes and request count against the
// file's own bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "storage/detail/read_ranges.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using detail::ByteRange;
using detail::coalesce_ranges;
using detail::CoalesceLimits;

TEST(CoalesceRanges, MergesNeighboursWithinTheHoleLimitAndNotBeyond) {
  const CoalesceLimits limits{100, 1000};
  // 0-10 and 50-60 (hole 40) merge; 200-210 is 140 past: its own request.
  const std::vector<ByteRange> ranges{{0, 10}, {50, 10}, {200, 10}};
  const auto reads = coalesce_ranges(ranges, limits);
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[0].offset, 0u);
  EXPECT_EQ(reads[0].length, 60u);
  EXPECT_EQ(reads[0].members, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(reads[1].offset, 200u);
  EXPECT_EQ(reads[1].length, 10u);
  EXPECT_EQ(reads[1].members, (std::vector<std::size_t>{2}));
}

TEST(CoalesceRanges, TakesRangesByOffsetAndSharesOverlaps) {
  const CoalesceLimits limits{0, 1000};
  // Given out of order; 10-30 overlaps 0-20; 30-40 touches (hole 0).
  const std::vector<ByteRange> ranges{{30, 10}, {10, 20}, {0, 20}, {500, 1}};
  const auto reads = coalesce_ranges(ranges, limits);
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[0].offset, 0u);
  EXPECT_EQ(reads[0].length, 40u);
  EXPECT_EQ(reads[0].members, (std::vector<std::size_t>{2, 1, 0}));
  EXPECT_EQ(reads[1].members, (std::vector<std::size_t>{3}));
}

TEST(CoalesceRanges, NeverMergesPastTheRequestLimitAndKeepsALargeRangeWhole) {
  const CoalesceLimits limits{100, 64};
  const std::vector<ByteRange> ranges{{0, 40}, {40, 40}, {80, 200}, {280, 8}};
  const auto reads = coalesce_ranges(ranges, limits);
  ASSERT_EQ(reads.size(), 4u);  // 0-40 + 40-80 would be 80 > 64; 80-280 alone is 200
  EXPECT_EQ(reads[2].offset, 80u);
  EXPECT_EQ(reads[2].length, 200u);
  for (const auto& r : reads) EXPECT_EQ(r.members.size(), 1u);
}

TEST(CoalesceRanges, EmptyListAndEmptyRanges) {
  EXPECT_TRUE(coalesce_ranges({}).empty());
  const std::vector<ByteRange> ranges{{5, 0}, {10, 4}, {12, 0}};
  const auto reads = coalesce_ranges(ranges);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].members.size(), 3u);
}

class FetchRanges : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 4096; ++i) bytes_.push_back(static_cast<char>(i * 7 + i / 256));
    path_ = dir_.path() + "/object.bin";
    testing::write_file(path_, bytes_);
  }
  testing::TempDir dir_;
  std::string bytes_;
  std::string path_;
};

TEST_F(FetchRanges, EachRangeGetsTheFilesBytesInFewerReads) {
  testing::CountingIo io;
  auto f = File::open(io, path_);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  std::vector<std::byte> direct(100);
  // Three neighbours (one read), one far range read straight into `direct`, and a range past
  // a request limit of 512 bytes (two reads).
  const std::vector<ByteRange> ranges{
      {10, 20}, {35, 5}, {2000, 100, direct.data()}, {40, 30}, {3000, 1000}};
  const CoalesceLimits limits{64, 512};
  io.preads = 0;
  std::vector<std::string> got(ranges.size());
  std::vector<std::size_t> order;
  const Status st =
      detail::fetch_ranges(*f, ranges, limits, 1, 1 << 20, [&](std::size_t i, const std::byte* b) {
        got[i].assign(reinterpret_cast<const char*>(b), ranges[i].length);
        order.push_back(i);
        return Status::ok();
      });
  ASSERT_TRUE(st.is_ok()) << st.message();
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_EQ(got[i], bytes_.substr(ranges[i].offset, ranges[i].length)) << "range " << i;
  }
  EXPECT_EQ(std::memcmp(direct.data(), bytes_.data() + 2000, 100), 0);
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 3, 2, 4}));
  EXPECT_EQ(io.preads, 1 + 1 + 2);
}

TEST_F(FetchRanges, SeveralInFlightGiveTheSameBytes) {
  auto f = File::open(posix_io(), path_);
  ASSERT_TRUE(f.is_ok());
  std::vector<ByteRange> ranges;
  for (std::uint64_t at = 0; at + 30 <= 4096; at += 97) ranges.push_back({at, 30});
  std::vector<std::string> got(ranges.size());
  const Status st = detail::fetch_ranges(*f, ranges, CoalesceLimits{16, 256}, 4, 1024,
                                         [&](std::size_t i, const std::byte* b) {
                                           got[i].assign(reinterpret_cast<const char*>(b), 30);
                                           return Status::ok();
                                         });
  ASSERT_TRUE(st.is_ok()) << st.message();
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_EQ(got[i], bytes_.substr(ranges[i].offset, 30)) << "range " << i;
  }
}

TEST_F(FetchRanges, AReadPastTheEndFailsNamingTheFileAndConsumesNothingAfter) {
  auto f = File::open(posix_io(), path_);
  ASSERT_TRUE(f.is_ok());
  const std::vector<ByteRange> ranges{{0, 10}, {4090, 100}, {8000, 4}};
  std::vector<std::size_t> consumed;
  const Status st = detail::fetch_ranges(*f, ranges, CoalesceLimits{0, 1 << 20}, 1, 1 << 20,
                                         [&](std::size_t i, const std::byte*) {
                                           consumed.push_back(i);
                                           return Status::ok();
                                         });
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("object.bin"), std::string::npos) << st.message();
  EXPECT_EQ(consumed, (std::vector<std::size_t>{0}));
}

}  // namespace
}  // namespace shardload
