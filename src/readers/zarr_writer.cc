// The Zarr writer: one v2 store per shard, uncompressed, chunked along axis 0 only, its
// .zarray written from the ZarrMeta the reader parses (zarr_meta.cc), so that what is
// written and what is read cannot drift apart.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "readers/detail/object_layout.hpp"
#include "readers/detail/readers.hpp"
#include "readers/detail/write_files.hpp"
#include "readers/detail/zarr.hpp"
#include "shardload/byte_order.hpp"

namespace shardload::detail {

namespace {

// At most this many bytes a chunk: large enough for few files, small enough to decode one
// chunk per read unit.
constexpr std::size_t kChunkBytes = std::size_t{64} << 20;

constexpr const char* kMetadataName = ".zarray";

// The store of a shard of `rows` rows in `chunk_rows`-row chunks.
ZarrMeta store_meta(const WriteSpec& spec, std::int64_t rows, std::int64_t chunk_rows) {
  ZarrMeta m;
  m.zarr_format = 2;
  m.dtype = spec.dtype;
  m.big_endian = spec.dtype.size > 1 && !host_is_little_endian();
  m.shape.push_back(rows);
  m.shape.insert(m.shape.end(), spec.trailing.begin(), spec.trailing.end());
  m.chunks.push_back(chunk_rows);
  for (const auto d : spec.trailing) m.chunks.push_back(std::max<std::int64_t>(1, d));
  m.v2_keys = true;
  m.separator = '.';
  m.fill.assign(spec.dtype.size, '\0');
  return m;
}

// The key of chunk `k` along axis 0 ("3.0.0").
std::string chunk_key(const ZarrMeta& m, std::int64_t k) {
  std::vector<std::int64_t> index(m.shape.size(), 0);
  index[0] = k;
  return zarr_chunk_key(m, index);
}

class ZarrWriter final : public ShardWriter {
 public:
  [[nodiscard]] bool writes_directories() const override { return true; }

  Status create(const std::string& path, const WriteSpec& spec, std::int64_t rows,
                ShardPlacement* placement) const override {
    if (::mkdir(path.c_str(), 0777) != 0) return sys_error(path, "cannot create", errno);
    const std::int64_t cr = zarr_save_chunk_rows(spec, rows);
    placement->data_offset = 0;
    placement->chunk_rows = cr;
    if (spec.row_bytes == 0) return Status::ok();  // no bytes: every chunk is missing (fill)
    const ZarrMeta m = store_meta(spec, rows, cr);
    const auto chunk_bytes = cr * static_cast<std::int64_t>(spec.row_bytes);
    for (std::int64_t k = 0; k * cr < rows; ++k) {
      // Zarr v2 stores an edge chunk at full size; the padding stays zeros.
      SHARDLOAD_RETURN_IF_ERROR(create_file(path + "/" + chunk_key(m, k), {}, chunk_bytes));
    }
    return Status::ok();
  }

  Status write(const std::string& path, const WriteSpec& spec, const ShardPlacement& placement,
               std::int64_t lo, std::int64_t hi, const std::byte* src) const override {
    if (spec.row_bytes == 0) return Status::ok();  // no chunk holds anything
    const auto rb = static_cast<std::int64_t>(spec.row_bytes);
    const std::int64_t cr = placement.chunk_rows;
    // The rows of the shard do not change a key; the meta is only for the key's spelling.
    const ZarrMeta m = store_meta(spec, hi, cr);
    for (std::int64_t r = lo; r < hi;) {
      const std::int64_t k = r / cr;
      const std::int64_t end = std::min(hi, (k + 1) * cr);
      SHARDLOAD_RETURN_IF_ERROR(write_file_at(path + "/" + chunk_key(m, k), (r - k * cr) * rb,
                                              src + (r - lo) * rb,
                                              static_cast<std::size_t>((end - r) * rb)));
      r = end;
    }
    return Status::ok();
  }

  Status finish(const std::string& dir, const WriteSpec& spec,
                const std::vector<WrittenShard>& shards) const override {
    SHARDLOAD_ASSIGN_OR_RETURN(const ObjectFiles files, zarr_object_metadata(spec, shards));
    for (const auto& [name, text] : files) {
      SHARDLOAD_RETURN_IF_ERROR(write_text(dir + "/" + name, text));
    }
    return Status::ok();
  }

  [[nodiscard]] std::string store_metadata_name() const override { return kMetadataName; }

  // A decimal chunk number along axis 0 without leading zeros, then ".0" per other axis.
  [[nodiscard]] bool is_chunk_entry(std::string_view name, std::size_t dims,
                                    std::int64_t chunks) const override {
    std::size_t digits = 0;
    while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
    if (digits == 0 || digits > 18 || (digits > 1 && name[0] == '0')) return false;
    std::string_view rest = name.substr(digits);
    std::size_t axes = 1;
    while (rest.size() >= 2 && rest[0] == '.' && rest[1] == '0') {
      rest.remove_prefix(2);
      ++axes;
    }
    if (!rest.empty() || (dims > 0 && axes != dims)) return false;
    const std::int64_t k = std::stoll(std::string(name.substr(0, digits)));
    return chunks < 0 || k < chunks;
  }
};

}  // namespace

std::int64_t zarr_save_chunk_rows(const WriteSpec& spec, std::int64_t rows) {
  // As few chunks as keep each within kChunkBytes, their rows split evenly: Zarr v2 stores
  // the edge chunk at full size, so the padding is under one row a chunk, not up to a chunk
  // (which a local file leaves sparse but an object upload would send as zeros).
  const auto rb = static_cast<std::int64_t>(std::max<std::size_t>(spec.row_bytes, 1));
  const auto cap = std::max<std::int64_t>(1, static_cast<std::int64_t>(kChunkBytes) / rb);
  if (rows <= cap) return std::max<std::int64_t>(1, rows);
  const std::int64_t chunks = (rows + cap - 1) / cap;
  return (rows + chunks - 1) / chunks;
}

std::string zarr_save_chunk_name(const WriteSpec& spec, std::int64_t k) {
  return chunk_key(store_meta(spec, 0, 1), k);
}

Result<ObjectFiles> zarr_object_metadata(const WriteSpec& spec,
                                         const std::vector<WrittenShard>& shards) {
  ObjectFiles out;
  for (const WrittenShard& w : shards) {
    const std::string name = w.name + "/" + kMetadataName;
    auto text = zarr_v2_metadata_text(store_meta(spec, w.rows, w.placement.chunk_rows));
    if (!text) return text.status().with_context(name);
    out.emplace_back(name, *std::move(text));
  }
  return out;
}

std::shared_ptr<const ShardWriter> zarr_writer() { return std::make_shared<ZarrWriter>(); }

}  // namespace shardload::detail
