// A user-defined reader through the C++ API: registers the ".rows" reader of rows_format.hpp,
// writes three shards, discovers them by extension and loads them with one parallel launch
// under Legate, then checks every value. Prints "custom reader: shape (10, 3) float32 OK".
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include <legate.h>
#include <unistd.h>

#include "rows_format.hpp"
#include "shardload/legate.hpp"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  // Before anything discovers or loads, on every rank.
  if (auto s = rows_format::register_rows_reader(); !s) {
    std::fprintf(stderr, "custom_reader: %s\n", s.message().c_str());
    return 1;
  }
  const fs::path dir = argc > 1 ? fs::path(argv[1])
                                : fs::temp_directory_path() /
                                      ("shardload-custom-reader-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::int64_t rows[] = {4, 0, 6};
  float first = 0;
  for (int i = 0; i < 3; ++i) {
    const auto path = dir / ("shard_000" + std::to_string(i) + ".rows");
    if (!rows_format::write_rows_file(path.string(), rows[i], 3, first)) return 1;
    first += static_cast<float>(rows[i] * 3);
  }
  int rc = 0;
  legate::start();
  try {
    const shardload::Layout layout = shardload::discover(dir.string());  // by the extension
    const legate::LogicalArray a = shardload::load(layout);
    const auto store = a.data().get_physical_store();
    const legate::InlineAllocation alloc = store.get_inline_allocation();
    const auto* base = static_cast<const std::byte*>(alloc.ptr);
    for (std::int64_t r = 0; r < 10; ++r) {
      for (std::int64_t c = 0; c < 3; ++c) {
        float v = 0;
        std::memcpy(&v, base + r * alloc.strides[0] + c * alloc.strides[1], sizeof v);
        if (v != static_cast<float>(r * 3 + c)) {
          std::fprintf(stderr, "custom_reader: wrong value at (%lld, %lld)\n",
                       static_cast<long long>(r), static_cast<long long>(c));
          rc = 1;
        }
      }
    }
    if (rc == 0) {
      std::printf("custom reader: shape %s %s OK\n",
                  shardload::shape_string(layout.shape()).c_str(), layout.dtype.name().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_reader: %s\n", e.what());
    rc = 1;
  }
  fs::remove_all(dir);
  const int finished = legate::finish();
  return rc != 0 ? rc : finished;
}
