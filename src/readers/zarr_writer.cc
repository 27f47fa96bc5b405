// What save writes as Zarr: one v2 store per shard, uncompressed, chunked along axis 0 only
// (the layout's chunk rows and keys, which the engine's writer fills through the store's
// sinks), its .zarray written from the ZarrMeta the reader parses (zarr_meta.cc), so that what
// is written and what is read cannot drift apart; and the names an overwrite knows.
#include <algorithm>

#include "readers/detail/object_layout.hpp"
#include "readers/detail/readers.hpp"
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
