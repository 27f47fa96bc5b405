// Chunk codecs for the Zarr reader, over the real libraries (zlib, zstd, lz4,
// blosc). Every decoder checks that the input is consumed exactly (blosc: its frame, as
// numcodecs does, see blosc_decode; gzip: its members and their zero padding, see
// inflate_stream) and the output has exactly the size the metadata
// promises: a corrupt chunk is an error, never a buffer of garbage or a silently short chunk.
#include <blosc.h>
#include <lz4.h>
#include <zlib.h>
#include <zstd.h>

#include <array>
#include <climits>
#include <cmath>
#include <cstring>

#include "readers/detail/zarr.hpp"

namespace shardload::detail {

namespace {

Status corrupt(ZarrCodec c, const std::string& why) {
  return {ErrorCode::kFormat, std::string(zarr_codec_name(c)) + ": corrupt chunk (" + why + ")"};
}

std::uint32_t load_le32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}

// Inflates a zlib (window 15) or gzip (15 + 16) stream. With `grow` set the
// output grows up to `cap`; else it must fill exactly `expected` bytes.
//
// A gzip stream is a series of members (RFC 1952, 2.2: what `cat a.gz b.gz` and parallel
// writers such as pigz make), each checked against its own CRC-32 and length; the chunk is
// their concatenation. Zero bytes after a member are padding, as Python's gzip (numcodecs'
// decoder, so zarr-python's) skips them; anything else after a member is an error, as it is
// there. A zlib stream is one stream: bytes after it are refused.
Status inflate_stream(ZarrCodec c, const std::byte* in, std::size_t n, std::byte* out,
                      std::size_t expected, std::vector<std::byte>* grow, std::size_t cap) {
  if (n > UINT_MAX) return corrupt(c, "a chunk of more than 4 GiB");
  z_stream z{};
  const int window = c == ZarrCodec::kGzip ? 15 + 16 : 15;
  if (inflateInit2(&z, window) != Z_OK) return corrupt(c, "inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in));
  z.avail_in = static_cast<uInt>(n);
  const std::size_t limit = grow != nullptr ? cap : expected;
  std::size_t produced = 0;
  std::size_t members = 0;
  int rc = Z_OK;
  for (;;) {
    // Once the output is full, one byte more of room tells a stream that ends there from
    // one that would decode to more.
    std::byte probe{};
    std::byte* dst = &probe;
    std::size_t room = 1;
    if (grow != nullptr && produced == grow->size() && grow->size() < cap) {
      grow->resize(std::min(cap, std::max<std::size_t>(4096, grow->size() * 2)));
    }
    if (produced < limit) {
      dst = (grow != nullptr ? grow->data() : out) + produced;
      room =
          std::min<std::size_t>((grow != nullptr ? grow->size() : expected) - produced, UINT_MAX);
    }
    z.next_out = reinterpret_cast<Bytef*>(dst);
    z.avail_out = static_cast<uInt>(room);
    rc = inflate(&z, Z_NO_FLUSH);
    const std::size_t wrote = room - z.avail_out;
    if (dst == &probe && wrote != 0) {
      inflateEnd(&z);
      return corrupt(c, grow != nullptr ? "decodes to more than " + std::to_string(cap) + " bytes"
                                        : "decodes to more than the " + std::to_string(expected) +
                                              " bytes expected");
    }
    produced += wrote;
    if (rc == Z_STREAM_END) {
      ++members;
      if (c != ZarrCodec::kGzip) break;
      while (z.avail_in != 0 && *z.next_in == 0) {
        ++z.next_in;
        --z.avail_in;
      }
      // The next member's magic, else the end (or bytes that are no member: refused below).
      if (z.avail_in < 2 || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b) break;
      if (inflateReset(&z) != Z_OK) {
        inflateEnd(&z);
        return corrupt(c, "inflateReset failed");
      }
      continue;
    }
    if (rc == Z_BUF_ERROR && z.avail_out != 0) break;  // input ended early
    if (rc != Z_OK) break;
  }
  const std::string msg = z.msg != nullptr ? z.msg : "";
  const auto left = z.avail_in;
  inflateEnd(&z);
  if (rc != Z_STREAM_END) {
    std::string why = msg.empty() ? "the stream ends early" : msg;
    if (members != 0) why += " in gzip member " + std::to_string(members + 1);
    return corrupt(c, why);
  }
  if (left != 0) {
    return corrupt(c, c == ZarrCodec::kGzip
                          ? std::to_string(left) +
                                " bytes after the last gzip member that are neither another "
                                "member nor zero padding"
                          : std::to_string(left) + " bytes after the end of the stream");
  }
  if (grow != nullptr) {
    grow->resize(produced);
  } else if (produced != expected) {
    return corrupt(c, "decodes to " + std::to_string(produced) + " bytes, expected " +
                          std::to_string(expected));
  }
  return Status::ok();
}

Status zstd_decode(const std::byte* in, std::size_t n, std::byte* out, std::size_t expected,
                   std::vector<std::byte>* grow, std::size_t cap) {
  const ZarrCodec c = ZarrCodec::kZstd;
  if (grow != nullptr) {
    const unsigned long long size = ZSTD_getFrameContentSize(in, n);
    if (size == ZSTD_CONTENTSIZE_ERROR) return corrupt(c, "not a zstd frame");
    // Without a recorded size the cap bounds the output.
    expected = size == ZSTD_CONTENTSIZE_UNKNOWN ? cap : static_cast<std::size_t>(size);
    if (size != ZSTD_CONTENTSIZE_UNKNOWN && size > cap) {
      return corrupt(
          c, "a frame of " + std::to_string(size) + " bytes, more than " + std::to_string(cap));
    }
    grow->resize(expected);
    out = grow->data();
  }
  const std::size_t got = ZSTD_decompress(out, expected, in, n);
  if (ZSTD_isError(got) != 0U) return corrupt(c, ZSTD_getErrorName(got));
  if (grow != nullptr) {
    grow->resize(got);
  } else if (got != expected) {
    return corrupt(
        c, "decodes to " + std::to_string(got) + " bytes, expected " + std::to_string(expected));
  }
  return Status::ok();
}

// numcodecs' LZ4: a little-endian uint32 of the decoded size, then one block.
Status lz4_decode(const std::byte* in, std::size_t n, std::byte* out, std::size_t expected,
                  std::vector<std::byte>* grow, std::size_t cap) {
  const ZarrCodec c = ZarrCodec::kLz4;
  if (n < 4) return corrupt(c, "shorter than its 4-byte size header");
  if (n - 4 > static_cast<std::size_t>(INT_MAX)) return corrupt(c, "a block of more than 2 GiB");
  const std::uint32_t size = load_le32(in);
  if (grow != nullptr) {
    if (size > cap) return corrupt(c, "a size header of " + std::to_string(size) + " bytes");
    grow->resize(size);
    out = grow->data();
    expected = size;
  } else if (size != expected) {
    return corrupt(c, "its header says " + std::to_string(size) + " bytes, expected " +
                          std::to_string(expected));
  }
  if (expected > static_cast<std::size_t>(INT_MAX)) return corrupt(c, "more than 2 GiB");
  const int got =
      LZ4_decompress_safe(reinterpret_cast<const char*>(in + 4), reinterpret_cast<char*>(out),
                          static_cast<int>(n - 4), static_cast<int>(expected));
  if (got < 0) return corrupt(c, "malformed block");
  if (static_cast<std::size_t>(got) != expected) {
    return corrupt(
        c, "decodes to " + std::to_string(got) + " bytes, expected " + std::to_string(expected));
  }
  return Status::ok();
}

Status blosc_decode(const std::byte* in, std::size_t n, std::byte* out, std::size_t expected,
                    std::vector<std::byte>* grow, std::size_t cap) {
  const ZarrCodec c = ZarrCodec::kBlosc;
  if (n < BLOSC_MIN_HEADER_LENGTH) {
    return corrupt(c, "not a valid blosc buffer of " + std::to_string(n) + " bytes");
  }
  std::size_t nb = 0;
  std::size_t cbytes = 0;
  std::size_t block = 0;
  blosc_cbuffer_sizes(in, &nb, &cbytes, &block);
  // The frame is the header's cbytes; bytes after it are not blosc's. Other writers leave
  // some there (z5py: 16), and numcodecs decodes the frame and ignores them, so they are
  // ignored here too. A frame longer than the chunk is a truncated one.
  if (cbytes > n) {
    return corrupt(c, "its header says " + std::to_string(cbytes) + " compressed bytes, found " +
                          std::to_string(n));
  }
  std::size_t nbytes = 0;
  // validate checks the header against the frame's length, which is what makes the
  // decompression below (which reads at most cbytes bytes) safe on untrusted bytes.
  if (blosc_cbuffer_validate(in, cbytes, &nbytes) != 0) {
    return corrupt(c, "not a valid blosc buffer of " + std::to_string(cbytes) + " bytes");
  }
  if (grow != nullptr) {
    if (nbytes > cap) return corrupt(c, "a buffer of " + std::to_string(nbytes) + " bytes");
    grow->resize(nbytes);
    out = grow->data();
    expected = nbytes;
  } else if (nbytes != expected) {
    return corrupt(c, "its header says " + std::to_string(nbytes) + " bytes, expected " +
                          std::to_string(expected));
  }
  if (expected == 0) return Status::ok();
  const int got = blosc_decompress_ctx(in, out, expected, 1);
  if (got <= 0 || static_cast<std::size_t>(got) != expected) {
    const char* lib = blosc_cbuffer_complib(in);
    return corrupt(c, std::string("decompression with ") + (lib != nullptr ? lib : "?") +
                          " failed (" + std::to_string(got) + ")");
  }
  return Status::ok();
}

Status crc_decode(const std::byte* in, std::size_t n, std::byte* out, std::size_t expected,
                  std::vector<std::byte>* grow) {
  const ZarrCodec c = ZarrCodec::kCrc32c;
  if (n < 4) return corrupt(c, "shorter than its 4-byte checksum");
  const std::size_t body = n - 4;
  const std::uint32_t want = load_le32(in + body);
  const std::uint32_t got = crc32c(in, body);
  if (want != got) {
    return corrupt(c, "checksum mismatch: stored " + std::to_string(want) + ", computed " +
                          std::to_string(got));
  }
  if (grow != nullptr) {
    grow->assign(in, in + body);
  } else {
    if (body != expected) {
      return corrupt(c, std::to_string(body) + " bytes, expected " + std::to_string(expected));
    }
    if (body != 0) std::memcpy(out, in, body);
  }
  return Status::ok();
}

Status decode(ZarrCodec c, const std::byte* in, std::size_t n, std::byte* out, std::size_t expected,
              std::vector<std::byte>* grow, std::size_t cap) {
  switch (c) {
    case ZarrCodec::kZlib:
    case ZarrCodec::kGzip:
      return inflate_stream(c, in, n, out, expected, grow, cap);
    case ZarrCodec::kZstd:
      return zstd_decode(in, n, out, expected, grow, cap);
    case ZarrCodec::kLz4:
      return lz4_decode(in, n, out, expected, grow, cap);
    case ZarrCodec::kBlosc:
      return blosc_decode(in, n, out, expected, grow, cap);
    case ZarrCodec::kCrc32c:
      return crc_decode(in, n, out, expected, grow);
  }
  return {ErrorCode::kFormat, "unknown codec"};
}

}  // namespace

const char* zarr_codec_name(ZarrCodec c) {
  switch (c) {
    case ZarrCodec::kZlib:
      return "zlib";
    case ZarrCodec::kGzip:
      return "gzip";
    case ZarrCodec::kZstd:
      return "zstd";
    case ZarrCodec::kLz4:
      return "lz4";
    case ZarrCodec::kBlosc:
      return "blosc";
    case ZarrCodec::kCrc32c:
      return "crc32c";
  }
  return "unknown";
}

Status zarr_decode_exact(ZarrCodec codec, const std::byte* in, std::size_t n, std::byte* out,
                         std::size_t expected) {
  return decode(codec, in, n, out, expected, nullptr, 0);
}

Status zarr_decode_grow(ZarrCodec codec, const std::byte* in, std::size_t n,
                        std::vector<std::byte>* grow, std::size_t cap) {
  grow->clear();
  return decode(codec, in, n, nullptr, 0, grow, cap);
}

std::uint32_t crc32c(const std::byte* data, std::size_t n) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1U) != 0 ? 0x82F63B78U ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFU;
  for (std::size_t i = 0; i < n; ++i) {
    c = table[(c ^ std::to_integer<std::uint32_t>(data[i])) & 0xFFU] ^ (c >> 8);
  }
  return c ^ 0xFFFFFFFFU;
}

std::uint16_t double_to_half(double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<std::uint16_t>(sign | 0x7E00);
  const double a = std::fabs(x);
  // 65520 is halfway between 65504 (the largest half) and 65536: it and
  // everything above round to infinity.
  if (a >= 65520.0) return static_cast<std::uint16_t>(sign | 0x7C00);
  if (a < std::ldexp(1.0, -14)) {
    // Subnormal: units of 2^-24, rounded to nearest even; 1024 units is the
    // smallest normal, whose bits are exactly 0x0400.
    const auto q = static_cast<std::uint16_t>(std::nearbyint(std::ldexp(a, 24)));
    return static_cast<std::uint16_t>(sign | q);
  }
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exponent = e - 1;                // a = (2m) * 2^exponent, 2m in [1, 2)
  auto q = static_cast<std::uint32_t>(std::nearbyint((2.0 * m - 1.0) * 1024.0));
  if (q == 1024) {
    q = 0;
    ++exponent;
  }
  if (exponent + 15 >= 31) return static_cast<std::uint16_t>(sign | 0x7C00);
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exponent + 15) << 10) | q);
}

}  // namespace shardload::detail
