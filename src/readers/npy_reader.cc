// The .npy reader: positional reads straight into the destination for
// C-order shards, a bounded scratch buffer for Fortran-order ones.
#include <algorithm>
#include <cstring>
#include <memory>

#include "readers/detail/fortran_walk.hpp"
#include "readers/detail/object_layout.hpp"
#include "readers/detail/readers.hpp"
#include "readers/detail/write_files.hpp"
#include "shardload/byte_order.hpp"
#include "shardload/npy.hpp"

namespace shardload::detail {

namespace {

class NpyReader final : public ShardReader {
 public:
  explicit NpyReader(const ReaderContext& ctx) : ctx_(ctx) {}

  Result<ShardProbe> probe(const std::string& path) override {
    ShardProbe p;
    p.shard.path = path;
    SHARDLOAD_ASSIGN_OR_RETURN(NpyHeader h, probe_npy(*ctx_.source, path, &p.shard.snapshot));
    p.dtype = h.dtype;
    p.trailing_shape.assign(h.shape.begin() + 1, h.shape.end());
    p.shard.rows = h.shape[0];
    p.shard.data_offset = h.data_offset;
    p.shard.byte_swap = h.dtype.size > 1 && h.big_endian == host_is_little_endian();
    // A Fortran-ordered array with at most one dimension longer than 1 has
    // the same bytes as the C-ordered one; read it as C.
    int long_dims = 0;
    for (const auto d : h.shape) long_dims += d > 1 ? 1 : 0;
    p.shard.fortran_order = h.fortran_order && long_dims > 1;
    return p;
  }

  Status read_rows(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override {
    SHARDLOAD_ASSIGN_OR_RETURN(const File* fp, open_.get(*ctx_.source, s, ctx_.check_snapshot));
    const File& f = *fp;
    const std::size_t bytes = static_cast<std::size_t>(hi - lo) * l.row_bytes;
    Status read;
    if (s.fortran_order) {
      read = read_fortran(f, l, s, lo, hi, dst);
    } else {
      const std::uint64_t off = s.data_offset + static_cast<std::uint64_t>(lo) * l.row_bytes;
      read = f.read_exact(dst, bytes, off);
    }
    if (ctx_.check_snapshot && ctx_.check_each_read) {
      read = check_unchanged(f, s.snapshot, std::move(read));
    }
    if (!read.is_ok()) {
      open_.reset();
      return read;
    }
    if (s.byte_swap) byte_swap(dst, bytes / l.dtype.swap_unit(), l.dtype.swap_unit());
    return Status::ok();
  }

 private:
  // In a Fortran-ordered file each trailing element index m (Fortran-flat)
  // owns a run of `rows` consecutive values, so rows [lo, hi) of it are
  // contiguous: read them in bounded chunks and scatter them into C order.
  Status read_fortran(const File& f, const ReadSpec& l, const Shard& s, std::int64_t lo,
                      std::int64_t hi, std::byte* dst) {
    const std::size_t item = l.dtype.size;
    const std::uint64_t T = l.row_elements();
    const auto R = static_cast<std::uint64_t>(s.stored_rows());
    const auto n = static_cast<std::uint64_t>(hi - lo);
    const std::size_t scratch = std::max<std::size_t>(ctx_.scratch_bytes, item);
    const std::uint64_t rows_per_chunk = std::max<std::uint64_t>(1, scratch / item);
    if (scratch_.size() < scratch) {
      scratch_.clear();
      scratch_.shrink_to_fit();
      scratch_.resize(scratch);
    }
    std::byte* buf = scratch_.data();

    FortranWalk walk(l.trailing_shape);
    const std::size_t step = T * item;
    for (std::uint64_t m = 0; m < T; ++m) {
      for (std::uint64_t r0 = 0; r0 < n; r0 += rows_per_chunk) {
        const std::uint64_t cnt = std::min(rows_per_chunk, n - r0);
        const std::uint64_t off =
            s.data_offset + (m * R + static_cast<std::uint64_t>(lo) + r0) * item;
        SHARDLOAD_RETURN_IF_ERROR(f.read_exact(buf, cnt * item, off));
        std::byte* out = dst + ((r0 * T) + walk.c_index()) * item;
        for (std::uint64_t r = 0; r < cnt; ++r) std::memcpy(out + r * step, buf + r * item, item);
      }
      walk.next();
    }
    return Status::ok();
  }

  ReaderContext ctx_;
  OpenShardFile open_;  // the file read last, for the next piece of the same shard
  std::vector<std::byte> scratch_;
};

// One .npy file per shard: the header encode_npy_header writes (what probe_npy parses),
// then the rows in C order.
class NpyWriter final : public ShardWriter {
 public:
  [[nodiscard]] bool writes_directories() const override { return false; }
};

}  // namespace

std::shared_ptr<const ShardWriter> npy_writer() { return std::make_shared<NpyWriter>(); }

std::string npy_object_head(const WriteSpec& spec, std::int64_t rows) {
  std::vector<std::int64_t> shape{rows};
  shape.insert(shape.end(), spec.trailing.begin(), spec.trailing.end());
  return encode_npy_header(spec.dtype, shape);
}

Result<std::unique_ptr<ShardReader>> make_npy_reader(const FormatOptions& /*options*/,
                                                     const ReaderContext& context) {
  return std::unique_ptr<ShardReader>(std::make_unique<NpyReader>(context));
}

}  // namespace shardload::detail
