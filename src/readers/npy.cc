#include "shardload/npy.hpp"

#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "base/detail/checked.hpp"
#include "shardload/io.hpp"
#include "shardload/shard_source.hpp"

namespace shardload {

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

Status format_error(const std::string& msg) { return {ErrorCode::kFormat, "header: " + msg}; }

std::uint64_t load_le(const std::byte* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

// A tokenizer for the small subset of Python literals numpy writes.
class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool at_end() {
    skip_ws();
    return pos_ == s_.size();
  }
  [[nodiscard]] char peek() {
    skip_ws();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  [[nodiscard]] std::size_t pos() const { return pos_; }

  std::optional<std::string> string_literal() {
    skip_ws();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return std::nullopt;
    const char q = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\') return std::nullopt;  // numpy never escapes in these fields
      out.push_back(s_[pos_++]);
    }
    if (pos_ >= s_.size()) return std::nullopt;
    ++pos_;
    return out;
  }

  std::optional<std::string_view> identifier() {
    skip_ws();
    const std::size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) != 0)) ++pos_;
    if (pos_ == start) return std::nullopt;
    return s_.substr(start, pos_ - start);
  }

  // A non-negative decimal integer that fits int64; Python 2's 'L' suffix allowed.
  std::optional<std::int64_t> integer() {
    skip_ws();
    const std::size_t start = pos_;
    std::int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const int d = s_[pos_] - '0';
      if (v > (std::numeric_limits<std::int64_t>::max() - d) / 10) return std::nullopt;
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;
    return v;
  }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
};

// Explains why a descr numpy can write is one shardload cannot load.
std::string describe_unsupported(const std::string& descr) {
  std::string_view d = descr;
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) d.remove_prefix(1);
  const char c = d.empty() ? '\0' : d[0];
  std::string what = "unsupported dtype";
  if (c == 'O') what = "object dtype is not supported";
  if (c == 'U' || c == 'S' || c == 'a') what = "string dtype is not supported";
  if (c == 'V') what = "void/structured dtype is not supported";
  if (c == 'M' || c == 'm') what = "datetime/timedelta dtype is not supported";
  return "descr: " + what + " (found '" + descr +
         "'; expected bool, int8-64, uint8-64, float16/32/64 or complex64/128)";
}

}  // namespace

Result<std::uint64_t> npy_header_size(std::span<const std::byte> prefix) {
  if (prefix.size() < kMagic.size() + 2 ||
      std::memcmp(prefix.data(), kMagic.data(), kMagic.size()) != 0) {
    return format_error("not a .npy file (magic string \\x93NUMPY not found)");
  }
  const int major = std::to_integer<int>(prefix[6]);
  const int minor = std::to_integer<int>(prefix[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return format_error("format version " + std::to_string(major) + "." + std::to_string(minor) +
                        " is not supported (expected 1.0, 2.0 or 3.0)");
  }
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (prefix.size() < 8 + len_bytes) return format_error("file ends inside the header length");
  const std::uint64_t len = load_le(prefix.data() + 8, static_cast<int>(len_bytes));
  const std::uint64_t total = 8 + len_bytes + len;
  if (total > kMaxNpyHeaderBytes) {
    return format_error("header length " + std::to_string(len) + " exceeds the limit of " +
                        std::to_string(kMaxNpyHeaderBytes) + " bytes");
  }
  return total;
}

namespace {

// The header dict's entries as written, before any of them is interpreted.
struct HeaderDict {
  std::optional<std::string> descr;
  std::optional<bool> fortran;
  std::optional<std::vector<std::int64_t>> shape;
};

// The shape tuple after its key: "(n,)", "(a, b)", "()".
Result<std::vector<std::int64_t>> tokenize_shape(Parser& p) {
  if (!p.eat('(')) return format_error("shape: expected a tuple");
  std::vector<std::int64_t> dims;
  bool need_comma = false;  // a 1-tuple must be written "(5,)"
  while (!p.eat(')')) {
    auto v = p.integer();
    if (!v) return format_error("shape: expected a non-negative integer that fits int64");
    dims.push_back(*v);
    if (p.eat(',')) {
      need_comma = false;
    } else if (p.peek() == ')') {
      need_comma = dims.size() == 1;
    } else {
      return format_error("shape: expected ',' or ')'");
    }
  }
  if (need_comma) return format_error("shape: '(n)' is not a tuple; expected '(n,)'");
  return dims;
}

// Tokenising: the dict literal into its three entries; every syntax error, a duplicate or
// an unknown key is refused here.
Result<HeaderDict> tokenize_dict(std::string_view text) {
  HeaderDict d;
  auto& descr = d.descr;
  auto& fortran = d.fortran;
  auto& shape = d.shape;
  Parser p(text);
  if (!p.eat('{')) return format_error("expected '{' at the start of the header dict");
  while (!p.eat('}')) {
    auto key = p.string_literal();
    if (!key) return format_error("expected a quoted key at offset " + std::to_string(p.pos()));
    if (!p.eat(':')) return format_error("expected ':' after key '" + *key + "'");
    if (*key == "descr") {
      if (descr) return format_error("key 'descr' appears twice");
      if (p.peek() == '[') {
        return format_error("descr: structured dtype (a list of fields) is not supported");
      }
      descr = p.string_literal();
      if (!descr) return format_error("descr: expected a quoted type string");
    } else if (*key == "fortran_order") {
      if (fortran) return format_error("key 'fortran_order' appears twice");
      auto id = p.identifier();
      if (id == "True") {
        fortran = true;
      } else if (id == "False") {
        fortran = false;
      } else {
        return format_error("fortran_order: expected True or False, found '" +
                            std::string(id.value_or("")) + "'");
      }
    } else if (*key == "shape") {
      if (shape) return format_error("key 'shape' appears twice");
      SHARDLOAD_ASSIGN_OR_RETURN(shape, tokenize_shape(p));
    } else {
      return format_error("unexpected key '" + *key +
                          "' (expected only descr, fortran_order and shape)");
    }
    if (!p.eat(',')) {
      if (!p.eat('}')) return format_error("expected ',' or '}' after the value of '" + *key + "'");
      break;
    }
  }
  if (!p.at_end()) return format_error("unexpected text after the header dict");
  return d;
}

// Validation: what the entries mean (dtype and byte order, order, shape, sizes) into h.
Status validate_dict(HeaderDict dict, NpyHeader& h) {
  auto& descr = dict.descr;
  auto& fortran = dict.fortran;
  auto& shape = dict.shape;
  if (!descr) return format_error("missing key 'descr'");
  if (!fortran) return format_error("missing key 'fortran_order'");
  if (!shape) return format_error("missing key 'shape'");

  auto dt = parse_dtype(*descr, &h.big_endian);
  if (!dt) return format_error(describe_unsupported(*descr));
  // A plain code without an order character ("f4") is ambiguous in a file.
  if ((*descr)[0] != '<' && (*descr)[0] != '>' && (*descr)[0] != '|' && (*descr)[0] != '=') {
    return format_error("descr: '" + *descr + "' has no byte-order character");
  }
  h.dtype = *dt;
  h.fortran_order = *fortran;
  if (shape->empty()) {
    return format_error("shape: 0-d arrays (shape ()) cannot be stacked along axis 0");
  }
  h.shape = std::move(*shape);
  std::uint64_t elements = 1;
  for (const auto d : h.shape) {
    if (!detail::checked_mul(elements, static_cast<std::uint64_t>(d), &elements)) {
      return format_error("shape: the element count overflows 64 bits");
    }
  }
  if (!detail::checked_mul(elements, std::uint64_t{h.dtype.size}, &h.data_bytes) ||
      h.data_bytes >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - h.data_offset) {
    return format_error("shape: the data size overflows 64 bits");
  }
  return Status::ok();
}

// Framing: the magic, version and size (npy_header_size), then the dict's text, which ends
// with a newline and, before version 3.0, is ASCII.
Result<std::string_view> header_text(std::span<const std::byte> header, NpyHeader& h) {
  SHARDLOAD_ASSIGN_OR_RETURN(const std::uint64_t total, npy_header_size(header));
  if (header.size() != total) {
    return format_error("expected " + std::to_string(total) + " header bytes, found " +
                        std::to_string(header.size()));
  }
  h.major = std::to_integer<int>(header[6]);
  h.minor = std::to_integer<int>(header[7]);
  h.data_offset = total;
  const std::size_t start = h.major == 1 ? 10 : 12;
  std::string_view text(reinterpret_cast<const char*>(header.data()) + start, total - start);
  if (text.empty() || text.back() != '\n') {
    return format_error("the header dict does not end with a newline");
  }
  if (h.major < 3) {
    for (const char c : text) {
      if (static_cast<unsigned char>(c) >= 0x80) {
        return format_error("non-ASCII byte in a version " + std::to_string(h.major) +
                            ".0 header (only version 3.0 allows UTF-8)");
      }
    }
  }
  return text;
}

}  // namespace

std::string encode_npy_header(const DType& dtype, const std::vector<std::int64_t>& shape) {
  const char order = dtype.size == 1 ? '|' : (host_is_little_endian() ? '<' : '>');
  std::string dict = "{'descr': '" + std::string(1, order) + dtype.code() +
                     "', 'fortran_order': False, 'shape': " + shape_string(shape) + ", }";
  // numpy pads with spaces so that the data starts on a 64-byte boundary.
  const std::size_t unpadded = 10 + dict.size() + 1;
  const std::size_t total = (unpadded + 63) / 64 * 64;
  dict.append(total - unpadded, ' ');
  dict.push_back('\n');
  const auto len = static_cast<std::uint16_t>(dict.size());
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(len & 0xFF));
  out.push_back(static_cast<char>(len >> 8));
  return out + dict;
}

Result<NpyHeader> parse_npy_header(std::span<const std::byte> header) {
  NpyHeader h;
  SHARDLOAD_ASSIGN_OR_RETURN(const std::string_view text, header_text(header, h));
  SHARDLOAD_ASSIGN_OR_RETURN(HeaderDict dict, tokenize_dict(text));
  SHARDLOAD_RETURN_IF_ERROR(validate_dict(std::move(dict), h));
  return h;
}

Result<NpyHeader> probe_npy(ShardSource& source, const std::string& key, FileInfo* info) {
  FileInfo st;
  SHARDLOAD_ASSIGN_OR_RETURN(File f, source.open_stat(key, &st));
  const std::string& path = f.path();
  if (!st.regular) return Status(ErrorCode::kLayout, path + ": not a regular file");
  // One small read serves almost every header: numpy pads them to 64 or 128 bytes (a
  // larger one costs a second read); a probe copies no more than it needs.
  std::vector<std::byte> buf(static_cast<std::size_t>(std::min<std::uint64_t>(st.size, 512)));
  if (!buf.empty()) SHARDLOAD_RETURN_IF_ERROR(f.read_exact(buf.data(), buf.size(), 0));
  auto total = npy_header_size(buf);
  if (!total) return total.status().with_context(path);
  if (*total > st.size) {
    return Status(ErrorCode::kFormat, path + ": header: the file (" + std::to_string(st.size) +
                                          " bytes) ends inside the header (" +
                                          std::to_string(*total) + " bytes)");
  }
  if (*total > buf.size()) {
    buf.resize(static_cast<std::size_t>(*total));
    SHARDLOAD_RETURN_IF_ERROR(f.read_exact(buf.data(), buf.size(), 0));
  }
  auto h = parse_npy_header(std::span(buf).first(static_cast<std::size_t>(*total)));
  if (!h) return h.status().with_context(path);
  const std::uint64_t expected = h->data_offset + h->data_bytes;
  if (st.size != expected) {
    return Status(ErrorCode::kFormat,
                  path + ": size: expected " + std::to_string(expected) + " bytes (header " +
                      std::to_string(h->data_offset) + " + data " + std::to_string(h->data_bytes) +
                      "), found " + std::to_string(st.size) +
                      (st.size < expected ? " (truncated)" : " (trailing bytes)"));
  }
  if (info != nullptr) *info = st;
  return h;
}

}  // namespace shardload
