#include "base/detail/bytes.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>

namespace shardload::detail {

void put_le(std::vector<std::uint8_t>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void put_le_at(std::span<std::uint8_t> out, std::size_t at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

std::uint64_t get_le(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

void put_word(std::vector<std::uint8_t>& out, std::uint64_t v) { put_le(out, v, 8); }

void put_word_str(std::vector<std::uint8_t>& out, std::string_view s) {
  put_word(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void put_word_ints(std::vector<std::uint8_t>& out, std::span<const std::int64_t> v) {
  put_word(out, v.size());
  for (const std::int64_t x : v) put_word(out, static_cast<std::uint64_t>(x));
}

bool WordReader::u64(std::uint64_t* v) {
  if (b_.size() - pos_ < 8) return false;
  *v = get_le(b_.data() + pos_, 8);
  pos_ += 8;
  return true;
}

bool WordReader::str(std::string* s) {
  std::uint64_t n = 0;
  if (!u64(&n) || n > b_.size() - pos_) return false;
  s->assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
  pos_ += n;
  return true;
}

bool WordReader::ints(std::vector<std::int64_t>* v) {
  std::uint64_t n = 0;
  if (!u64(&n) || n > (b_.size() - pos_) / 8) return false;
  v->resize(n);
  for (auto& x : *v) {
    std::uint64_t u = 0;
    (void)u64(&u);
    x = static_cast<std::int64_t>(u);
  }
  return true;
}

void put_varint(std::vector<std::uint8_t>& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(v));
}

bool get_varint(std::span<const std::uint8_t> b, std::size_t* pos, std::uint64_t* v) {
  std::uint64_t r = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= b.size()) return false;
    const std::uint8_t byte = b[(*pos)++];
    r |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) {
      *v = r;
      return true;
    }
  }
  return false;
}

Status write_all(int fd, const std::string& path, const void* data, std::size_t n,
                 std::int64_t offset) {
  const auto* p = static_cast<const char*>(data);
  const bool positional = offset >= 0;
  auto failed = [&](int err) {
    const std::string what = positional
                                 ? "write of " + std::to_string(n) + " bytes at offset " +
                                       std::to_string(offset) + " failed: " + std::strerror(err)
                                 : std::string("cannot write: ") + std::strerror(err);
    return file_error(ErrorCode::kIo, path, what, err);
  };
  while (n > 0) {
    const std::size_t piece = std::min<std::size_t>(n, std::size_t{1} << 30);
    const ssize_t w = positional ? ::pwrite(fd, p, piece, offset) : ::write(fd, p, piece);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return failed(errno);
    if (w == 0) return failed(ENOSPC);
    p += w;
    n -= static_cast<std::size_t>(w);
    if (positional) offset += w;
  }
  return Status::ok();
}

std::string size_string(std::uint64_t bytes) {
  if (bytes < 1000) return std::to_string(bytes) + " bytes";
  static constexpr const char* kUnits[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes) / 1000.0;
  std::size_t u = 0;
  // Past 999.995 the two decimals would round up to "1000.00": take the next unit.
  while (v >= 999.995 && u + 1 < std::size(kUnits)) {
    v /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return std::string(buf) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace shardload::detail
