#include "shardload/codec.hpp"

#include <bit>
#include <cstring>
#include <string>

namespace shardload {

namespace {

// The last byte is the version: 2 added ctime, inode and linked files to the
// snapshots; 3 row views (a shard's first row and its file's rows); 4 the decode
// unit grid (Shard::decode_rows). A task never decodes another version's bytes.
constexpr std::uint8_t kMagic[4] = {'S', 'L', 'L', '4'};

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
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<std::uint8_t>(v | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<std::uint8_t>(v));
  }
  void svarint(std::int64_t v) {  // zigzag keeps small negative numbers short
    varint((static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
  }
  void str(const std::string& s) {
    varint(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void f64(double d) {
    const auto bits = std::bit_cast<std::uint64_t>(d);
    for (int i = 0; i < 8; ++i) u8(static_cast<std::uint8_t>(bits >> (8 * i)));
  }
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
    for (int shift = 0; shift < 64; shift += 7) {
      const std::uint8_t byte = u8();
      if (!ok_) return 0;
      v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    return fail<std::uint64_t>();
  }
  std::int64_t svarint() {
    const std::uint64_t z = varint();
    return static_cast<std::int64_t>((z >> 1) ^ (~(z & 1) + 1));
  }
  std::string str() {
    const std::uint64_t n = varint();
    if (!ok_ || n > b_.size() - pos_) return fail<std::string>();
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  double f64() {
    std::uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits |= static_cast<std::uint64_t>(u8()) << (8 * i);
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

}  // namespace

std::vector<std::uint8_t> encode_layout(const Layout& l) {
  Writer w;
  w.out.assign(std::begin(kMagic), std::end(kMagic));
  w.u8(static_cast<std::uint8_t>(l.format));
  const FormatOptions& o = l.options;
  // Only after the custom format's code, which no earlier encoding holds: no new version.
  if (l.format == Format::kCustom) w.str(o.reader);
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
  const auto format = static_cast<Format>(r.u8());
  FormatOptions o;
  if (format == Format::kCustom) {
    o.reader = r.str();
    if (r.ok() && o.reader.empty()) return bad("a custom format without a reader name");
  }
  if (r.u8() != 0) o.dtype = get_dtype(r);
  if (const std::uint8_t order = r.u8(); order != 0) o.big_endian = order == 2;
  if (r.u8() != 0) o.trailing_shape = get_dims(r);
  if (r.u8() != 0) o.header_bytes = r.varint();
  o.dataset = r.str();
  o.columns.resize(static_cast<std::size_t>(r.count()));
  for (auto& c : o.columns) c = r.str();
  if (r.u8() != 0) o.fill_value = r.f64();

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

}  // namespace shardload
