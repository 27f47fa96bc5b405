// Zarr metadata: strict parsing of .zarray (v2) and zarr.json (v3) into the
// few facts the reader needs, and their compact encoding for Shard::extra.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "base/detail/checked.hpp"
#include "base/detail/json.hpp"
#include "readers/detail/write_files.hpp"
#include "readers/detail/zarr.hpp"
#include "shardload/format.hpp"

namespace shardload::detail {

namespace {

constexpr std::string_view kV2Codecs = "zlib, gzip, zstd, lz4 or blosc";
constexpr std::string_view kV3Codecs =
    "bytes, sharding_indexed, gzip, zstd, blosc, crc32c, numcodecs.zlib, numcodecs.gzip, "
    "numcodecs.zstd, numcodecs.lz4 or numcodecs.blosc";

Status bad(const std::string& file, const std::string& field, const std::string& why) {
  return {ErrorCode::kFormat, file + ": " + field + ": " + why};
}

const Json* find(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

Result<const Json*> require(const std::string& file, const Json& obj, const std::string& where,
                            const char* key) {
  const Json* v = find(obj, key);
  if (v == nullptr) {
    return Status(
        ErrorCode::kFormat,
        file + ": " + (where.empty() ? std::string(key) : where + "." + key) + ": missing");
  }
  return v;
}

// ---- fill values ----------------------------------------------------------------

// A float given as a JSON number or one of the strings Zarr uses for the
// values JSON cannot spell ("NaN", "Infinity", "-Infinity").
Result<double> fill_float(const std::string& file, const std::string& field, const Json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  return json_error(file, field, "a number, \"NaN\", \"Infinity\" or \"-Infinity\"", v);
}

void put_float(double x, std::uint8_t size, std::byte* out) {
  if (size == 2) {
    const std::uint16_t h = double_to_half(x);
    std::memcpy(out, &h, 2);
  } else if (size == 4) {
    const auto f = static_cast<float>(x);
    std::memcpy(out, &f, 4);
  } else {
    std::memcpy(out, &x, 8);
  }
}

// v3's "0x..." form: the value's bytes, big-endian hex, for floats whose bits
// matter (a NaN payload).
bool hex_bits(const Json& v, std::size_t size, std::byte* out) {
  if (!v.is_string()) return false;
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() != 2 + 2 * size || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return false;
  std::uint64_t bits = 0;
  for (std::size_t i = 2; i < s.size(); ++i) {
    const char ch = s[i];
    int d = -1;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
    if (d < 0) return false;
    bits = (bits << 4) | static_cast<std::uint64_t>(d);
  }
  // Native order of an unsigned of that size.
  if (size == 2) {
    const auto b = static_cast<std::uint16_t>(bits);
    std::memcpy(out, &b, 2);
  } else if (size == 4) {
    const auto b = static_cast<std::uint32_t>(bits);
    std::memcpy(out, &b, 4);
  } else {
    std::memcpy(out, &bits, 8);
  }
  return true;
}

Result<std::string> parse_fill(const std::string& file, const Json& v, DType d, int zarr_format) {
  std::string out(d.size, '\0');
  auto* p = reinterpret_cast<std::byte*>(out.data());
  const std::string field = "fill_value";
  // v2's null means "no fill value"; zarr-python reads missing chunks of such
  // arrays as zeros, and so do we.
  if (v.is_null()) {
    if (zarr_format == 2) return out;
    return json_error(file, field, "a value (null is not allowed in Zarr v3)", v);
  }
  switch (d.kind) {
    case DTypeKind::kBool: {
      if (v.is_boolean()) {
        out[0] = v.get<bool>() ? '\1' : '\0';
        return out;
      }
      if (v.is_number_integer() && (v.get<std::int64_t>() == 0 || v.get<std::int64_t>() == 1)) {
        out[0] = static_cast<char>(v.get<std::int64_t>());
        return out;
      }
      return json_error(file, field, "true or false", v);
    }
    case DTypeKind::kInt:
    case DTypeKind::kUInt: {
      const bool is_signed = d.kind == DTypeKind::kInt;
      const unsigned bits = 8U * d.size;
      bool ok = false;
      std::uint64_t u = 0;
      if (v.is_number_unsigned()) {
        u = v.get<std::uint64_t>();
        ok = is_signed ? u <= (std::uint64_t{1} << (bits - 1)) - 1
                       : bits == 64 || u < (std::uint64_t{1} << bits);
      } else if (v.is_number_integer()) {
        const auto i = v.get<std::int64_t>();
        ok = is_signed && (bits == 64 || (i >= -(std::int64_t{1} << (bits - 1)) &&
                                          i < (std::int64_t{1} << (bits - 1))));
        u = static_cast<std::uint64_t>(i);
      } else if (v.is_number_float()) {
        // Some writers spell an integral fill as 0.0.
        const double x = v.get<double>();
        if (std::isfinite(x) && x == std::trunc(x) && std::fabs(x) < 9.0e15) {
          const auto i = static_cast<std::int64_t>(x);
          ok = is_signed ? (bits == 64 || (i >= -(std::int64_t{1} << (bits - 1)) &&
                                           i < (std::int64_t{1} << (bits - 1))))
                         : i >= 0 && (bits == 64 || i < (std::int64_t{1} << bits));
          u = static_cast<std::uint64_t>(i);
        }
      }
      if (!ok) return json_error(file, field, "an integer that fits " + d.name(), v);
      // The low `size` bytes of u in native order are the two's-complement value.
      if (host_is_little_endian()) {
        std::memcpy(p, &u, d.size);
      } else {
        std::memcpy(p, reinterpret_cast<const std::byte*>(&u) + (8 - d.size), d.size);
      }
      return out;
    }
    case DTypeKind::kFloat: {
      if (hex_bits(v, d.size, p)) return out;
      SHARDLOAD_ASSIGN_OR_RETURN(const double x, fill_float(file, field, v));
      put_float(x, d.size, p);
      return out;
    }
    case DTypeKind::kComplex: {
      const auto half = static_cast<std::uint8_t>(d.size / 2);
      if (v.is_array() && v.size() == 2) {
        for (std::size_t k = 0; k < 2; ++k) {
          const std::string f = field + "[" + std::to_string(k) + "]";
          if (hex_bits(v[k], half, p + k * half)) continue;
          SHARDLOAD_ASSIGN_OR_RETURN(const double x, fill_float(file, f, v[k]));
          put_float(x, half, p + k * half);
        }
        return out;
      }
      SHARDLOAD_ASSIGN_OR_RETURN(const double x, fill_float(file, field, v));
      put_float(x, half, p);
      put_float(0.0, half, p + half);
      return out;
    }
  }
  return json_error(file, field, "a fill value", v);
}

// ---- shared checks ---------------------------------------------------------------

// Dimensions agree and chunks are non-empty; with `unit` set, also that one
// decoded chunk of that shape stays within what a decode may allocate.
Status check_grid(const std::string& file, const ZarrMeta& m, const char* chunk_field,
                  const std::vector<std::int64_t>* unit) {
  if (m.shape.empty()) {
    return bad(file, "shape", "a 0-d array has no rows to load (expected at least 1 dimension)");
  }
  if (m.chunks.size() != m.shape.size()) {
    return bad(file, chunk_field,
               std::to_string(m.chunks.size()) + " dimensions, but shape has " +
                   std::to_string(m.shape.size()));
  }
  for (std::size_t i = 0; i < m.chunks.size(); ++i) {
    if (m.chunks[i] < 1) {
      return bad(file, std::string(chunk_field) + "[" + std::to_string(i) + "]",
                 "expected at least 1, found " + std::to_string(m.chunks[i]));
    }
  }
  if (unit == nullptr) return Status::ok();
  std::uint64_t elems = 1;
  for (const auto d : *unit) {
    if (!checked_mul(elems, static_cast<std::uint64_t>(d), &elems)) {
      return bad(file, chunk_field, "the chunk size overflows 64 bits");
    }
  }
  std::uint64_t bytes = 0;
  // A chunk is decoded whole; 2^31 bytes bounds what one decode may allocate.
  if (!checked_mul(elems, std::uint64_t{m.dtype.size}, &bytes) || bytes > (1ULL << 31)) {
    return bad(file, chunk_field, "a chunk of more than 2 GiB is not supported");
  }
  return Status::ok();
}

// ---- v2 --------------------------------------------------------------------------

Result<ZarrCodec> v2_codec(const std::string& file, const Json& c) {
  if (!c.is_object()) return json_error(file, "compressor", "null or an object with \"id\"", c);
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* idv, require(file, c, "compressor", "id"));
  SHARDLOAD_ASSIGN_OR_RETURN(const std::string id, json_string(file, "compressor.id", *idv));
  if (id == "zlib") return ZarrCodec::kZlib;
  if (id == "gzip") return ZarrCodec::kGzip;
  if (id == "zstd") return ZarrCodec::kZstd;
  if (id == "lz4") return ZarrCodec::kLz4;
  if (id == "blosc") return ZarrCodec::kBlosc;
  return bad(file, "compressor.id",
             "unsupported codec '" + id + "' (supported: " + std::string(kV2Codecs) + ")");
}

Result<ZarrMeta> parse_v2(const std::string& file, const Json& j) {
  ZarrMeta m;
  m.zarr_format = 2;
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* zf, require(file, j, "", "zarr_format"));
  if (!zf->is_number_integer() || zf->get<std::int64_t>() != 2) {
    return json_error(file, "zarr_format", "2", *zf);
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* dt, require(file, j, "", "dtype"));
  SHARDLOAD_ASSIGN_OR_RETURN(const std::string dts, json_string(file, "dtype", *dt));
  {
    // v2 dtypes are numpy type strings with a byte order: "<f4", "|b1", ">i8".
    bool big = false;
    auto d = parse_dtype(dts, &big);
    if (!d || dts.size() < 3 || (dts[0] != '<' && dts[0] != '>' && dts[0] != '|')) {
      return bad(file, "dtype",
                 "unsupported dtype '" + dts +
                     "' (expected a numpy type string such as '<f4': bool, int8-64, uint8-64, "
                     "float16/32/64 or complex64/128)");
    }
    m.dtype = *d;
    m.big_endian = big;
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* sh, require(file, j, "", "shape"));
  SHARDLOAD_ASSIGN_OR_RETURN(m.shape, json_shape(file, "shape", *sh));
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* ch, require(file, j, "", "chunks"));
  SHARDLOAD_ASSIGN_OR_RETURN(m.chunks, json_shape(file, "chunks", *ch));
  SHARDLOAD_RETURN_IF_ERROR(check_grid(file, m, "chunks", &m.chunks));
  if (const Json* o = find(j, "order"); o != nullptr) {
    SHARDLOAD_ASSIGN_OR_RETURN(const std::string order, json_string(file, "order", *o));
    if (order != "C" && order != "F") return json_error(file, "order", "\"C\" or \"F\"", *o);
    m.fortran = order == "F";
  }
  if (const Json* f = find(j, "filters"); f != nullptr && !f->is_null()) {
    if (!f->is_array()) return json_error(file, "filters", "null or a list", *f);
    if (!f->empty()) {
      const Json& f0 = (*f)[0];
      std::string id = "?";
      if (f0.is_object() && f0.contains("id") && f0["id"].is_string()) {
        id = f0["id"].get<std::string>();
      }
      return bad(file, "filters",
                 "filters are not supported (found '" + id + "'; expected null or [])");
    }
  }
  if (const Json* c = find(j, "compressor"); c != nullptr && !c->is_null()) {
    SHARDLOAD_ASSIGN_OR_RETURN(const ZarrCodec codec, v2_codec(file, *c));
    m.codecs.push_back(codec);
  }
  m.v2_keys = true;
  m.separator = '.';
  if (const Json* s = find(j, "dimension_separator"); s != nullptr && !s->is_null()) {
    SHARDLOAD_ASSIGN_OR_RETURN(const std::string sep, json_string(file, "dimension_separator", *s));
    if (sep != "." && sep != "/")
      return json_error(file, "dimension_separator", "\".\" or \"/\"", *s);
    m.separator = sep[0];
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* fv, require(file, j, "", "fill_value"));
  SHARDLOAD_ASSIGN_OR_RETURN(m.fill, parse_fill(file, *fv, m.dtype, 2));
  return m;
}

// ---- v3 --------------------------------------------------------------------------

struct V3Codec {
  std::string name;
  const Json* config = nullptr;  // nullptr: none given
};

Result<std::vector<V3Codec>> v3_codec_list(const std::string& file, const std::string& field,
                                           const Json& list) {
  if (!list.is_array() || list.empty()) {
    return json_error(file, field, "a non-empty list of codecs", list);
  }
  std::vector<V3Codec> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    const Json& c = list[i];
    V3Codec v;
    if (c.is_string()) {
      v.name = c.get<std::string>();
    } else if (c.is_object()) {
      SHARDLOAD_ASSIGN_OR_RETURN(const Json* n, require(file, c, f, "name"));
      SHARDLOAD_ASSIGN_OR_RETURN(v.name, json_string(file, f + ".name", *n));
      v.config = find(c, "configuration");
      if (v.config != nullptr && !v.config->is_object()) {
        return json_error(file, f + ".configuration", "an object", *v.config);
      }
    } else {
      return json_error(file, f, "a codec object {\"name\": ...}", c);
    }
    out.push_back(std::move(v));
  }
  return out;
}

// The endianness of a "bytes" codec; one-byte types may leave it out.
Result<bool> bytes_big_endian(const std::string& file, const std::string& field, const V3Codec& c,
                              std::uint8_t item) {
  const Json* e = c.config == nullptr ? nullptr : find(*c.config, "endian");
  if (e == nullptr || e->is_null()) {
    if (item == 1) return false;
    return bad(file, field + ".configuration.endian",
               "missing (required for types wider than one byte)");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const std::string s,
                             json_string(file, field + ".configuration.endian", *e));
  if (s != "little" && s != "big") {
    return json_error(file, field + ".configuration.endian", "\"little\" or \"big\"", *e);
  }
  return s == "big";
}

Result<ZarrCodec> v3_bytes_codec(const std::string& file, const std::string& field,
                                 const V3Codec& c) {
  const std::string& n = c.name;
  if (n == "gzip" || n == "numcodecs.gzip") return ZarrCodec::kGzip;
  if (n == "zstd" || n == "numcodecs.zstd") return ZarrCodec::kZstd;
  if (n == "blosc" || n == "numcodecs.blosc") return ZarrCodec::kBlosc;
  if (n == "crc32c" || n == "numcodecs.crc32c") return ZarrCodec::kCrc32c;
  if (n == "numcodecs.zlib") return ZarrCodec::kZlib;
  if (n == "numcodecs.lz4") return ZarrCodec::kLz4;
  if (n == "transpose") {
    return bad(file, field, "the transpose codec is not supported (write the array in C order)");
  }
  return bad(file, field,
             "unsupported codec '" + n + "' (supported: " + std::string(kV3Codecs) + ")");
}

// One level of a v3 codec chain: [bytes | sharding_indexed] + bytes codecs.
// Fills the chain's endianness and codecs; `sharding` (when not null) says
// whether sharding_indexed was the array-to-bytes codec and where.
Status v3_chain(const std::string& file, const std::string& field, const std::vector<V3Codec>& list,
                ZarrMeta* m, bool allow_sharding, const V3Codec** sharding) {
  std::size_t i = 0;
  if (list[0].name != "bytes" && list[0].name != "sharding_indexed") {
    SHARDLOAD_RETURN_IF_ERROR(
        v3_bytes_codec(file, field + "[0]", list[0]).status());  // names unsupported ones
    return bad(file, field + "[0]",
               "expected the array-to-bytes codec ('bytes' or 'sharding_indexed') first, found '" +
                   list[0].name + "'");
  }
  if (list[0].name == "sharding_indexed") {
    if (!allow_sharding) {
      return bad(file, field + "[0]", "nested sharding_indexed is not supported");
    }
    *sharding = &list[0];
  } else {
    SHARDLOAD_ASSIGN_OR_RETURN(m->big_endian,
                               bytes_big_endian(file, field + "[0]", list[0], m->dtype.size));
  }
  ++i;
  for (; i < list.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    if (list[i].name == "bytes" || list[i].name == "sharding_indexed") {
      return bad(file, f, "a second array-to-bytes codec '" + list[i].name + "'");
    }
    SHARDLOAD_ASSIGN_OR_RETURN(const ZarrCodec c, v3_bytes_codec(file, f, list[i]));
    if (sharding != nullptr && *sharding != nullptr) {
      return bad(file, f,
                 "found codec '" + list[i].name +
                     "' after sharding_indexed, which encodes whole shards (a read of part of a "
                     "shard would decode all of it); expected none after it: put '" +
                     list[i].name + "' in the sharding codec's own codecs (" + field +
                     "[0].configuration.codecs), where each inner chunk is encoded alone");
    }
    m->codecs.push_back(c);
  }
  return Status::ok();
}

Status v3_sharding(const std::string& file, const V3Codec& c, ZarrMeta* m) {
  const std::string field = "codecs[0].configuration";
  if (c.config == nullptr) return bad(file, field, "missing");
  const Json& cfg = *c.config;
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* cs, require(file, cfg, field, "chunk_shape"));
  SHARDLOAD_ASSIGN_OR_RETURN(m->inner_chunks, json_shape(file, field + ".chunk_shape", *cs));
  if (m->inner_chunks.size() != m->chunks.size()) {
    return bad(file, field + ".chunk_shape",
               std::to_string(m->inner_chunks.size()) + " dimensions, expected " +
                   std::to_string(m->chunks.size()));
  }
  std::uint64_t per_shard = 1;
  for (std::size_t k = 0; k < m->inner_chunks.size(); ++k) {
    const auto in = m->inner_chunks[k];
    if (in < 1 || m->chunks[k] % in != 0) {
      return bad(file, field + ".chunk_shape",
                 shape_string(m->inner_chunks) + " does not divide the shard shape " +
                     shape_string(m->chunks));
    }
    if (!checked_mul(per_shard, static_cast<std::uint64_t>(m->chunks[k] / in), &per_shard) ||
        per_shard > (1ULL << 27)) {
      return bad(file, field + ".chunk_shape", "too many inner chunks per shard");
    }
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* inner, require(file, cfg, field, "codecs"));
  SHARDLOAD_ASSIGN_OR_RETURN(const auto inner_list, v3_codec_list(file, field + ".codecs", *inner));
  SHARDLOAD_RETURN_IF_ERROR(v3_chain(file, field + ".codecs", inner_list, m, false, nullptr));
  if (const Json* loc = find(cfg, "index_location"); loc != nullptr) {
    SHARDLOAD_ASSIGN_OR_RETURN(const std::string l,
                               json_string(file, field + ".index_location", *loc));
    if (l != "start" && l != "end") {
      return json_error(file, field + ".index_location", "\"start\" or \"end\"", *loc);
    }
    m->index_at_end = l == "end";
  }
  // The index is (offset, nbytes) uint64 pairs: "bytes" with an endianness,
  // optionally followed by crc32c. Nothing else keeps it seekable.
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* ic, require(file, cfg, field, "index_codecs"));
  SHARDLOAD_ASSIGN_OR_RETURN(const auto index_list,
                             v3_codec_list(file, field + ".index_codecs", *ic));
  if (index_list[0].name != "bytes") {
    return bad(file, field + ".index_codecs[0]",
               "expected 'bytes', found '" + index_list[0].name + "'");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(m->index_big_endian,
                             bytes_big_endian(file, field + ".index_codecs[0]", index_list[0], 8));
  for (std::size_t k = 1; k < index_list.size(); ++k) {
    if (k == 1 && index_list[k].name == "crc32c") {
      m->index_crc32c = true;
      continue;
    }
    return bad(file, field + ".index_codecs[" + std::to_string(k) + "]",
               "unsupported index codec '" + index_list[k].name + "' (expected crc32c)");
  }
  m->sharded = true;
  return Status::ok();
}

// The node_type of v3 metadata: "array", else an error (and *not_an_array set, as data).
Status check_v3_node(const std::string& file, const Json& j, bool* not_an_array) {
  auto nt = require(file, j, "", "node_type");
  Result<std::string> node = nt ? json_string(file, "node_type", **nt) : nt.status();
  if (node && *node == "array") return Status::ok();
  *not_an_array = true;
  if (!node) return node.status();
  return bad(file, "node_type",
             "expected \"array\", found \"" + *node + "\" (name the array with " +
                 option_mention("dataset") + ")");
}

Result<ZarrMeta> parse_v3(const std::string& file, const Json& j, bool* not_an_array) {
  ZarrMeta m;
  m.zarr_format = 3;
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* zf, require(file, j, "", "zarr_format"));
  if (!zf->is_number_integer() || zf->get<std::int64_t>() != 3) {
    return json_error(file, "zarr_format", "3", *zf);
  }
  SHARDLOAD_RETURN_IF_ERROR(check_v3_node(file, j, not_an_array));
  // A field the v3 spec does not define is an extension, which may change what the chunks
  // mean: read past only where it says "must_understand": false, as the spec asks.
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const Json& value = it.value();
    static constexpr std::array<std::string_view, 11> kFields = {
        "zarr_format",    "node_type", "shape",      "data_type",          "chunk_grid",
        "fill_value",     "codecs",    "attributes", "chunk_key_encoding", "storage_transformers",
        "dimension_names"};
    if (std::find(kFields.begin(), kFields.end(), key) != kFields.end()) continue;
    const Json* must = value.is_object() ? find(value, "must_understand") : nullptr;
    if (must != nullptr && must->is_boolean() && !must->get<bool>()) continue;
    return bad(file, key,
               "an extension field this reader does not know, which does not say "
               "\"must_understand\": false (the Zarr v3 spec asks a reader to refuse it)");
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* dt, require(file, j, "", "data_type"));
  if (!dt->is_string()) return json_error(file, "data_type", "a data type name", *dt);
  {
    const auto& name = dt->get_ref<const std::string&>();
    auto d = parse_dtype(name);
    // Only the v3 names ("float32"), not numpy codes that parse_dtype also takes.
    if (!d || d->name() != name) {
      return bad(file, "data_type",
                 "unsupported data type '" + name +
                     "' (expected bool, int8-64, uint8-64, float16/32/64, complex64/128)");
    }
    m.dtype = *d;
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* sh, require(file, j, "", "shape"));
  SHARDLOAD_ASSIGN_OR_RETURN(m.shape, json_shape(file, "shape", *sh));
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* grid, require(file, j, "", "chunk_grid"));
  if (!grid->is_object()) return json_error(file, "chunk_grid", "an object", *grid);
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* gname, require(file, *grid, "chunk_grid", "name"));
  if (!gname->is_string() || gname->get<std::string>() != "regular") {
    return json_error(file, "chunk_grid.name", "\"regular\"", *gname);
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* gcfg, require(file, *grid, "chunk_grid", "configuration"));
  if (!gcfg->is_object()) return json_error(file, "chunk_grid.configuration", "an object", *gcfg);
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* cs,
                             require(file, *gcfg, "chunk_grid.configuration", "chunk_shape"));
  SHARDLOAD_ASSIGN_OR_RETURN(m.chunks,
                             json_shape(file, "chunk_grid.configuration.chunk_shape", *cs));
  SHARDLOAD_RETURN_IF_ERROR(check_grid(file, m, "chunk_grid.configuration.chunk_shape", nullptr));

  SHARDLOAD_ASSIGN_OR_RETURN(const Json* cke, require(file, j, "", "chunk_key_encoding"));
  if (!cke->is_object()) return json_error(file, "chunk_key_encoding", "an object", *cke);
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* kname, require(file, *cke, "chunk_key_encoding", "name"));
  SHARDLOAD_ASSIGN_OR_RETURN(const std::string key_name,
                             json_string(file, "chunk_key_encoding.name", *kname));
  if (key_name != "default" && key_name != "v2") {
    return json_error(file, "chunk_key_encoding.name", "\"default\" or \"v2\"", *kname);
  }
  m.v2_keys = key_name == "v2";
  m.separator = m.v2_keys ? '.' : '/';
  if (const Json* kc = find(*cke, "configuration"); kc != nullptr && kc->is_object()) {
    if (const Json* sep = find(*kc, "separator"); sep != nullptr) {
      SHARDLOAD_ASSIGN_OR_RETURN(
          const std::string s,
          json_string(file, "chunk_key_encoding.configuration.separator", *sep));
      if (s != "." && s != "/") {
        return json_error(file, "chunk_key_encoding.configuration.separator", "\".\" or \"/\"",
                          *sep);
      }
      m.separator = s[0];
    }
  }

  if (const Json* st = find(j, "storage_transformers"); st != nullptr) {
    if (!st->is_array() || !st->empty()) {
      return json_error(file, "storage_transformers", "none ([])", *st);
    }
  }
  SHARDLOAD_ASSIGN_OR_RETURN(const Json* codecs, require(file, j, "", "codecs"));
  SHARDLOAD_ASSIGN_OR_RETURN(const auto list, v3_codec_list(file, "codecs", *codecs));
  const V3Codec* sharding = nullptr;
  SHARDLOAD_RETURN_IF_ERROR(v3_chain(file, "codecs", list, &m, true, &sharding));
  if (sharding != nullptr) {
    SHARDLOAD_RETURN_IF_ERROR(v3_sharding(file, *sharding, &m));
    SHARDLOAD_RETURN_IF_ERROR(
        check_grid(file, m, "codecs[0].configuration.chunk_shape", &m.inner_chunks));
  } else {
    SHARDLOAD_RETURN_IF_ERROR(
        check_grid(file, m, "chunk_grid.configuration.chunk_shape", &m.chunks));
  }

  SHARDLOAD_ASSIGN_OR_RETURN(const Json* fv, require(file, j, "", "fill_value"));
  SHARDLOAD_ASSIGN_OR_RETURN(m.fill, parse_fill(file, *fv, m.dtype, 3));
  return m;
}

// ---- the encoding in Shard::extra ------------------------------------------------

constexpr std::string_view kMagic = "zarrmeta1";

void put_u8(std::string* s, std::uint8_t v) { s->push_back(static_cast<char>(v)); }
void put_i64(std::string* s, std::int64_t v) {
  for (int i = 0; i < 8; ++i)
    put_u8(s, static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i)));
}
void put_dims(std::string* s, const std::vector<std::int64_t>& d) {
  put_u8(s, static_cast<std::uint8_t>(d.size()));
  for (const auto x : d) put_i64(s, x);
}

class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  bool u8(std::uint8_t* v) {
    if (pos_ >= s_.size()) return false;
    *v = static_cast<std::uint8_t>(s_[pos_++]);
    return true;
  }
  bool i64(std::int64_t* v) {
    std::uint64_t u = 0;
    for (int i = 0; i < 8; ++i) {
      std::uint8_t b = 0;
      if (!u8(&b)) return false;
      u |= std::uint64_t{b} << (8 * i);
    }
    *v = static_cast<std::int64_t>(u);
    return true;
  }
  bool dims(std::vector<std::int64_t>* d) {
    std::uint8_t n = 0;
    if (!u8(&n)) return false;
    d->resize(n);
    for (auto& x : *d) {
      if (!i64(&x)) return false;
    }
    return true;
  }
  bool bytes(std::size_t n, std::string* out) {
    if (s_.size() - pos_ < n) return false;
    out->assign(s_.substr(pos_, n));
    pos_ += n;
    return true;
  }
  [[nodiscard]] bool done() const { return pos_ == s_.size(); }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
};

}  // namespace

Result<ZarrMeta> parse_zarr_metadata(const std::string& file, std::string_view text,
                                     int zarr_format, bool* not_an_array) {
  bool ignored = false;
  if (not_an_array == nullptr) not_an_array = &ignored;
  *not_an_array = false;
  try {
    SHARDLOAD_ASSIGN_OR_RETURN(const Json j, parse_json_object(file, text));
    return zarr_format == 2 ? parse_v2(file, j) : parse_v3(file, j, not_an_array);
  } catch (const std::exception& e) {
    // The accessors above check types first; this only catches what cannot
    // be ruled out (allocation failure) so that nothing leaves the core.
    return Status(ErrorCode::kFormat, file + ": " + e.what());
  }
}

Result<std::string> zarr_v2_metadata_text(const ZarrMeta& m) {
  // What shardload writes: uncompressed chunks with a zero fill. Anything else has no
  // spelling here, and is refused rather than written as something the reader would take
  // for different.
  if (m.zarr_format != 2 || !m.codecs.empty() || m.sharded || !m.v2_keys ||
      m.shape.size() != m.chunks.size() || m.fill.size() != m.dtype.size ||
      m.fill.find_first_not_of('\0') != std::string::npos) {
    return Status(ErrorCode::kInvalidArgument,
                  "zarr: only v2 metadata of uncompressed chunks with a zero fill is written");
  }
  const char order = m.dtype.size == 1 ? '|' : m.big_endian ? '>' : '<';
  const char* fill = "0";
  if (m.dtype.kind == DTypeKind::kBool) fill = "false";
  if (m.dtype.kind == DTypeKind::kFloat) fill = "0.0";
  if (m.dtype.kind == DTypeKind::kComplex) fill = "[0.0, 0.0]";
  return "{\"zarr_format\": 2, \"shape\": " + json_int_list(m.shape) +
         ", \"chunks\": " + json_int_list(m.chunks) + ", \"dtype\": \"" + std::string(1, order) +
         m.dtype.code() + "\", \"compressor\": null, \"fill_value\": " + fill + ", \"order\": \"" +
         (m.fortran ? "F" : "C") + "\", \"filters\": null, \"dimension_separator\": \"" +
         std::string(1, m.separator) + "\"}\n";
}

std::string encode_zarr_meta(const ZarrMeta& m) {
  std::string s(kMagic);
  put_u8(&s, static_cast<std::uint8_t>(m.zarr_format));
  put_u8(&s, static_cast<std::uint8_t>(m.dtype.kind));
  put_u8(&s, m.dtype.size);
  put_u8(&s, static_cast<std::uint8_t>((m.big_endian ? 1 : 0) | (m.fortran ? 2 : 0) |
                                       (m.v2_keys ? 4 : 0) | (m.sharded ? 8 : 0) |
                                       (m.index_at_end ? 16 : 0) | (m.index_big_endian ? 32 : 0) |
                                       (m.index_crc32c ? 64 : 0)));
  put_u8(&s, static_cast<std::uint8_t>(m.separator));
  put_dims(&s, m.shape);
  put_dims(&s, m.chunks);
  put_dims(&s, m.inner_chunks);
  put_u8(&s, static_cast<std::uint8_t>(m.codecs.size()));
  for (const auto c : m.codecs) put_u8(&s, static_cast<std::uint8_t>(c));
  put_u8(&s, static_cast<std::uint8_t>(m.fill.size()));
  s += m.fill;
  return s;
}

Result<ZarrMeta> decode_zarr_meta(std::string_view extra, const std::string& store) {
  auto fail = [&] {
    return Status(ErrorCode::kFormat,
                  store + ": the layout's Zarr metadata (Shard::extra) is malformed");
  };
  if (extra.substr(0, kMagic.size()) != kMagic) return fail();
  Cursor c(extra.substr(kMagic.size()));
  ZarrMeta m;
  std::uint8_t v = 0;
  std::uint8_t kind = 0;
  std::uint8_t flags = 0;
  std::uint8_t sep = 0;
  std::uint8_t n = 0;
  if (!c.u8(&v) || (v != 2 && v != 3) || !c.u8(&kind) || kind > 4 || !c.u8(&m.dtype.size) ||
      !c.u8(&flags) || !c.u8(&sep) || (sep != '.' && sep != '/')) {
    return fail();
  }
  m.zarr_format = v;
  m.dtype.kind = static_cast<DTypeKind>(kind);
  if (auto pd = parse_dtype(m.dtype.name()); !pd || *pd != m.dtype) return fail();
  m.big_endian = (flags & 1) != 0;
  m.fortran = (flags & 2) != 0;
  m.v2_keys = (flags & 4) != 0;
  m.sharded = (flags & 8) != 0;
  m.index_at_end = (flags & 16) != 0;
  m.index_big_endian = (flags & 32) != 0;
  m.index_crc32c = (flags & 64) != 0;
  m.separator = static_cast<char>(sep);
  if (!c.dims(&m.shape) || !c.dims(&m.chunks) || !c.dims(&m.inner_chunks) || !c.u8(&n)) {
    return fail();
  }
  for (std::uint8_t i = 0; i < n; ++i) {
    std::uint8_t k = 0;
    if (!c.u8(&k) || k < 1 || k > 6) return fail();
    m.codecs.push_back(static_cast<ZarrCodec>(k));
  }
  if (!c.u8(&n) || n != m.dtype.size || !c.bytes(n, &m.fill) || !c.done()) return fail();
  // The same grid checks as at discovery: the bytes may have travelled.
  if (m.sharded) {
    if (m.inner_chunks.size() != m.chunks.size()) return fail();
    for (std::size_t k = 0; k < m.chunks.size(); ++k) {
      if (m.inner_chunks[k] < 1 || m.chunks[k] % m.inner_chunks[k] != 0) return fail();
    }
  } else if (!m.inner_chunks.empty()) {
    return fail();
  }
  if (!check_grid(store, m, "chunks", m.sharded ? &m.inner_chunks : &m.chunks).is_ok()) {
    return fail();
  }
  for (const auto d : m.shape) {
    if (d < 0) return fail();
  }
  return m;
}

std::string zarr_chunk_key(const ZarrMeta& m, const std::vector<std::int64_t>& index) {
  std::string key = m.v2_keys ? "" : "c";
  for (std::size_t i = 0; i < index.size(); ++i) {
    if (i > 0 || !m.v2_keys) key.push_back(m.separator);
    key += std::to_string(index[i]);
  }
  return key;
}

}  // namespace shardload::detail
