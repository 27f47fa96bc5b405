#include "shardload/codec.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "base/detail/bytes.hpp"
#include "shardload/store_options.hpp"

namespace shardload {

namespace {

// The last byte is the version: 2 added ctime, inode and linked files to the
// snapshots; 3 row views (a shard's first row and its file's rows); 4 the decode
// unit grid (Shard::decode_rows). A task never decodes another version's bytes. A shard's
// directory identities (Shard::dirs) came later, behind a flag of their own (kHasDirs), so
// that a layout without them encodes as version 4 did; so did a remote Zarr store's server
// time (Shard::server_snapshot_s), flagged in a second flags byte (kMoreFlags) that only a shard
// with such a flag has.
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
constexpr std::uint8_t kHasDirs = 64;
constexpr std::uint8_t kMoreFlags = 128;  // the second flags byte follows
constexpr std::uint8_t kAllFlags =
    kByteSwap | kFortran | kRegular | kHasLinked | kView | kDecodeGrid | kHasDirs | kMoreFlags;
// The second byte's flags.
constexpr std::uint8_t kServerTime = 1;
constexpr std::uint8_t kAllMoreFlags = kServerTime;

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

// The options are written from their table (shardload/format.hpp), which the codec never
// names. The first kPositionalOptions rows are written in place, each as its kind dictates,
// as version 4 wrote them; rows after those, which version 4 did not know, follow only when
// one is set, flagged in the format's byte (kExtendedOptions) as (row, value) pairs, so that
// a layout without them encodes as before and one encoding means one layout.
constexpr std::size_t kPositionalOptions = 6;
constexpr std::uint8_t kExtendedOptions = 0x80;

void put_value(Writer& w, OptionKind kind, const OptionValue& v) {
  switch (kind) {
    case OptionKind::kDType:
    case OptionKind::kText:
      w.str(std::get<std::string>(v));
      break;
    case OptionKind::kDims:
      put_dims(w, std::get<std::vector<std::int64_t>>(v));
      break;
    case OptionKind::kCount:
      w.varint(std::get<std::uint64_t>(v));
      break;
    case OptionKind::kTextList: {
      const auto& items = std::get<std::vector<std::string>>(v);
      w.varint(items.size());
      for (const auto& c : items) w.str(c);
      break;
    }
    case OptionKind::kNumber:
      w.f64(std::get<double>(v));
      break;
    case OptionKind::kFlag:
      w.u8(std::get<bool>(v) ? 1 : 0);
      break;
  }
}

OptionValue get_value(Reader& r, OptionKind kind) {
  switch (kind) {
    case OptionKind::kDType:
    case OptionKind::kText:
      return r.str();
    case OptionKind::kDims:
      return get_dims(r);
    case OptionKind::kCount:
      return r.varint();
    case OptionKind::kTextList: {
      std::vector<std::string> items(static_cast<std::size_t>(r.count()));
      for (auto& c : items) c = r.str();
      return items;
    }
    case OptionKind::kNumber:
      return r.f64();
    case OptionKind::kFlag:
      return r.u8() != 0;
  }
  return {};
}

// A positional row as version 4 wrote it: a dtype as its codes and a byte order; text and
// lists bare (empty when unset); the others behind a presence byte.
void put_positional(Writer& w, const FormatOptionSpec& row, const FormatOptions& o) {
  const std::optional<OptionValue> v = row.get(o);
  switch (row.kind) {
    case OptionKind::kDType: {
      // The row's text ("float32", ">f4"), which always parses, as its codes and an order.
      const std::string text = v ? std::get<std::string>(*v) : std::string();
      bool big = false;
      const auto d = v ? parse_dtype(text, &big) : Result<DType>(DType{});
      w.u8(v && d ? 1 : 0);
      if (v && d) put_dtype(w, *d);
      const bool ordered = !text.empty() && (text[0] == '<' || text[0] == '>');
      w.u8(ordered ? (big ? 2 : 1) : 0);
      return;
    }
    case OptionKind::kText:
      w.str(v ? std::get<std::string>(*v) : std::string());
      return;
    case OptionKind::kTextList:
      put_value(w, row.kind, v ? *v : OptionValue(std::vector<std::string>{}));
      return;
    default:
      w.u8(v ? 1 : 0);
      if (v) put_value(w, row.kind, *v);
  }
}

// The checks of a value's kind that bytes from elsewhere must pass, as every front end's
// parser makes them.
Status set_value(const FormatOptionSpec& row, const OptionValue& v, FormatOptions* o) {
  if (row.kind == OptionKind::kDims) {
    for (const auto d : std::get<std::vector<std::int64_t>>(v)) {
      if (d < 0) return {ErrorCode::kInvalidArgument, "negative dimension"};
    }
  }
  if (row.kind == OptionKind::kCount &&
      std::get<std::uint64_t>(v) > static_cast<std::uint64_t>(INT64_MAX)) {
    return {ErrorCode::kInvalidArgument, std::string(row.name) + " out of range"};
  }
  if (Status st = row.set(v, o); !st) {
    return {ErrorCode::kInvalidArgument, std::string(row.name) + ": " + st.message()};
  }
  return Status::ok();
}

Status get_positional(Reader& r, const FormatOptionSpec& row, FormatOptions* o) {
  switch (row.kind) {
    case OptionKind::kDType: {
      const bool has = r.u8() != 0;
      const DType d = has ? get_dtype(r) : DType{};
      const std::uint8_t order = r.u8();
      if (!r.ok()) return Status::ok();  // the caller reports the truncation
      if (order > 2) return {ErrorCode::kInvalidArgument, "byte order out of range"};
      if (!has) {
        if (order != 0) return {ErrorCode::kInvalidArgument, "a byte order without a dtype"};
        return Status::ok();
      }
      if (d.name() == "invalid") return {ErrorCode::kInvalidArgument, "unknown dtype code"};
      std::string text = d.name();
      if (order != 0) text = (order == 2 ? '>' : '<') + d.code();
      return set_value(row, text, o);
    }
    case OptionKind::kText:
    case OptionKind::kTextList: {
      const OptionValue v = get_value(r, row.kind);
      const bool empty = row.kind == OptionKind::kText
                             ? std::get<std::string>(v).empty()
                             : std::get<std::vector<std::string>>(v).empty();
      if (!r.ok() || empty) return Status::ok();
      return set_value(row, v, o);
    }
    default: {
      if (r.u8() == 0) return Status::ok();
      const OptionValue v = get_value(r, row.kind);
      if (!r.ok()) return Status::ok();
      return set_value(row, v, o);
    }
  }
}

// Whether the format's descriptor is a registered reader's, whose name its options carry.
bool registered(Format format) {
  const FormatDescriptor* d = find_format(format);
  return d != nullptr && d->registered;
}

// The format's code and its options: the head of a layout's encoding, and the whole of an
// options encoding.
void put_options(Writer& w, Format format, const FormatOptions& o) {
  const auto table = format_option_table();
  std::vector<std::pair<std::size_t, OptionValue>> extended;
  for (std::size_t i = kPositionalOptions; i < table.size(); ++i) {
    if (auto v = table[i].get(o)) extended.emplace_back(i, std::move(*v));
  }
  w.u8(static_cast<std::uint8_t>(static_cast<std::uint8_t>(format) |
                                 (extended.empty() ? 0 : kExtendedOptions)));
  // A registered reader's name, only after the custom format's code (the one the
  // descriptors mark registered), which no earlier encoding holds: no new version.
  if (registered(format)) w.str(o.reader);
  for (std::size_t i = 0; i < kPositionalOptions && i < table.size(); ++i) {
    put_positional(w, table[i], o);
  }
  if (extended.empty()) return;
  w.varint(extended.size());
  for (const auto& [row, value] : extended) {
    w.varint(row);
    put_value(w, table[row].kind, value);
  }
}

// Reads what put_options wrote; a fault the reader's state does not show is an error here
// (the caller checks r.ok() for truncation).
Status get_options(Reader& r, Format* format, FormatOptions* o) {
  const std::uint8_t code = r.u8();
  *format = static_cast<Format>(code & ~kExtendedOptions);
  if (registered(*format)) {
    o->reader = r.str();
    if (r.ok() && o->reader.empty()) {
      return {ErrorCode::kInvalidArgument, "a custom format without a reader name"};
    }
  }
  const auto table = format_option_table();
  for (std::size_t i = 0; i < kPositionalOptions && i < table.size(); ++i) {
    SHARDLOAD_RETURN_IF_ERROR(get_positional(r, table[i], o));
  }
  if ((code & kExtendedOptions) == 0) return Status::ok();
  const std::uint64_t n = r.count();
  if (r.ok() && n == 0) return {ErrorCode::kInvalidArgument, "an empty list of options"};
  std::uint64_t last = 0;
  for (std::uint64_t k = 0; k < n && r.ok(); ++k) {
    const std::uint64_t row = r.varint();
    if (!r.ok()) break;
    // Each set row once, in table order, so that one encoding means one layout.
    if (row < kPositionalOptions || row >= table.size() || (k > 0 && row <= last)) {
      return {ErrorCode::kInvalidArgument,
              "option row " + std::to_string(row) + " unknown or out of order"};
    }
    last = row;
    const OptionValue v = get_value(r, table[row].kind);
    if (!r.ok()) break;
    SHARDLOAD_RETURN_IF_ERROR(set_value(table[row], v, o));
    if (!table[row].get(*o)) {
      return {ErrorCode::kInvalidArgument,
              std::string("option ") + table[row].name + " written at its default"};
    }
  }
  return Status::ok();
}

// What both decodings check once the options (get_options) and the rest are read.
Status check_end(const Reader& r, Format format, bool auto_ok) {
  if (!r.ok()) return {ErrorCode::kInvalidArgument, "truncated or malformed"};
  if (!r.done()) return {ErrorCode::kInvalidArgument, "trailing bytes"};
  if (!(auto_ok && format == Format::kAuto) && find_format(format) == nullptr) {
    return {ErrorCode::kInvalidArgument, "unknown format code"};
  }
  return Status::ok();
}

}  // namespace

std::vector<std::uint8_t> encode_layout(const Layout& l, bool credentials) {
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
    const std::uint8_t more = s.server_snapshot_s > 0 ? kServerTime : 0;
    w.u8(static_cast<std::uint8_t>(
        (s.byte_swap ? kByteSwap : 0) | (s.fortran_order ? kFortran : 0) |
        (s.snapshot.regular ? kRegular : 0) | (s.linked.empty() ? 0 : kHasLinked) |
        (s.is_view() ? kView : 0) | (s.decode_rows > 0 ? kDecodeGrid : 0) |
        (s.dirs.empty() ? 0 : kHasDirs) | (more != 0 ? kMoreFlags : 0)));
    if (more != 0) w.u8(more);
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
    if (!s.dirs.empty()) {
      // The inode only: a device number is the process's own (DirIdentity).
      w.varint(s.dirs.size());
      for (const auto& d : s.dirs) {
        w.str(d.below);
        w.varint(d.inode);
      }
    }
    // A task that reads a remote Zarr store's chunks judges them by the time discovery took
    // (a task of Dask's or Legate's, a pickled layout), as the discovering process does.
    if (s.server_snapshot_s > 0) w.varint(static_cast<std::uint64_t>(s.server_snapshot_s));
  }
  // The credentials the paths name by handle (shardload/store_options.hpp), so that the
  // process that decodes the layout reads with them; present only when there are any, so that
  // a layout without them (a manifest's, whose paths have no query) encodes as it always did.
  // Without them (credentials false), the layout's identity alone.
  std::vector<std::string> handles;
  for (const auto& s : credentials ? std::span<const Shard>(l.shards) : std::span<const Shard>()) {
    credential_handles(s.path, &handles);
    for (const auto& f : s.linked) credential_handles(f.path, &handles);
  }
  std::sort(handles.begin(), handles.end());
  handles.erase(std::unique(handles.begin(), handles.end()), handles.end());
  // And the entries those name in turn (an http(s) URL's secret items sealed around another
  // handle), which the reading process puts back too.
  for (std::size_t i = 0; i < handles.size(); ++i) {
    credential_handles_in_items(credential_items(handles[i]), &handles);
  }
  std::sort(handles.begin(), handles.end());
  handles.erase(std::unique(handles.begin(), handles.end()), handles.end());
  std::vector<std::pair<std::string, std::string>> entries;
  for (auto& h : handles) {
    std::string items = credential_items(h);
    if (!items.empty()) entries.emplace_back(std::move(h), std::move(items));
  }
  if (!entries.empty()) {
    w.varint(entries.size());
    for (const auto& [handle, items] : entries) {
      w.str(handle);
      w.str(items);
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
    // Present only when one of its flags is set, so that one encoding means one layout.
    const std::uint8_t more = (flags & kMoreFlags) != 0 ? r.u8() : 0;
    if (r.ok() && (flags & kMoreFlags) != 0 && (more == 0 || (more & ~kAllMoreFlags) != 0)) {
      return bad(more == 0 ? "an empty second flags byte" : "unknown shard flags");
    }
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
    if ((flags & kHasDirs) != 0) {
      // Present only when not empty, so that one encoding means one layout.
      s.dirs.resize(static_cast<std::size_t>(r.count()));
      if (r.ok() && s.dirs.empty()) return bad("empty list of directories");
      for (auto& d : s.dirs) {
        d.below = r.str();
        d.inode = r.varint();
        if (r.ok() && !d.below.empty() && d.below[0] != '/') {
          return bad("a directory that is not under its shard's path");
        }
      }
    }
    if ((more & kServerTime) != 0) {
      // Present only when set, so that one encoding means one layout.
      const std::uint64_t t = r.varint();
      if (r.ok() && (t == 0 || t > static_cast<std::uint64_t>(INT64_MAX))) {
        return bad("server time out of range");
      }
      s.server_snapshot_s = static_cast<std::int64_t>(t);
    }
    if (!r.ok()) break;
  }
  std::vector<std::pair<std::string, std::string>> credentials;
  if (r.ok() && !r.done()) {
    credentials.resize(static_cast<std::size_t>(r.count()));
    if (r.ok() && credentials.empty()) return bad("empty credentials section");
    for (auto& [handle, items] : credentials) {
      handle = r.str();
      items = r.str();
    }
  }
  if (Status st = check_end(r, format, false); !st) return bad(st.message());
  if (dtype.name() == "invalid") return bad("unknown dtype code");
  // Pinned until the layout pins them itself.
  CredentialPins adopted;
  for (const auto& [handle, items] : credentials) {
    if (Status st = adopt_credentials(handle, items, &adopted); !st) return bad(st.message());
  }
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
  // Any format of the table, or auto: a request may leave it open.
  if (Status st = check_end(r, o.format, true); !st) return bad(st.message());
  return o;
}

}  // namespace shardload
