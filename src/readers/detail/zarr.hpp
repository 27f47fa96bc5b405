// Internals of the Zarr reader: the metadata it keeps per store, how that
// metadata travels in Shard::extra, and the codecs it decodes chunks with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

// The bytes-to-bytes codecs a chunk may pass through. Their parameters are
// not kept: every one of these formats describes itself (zstd and blosc
// headers, lz4's size prefix), so decoding needs only the kind.
enum class ZarrCodec : std::uint8_t { kZlib = 1, kGzip, kZstd, kLz4, kBlosc, kCrc32c };

const char* zarr_codec_name(ZarrCodec c);

// What reading a store's array needs, from its .zarray (v2) or zarr.json
// (v3). Everything here is validated by parse_zarr_metadata.
struct ZarrMeta {
  int zarr_format = 2;  // 2 or 3
  DType dtype;
  bool big_endian = false;  // the chunks' byte order
  bool fortran = false;     // v2 "order": "F": each chunk is column-major
  std::vector<std::int64_t> shape;
  // The grid of stored objects: chunk shape, or the shard shape when sharded.
  std::vector<std::int64_t> chunks;
  bool v2_keys = true;  // keys "i.j.k" (v2, v3 "v2" encoding) or "c/i/j/k" (v3 default)
  char separator = '.';
  std::string fill;  // one element in this host's byte order
  // Bytes-to-bytes codecs of a chunk (of an inner chunk when sharded), in
  // encoding order; decoding applies them last to first.
  std::vector<ZarrCodec> codecs;
  // v3 sharding_indexed: each stored object is a shard of inner chunks with
  // an index of (offset, nbytes) uint64 pairs at its start or end.
  bool sharded = false;
  std::vector<std::int64_t> inner_chunks;
  bool index_at_end = true;
  bool index_big_endian = false;
  bool index_crc32c = false;

  friend bool operator==(const ZarrMeta&, const ZarrMeta&) = default;
};

// Parses and validates the metadata file `file` (.zarray or zarr.json).
// Errors (kFormat) name the file and the field. *not_an_array (when given) says, as data,
// whether the error is that v3 metadata is of no array (its node_type missing or not
// "array": a group), for the reader to name the arrays it holds.
Result<ZarrMeta> parse_zarr_metadata(const std::string& file, std::string_view text,
                                     int zarr_format, bool* not_an_array = nullptr);

// The .zarray text of `meta`, which parse_zarr_metadata reads back as `meta`: v2, no
// codecs, a zero fill (what shardload writes); kInvalidArgument for anything else.
Result<std::string> zarr_v2_metadata_text(const ZarrMeta& meta);

// A compact, versioned byte string for Shard::extra, and its strict inverse
// (the task side rebuilds the layout from what travelled).
std::string encode_zarr_meta(const ZarrMeta& meta);
Result<ZarrMeta> decode_zarr_meta(std::string_view extra, const std::string& store);

// The key of the chunk (or shard) at grid position `index`, relative to the
// array's directory: "1.0.3", "1/0/3", "c/1/0/3", ...
std::string zarr_chunk_key(const ZarrMeta& meta, const std::vector<std::int64_t>& index);

// Decodes `in` through one codec. With `expected` known (the last step of a
// chain) the output must be exactly that many bytes and goes to `out`;
// otherwise `grow` receives the output, at most `cap` bytes. Errors are
// kFormat and say what was wrong, without the file (the caller adds it).
Status zarr_decode_exact(ZarrCodec codec, const std::byte* in, std::size_t n, std::byte* out,
                         std::size_t expected);
Status zarr_decode_grow(ZarrCodec codec, const std::byte* in, std::size_t n,
                        std::vector<std::byte>* grow, std::size_t cap);

// CRC-32C (Castagnoli), as the v3 crc32c codec and shard indexes use.
std::uint32_t crc32c(const std::byte* data, std::size_t n);

// float16 bits of a double, rounded to nearest even (fill values).
std::uint16_t double_to_half(double x);

}  // namespace shardload::detail
