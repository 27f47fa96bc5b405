// The HDF5 reader's C++ surface: option checks and errors on files that are
// not HDF5. Data round trips (every dtype, chunking, gzip, byte order) are in
// tests/python/test_hdf5.py, with h5py writing the files as the oracle.
#include <gtest/gtest.h>

#include "shardload/layout.hpp"
#include "shardload/reader.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::TempDir;
using testing::write_file;

TEST(Hdf5Reader, RejectsOptionsOfOtherFormats) {
  FormatOptions o;
  o.columns = {"a"};
  auto r = make_reader(Format::kHdf5, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("hdf5"), std::string::npos) << r.status().message();
}

TEST(Hdf5Reader, LoadsTheLibrary) {
  auto r = make_reader(Format::kHdf5, {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
}

TEST(Hdf5Reader, NotAnHdf5FileNamesTheFile) {
  TempDir dir;
  const std::string path = dir.file("shard_0000.h5");
  write_file(path, std::string(4096, 'x'));
  auto l = try_discover_paths({path});
  ASSERT_FALSE(l.is_ok());
  EXPECT_EQ(l.status().code(), ErrorCode::kLayout);
  EXPECT_NE(l.status().message().find(path + ": not a readable HDF5 file"), std::string::npos)
      << l.status().message();
}

TEST(Hdf5Reader, MissingFileNamesTheFile) {
  TempDir dir;
  const std::string path = dir.file("nope.h5");
  auto l = try_discover_paths({path});
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.status().message().find(path), std::string::npos) << l.status().message();
}

}  // namespace
}  // namespace shardload
