// The C++ API under a running Legate runtime (LEGATE_CONFIG, e.g. two CPUs).
#include <gtest/gtest.h>
#include <unistd.h>
#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "legate/detail/tasks.hpp"
#include "shardload/fill.hpp"
#include "shardload/legate.hpp"
#include "shardload/manifest.hpp"
#include "shardload/manifest_legate.hpp"
#ifdef SHARDLOAD_TEST_CUPYNUMERIC
#include "shardload/cupynumeric.hpp"
#endif
#include "shardload/synth.hpp"

namespace shardload {
namespace {

namespace fs = std::filesystem;

class LegateLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardload-legate-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes shards of synthetic data; returns the total shape.
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

  // Compares the whole array with synth_fill through a host mapping.
  static void expect_synth(const legate::LogicalArray& a, const Layout& l, std::uint64_t seed) {
    ASSERT_EQ(a.dim(), static_cast<std::uint32_t>(l.shape().size()));
    const auto extents = a.shape().extents();
    for (std::size_t d = 0; d < l.shape().size(); ++d) {
      ASSERT_EQ(static_cast<std::int64_t>(extents[static_cast<std::uint32_t>(d)]), l.shape()[d]);
    }
    if (l.total_bytes() == 0) return;
    const auto phys = a.data().get_physical_store();
    const legate::InlineAllocation alloc = phys.get_inline_allocation();
    std::vector<std::byte> want(l.total_bytes());
    synth_fill(l.dtype, seed, 0, want.size() / l.dtype.size, want.data());
    ASSERT_EQ(alloc.strides.back(), l.dtype.size);
    ASSERT_EQ(std::memcmp(alloc.ptr, want.data(), want.size()), 0);
  }

  fs::path dir_;
};

TEST_F(LegateLoad, RandomLayoutsAndK) {
  std::mt19937 rng(17);
  const char* dtypes[] = {"bool",    "int8",    "uint16",  "int32",     "int64",     "uint64",
                          "float16", "float32", "float64", "complex64", "complex128"};
  for (int iter = 0; iter < 12; ++iter) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const int n = 1 + static_cast<int>(rng() % 20);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
    for (auto& r : rows) r = rng() % 4 == 0 ? 0 : static_cast<std::int64_t>(rng() % 50);
    std::vector<std::int64_t> trailing(rng() % 4);
    for (auto& d : trailing) d = static_cast<std::int64_t>(1 + rng() % 3);
    const DType dtype = *parse_dtype(dtypes[rng() % std::size(dtypes)]);
    write(rows, trailing, dtype, static_cast<std::uint64_t>(iter));
    const Layout layout = discover(dir_.string());
    for (std::int64_t k : {1, 3}) {
      SCOPED_TRACE("iter " + std::to_string(iter) + " K " + std::to_string(k) + " " + dtype.name() +
                   " " + shape_string(layout.shape()));
      LoadInfo info;
      const auto a = load(layout, LoadOptions{k}, &info);
      EXPECT_EQ(info.target, "CPU");
      EXPECT_GE(info.processors, 1);
      EXPECT_LE(info.tiles, info.processors * k);
      expect_synth(a, layout, static_cast<std::uint64_t>(iter));
    }
  }
}

// The throwing discover takes every DiscoverOptions: a trusted manifest is taken without
// looking at the shards, so a shard removed after indexing goes unseen; a plain discover
// probes and finds one shard fewer.
TEST_F(LegateLoad, DiscoverTakesDiscoverOptions) {
  write({30, 20}, {2}, *parse_dtype("int32"), 4);
  const Layout probed = discover(dir_.string());
  ASSERT_TRUE(write_manifest(probed, dir_.string()));
  fs::remove(path(1));
  DiscoverOptions trusted;
  trusted.trust_manifest = true;
  EXPECT_EQ(discover(Source::directory(dir_.string()), trusted).total_rows(), 50);
  EXPECT_EQ(discover(dir_.string(), trusted).total_rows(), 50);
  EXPECT_EQ(discover(Source::directory(dir_.string())).total_rows(), 30);
  DiscoverOptions ignore;
  ignore.use_manifest = false;
  EXPECT_EQ(discover(dir_.string(), ignore).shards.size(), 1u);
  EXPECT_THROW(discover(Source::directory((dir_ / "missing").string()), trusted),
               SourceNotFoundError);
  // discover_once carries the same options to its point task.
  EXPECT_EQ(discover_once(dir_.string(), {}, trusted).total_rows(), 50);
  EXPECT_EQ(discover_once(dir_.string(), {}, ignore).total_rows(), 30);
  trusted.use_manifest = false;  // no manifest to trust: the files as they are
  EXPECT_EQ(discover_once(dir_.string(), {}, trusted).total_rows(), 30);
  DiscoverOptions local_io;
  local_io.io = &posix_io();
  EXPECT_THROW(discover_once(dir_.string(), {}, local_io), ArgumentError);
}

// dtype_of inverts legate_type for every dtype and refuses a type shardload does not hold.
TEST(LegateTypes, DtypeOfInvertsLegateType) {
  for (const char* name : {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                           "uint64", "float16", "float32", "float64", "complex64", "complex128"}) {
    const DType d = *parse_dtype(name);
    EXPECT_EQ(dtype_of(legate_type(d)), d) << name;
  }
  try {
    (void)dtype_of(legate::string_type());
    FAIL() << "expected ArgumentError";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("has no shardload dtype"), std::string::npos) << e.what();
  }
}

TEST_F(LegateLoad, EmptyDataset) {
  write({0, 0}, {3}, *parse_dtype("float32"), 1);
  LoadInfo info;
  const auto a = load(discover(dir_.string()), {}, &info);
  EXPECT_EQ(info.tiles, 0);
  EXPECT_EQ(a.shape().extents()[0], 0u);
  EXPECT_EQ(a.shape().extents()[1], 3u);
}

TEST_F(LegateLoad, ErrorsAreTypedAndTheRuntimeSurvives) {
  EXPECT_THROW(discover((dir_ / "missing").string()), LayoutError);
  EXPECT_THROW(discover((dir_ / "missing").string()), SourceNotFoundError);
  write({100, 100}, {4}, *parse_dtype("float64"), 2);
  const Layout layout = discover(dir_.string());
  EXPECT_THROW(load(layout, LoadOptions{0}), LayoutError);
  // Truncate a shard after discovery: a point task fails, the caller gets
  // the error naming the file and rows, and the next load works.
  fs::resize_file(path(1), fs::file_size(path(1)) - 8);
  try {
    (void)load(layout);
    FAIL() << "expected ShardReadError";
  } catch (const ShardReadError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path(1)), std::string::npos) << what;
    EXPECT_NE(what.find("rows ["), std::string::npos) << what;
    EXPECT_NE(what.find("changed since discovery"), std::string::npos) << what;
    // The code and the file crossed the task boundary as data, not as text in the message.
    EXPECT_EQ(e.status().code(), ErrorCode::kChanged);
    EXPECT_EQ(e.filename(), path(1));
    EXPECT_EQ(what.find('\x1e'), std::string::npos) << what;
    EXPECT_EQ(e.status().message(), what);
  }
  write({100, 100}, {4}, *parse_dtype("float64"), 2);
  const Layout again = discover(dir_.string());
  expect_synth(load(again), again, 2);
}

// A shard that disappears after discovery: the task's error reaches the caller with the file
// and the errno of the failed open as data, the class and code of a read error.
TEST_F(LegateLoad, AShardRemovedAfterDiscoveryIsNamedWithItsErrno) {
  write({40, 40, 40}, {2}, *parse_dtype("int32"), 5);
  const Layout layout = discover(dir_.string());
  fs::remove(path(2));
  try {
    (void)load(layout, LoadOptions{2});
    FAIL() << "expected ShardReadError";
  } catch (const ShardReadError& e) {
    EXPECT_EQ(e.status().code(), ErrorCode::kIo);
    EXPECT_EQ(e.filename(), path(2));
    EXPECT_EQ(e.sys_errno(), ENOENT);
    EXPECT_NE(std::string(e.what()).find(path(2)), std::string::npos) << e.what();
  }
}

// A message names its options by marks (shardload/format.hpp), which are part of its text: they
// survive each layer's context and the frame a task's error travels in, and the exceptions
// spell them: what() in the C++ API's words, message() as the front end asks.
TEST(TaskError, OptionMarksSurviveTheFrameAndTheExceptionsSpellThem) {
  const Status st =
      file_error(ErrorCode::kFormat, "f.parquet",
                 "row 2 is null (pass " + option_mention("fill_value") + " to replace nulls)")
          .with_context("tile 0");
  const Status back = detail::task_error_status(static_cast<std::int32_t>(ErrorCode::kFormat),
                                                detail::task_error_message(st));
  EXPECT_EQ(back.message(), st.message());
  const ShardReadError e(back);
  EXPECT_STREQ(e.what(),
               "tile 0: f.parquet: row 2 is null (pass the fill value option to replace "
               "nulls)");
  EXPECT_EQ(e.message(OptionSpelling::kCli),
            "tile 0: f.parquet: row 2 is null (pass --fill-value to replace nulls)");
  EXPECT_EQ(e.message(OptionSpelling::kPython),
            "tile 0: f.parquet: row 2 is null (pass fill_value= to replace nulls)");
  EXPECT_EQ(e.filename(), "f.parquet");
}

// Several tiles fail: the error is the lowest failing tile's, every time, whichever point
// finished first (each point's failure is a record in tile order, read after all of them).
TEST_F(LegateLoad, TheLowestFailingTileIsReported) {
  // Eight shards of 16 rows and K=4 on the test's CPUs: several tiles, each of whole shards.
  write(std::vector<std::int64_t>(8, 16), {3}, *parse_dtype("int16"), 7);
  const Layout layout = discover(dir_.string());
  LoadInfo info;
  (void)load(layout, LoadOptions{4}, &info);
  ASSERT_GE(info.tiles, 3);
  ASSERT_EQ(info.tile_rows % 16, 0);
  // Tile 1's first shard changed; every shard of the tiles after it gone.
  const auto low = static_cast<std::size_t>(info.tile_rows / 16);
  fs::resize_file(path(low), fs::file_size(path(low)) - 2);
  for (std::size_t i = 2 * low; i < layout.shards.size(); ++i) fs::remove(path(i));
  for (int attempt = 0; attempt < 5; ++attempt) {
    try {
      (void)load(layout, LoadOptions{4});
      FAIL() << "expected ShardReadError";
    } catch (const ShardReadError& e) {
      EXPECT_EQ(e.status().code(), ErrorCode::kChanged) << e.what();
      EXPECT_EQ(e.filename(), path(low)) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("tile 1 (rows [", 0), 0u) << e.what();
    }
  }
}

// The frame a task's error travels in: file and errno come back exactly, whatever bytes they
// hold, and the message as every Status message shows it (control characters and bytes that
// are no UTF-8 escaped: printable()); a message without the frame is taken whole, with no file.
TEST(TaskError, FrameRoundTripsAndPlainMessagesPass) {
  const std::string odd_path = std::string("dir;7;/\x1e") + '\xff' + "shard 1;.npy";
  const std::string message = odd_path + ": 12;34; read failed";
  const Status st = file_error(ErrorCode::kIo, odd_path, "12;34; read failed", EACCES);
  const Status back = detail::task_error_status(static_cast<std::int32_t>(ErrorCode::kIo),
                                                detail::task_error_message(st));
  EXPECT_EQ(back.code(), ErrorCode::kIo);
  EXPECT_EQ(back.path(), odd_path);
  EXPECT_EQ(back.sys_errno(), EACCES);
  EXPECT_EQ(back.message(), printable(message));

  const Status none = detail::task_error_status(
      static_cast<std::int32_t>(ErrorCode::kLayout),
      detail::task_error_message(Status(ErrorCode::kLayout, "no file here")));
  EXPECT_EQ(none.path(), "");
  EXPECT_EQ(none.sys_errno(), 0);
  EXPECT_EQ(none.message(), "no file here");

  const Status plain = detail::task_error_status(99, "a runtime's own words");
  EXPECT_EQ(plain.code(), ErrorCode::kIo);
  EXPECT_EQ(plain.path(), "");
  EXPECT_EQ(plain.message(), "a runtime's own words");
  // A damaged frame (a path longer than what follows) is a plain message too.
  const std::string bad = std::string(detail::kTaskErrorMark) + "2;999;short";
  EXPECT_EQ(detail::task_error_status(1, bad).message(), printable(bad));
  EXPECT_EQ(detail::task_error_status(1, bad).path(), "");

  // A batch's error record: the same frame, the message cut at its end to fit, the file kept.
  const Status long_message = file_error(ErrorCode::kChanged, odd_path,
                                         "changed since discovery: " + std::string(300, 'x'), 0);
  std::vector<std::byte> record(detail::kRecordHeader + 200);
  detail::encode_record(long_message, record.data(), record.size());
  const Status got = detail::decode_record(record.data(), record.size());
  EXPECT_EQ(got.code(), ErrorCode::kChanged);
  EXPECT_EQ(got.path(), odd_path);
  EXPECT_EQ(got.message().rfind(printable(odd_path) + ": changed since discovery: xxx", 0), 0u)
      << got.message();
  EXPECT_EQ(got.message().substr(got.message().size() - 6), " [...]") << got.message();
  // A cut that would fall inside an option's mark falls before it: no half mark is left.
  for (std::size_t pad = 100; pad < 170; ++pad) {
    const Status marked = file_error(
        ErrorCode::kFormat, "f.parquet",
        std::string(pad, 'y') + " pass " + option_mention("fill_value") + " to replace nulls");
    detail::encode_record(marked, record.data(), record.size());
    const std::string text = detail::decode_record(record.data(), record.size()).message();
    EXPECT_EQ(std::count(text.begin(), text.end(), option_mention("dtype").front()) % 2, 0)
        << pad << ": " << text;
    EXPECT_EQ(spell_options(text, OptionSpelling::kCli).find('\x1f'), std::string::npos) << text;
  }
  detail::encode_record(st, record.data(), record.size());
  EXPECT_EQ(detail::decode_record(record.data(), record.size()).sys_errno(), EACCES);
  detail::encode_record(Status::ok(), record.data(), record.size());
  EXPECT_TRUE(detail::decode_record(record.data(), record.size()).is_ok());
}

// A .npy whose header declares more data than Legate's whole system memory (the data is a
// hole, so the file costs nothing): refused before anything is allocated, naming both sizes.
TEST_F(LegateLoad, DatasetLargerThanLegateMemoryIsRefused) {
  const std::int64_t rows = std::int64_t{1} << 40;  // 8 TiB of float64
  std::string header =
      "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ",), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  {
    std::FILE* f = std::fopen(path(0).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  fs::resize_file(path(0), bytes.size() + static_cast<std::uintmax_t>(rows) * 8);
  const Layout layout = discover(dir_.string());
  try {
    (void)load(layout);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("needs 8.80 TB (8796093022208 bytes)"), std::string::npos) << what;
    EXPECT_NE(what.find("Legate has"), std::string::npos) << what;
  }
  fs::remove(path(0));
  write({10, 5}, {2}, *parse_dtype("int32"), 4);
  const Layout good = discover(dir_.string());
  expect_synth(load(good), good, 4);
}

// Legate holds arrays of at most LEGATE_MAX_DIM (6) dimensions, and a store of more ends the
// process with an exception out of the runtime. Such data is discovered and read on the host
// like any other, and load() refuses it before creating anything; the runtime goes on.
TEST_F(LegateLoad, MoreDimensionsThanLegateHoldsAreRefusedBeforeTheLaunch) {
  ASSERT_EQ(kMaxLegateDims, 6u);
  for (const std::size_t dims : {kMaxLegateDims + 1, kMaxLegateDims + 2}) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::vector<std::int64_t> trailing(dims - 1, 2);
    write({3, 2}, trailing, *parse_dtype("int16"), 9);
    const Layout layout = discover(dir_.string());
    ASSERT_EQ(layout.shape().size(), dims);
    // Host reads take any number of dimensions.
    std::vector<std::byte> host(layout.total_bytes());
    ASSERT_TRUE(fill_rows(layout, 0, layout.total_rows(), host.data()));
    std::vector<std::byte> want(host.size());
    synth_fill(layout.dtype, 9, 0, want.size() / 2, want.data());
    EXPECT_EQ(host, want);
    try {
      (void)load(layout);
      FAIL() << "expected LayoutError";
    } catch (const LayoutError& e) {
      EXPECT_EQ(e.status().code(), ErrorCode::kLayout);
      EXPECT_EQ(std::string(e.what()),
                "the dataset of " + path(0) + " and 1 more shard has " + std::to_string(dims) +
                    " dimensions, shape " + shape_string(layout.shape()) +
                    ", and a Legate array has at most 6 (LEGATE_MAX_DIM of this Legate build); "
                    "it cannot be loaded through Legate, but it can be read on the host "
                    "(Python Layout.read, C++ fill_rows)");
    }
  }
  // The limit itself loads.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  write({3, 2}, std::vector<std::int64_t>(kMaxLegateDims - 1, 2), *parse_dtype("int16"), 9);
  const Layout six = discover(dir_.string());
  expect_synth(load(six), six, 9);
}

// The check of save() and of the Python package: an ArgumentError at the write site.
TEST(LegateDims, CheckNamesTheArrayTheShapeAndTheLimit) {
  const std::vector<std::int64_t> six(6, 1);
  EXPECT_NO_THROW(check_legate_dims(six, "the array", ErrorSite::kWrite));
  const std::vector<std::int64_t> seven{4, 1, 1, 1, 1, 1, 2};
  try {
    check_legate_dims(seven, "save: the array", ErrorSite::kWrite);
    FAIL() << "expected ArgumentError";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(std::string(e.what()),
              "save: the array has 7 dimensions, shape (4, 1, 1, 1, 1, 1, 2), and a Legate array "
              "has at most 6 (LEGATE_MAX_DIM of this Legate build); reshape it to fewer "
              "dimensions to save it");
  }
  EXPECT_THROW(check_legate_dims(seven, "the dataset"), LayoutError);
}

#ifdef SHARDLOAD_TEST_CUPYNUMERIC
TEST_F(LegateLoad, CupynumericNDArray) {
  write({700, 0, 333}, {3}, *parse_dtype("int64"), 4);
  const Layout layout = discover(dir_.string());
  cupynumeric::NDArray a = load_ndarray(layout);
  ASSERT_EQ(a.shape(), (std::vector<std::uint64_t>{1033, 3}));
  std::vector<std::int64_t> want(1033 * 3);
  synth_fill(layout.dtype, 4, 0, want.size(), reinterpret_cast<std::byte*>(want.data()));
  std::int64_t sum = 0;
  for (const auto v : want) sum += v;  // wraps like the array's int64 sum does
  const auto s = cupynumeric::sum(a).get_store().get_physical_store();
  const legate::InlineAllocation got = s.get_inline_allocation();
  EXPECT_EQ(*static_cast<const std::int64_t*>(got.ptr), sum);
}
#endif

}  // namespace
}  // namespace shardload

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  legate::start();
#ifdef SHARDLOAD_TEST_CUPYNUMERIC
  cupynumeric::initialize(argc, argv);
#endif
  const int rc = RUN_ALL_TESTS();
  const int fin = legate::finish();
  return rc != 0 ? rc : fin;
}
