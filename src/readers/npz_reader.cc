// The .npz reader: one array of each numpy savez / savez_compressed archive, each archive a
// shard. The ZIP central directory names the members (an array `x` is the member `x.npy`);
// a stored member is an .npy file at an offset of the archive and is read by byte ranges as
// one (the npy reader serves it); a deflated member is one decode unit, inflated from its
// start, so that make_reader's unit cache decodes it once for all the parts a tile asks for.
//
// Refused, naming the file: ZIP64 records (an archive or member of 4 GiB or more, or more
// than 65535 members), encryption, compression methods other than stored and deflated,
// split archives, and any record that does not fit the archive.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "readers/detail/fortran_walk.hpp"
#include "readers/detail/readers.hpp"
#include "shardload/byte_order.hpp"
#include "shardload/formats.hpp"
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

struct Member {
  std::string name;
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
    if (pos == 0) {
      return npz_error(path, "not a ZIP archive (no end of central directory record)");
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
    m.name.assign(reinterpret_cast<const char*>(c + kCentralBytes), n);
    if (m.compressed == 0xFFFFFFFF || m.size == 0xFFFFFFFF || m.local_offset == 0xFFFFFFFF) {
      return npz_error(path, kZip64);
    }
    dir.members.push_back(std::move(m));
    at += kCentralBytes + n + x + k;
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

std::string array_list(const Directory& d) {
  std::string out;
  for (const auto& m : d.members) out += (out.empty() ? "" : ", ") + array_name(m.name);
  return out;
}

Result<const Member*> choose(const std::string& path, const Directory& d, const std::string& name) {
  if (name.empty()) {
    if (d.members.size() == 1) return &d.members.front();
    if (d.members.empty()) return npz_error(path, "array: the archive holds no arrays");
    return npz_error(path, "array: expected exactly one array when none is named, found " +
                               std::to_string(d.members.size()) + " (" + array_list(d) +
                               "); name one with " + option_mention("dataset"));
  }
  for (const auto& m : d.members) {
    if (m.name == name || m.name == name + ".npy") return &m;
  }
  return npz_error(path, "array '" + name + "' not found (arrays in the archive: " +
                             (d.members.empty() ? std::string("none") : array_list(d)) + ")");
}

// Inflates one deflated member from its start, on demand: read() hands out the next bytes
// of the member, finish() checks that the stream ends where the directory says, with its
// CRC-32. Reads the compressed bytes in chunks into the caller's buffer.
class Inflater {
 public:
  Inflater(const File& f, std::uint64_t offset, std::uint64_t compressed, std::string where,
           std::vector<std::byte>* in)
      : f_(f), offset_(offset), compressed_(compressed), where_(std::move(where)), in_(*in) {}
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
        const std::size_t want = is_remote_url(f_.path()) ? kRemoteInputChunk : kInputChunk;
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

class NpzReader final : public ShardReader {
 public:
  NpzReader(const FormatOptions& options, const ReaderContext& ctx,
            std::unique_ptr<ShardReader> npy)
      : options_(options), ctx_(ctx), npy_(std::move(npy)) {}

  Result<ShardProbe> probe(const std::string& path) override {
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(File f, File::open_stat(*ctx_.io, path, &info));
    if (!info.regular) return Status(ErrorCode::kLayout, path + ": not a regular file");
    SHARDLOAD_ASSIGN_OR_RETURN(const Directory dir, read_directory(f, info.size));
    SHARDLOAD_ASSIGN_OR_RETURN(const Member* m, choose(path, dir, options_.dataset));
    const std::string where = path + ": member '" + m->name + "'";
    if ((m->flags & kEncrypted) != 0) {
      return Status(ErrorCode::kFormat,
                    where + ": encrypted; encrypted archives are not supported");
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
    const std::uint64_t data =
        m->local_offset + kLocalBytes + le16(&local[26]) + std::uint64_t{le16(&local[28])};
    if (data + m->compressed > dir.offset) {
      return Status(ErrorCode::kFormat, where + ": data (" + std::to_string(m->compressed) +
                                            " bytes at offset " + std::to_string(data) +
                                            ") runs past the members' data, which ends at " +
                                            std::to_string(dir.offset));
    }

    // The member's .npy header: read in place, or inflated from the stream's start.
    std::vector<std::byte> head(static_cast<std::size_t>(std::min<std::uint64_t>(m->size, 16)));
    std::unique_ptr<Inflater> z;
    if (m->method == kDeflated) z = std::make_unique<Inflater>(f, data, m->compressed, where, &in_);
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
    SHARDLOAD_ASSIGN_OR_RETURN(File f, open_checked(*ctx_.io, s, ctx_.check_snapshot));
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
    Inflater z(f, s.data_offset, d.compressed, s.path + ": member '" + d.member + "'", &in_);
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
  // Every read goes through the IoBackend, so a remote archive is read by ranged GETs.
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
