// shardload::Batches under a running Legate runtime (LEGATE_CONFIG, e.g. two CPUs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "shardload/batches.hpp"
#include "shardload/legate.hpp"
#include "shardload/synth.hpp"

namespace shardload {
namespace {

namespace fs = std::filesystem;

class LegateBatches : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardload-batches-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::vector<std::int64_t>& rows, const std::vector<std::int64_t>& trailing,
             DType dtype, std::uint64_t seed) {
    std::uint64_t row_elements = 1;
    for (const auto d : trailing) row_elements *= static_cast<std::uint64_t>(d);
    std::uint64_t first = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      NpyWriteSpec spec{dtype, {rows[i]}};
      spec.shape.insert(spec.shape.end(), trailing.begin(), trailing.end());
      ASSERT_TRUE(write_npy(path(i), spec, seed, first * row_elements));
      first += static_cast<std::uint64_t>(rows[i]);
    }
  }
  std::string path(std::size_t i) const {
    return (dir_ / NumberPattern{"shard_", 4, ".npy"}.format(static_cast<std::int64_t>(i)))
        .string();
  }

  // The batch holds the synthetic values of its rows, with the layout's trailing shape.
  static void expect_rows(const Batch& b, const Layout& l, std::uint64_t seed) {
    const auto extents = b.array.shape().extents();
    ASSERT_EQ(extents.size(), l.shape().size());
    ASSERT_EQ(static_cast<std::int64_t>(extents[0]), b.hi - b.lo);
    for (std::size_t d = 1; d < l.shape().size(); ++d) {
      ASSERT_EQ(static_cast<std::int64_t>(extents[static_cast<std::uint32_t>(d)]), l.shape()[d]);
    }
    const std::size_t bytes = static_cast<std::size_t>(b.hi - b.lo) * l.row_bytes;
    if (bytes == 0) return;
    const auto phys = b.array.data().get_physical_store();
    const legate::InlineAllocation alloc = phys.get_inline_allocation();
    const std::size_t row_elements = l.row_bytes / l.dtype.size;
    std::vector<std::byte> want(bytes);
    synth_fill(l.dtype, seed, static_cast<std::uint64_t>(b.lo) * row_elements,
               want.size() / l.dtype.size, want.data());
    ASSERT_EQ(std::memcmp(alloc.ptr, want.data(), want.size()), 0) << "batch " << b.index;
  }

  fs::path dir_;
};

TEST_F(LegateBatches, ConsecutiveRowsAcrossShards) {
  write({7, 0, 5, 3, 0}, {2, 3}, *parse_dtype("int32"), 5);
  const Layout layout = discover(dir_.string());
  for (const std::int64_t rows_per_batch : {1, 4, 14, 15, 16, 1000}) {
    for (const std::int64_t prefetch : {std::int64_t{0}, std::int64_t{1}, std::int64_t{3},
                                        std::numeric_limits<std::int64_t>::max()}) {
      Batches batches(layout, {rows_per_batch, prefetch, 2});
      const std::int64_t count = (15 + rows_per_batch - 1) / rows_per_batch;
      EXPECT_EQ(batches.size(), count);
      std::int64_t next_lo = 0;
      for (std::int64_t i = 0; i < count; ++i) {
        auto b = batches.next();
        ASSERT_TRUE(b.has_value());
        EXPECT_EQ(b->index, i);
        EXPECT_EQ(b->lo, next_lo);
        EXPECT_EQ(b->hi, std::min<std::int64_t>(15, next_lo + rows_per_batch));
        expect_rows(*b, layout, 5);
        next_lo = b->hi;
      }
      EXPECT_FALSE(batches.next().has_value());
      EXPECT_FALSE(batches.next().has_value());
    }
  }
}

TEST_F(LegateBatches, EmptyDatasetHasNoBatch) {
  write({0, 0}, {3}, *parse_dtype("float32"), 1);
  Batches batches(discover(dir_.string()), {10, 1, 1});
  EXPECT_EQ(batches.size(), 0);
  EXPECT_FALSE(batches.next().has_value());
}

// As load(): a layout of more dimensions than a Legate array has is refused when the
// batches are made, before any launch (Legate ended the process on the first batch's store).
TEST_F(LegateBatches, MoreDimensionsThanLegateHoldsAreRefused) {
  write({3, 2}, std::vector<std::int64_t>(kMaxLegateDims, 2), *parse_dtype("float32"), 3);
  const Layout layout = discover(dir_.string());
  BatchOptions options;
  options.rows_per_batch = 2;
  try {
    Batches batches(layout, options);
    FAIL() << "expected LayoutError";
  } catch (const LayoutError& e) {
    EXPECT_NE(std::string(e.what()).find(path(0) + " and 1 more shard has 7 dimensions, shape "
                                                   "(5, 2, 2, 2, 2, 2, 2), and a Legate array "
                                                   "has at most 6"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(LegateBatches, OptionsAreChecked) {
  write({10}, {}, *parse_dtype("float64"), 1);
  const Layout layout = discover(dir_.string());
  EXPECT_THROW(Batches(layout, {0, 1, 1}), ArgumentError);
  EXPECT_THROW(Batches(layout, {-3, 1, 1}), ArgumentError);
  EXPECT_THROW(Batches(layout, {5, -1, 1}), ArgumentError);
  EXPECT_THROW(Batches(layout, {5, 1, 0}), ArgumentError);
}

TEST_F(LegateBatches, ReadErrorIsThrownWhenItsBatchIsHandedOut) {
  write({10, 10, 10, 10, 10, 10}, {}, *parse_dtype("float64"), 3);
  const Layout layout = discover(dir_.string());
  fs::resize_file(path(3), fs::file_size(path(3)) - 8);  // changed after discovery
  Batches batches(layout, {10, 2, 1});
  for (int i = 0; i < 3; ++i) {
    auto b = batches.next();
    ASSERT_TRUE(b.has_value());
    expect_rows(*b, layout, 3);
  }
  try {
    (void)batches.next();
    FAIL() << "expected ShardReadError";
  } catch (const ShardReadError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path(3)), std::string::npos) << what;
    EXPECT_NE(what.find("batch 3 (rows [30, 40))"), std::string::npos) << what;
    EXPECT_NE(what.find("changed since discovery"), std::string::npos) << what;
    EXPECT_EQ(e.status().code(), ErrorCode::kChanged);
    EXPECT_EQ(e.filename(), path(3));
    EXPECT_EQ(e.sys_errno(), 0);
  }
  // The C++ iterator goes on with the batch after the failed one.
  auto b = batches.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->index, 4);
  expect_rows(*b, layout, 3);
}

TEST_F(LegateBatches, PrefetchedBatchesMustFitLegateMemory) {
  // Two batches of a sparse .npy declaring 8 TiB: one alone would not fit either, and the
  // message counts the batches prefetch keeps alive.
  const std::int64_t rows = std::int64_t{1} << 40;
  std::string header =
      "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ",), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  file += header;
  {
    std::FILE* f = std::fopen(path(0).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(file.data(), 1, file.size(), f);
    std::fclose(f);
  }
  fs::resize_file(path(0), file.size() + static_cast<std::uintmax_t>(rows) * 8);
  try {
    Batches batches(discover(dir_.string()), {rows / 2, 1, 1});
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("2 batches (prefetch + 1)"), std::string::npos) << what;
    EXPECT_NE(what.find("--sysmem"), std::string::npos) << what;
    EXPECT_NE(what.find("fewer rows per batch or a smaller prefetch"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace shardload

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  legate::start();
  const int rc = RUN_ALL_TESTS();
  const int fin = legate::finish();
  return rc != 0 ? rc : fin;
}
