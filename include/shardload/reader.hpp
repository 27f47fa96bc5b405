// The contract every format reader fulfils.
//
//   probe(path)                  -> rows, dtype, trailing shape, and what the
//                                   reader needs later (data offset, byte
//                                   order, memory order, format-specific
//                                   bytes in `extra`), plus the file snapshot;
//   read_rows(shard, lo, hi, dst) -> exactly (hi - lo) rows, native-endian,
//                                   C order, reading only what those rows need.
//
// A reader never throws and never reads a whole file to serve a slice. One
// reader object serves one thread; it may keep scratch buffers between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardload/format.hpp"
#include "shardload/io.hpp"
#include "shardload/status.hpp"

namespace shardload {

struct Layout;

struct Shard {
  std::string path;
  std::int64_t rows = 0;
  std::uint64_t data_offset = 0;  // npy / raw: bytes before the first row
  bool byte_swap = false;         // stored in the other byte order than this host's
  bool fortran_order = false;     // npy: stored column-major
  FileInfo snapshot;              // size and mtime seen at discovery
  std::string extra;              // format-specific, opaque outside its reader
};

struct ShardProbe {
  Shard shard;
  DType dtype;
  std::vector<std::int64_t> trailing_shape;
};

class ShardReader {
 public:
  virtual ~ShardReader() = default;
  virtual Result<ShardProbe> probe(const std::string& path) = 0;
  // dst holds (hi - lo) * layout.row_bytes bytes. Errors name the file.
  virtual Status read_rows(const Layout& layout, const Shard& shard, std::int64_t lo,
                           std::int64_t hi, std::byte* dst) = 0;
};

struct ReaderContext {
  IoBackend* io = nullptr;  // nullptr: posix_io()
  // Scratch for re-ordering or decoding; the most extra memory a reader
  // keeps, whatever the tile size.
  std::size_t scratch_bytes = std::size_t{4} << 20;
  // Compare each opened file with the discovery snapshot.
  bool check_snapshot = true;
};

// A reader for one resolved format (not kAuto). kInvalidArgument when the
// options do not fit the format; kUnsupported-format errors name the format.
Result<std::unique_ptr<ShardReader>> make_reader(Format format, const FormatOptions& options,
                                                 const ReaderContext& context = {});

// kChanged when the open file's size or mtime differ from the snapshot.
Status check_snapshot(const File& file, const Shard& shard);

}  // namespace shardload
