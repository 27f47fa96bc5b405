// A made-up shard format read through a registered reader: the example of
// shardload/reader_registry.hpp (examples/cpp/custom_reader.cc, tests/cpp).
//
// A ".rows" file is one text line, "ROWS <dtype> <rows> [<dim> ...]\n" (at most 256 bytes),
// then the rows, raw, in this host's byte order and C order. The reader uses only the public
// API: it opens files as keys of the context's ShardSource (local files, a store's keys or an
// injected backend's alike; a local open refuses FIFOs and devices) and checks the discovery
// snapshot, as the built-in readers do.
#pragma once

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "shardload/reader.hpp"
#include "shardload/reader_registry.hpp"

namespace rows_format {

class RowsReader final : public shardload::ShardReader {
 public:
  explicit RowsReader(const shardload::ReaderContext& context) : context_(context) {}

  shardload::Result<shardload::ShardProbe> probe(const std::string& path) override {
    shardload::FileInfo info;
    auto file = context_.source->open_stat(path, &info);
    if (!file) return file.status();
    std::string head(std::min<std::uint64_t>(info.size, 256), '\0');
    if (auto s = file->read_exact(head.data(), head.size(), 0); !s) return s;
    const auto end = head.find('\n');
    if (end == std::string::npos || head.rfind("ROWS ", 0) != 0) {
      return shardload::Status(shardload::ErrorCode::kLayout,
                               path + ": expected a header line \"ROWS <dtype> <rows> ...\"");
    }
    std::istringstream words(head.substr(5, end - 5));
    std::string dtype;
    shardload::ShardProbe p;
    words >> dtype >> p.shard.rows;
    if (!words) {
      return shardload::Status(shardload::ErrorCode::kLayout,
                               path + ": header: expected a dtype and a row count");
    }
    std::int64_t dim = 0;
    while (words >> dim) p.trailing_shape.push_back(dim);
    SHARDLOAD_ASSIGN_OR_RETURN(p.dtype, shardload::parse_dtype(dtype));
    p.shard.path = path;
    p.shard.data_offset = end + 1;
    p.shard.snapshot = info;
    // The file must hold every row the header declares.
    std::uint64_t row = p.dtype.size;
    for (const auto d : p.trailing_shape) row *= static_cast<std::uint64_t>(d < 0 ? 0 : d);
    const std::uint64_t want =
        p.shard.data_offset + row * static_cast<std::uint64_t>(p.shard.rows < 0 ? 0 : p.shard.rows);
    if (info.size < want) {
      return shardload::Status(shardload::ErrorCode::kLayout,
                               path + ": expected " + std::to_string(want) + " bytes, found " +
                                   std::to_string(info.size));
    }
    return p;
  }

  shardload::Status read_rows(const shardload::ReadSpec& spec, const shardload::Shard& shard,
                              std::int64_t lo, std::int64_t hi, std::byte* dst) override {
    auto file = context_.source->open(shard.path);
    if (!file) return file.status();
    if (context_.check_snapshot) {
      if (auto s = shardload::check_snapshot(*file, shard); !s) return s;
    }
    const auto n = static_cast<std::size_t>(hi - lo) * spec.row_bytes;
    auto read = file->read_exact(
        dst, n, shard.data_offset + static_cast<std::uint64_t>(lo) * spec.row_bytes);
    return context_.check_snapshot ? shardload::check_unchanged(*file, shard.snapshot, read) : read;
  }

 private:
  shardload::ReaderContext context_;
};

// Registers the reader as "rows" for ".rows" files; call it on every rank before discover.
inline shardload::Status register_rows_reader() {
  return shardload::register_reader(
      {"rows",
       [](const shardload::FormatOptions&, const shardload::ReaderContext& context)
           -> shardload::Result<std::unique_ptr<shardload::ShardReader>> {
         return std::unique_ptr<shardload::ShardReader>(new RowsReader(context));
       },
       {".rows"}});
}

// Writes a .rows file of `rows` float32 rows of `cols` values, value = first + index.
inline bool write_rows_file(const std::string& path, std::int64_t rows, std::int64_t cols,
                            float first) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  std::fprintf(f, "ROWS float32 %lld %lld\n", static_cast<long long>(rows),
               static_cast<long long>(cols));
  std::vector<float> data(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = first + static_cast<float>(i);
  // fwrite of nothing would still pass data()'s null pointer of an empty vector.
  const bool ok =
      data.empty() || std::fwrite(data.data(), sizeof(float), data.size(), f) == data.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace rows_format
