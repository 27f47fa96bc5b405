// The .npz reader: one array of each numpy savez / savez_compressed archive, each archive a
// shard. The ZIP central directory names the members (an array `x` is the member `x.npy`);
// a stored member is an .npy file at an offset of the archive and is read by byte ranges as
// one (the npy reader serves it); a deflated member is one decode unit, inflated from its
// start, so that make_reader's unit cache decodes it once for all the parts a tile asks for.
//
// Refused, naming the file: ZIP64 records (an archive or member of 4 GiB or more, or more
// than 65535 members), encryption, compression methods other than stored and deflated,
// split archives, and any record that does not fit the archive.
//
// Which member an array name means is numpy's choice (NpzFile over Python's zipfile): the
// member of exactly that name, else the one of that name and ".npy"; of a name the directory
// lists twice (what zipfile's append mode leaves after writing a member again), the last
// entry. Archives that one reader could take differently from another are refused rather
// than read one way: a second end record in the comment, bytes between the central directory
// and the end record (or entries the end record does not count), a local header whose name
// or sizes differ from the directory's, and a member whose data runs into the next one.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "readers/detail/fortran_walk.hpp"
#include "readers/detail/readers.hpp"
#include "shardload/byte_order.hpp"
#include "shardload/formats.hpp"
#include "shardload/location.hpp"
#include "shardload/npy.hpp"

namespace shardload::detail {

namespace {

constexpr std::uint32_t kLocalHeader = 0x04034b50;
constexpr std::uint32_t kCentralHeader = 0x02014b50;
constexpr std::uint32_t kEndRecord = 0x06054b50;
constexpr std::uint32_t kZip64Locator = 0x07064b50;
constexpr std::size_t kLocalBytes = 30;
constexpr std::size_t kCentralBytes = 46;
constexpr std::size_t kEndBytes = 22;
constexpr std::size_t kZip64LocatorBytes = 20;
constexpr std::uint16_t kStored = 0;
constexpr std::uint16_t kDeflated = 8;
constexpr std::uint16_t kEncrypted = 0x1;  // general purpose flag bit 0
// Bits 5 and 6: the member's bytes are a patch against another file, or under strong
// encryption: not the array's bytes. Python's zipfile refuses both.
constexpr std::uint16_t kPatched = 0x20;
constexpr std::uint16_t kStrongEncryption = 0x40;
constexpr std::uint16_t kDescriptor = 0x8;  // bit 3: sizes and CRC follow the data
constexpr std::uint16_t kUtf8Name = 0x800;  // bit 11: the name is UTF-8, else code page 437
constexpr std::uint16_t kZip64Extra = 0x0001;
constexpr std::size_t kInputChunk = std::size_t{256} << 10;
// From object storage each chunk of compressed input is a GET: larger ones pay a request's
// latency less often.
constexpr std::size_t kRemoteInputChunk = std::size_t{4} << 20;

std::uint16_t le16(const std::byte* p) {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) |
                                    std::to_integer<unsigned>(p[1]) << 8);
}
std::uint32_t le32(const std::byte* p) {
  return static_cast<std::uint32_t>(le16(p)) | static_cast<std::uint32_t>(le16(p + 2)) << 16;
}

Status npz_error(const std::string& path, const std::string& what) {
  return file_error(ErrorCode::kFormat, path, what);
}

constexpr const char* kZip64 =
    "ZIP64 archives are not supported (an archive or member of 4 GiB or more, or more than "
    "65535 members); save smaller shards";

// The characters 0x80-0xFF of code page 437, the names' encoding without flag bit 11.
constexpr std::array<char32_t, 128> kCp437High = {
    0x00C7, 0x00FC, 0x00E9, 0x00E2, 0x00E4, 0x00E0, 0x00E5, 0x00E7, 0x00EA, 0x00EB, 0x00E8, 0x00EF,
    0x00EE, 0x00EC, 0x00C4, 0x00C5, 0x00C9, 0x00E6, 0x00C6, 0x00F4, 0x00F6, 0x00F2, 0x00FB, 0x00F9,
    0x00FF, 0x00D6, 0x00DC, 0x00A2, 0x00A3, 0x00A5, 0x20A7, 0x0192, 0x00E1, 0x00ED, 0x00F3, 0x00FA,
    0x00F1, 0x00D1, 0x00AA, 0x00BA, 0x00BF, 0x2310, 0x00AC, 0x00BD, 0x00BC, 0x00A1, 0x00AB, 0x00BB,
    0x2591, 0x2592, 0x2593, 0x2502, 0x2524, 0x2561, 0x2562, 0x2556, 0x2555, 0x2563, 0x2551, 0x2557,
    0x255D, 0x255C, 0x255B, 0x2510, 0x2514, 0x2534, 0x252C, 0x251C, 0x2500, 0x253C, 0x255E, 0x255F,
    0x255A, 0x2554, 0x2569, 0x2566, 0x2560, 0x2550, 0x256C, 0x2567, 0x2568, 0x2564, 0x2565, 0x2559,
    0x2558, 0x2552, 0x2553, 0x256B, 0x256A, 0x2518, 0x250C, 0x2588, 0x2584, 0x258C, 0x2590, 0x2580,
    0x03B1, 0x00DF, 0x0393, 0x03C0, 0x03A3, 0x03C3, 0x00B5, 0x03C4, 0x03A6, 0x0398, 0x03A9, 0x03B4,
    0x221E, 0x03C6, 0x03B5, 0x2229, 0x2261, 0x00B1, 0x2265, 0x2264, 0x2320, 0x2321, 0x00F7, 0x2248,
    0x00B0, 0x2219, 0x00B7, 0x221A, 0x207F, 0x00B2, 0x25A0, 0x00A0};

void put_utf8(std::string* out, char32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// Whether `s` is UTF-8 as Python's strict decoder takes it (no overlong forms, surrogates
// or code points past U+10FFFF).
bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_at(s, i).length;
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// A stored name as Python's zipfile decodes it (UTF-8 where flag bit 11 says so, else code
// page 437), as UTF-8; nothing for a name flagged UTF-8 that is not.
std::optional<std::string> decode_name(std::string_view raw, std::uint16_t flags) {
  if ((flags & kUtf8Name) != 0) {
    if (!valid_utf8(raw)) return std::nullopt;
    return std::string(raw);
  }
  std::string out;
  for (const char ch : raw) {
    const auto c = static_cast<unsigned char>(ch);
    put_utf8(&out, c < 0x80 ? char32_t{c} : kCp437High[c - 0x80]);
  }
  return out;
}

struct Member {
  std::string name;    // decoded, whole: what messages show and the local header must repeat
  std::string lookup;  // up to the first NUL: the name zipfile (and so numpy) knows it by
  std::uint16_t flags = 0;
  std::uint16_t method = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed = 0;
  std::uint64_t size = 0;
  std::uint64_t local_offset = 0;
};

struct Directory {
  std::vector<Member> members;
  std::uint64_t offset = 0;  // where the central directory starts: members' data ends there
};

// The refusal of a tail with no end record whose comment reaches the file's end: where a
// signature is there, what its comment length says against the bytes after it (Python's
// zipfile reads such an archive; which directory it meant is not known), else not a ZIP.
Status no_end_record(const std::string& path, const std::vector<std::byte>& tail,
                     std::uint64_t size) {
  for (std::size_t pos = tail.size() - kEndBytes + 1; pos-- > 0;) {
    if (le32(&tail[pos]) != kEndRecord) continue;
    const std::size_t after = tail.size() - pos - kEndBytes;
    return npz_error(path, "the end of central directory record at offset " +
                               std::to_string(size - tail.size() + pos) + " declares a " +
                               std::to_string(le16(&tail[pos + 20])) + "-byte comment, but " +
                               std::to_string(after) +
                               " bytes follow it (truncated, or bytes appended after the "
                               "archive)");
  }
  return npz_error(path, "not a ZIP archive (no end of central directory record)");
}

// The end record (the last signature whose comment reaches the file's end exactly), then
// every central directory entry.
Result<Directory> read_directory(const File& f, std::uint64_t size) {
  const std::string& path = f.path();
  if (size < kEndBytes) {
    return npz_error(path, "not a ZIP archive (" + std::to_string(size) +
                               " bytes, shorter than an end of central directory record)");
  }
  const auto tail = static_cast<std::size_t>(std::min<std::uint64_t>(size, kEndBytes + 0xFFFF));
  std::vector<std::byte> buf(tail);
  SHARDLOAD_RETURN_IF_ERROR(f.read_exact(buf.data(), tail, size - tail));
  std::size_t pos = tail - kEndBytes;
  for (;; --pos) {
    if (le32(&buf[pos]) == kEndRecord && pos + kEndBytes + le16(&buf[pos + 20]) == tail) break;
    if (pos == 0) return no_end_record(path, buf, size);
  }
  // Python's zipfile takes the last signature in the tail, whatever its comment length says:
  // another one after this record would make it read another directory.
  for (std::size_t later = pos + 1; later + 4 <= tail; ++later) {
    if (le32(&buf[later]) == kEndRecord) {
      return npz_error(path, "a second end of central directory signature, at offset " +
                                 std::to_string(size - tail + later) +
                                 " in the archive comment, makes the archive ambiguous "
                                 "(readers would take different directories)");
    }
  }
  const std::byte* e = &buf[pos];
  if (pos >= kZip64LocatorBytes && le32(e - kZip64LocatorBytes) == kZip64Locator) {
    return npz_error(path, kZip64);
  }
  const std::uint16_t entries = le16(e + 10);
  const std::uint32_t cd_size = le32(e + 12);
  const std::uint32_t cd_offset = le32(e + 16);
  if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    return npz_error(path, kZip64);
  }
  if (le16(e + 4) != 0 || le16(e + 6) != 0 || le16(e + 8) != entries) {
    return npz_error(path, "split (multi-disk) ZIP archives are not supported");
  }
  const std::uint64_t end_offset = size - tail + pos;
  if (std::uint64_t{cd_offset} + cd_size > end_offset) {
    return npz_error(path, "central directory (" + std::to_string(cd_size) + " bytes at offset " +
                               std::to_string(cd_offset) + ") runs past the end record at offset " +
                               std::to_string(end_offset) + " (truncated or not a ZIP archive)");
  }
  // Where they differ, Python's zipfile shifts every offset by the difference (an archive
  // after other bytes): readers would find different members.
  if (std::uint64_t{cd_offset} + cd_size != end_offset) {
    return npz_error(path, "central directory (" + std::to_string(cd_size) + " bytes at offset " +
                               std::to_string(cd_offset) + ") ends at offset " +
                               std::to_string(std::uint64_t{cd_offset} + cd_size) +
                               ", not where the end record begins (" + std::to_string(end_offset) +
                               "): archives with bytes before or inside them are not supported");
  }
  std::vector<std::byte> cd(cd_size);
  if (cd_size > 0) SHARDLOAD_RETURN_IF_ERROR(f.read_exact(cd.data(), cd_size, cd_offset));
  Directory dir;
  dir.offset = cd_offset;
  std::size_t at = 0;
  for (std::uint16_t i = 0; i < entries; ++i) {
    const auto bad_entry = [&](const std::string& what) {
      return npz_error(path, "central directory entry " + std::to_string(i) + ": " + what);
    };
    if (at + kCentralBytes > cd.size() || le32(&cd[at]) != kCentralHeader) {
      return bad_entry("missing or malformed (expected " + std::to_string(entries) +
                       " entries in " + std::to_string(cd_size) + " bytes)");
    }
    const std::byte* c = &cd[at];
    const std::size_t n = le16(c + 28), x = le16(c + 30), k = le16(c + 32);
    if (at + kCentralBytes + n + x + k > cd.size()) return bad_entry("runs past the directory");
    Member m;
    m.flags = le16(c + 8);
    m.method = le16(c + 10);
    m.crc = le32(c + 16);
    m.compressed = le32(c + 20);
    m.size = le32(c + 24);
    m.local_offset = le32(c + 42);
    auto name = decode_name({reinterpret_cast<const char*>(c + kCentralBytes), n}, m.flags);
    if (!name) return bad_entry("the name is flagged UTF-8 and is not");
    m.name = *std::move(name);
    m.lookup = m.name.substr(0, m.name.find('\0'));
    if (m.compressed == 0xFFFFFFFF || m.size == 0xFFFFFFFF || m.local_offset == 0xFFFFFFFF) {
      return npz_error(path, kZip64);
    }
    dir.members.push_back(std::move(m));
    at += kCentralBytes + n + x + k;
  }
  // zipfile reads entries until the directory's bytes end, not the end record's count.
  if (at != cd.size()) {
    return npz_error(path, "central directory: " + std::to_string(cd.size() - at) +
                               " bytes follow its " + std::to_string(entries) +
                               " entries (entries the end record does not count)");
  }
  return dir;
}

// numpy names the member of array `x` "x.npy"; people name the array.
std::string array_name(const std::string& member) {
  constexpr std::string_view kExt = ".npy";
  if (member.size() > kExt.size() && member.ends_with(kExt)) {
    return member.substr(0, member.size() - kExt.size());
  }
  return member;
}

// The member names, each once, in the order of their first entries.
std::vector<std::string> distinct_names(const Directory& d) {
  std::vector<std::string> out;
  for (const auto& m : d.members) {
    if (std::find(out.begin(), out.end(), m.lookup) == out.end()) out.push_back(m.lookup);
  }
  return out;
}

// The arrays by name ("a, b"); members whose array names collide ("x" and "x.npy") by theirs.
std::string array_list(const std::vector<std::string>& names) {
  std::map<std::string, std::size_t> uses;
  for (const auto& n : names) ++uses[array_name(n)];
  std::vector<std::string> shown;
  shown.reserve(names.size());
  for (const auto& n : names) {
    std::string a = array_name(n);
    shown.push_back(uses[a] > 1 ? n : std::move(a));
  }
  return listed_names(std::move(shown));
}

// The last entry of member name `lookup`: zipfile's name lookup keeps the last one, and an
// archive updated in append mode lists the stale copy first.
const Member* last_named(const Directory& d, std::string_view lookup) {
  const Member* found = nullptr;
  for (const auto& m : d.members) {
    if (m.lookup == lookup) found = &m;
  }
  return found;
}

// The member numpy's NpzFile[name] reads.
Result<const Member*> choose(const std::string& path, const Directory& d, const std::string& name) {
  const std::vector<std::string> names = distinct_names(d);
  if (name.empty()) {
    if (names.size() == 1) return last_named(d, names.front());
    if (names.empty()) return npz_error(path, "array: the archive holds no arrays");
    return npz_error(path, "array: expected exactly one array when none is named, found " +
                               std::to_string(names.size()) + " (" + array_list(names) +
                               "); name one with " + option_mention("dataset"));
  }
  // The exact name first (numpy prefers member `x` to `x.npy` for "x"), then name + ".npy".
  if (const Member* m = last_named(d, name)) return m;
  if (const Member* m = last_named(d, name + ".npy")) return m;
  return npz_error(path, "array '" + name + "' not found (arrays in the archive: " +
                             (names.empty() ? std::string("none") : array_list(names)) + ")");
}

// Inflates one deflated member from its start, on demand: read() hands out the next bytes
// of the member, finish() checks that the stream ends where the directory says, with its
// CRC-32. Reads the compressed bytes in chunks into the caller's buffer.
class Inflater {
 public:
  // `round_trips`: each read of `f` is a request (ShardSource::round_trips), so the input is
  // read in larger pieces.
  Inflater(const File& f, std::uint64_t offset, std::uint64_t compressed, std::string where,
           std::vector<std::byte>* in, bool round_trips)
      : f_(f),
        offset_(offset),
        compressed_(compressed),
        where_(std::move(where)),
        in_(*in),
        input_chunk_(round_trips ? kRemoteInputChunk : kInputChunk) {}
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  ~Inflater() {
    if (init_) inflateEnd(&zs_);
  }

  [[nodiscard]] std::uint64_t produced() const { return produced_; }

  // The next n bytes of the member into out.
  Status read(std::byte* out, std::size_t n) {
    if (!init_) {
      if (inflateInit2(&zs_, -MAX_WBITS) != Z_OK) {
        return {ErrorCode::kNoMemory, where_ + ": cannot start inflating"};
      }
      init_ = true;
    }
    while (n > 0) {
      if (ended_) {
        return error("the deflated data ends after " + std::to_string(produced_) +
                     " bytes, before the " + std::to_string(produced_ + n) + " needed");
      }
      if (zs_.avail_in == 0) {
        const std::uint64_t left = compressed_ - consumed_;
        if (left == 0) {
          return error("the compressed data (" + std::to_string(compressed_) +
                       " bytes) ends after " + std::to_string(produced_) +
                       " bytes of output (truncated)");
        }
        const std::size_t want = input_chunk_;
        if (in_.size() < want) in_.resize(want);
        const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(left, in_.size()));
        SHARDLOAD_RETURN_IF_ERROR(f_.read_exact(in_.data(), k, offset_ + consumed_));
        consumed_ += k;
        zs_.next_in = reinterpret_cast<Bytef*>(in_.data());
        zs_.avail_in = static_cast<uInt>(k);
      }
      const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, UINT_MAX));
      zs_.next_out = reinterpret_cast<Bytef*>(out);
      zs_.avail_out = chunk;
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      const std::size_t got = chunk - zs_.avail_out;
      crc_ = crc32(crc_, reinterpret_cast<const Bytef*>(out), static_cast<uInt>(got));
      out += got;
      n -= got;
      produced_ += got;
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_STREAM_ERROR) {
        return error(std::string("corrupt deflated data (") +
                     (zs_.msg != nullptr ? zs_.msg : "invalid stream") + ")");
      } else if (rc == Z_MEM_ERROR) {
        return {ErrorCode::kNoMemory, where_ + ": out of memory while inflating"};
      }
      // Z_OK, or Z_BUF_ERROR with no input left: the loop reads more.
    }
    return Status::ok();
  }

  // Reads and drops the next n bytes.
  Status skip(std::size_t n, std::vector<std::byte>* scratch) {
    if (n > 0 && scratch->size() < kInputChunk) scratch->resize(kInputChunk);
    while (n > 0) {
      const std::size_t k = std::min(n, scratch->size());
      SHARDLOAD_RETURN_IF_ERROR(read(scratch->data(), k));
      n -= k;
    }
    return Status::ok();
  }

  // After all `size` bytes were read: the stream must end there, with the CRC-32 given.
  Status finish(std::uint32_t crc) {
    if (!ended_) {
      std::byte extra{};
      const std::uint64_t before = produced_;
      Status s = read(&extra, 1);
      if (s.is_ok()) {
        return error("the deflated data holds more than the " + std::to_string(before) +
                     " bytes the archive's directory gives");
      }
      if (!ended_ || produced_ != before) return s;  // a read error, not the stream's end
    }
    if (crc_ != crc) {
      return error("CRC-32 mismatch (the directory says " + std::to_string(crc) +
                   ", the data gives " + std::to_string(crc_) + ")");
    }
    return Status::ok();
  }

 private:
  Status error(const std::string& what) const { return {ErrorCode::kFormat, where_ + ": " + what}; }

  const File& f_;
  std::uint64_t offset_ = 0;
  std::uint64_t compressed_ = 0;
  std::uint64_t consumed_ = 0;
  std::uint64_t produced_ = 0;
  std::string where_;
  std::vector<std::byte>& in_;
  std::size_t input_chunk_;
  z_stream zs_{};
  bool init_ = false;
  bool ended_ = false;
  uLong crc_ = crc32(0L, Z_NULL, 0);
};

// What a deflated shard carries in Shard::extra (data_offset is the compressed data's).
struct Deflated {
  std::uint64_t compressed = 0;
  std::uint64_t size = 0;    // the member's bytes: the .npy header and the data
  std::uint64_t header = 0;  // the .npy header's bytes
  std::uint32_t crc = 0;
  std::string member;

  [[nodiscard]] std::string encode() const {
    return "deflate " + std::to_string(compressed) + " " + std::to_string(size) + " " +
           std::to_string(header) + " " + std::to_string(crc) + " " + member;
  }
  static Result<Deflated> decode(const Shard& s) {
    Deflated d;
    const std::string& e = s.extra;
    const char* p = e.data();
    const char* end = e.data() + e.size();
    const auto number = [&](auto* v) {
      while (p < end && *p == ' ') ++p;
      const auto r = std::from_chars(p, end, *v);
      p = r.ptr;
      return r.ec == std::errc();
    };
    constexpr std::string_view kTag = "deflate ";
    if (!e.starts_with(kTag)) return npz_error(s.path, "malformed format data of the shard");
    p += kTag.size();
    if (!number(&d.compressed) || !number(&d.size) || !number(&d.header) || !number(&d.crc) ||
        p >= end || *p != ' ') {
      return npz_error(s.path, "malformed format data of the shard");
    }
    d.member.assign(p + 1, end);
    return d;
  }
};

// The same rule as the npy reader's: a Fortran-ordered array with at most one dimension
// longer than 1 has the C-ordered array's bytes.
bool really_fortran(const NpyHeader& h) {
  int long_dims = 0;
  for (const auto d : h.shape) long_dims += d > 1 ? 1 : 0;
  return h.fortran_order && long_dims > 1;
}

// The local header of `m` (its fixed part in `local`) must say what the central directory
// says: the same name (zipfile refuses another), and the same sizes where it gives them (a
// reader that walks the local headers would find other bytes).
Status check_local_header(const File& f, const Member& m,
                          const std::array<std::byte, kLocalBytes>& local,
                          const std::string& where) {
  const std::uint16_t flags = le16(&local[6]);
  const std::size_t n = le16(&local[26]);
  const std::size_t x = le16(&local[28]);
  std::vector<std::byte> tail(n + x);
  if (!tail.empty()) {
    SHARDLOAD_RETURN_IF_ERROR(f.read_exact(tail.data(), tail.size(), m.local_offset + kLocalBytes));
  }
  const auto name = decode_name({reinterpret_cast<const char*>(tail.data()), n}, flags);
  if (!name || *name != m.name) {
    return Status(ErrorCode::kFormat,
                  where + ": the local header at offset " + std::to_string(m.local_offset) +
                      " names another member (" +
                      (name ? "'" + *name + "'" : std::string("a name flagged UTF-8 that is not")) +
                      "): the central directory and the local headers disagree");
  }
  if (le16(&local[8]) != m.method) {
    return Status(ErrorCode::kFormat, where + ": the local header gives compression method " +
                                          std::to_string(le16(&local[8])) +
                                          ", the central directory " + std::to_string(m.method) +
                                          ": the archive is inconsistent");
  }
  if ((flags & kDescriptor) != 0) return Status::ok();  // sizes in a descriptor after the data
  std::uint64_t size = le32(&local[22]);
  std::uint64_t compressed = le32(&local[18]);
  // Sizes of 0xFFFFFFFF are in the ZIP64 extra field (numpy's savez writes its local
  // headers so): the uncompressed size first, then the compressed one.
  for (std::size_t at = n; at + 4 <= tail.size();) {
    const std::uint16_t id = le16(&tail[at]);
    const std::size_t len = le16(&tail[at + 2]);
    if (at + 4 + len > tail.size()) break;
    if (id == kZip64Extra) {
      std::size_t p = at + 4;
      for (std::uint64_t* v : {&size, &compressed}) {
        if (*v != 0xFFFFFFFF) continue;
        if (p + 8 > at + 4 + len) break;
        *v = std::uint64_t{le32(&tail[p])} | std::uint64_t{le32(&tail[p + 4])} << 32;
        p += 8;
      }
      break;
    }
    at += 4 + len;
  }
  if (size != m.size || compressed != m.compressed) {
    return Status(ErrorCode::kFormat,
                  where + ": the local header gives " + std::to_string(compressed) + " bytes (" +
                      std::to_string(size) + " uncompressed), the central directory " +
                      std::to_string(m.compressed) + " (" + std::to_string(m.size) +
                      "): the archive is inconsistent");
  }
  return Status::ok();
}

class NpzReader final : public ShardReader {
 public:
  NpzReader(const FormatOptions& options, const ReaderContext& ctx,
            std::unique_ptr<ShardReader> npy)
      : options_(options), ctx_(ctx), npy_(std::move(npy)) {}

  Result<ShardProbe> probe(const std::string& path) override {
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(File f, ctx_.source->open_stat(path, &info));
    if (!info.regular) return Status(ErrorCode::kLayout, path + ": not a regular file");
    SHARDLOAD_ASSIGN_OR_RETURN(const Directory dir, read_directory(f, info.size));
    SHARDLOAD_ASSIGN_OR_RETURN(const Member* m, choose(path, dir, options_.dataset));
    const std::string where = path + ": member '" + m->name + "'";
    if ((m->flags & (kEncrypted | kStrongEncryption)) != 0) {
      return Status(ErrorCode::kFormat,
                    where + ": encrypted; encrypted archives are not supported");
    }
    if ((m->flags & kPatched) != 0) {
      return Status(ErrorCode::kFormat,
                    where + ": compressed patched data (flag bit 5) is not supported");
    }
    if (m->method != kStored && m->method != kDeflated) {
      return Status(ErrorCode::kFormat, where + ": compression method " +
                                            std::to_string(m->method) +
                                            " is not supported (expected stored or deflated)");
    }
    if (m->method == kStored && m->compressed != m->size) {
      return Status(ErrorCode::kFormat, where + ": stored with " + std::to_string(m->compressed) +
                                            " bytes in the archive for " + std::to_string(m->size) +
                                            " bytes of data");
    }
    std::array<std::byte, kLocalBytes> local{};
    if (m->local_offset + kLocalBytes > dir.offset) {
      return Status(ErrorCode::kFormat, where + ": local header at offset " +
                                            std::to_string(m->local_offset) +
                                            " lies past the members' data");
    }
    SHARDLOAD_RETURN_IF_ERROR(f.read_exact(local.data(), local.size(), m->local_offset));
    if (le32(local.data()) != kLocalHeader) {
      return Status(ErrorCode::kFormat,
                    where + ": no local header at offset " + std::to_string(m->local_offset));
    }
    const std::size_t local_name = le16(&local[26]);
    const std::size_t local_extra = le16(&local[28]);
    const std::uint64_t data = m->local_offset + kLocalBytes + local_name + local_extra;
    // The member's bytes end where the next member's local header begins (by offset), as
    // Python's zipfile checks since 3.12: overlapping members are refused, not read twice.
    std::uint64_t next = dir.offset;
    for (const auto& o : dir.members) {
      if (o.local_offset > m->local_offset) next = std::min(next, o.local_offset);
    }
    if (data + m->compressed > next) {
      return Status(ErrorCode::kFormat,
                    where + ": data (" + std::to_string(m->compressed) + " bytes at offset " +
                        std::to_string(data) + ") runs past " +
                        (next == dir.offset ? "the members' data, which ends at "
                                            : "the next member's local header, at ") +
                        std::to_string(next) +
                        (next == dir.offset ? "" : " (overlapping members)"));
    }
    SHARDLOAD_RETURN_IF_ERROR(check_local_header(f, *m, local, where));
    // The member's .npy header: read in place, or inflated from the stream's start.
    std::vector<std::byte> head(static_cast<std::size_t>(std::min<std::uint64_t>(m->size, 16)));
    std::unique_ptr<Inflater> z;
    if (m->method == kDeflated)
      z = std::make_unique<Inflater>(f, data, m->compressed, where, &in_,
                                     ctx_.source->round_trips(path));
    const auto fetch = [&](std::size_t from, std::size_t n) -> Status {
      return z ? z->read(head.data() + from, n) : f.read_exact(head.data() + from, n, data + from);
    };
    SHARDLOAD_RETURN_IF_ERROR(fetch(0, head.size()));
    auto total = npy_header_size(head);
    if (!total) return total.status().with_context(where);
    if (*total > m->size) {
      return Status(ErrorCode::kFormat, where + ": header: the member (" + std::to_string(m->size) +
                                            " bytes) ends inside the .npy header (" +
                                            std::to_string(*total) + " bytes)");
    }
    const std::size_t had = head.size();
    head.resize(static_cast<std::size_t>(*total));
    if (head.size() > had) SHARDLOAD_RETURN_IF_ERROR(fetch(had, head.size() - had));
    auto h = parse_npy_header(std::span(head).first(static_cast<std::size_t>(*total)));
    if (!h) return h.status().with_context(where);
    if (h->data_offset + h->data_bytes != m->size) {
      return Status(ErrorCode::kFormat, where + ": size: expected " +
                                            std::to_string(h->data_offset + h->data_bytes) +
                                            " bytes (header " + std::to_string(h->data_offset) +
                                            " + data " + std::to_string(h->data_bytes) +
                                            "), the archive holds " + std::to_string(m->size));
    }

    ShardProbe p;
    p.shard.path = path;
    p.shard.snapshot = info;
    p.dtype = h->dtype;
    p.trailing_shape.assign(h->shape.begin() + 1, h->shape.end());
    p.shard.rows = h->shape[0];
    p.shard.byte_swap = h->dtype.size > 1 && h->big_endian == host_is_little_endian();
    p.shard.fortran_order = really_fortran(*h);
    if (m->method == kStored) {
      p.shard.data_offset = data + h->data_offset;
    } else {
      // One unit: the whole member, which only inflating from its start reaches.
      p.shard.data_offset = data;
      p.shard.extra = Deflated{m->compressed, m->size, h->data_offset, m->crc, m->name}.encode();
      p.shard.decode_rows = p.shard.rows;
      p.decode_rows = p.shard.rows;
    }
    return p;
  }

  Status read_rows(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override {
    // A stored member is an .npy file at an offset of the archive.
    if (s.extra.empty()) return npy_->read_rows(l, s, lo, hi, dst);
    SHARDLOAD_ASSIGN_OR_RETURN(const Deflated d, Deflated::decode(s));
    SHARDLOAD_ASSIGN_OR_RETURN(File f, open_checked(*ctx_.source, s, ctx_.check_snapshot));
    if (ctx_.stats != nullptr) ctx_.stats->decodes.fetch_add(1, std::memory_order_relaxed);
    const std::size_t bytes = static_cast<std::size_t>(hi - lo) * l.row_bytes;
    Status read = inflate_rows(f, l, s, d, lo, hi, dst);
    if (ctx_.check_snapshot) read = check_unchanged(f, s.snapshot, std::move(read));
    SHARDLOAD_RETURN_IF_ERROR(read);
    if (s.byte_swap) byte_swap(dst, bytes / l.dtype.swap_unit(), l.dtype.swap_unit());
    return Status::ok();
  }

 private:
  Status inflate_rows(const File& f, const ReadSpec& l, const Shard& s, const Deflated& d,
                      std::int64_t lo, std::int64_t hi, std::byte* dst) {
    Inflater z(f, s.data_offset, d.compressed, s.path + ": member '" + d.member + "'", &in_,
               ctx_.source->round_trips(s.path));
    const auto stored = static_cast<std::uint64_t>(s.stored_rows());
    if (d.header + stored * l.row_bytes != d.size) {
      return npz_error(s.path, "member '" + d.member + "': " + std::to_string(d.size) +
                                   " bytes do not hold " + std::to_string(stored) + " rows of " +
                                   std::to_string(l.row_bytes) + " bytes");
    }
    if (!s.fortran_order) {
      SHARDLOAD_RETURN_IF_ERROR(
          z.skip(static_cast<std::size_t>(d.header + static_cast<std::uint64_t>(lo) * l.row_bytes),
                 &scratch_));
      SHARDLOAD_RETURN_IF_ERROR(z.read(dst, static_cast<std::size_t>(hi - lo) * l.row_bytes));
      // The CRC covers the whole member: checked when a read reaches its end.
      if (static_cast<std::uint64_t>(hi) == stored) return z.finish(d.crc);
      return Status::ok();
    }
    // Fortran order: each trailing element's values of all rows are one run, so any row
    // needs the whole member; it is inflated whole, then rows [lo, hi) gathered into C order.
    std::vector<std::byte> all(static_cast<std::size_t>(d.size - d.header));
    SHARDLOAD_RETURN_IF_ERROR(z.skip(static_cast<std::size_t>(d.header), &scratch_));
    SHARDLOAD_RETURN_IF_ERROR(z.read(all.data(), all.size()));
    SHARDLOAD_RETURN_IF_ERROR(z.finish(d.crc));
    const std::size_t item = l.dtype.size;
    const std::uint64_t T = l.row_elements();
    FortranWalk walk(l.trailing_shape);
    for (std::uint64_t m = 0; m < T; ++m) {
      for (std::int64_t r = lo; r < hi; ++r) {
        const auto row = static_cast<std::uint64_t>(r);
        std::memcpy(dst + (static_cast<std::uint64_t>(r - lo) * T + walk.c_index()) * item,
                    all.data() + (m * stored + row) * item, item);
      }
      walk.next();
    }
    return Status::ok();
  }

  FormatOptions options_;
  ReaderContext ctx_;
  std::unique_ptr<ShardReader> npy_;  // reads stored members
  std::vector<std::byte> in_;
  std::vector<std::byte> scratch_;
};

// A ZIP archive whose first member is an .npy: what numpy's savez writes.
bool sniff_npz(const File& f, std::uint64_t size) {
  std::array<std::byte, kLocalBytes> local{};
  if (size < kLocalBytes || !f.read_exact(local.data(), local.size(), 0).is_ok()) return false;
  if (le32(local.data()) != kLocalHeader) return false;
  const std::size_t n = le16(&local[26]);
  if (n < 5 || kLocalBytes + n > size) return false;
  std::string name(n, '\0');
  return f.read_exact(name.data(), n, kLocalBytes).is_ok() && name.ends_with(".npy");
}

}  // namespace

FormatDescriptor npz_format() {
  FormatDescriptor d;
  d.format = Format::kNpz;
  d.name = "npz";
  d.extensions = {".npz"};
  d.sniff = sniff_npz;
  // Not contiguous_rows: a deflated member has no byte range of rows. Probing reads the end
  // of the archive, its directory and one header: cheap, but a manifest saves it.
  // Every read is a key of the reader's ShardSource, so a remote archive is read by ranged GETs.
  d.capabilities = {.parallel_probe = true, .remote_reads = true};
  d.make_reader = [](const FormatOptions& options,
                     const ReaderContext& context) -> Result<std::unique_ptr<ShardReader>> {
    SHARDLOAD_ASSIGN_OR_RETURN(auto npy, make_npy_reader(FormatOptions{}, context));
    return std::unique_ptr<ShardReader>(
        std::make_unique<NpzReader>(options, context, std::move(npy)));
  };
  return d;
}

}  // namespace shardload::detail
