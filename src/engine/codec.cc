#include "shardload/codec.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "base/detail/bytes.hpp"

namespace shardload {

namespace {

// The last byte is the version: 2 added ctime, inode and linked files to the
// snapshots; 3 row views (a shard's first row and its file's rows); 4 the decode
// unit grid (Shard::decode_rows). A task never decodes another version's bytes.
constexpr std::uint8_t kMagic[4] = {'S', 'L', 'L', '4'};
// Format options alone (encode_format_options): their own magic, so that neither encoding
// is taken for the other.
constexpr std::uint8_t kOptionsMagic[4] = {'S', 'L', 'O', '1'};

// Shard flags.
constexpr std::uint8_t kByteSwap = 1;
constexpr std::uint8_t kFortran = 2;
constexpr std::uint8_t kRegular = 4;
constexpr std::uint8_t kHasLinked = 8;
constexpr std::uint8_t kView = 16;
constexpr std::uint8_t kDecodeGrid = 32;
constexpr std::uint8_t kAllFlags =
    kByteSwap | kFortran | kRegular | kHasLinked | kView | kDecodeGrid;

class Writer {
 public:
  void u8(std::uint8_t v) { out.push_back(v); }
  void varint(std::uint64_t v) { detail::put_varint(out, v); }
  void svarint(std::int64_t v) { varint(detail::zigzag(v)); }  // small negatives stay short
  void str(const std::string& s) {
    varint(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void f64(double d) { detail::put_le(out, std::bit_cast<std::uint64_t>(d), 8); }
  std::vector<std::uint8_t> out;
};

class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> b) : b_(b) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == b_.size(); }

  std::uint8_t u8() {
    if (pos_ >= b_.size()) return fail<std::uint8_t>();
    return b_[pos_++];
  }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    if (!ok_ || !detail::get_varint(b_, &pos_, &v)) return fail<std::uint64_t>();
    return v;
  }
  std::int64_t svarint() { return detail::unzigzag(varint()); }
  std::string str() {
    const std::uint64_t n = varint();
    if (!ok_ || n > b_.size() - pos_) return fail<std::string>();
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  double f64() {
    if (b_.size() - pos_ < 8) return fail<double>();
    const std::uint64_t bits = detail::get_le(b_.data() + pos_, 8);
    pos_ += 8;
    return std::bit_cast<double>(bits);
  }
  // A count of items that each take at least one byte: bounded by what is left.
  std::uint64_t count() {
    const std::uint64_t n = varint();
    if (n > b_.size() - pos_) return fail<std::uint64_t>();
    return n;
  }

 private:
  template <typename T>
  T fail() {
    ok_ = false;
    pos_ = b_.size();
    return T{};
  }
  std::span<const std::uint8_t> b_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

void put_dtype(Writer& w, DType d) {
  w.u8(static_cast<std::uint8_t>(d.kind));
  w.u8(d.size);
}

DType get_dtype(Reader& r) {
  DType d;
  d.kind = static_cast<DTypeKind>(r.u8());
  d.size = r.u8();
  return d;
}

void put_dims(Writer& w, const std::vector<std::int64_t>& dims) {
  w.varint(dims.size());
  for (const auto d : dims) w.svarint(d);
}

std::vector<std::int64_t> get_dims(Reader& r) {
  std::vector<std::int64_t> dims(static_cast<std::size_t>(r.count()));
  for (auto& d : dims) d = r.svarint();
  return dims;
}

void put_info(Writer& w, const FileInfo& f) {
  w.varint(f.size);
  w.svarint(f.mtime_ns);
  w.svarint(f.ctime_ns);
  w.varint(f.inode);
}

void get_info(Reader& r, FileInfo* f) {
  f->size = r.varint();
  f->mtime_ns = r.svarint();
  f->ctime_ns = r.svarint();
  f->inode = r.varint();
}

std::size_t common_prefix(const std::vector<Shard>& shards) {
  if (shards.empty()) return 0;
  std::size_t n = shards[0].path.size();
  for (const auto& s : shards) {
    std::size_t k = 0;
    while (k < n && k < s.path.size() && s.path[k] == shards[0].path[k]) ++k;
    n = k;
  }
  return n;
}

// The format's code and its options: the head of a layout's encoding, and the whole of an
// options encoding.
void put_options(Writer& w, Format format, const FormatOptions& o) {
  w.u8(static_cast<std::uint8_t>(format));
  // Only after the custom format's code, which no earlier encoding holds: no new version.
  if (format == Format::kCustom) w.str(o.reader);
  w.u8(o.dtype ? 1 : 0);
  if (o.dtype) put_dtype(w, *o.dtype);
  w.u8(o.big_endian ? (*o.big_endian ? 2 : 1) : 0);
  w.u8(o.trailing_shape ? 1 : 0);
  if (o.trailing_shape) put_dims(w, *o.trailing_shape);
  w.u8(o.header_bytes ? 1 : 0);
  if (o.header_bytes) w.varint(*o.header_bytes);
  w.str(o.dataset);
  w.varint(o.columns.size());
  for (const auto& c : o.columns) w.str(c);
  w.u8(o.fill_value ? 1 : 0);
  if (o.fill_value) w.f64(*o.fill_value);
}

// Reads what put_options wrote; a fault the reader's state does not show is an error here
// (the caller checks r.ok() for truncation).
Status get_options(Reader& r, Format* format, FormatOptions* o) {
  *format = static_cast<Format>(r.u8());
  if (*format == Format::kCustom) {
    o->reader = r.str();
    if (r.ok() && o->reader.empty()) {
      return {ErrorCode::kInvalidArgument, "a custom format without a reader name"};
    }
  }
  if (r.u8() != 0) o->dtype = get_dtype(r);
  if (const std::uint8_t order = r.u8(); order != 0) o->big_endian = order == 2;
  if (r.u8() != 0) o->trailing_shape = get_dims(r);
  if (r.u8() != 0) o->header_bytes = r.varint();
  o->dataset = r.str();
  o->columns.resize(static_cast<std::size_t>(r.count()));
  for (auto& c : o->columns) c = r.str();
  if (r.u8() != 0) o->fill_value = r.f64();
  return Status::ok();
}

}  // namespace

std::vector<std::uint8_t> encode_layout(const Layout& l) {
  Writer w;
  w.out.assign(std::begin(kMagic), std::end(kMagic));
  put_options(w, l.format, l.options);

  put_dtype(w, l.dtype);
  put_dims(w, l.trailing_shape);
  const std::size_t prefix = common_prefix(l.shards);
  w.str(l.shards.empty() ? std::string() : l.shards[0].path.substr(0, prefix));
  w.varint(l.shards.size());
  for (const auto& s : l.shards) {
    w.str(s.path.substr(prefix));
    w.varint(static_cast<std::uint64_t>(s.rows));
    w.varint(s.data_offset);
    w.u8(static_cast<std::uint8_t>(
        (s.byte_swap ? kByteSwap : 0) | (s.fortran_order ? kFortran : 0) |
        (s.snapshot.regular ? kRegular : 0) | (s.linked.empty() ? 0 : kHasLinked) |
        (s.is_view() ? kView : 0) | (s.decode_rows > 0 ? kDecodeGrid : 0)));
    if (s.is_view()) {
      w.varint(static_cast<std::uint64_t>(s.first_row));
      w.varint(static_cast<std::uint64_t>(s.file_rows));
    }
    if (s.decode_rows > 0) w.varint(static_cast<std::uint64_t>(s.decode_rows));
    put_info(w, s.snapshot);
    w.str(s.extra);
    if (!s.linked.empty()) {
      w.varint(s.linked.size());
      for (const auto& f : s.linked) {
        w.str(f.path);
        w.u8(f.snapshot.regular ? 1 : 0);
        put_info(w, f.snapshot);
      }
    }
  }
  return std::move(w.out);
}

Result<Layout> decode_layout(std::span<const std::uint8_t> bytes) {
  auto bad = [](const std::string& why) {
    return Status(ErrorCode::kInvalidArgument, "encoded layout: " + why);
  };
  if (bytes.size() < 4 || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return bad("wrong magic (not an encoded layout, or another version)");
  }
  Reader r(bytes.subspan(4));
  Format format = Format::kAuto;
  FormatOptions o;
  if (Status st = get_options(r, &format, &o); !st) return bad(st.message());

  const DType dtype = get_dtype(r);
  auto trailing = get_dims(r);
  const std::string prefix = r.str();
  std::vector<Shard> shards(static_cast<std::size_t>(r.count()));
  for (auto& s : shards) {
    s.path = prefix + r.str();
    s.rows = static_cast<std::int64_t>(r.varint());
    s.data_offset = r.varint();
    const std::uint8_t flags = r.u8();
    if ((flags & ~kAllFlags) != 0) return bad("unknown shard flags");
    s.byte_swap = (flags & kByteSwap) != 0;
    s.fortran_order = (flags & kFortran) != 0;
    s.snapshot.regular = (flags & kRegular) != 0;
    if ((flags & kView) != 0) {
      const std::uint64_t first = r.varint();
      const std::uint64_t file_rows = r.varint();
      if (first > static_cast<std::uint64_t>(INT64_MAX) ||
          file_rows > static_cast<std::uint64_t>(INT64_MAX)) {
        return bad("row view out of range");
      }
      s.first_row = static_cast<std::int64_t>(first);
      s.file_rows = static_cast<std::int64_t>(file_rows);
      // Present only for a true view, so that one encoding means one layout.
      if (r.ok() && s.first_row == 0 && s.rows == s.file_rows)
        return bad("a view of the whole file");
    }
    if ((flags & kDecodeGrid) != 0) {
      // Present only when set, so that one encoding means one layout.
      const std::uint64_t unit = r.varint();
      if (r.ok() && (unit == 0 || unit > static_cast<std::uint64_t>(INT64_MAX))) {
        return bad("decode unit rows out of range");
      }
      s.decode_rows = static_cast<std::int64_t>(unit);
    }
    get_info(r, &s.snapshot);
    s.extra = r.str();
    if ((flags & kHasLinked) != 0) {
      // Present only when not empty, so that one encoding means one layout.
      s.linked.resize(static_cast<std::size_t>(r.count()));
      if (r.ok() && s.linked.empty()) return bad("empty list of linked files");
      for (auto& f : s.linked) {
        f.path = r.str();
        const std::uint8_t regular = r.u8();
        if (regular > 1) return bad("linked file flag out of range");
        f.snapshot.regular = regular == 1;
        get_info(r, &f.snapshot);
      }
    }
    if (!r.ok()) break;
  }
  if (!r.ok()) return bad("truncated or malformed");
  if (!r.done()) return bad("trailing bytes");
  if (find_format(format) == nullptr) {
    return bad("unknown format code");
  }
  if (dtype.name() == "invalid") return bad("unknown dtype code");
  for (const auto d : trailing) {
    if (d < 0) return bad("negative dimension");
  }
  auto l = assemble_layout(format, std::move(o), dtype, std::move(trailing), std::move(shards));
  if (!l) return bad(l.status().message());
  return l;
}

Result<TileEncoding> encode_tiles(const Layout& layout, const ReadPlan& plan) {
  TileEncoding e;
  e.offsets.reserve(static_cast<std::size_t>(plan.tiles) + 1);
  e.offsets.push_back(0);
  for (std::int64_t t = 0; t < plan.tiles; ++t) {
    SHARDLOAD_ASSIGN_OR_RETURN(const Layout tile,
                               slice_rows(layout, plan.tile_begin(t), plan.tile_end(t)));
    const std::vector<std::uint8_t> b = encode_layout(tile);
    e.bytes.insert(e.bytes.end(), b.begin(), b.end());
    e.offsets.push_back(static_cast<std::int64_t>(e.bytes.size()));
  }
  return e;
}

Result<Layout> decode_tile(std::span<const std::uint8_t> bytes,
                           std::span<const std::int64_t> offsets, std::int64_t tile) {
  const auto tiles = static_cast<std::int64_t>(offsets.size()) - 1;
  if (tile < 0 || tile >= tiles) {
    return Status(ErrorCode::kInvalidArgument,
                  "encoded tiles: tile " + std::to_string(tile) + " outside the table's " +
                      std::to_string(std::max<std::int64_t>(tiles, 0)) + " tiles");
  }
  const std::int64_t a = offsets[static_cast<std::size_t>(tile)];
  const std::int64_t b = offsets[static_cast<std::size_t>(tile) + 1];
  if (a < 0 || b < a || static_cast<std::uint64_t>(b) > bytes.size()) {
    return Status(ErrorCode::kInvalidArgument, "encoded tiles: tile " + std::to_string(tile) +
                                                   " spans bytes [" + std::to_string(a) + ", " +
                                                   std::to_string(b) + ") of " +
                                                   std::to_string(bytes.size()));
  }
  return decode_layout(bytes.subspan(static_cast<std::size_t>(a), static_cast<std::size_t>(b - a)));
}

std::vector<std::uint8_t> encode_format_options(const FormatOptions& options) {
  Writer w;
  w.out.assign(std::begin(kOptionsMagic), std::end(kOptionsMagic));
  put_options(w, options.format, options);
  return std::move(w.out);
}

Result<FormatOptions> decode_format_options(std::span<const std::uint8_t> bytes) {
  auto bad = [](const std::string& why) {
    return Status(ErrorCode::kInvalidArgument, "encoded format options: " + why);
  };
  if (bytes.size() < 4 || std::memcmp(bytes.data(), kOptionsMagic, 4) != 0) {
    return bad("wrong magic (not encoded format options, or another version)");
  }
  Reader r(bytes.subspan(4));
  FormatOptions o;
  if (Status st = get_options(r, &o.format, &o); !st) return bad(st.message());
  if (!r.ok()) return bad("truncated or malformed");
  if (!r.done()) return bad("trailing bytes");
  // Any format of the table (as decode_layout checks), or auto: a request may leave it open.
  if (o.format != Format::kAuto && find_format(o.format) == nullptr) {
    return bad("unknown format code");
  }
  if (o.dtype && o.dtype->name() == "invalid") return bad("unknown dtype code");
  if (o.trailing_shape) {
    for (const auto d : *o.trailing_shape) {
      if (d < 0) return bad("negative dimension");
    }
  }
  return o;
}

}  // namespace shardload
