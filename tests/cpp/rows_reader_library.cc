// A test-only library (never installed): loading it registers the example reader
// (examples/cpp/rows_format.hpp) in libshardload's registry as "cxx_rows" for ".cxxrows"
// files, from a static initializer, as a user's C++ plugin would. The Python tests load it
// with ctypes and read its files through shardload.discover / load / batches
// (tests/python/test_shared_library.py).
#include "cpp/rows_format.hpp"

namespace {

shardload::Status register_cxx_rows() {
  return shardload::register_reader(
      {"cxx_rows",
       [](const shardload::FormatOptions&, const shardload::ReaderContext& context)
           -> shardload::Result<std::unique_ptr<shardload::ShardReader>> {
         return std::unique_ptr<shardload::ShardReader>(new rows_format::RowsReader(context));
       },
       {".cxxrows"}});
}

const shardload::Status registered = register_cxx_rows();

}  // namespace

// 1 when the registration at load time succeeded; the tests check it before reading.
extern "C" int shardload_test_rows_registered() { return registered.is_ok() ? 1 : 0; }
