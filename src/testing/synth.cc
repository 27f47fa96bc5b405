#include "shardload/synth.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "base/detail/bytes.hpp"
#include "shardload/layout.hpp"
#include "shardload/npy.hpp"

namespace shardload {

namespace {

// An exact integer v, |v| < 2^(b-1), scaled by 2^-8.
double synth_real(std::uint64_t h, int bits) {
  const auto v = static_cast<std::int64_t>(h >> (64 - bits)) - (std::int64_t{1} << (bits - 1));
  return std::ldexp(static_cast<double>(v), -8);
}

// float16 bits for v * 2^-8 with |v| < 1024: always a normal or zero half.
std::uint16_t synth_half(std::uint64_t h) {
  const auto v = static_cast<std::int64_t>(h >> 53) - 1024;
  if (v == 0) return 0;
  const std::uint16_t sign = v < 0 ? std::uint16_t{0x8000} : std::uint16_t{0};
  auto a = static_cast<std::uint32_t>(v < 0 ? -v : v);
  int e = 31 - __builtin_clz(a);  // a = 2^e * 1.f
  const auto exponent = static_cast<std::uint16_t>(e - 8 + 15);
  const auto mantissa = static_cast<std::uint16_t>((a << (10 - e)) & 0x3FF);
  return static_cast<std::uint16_t>(sign | (exponent << 10) | mantissa);
}

template <typename T>
void put(std::byte* dst, std::size_t i, T v) {
  std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

void synth_fill(DType d, std::uint64_t seed, std::uint64_t first, std::size_t count,
                std::byte* dst) {
  const std::uint64_t key = splitmix64(seed);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t h = splitmix64(key + first + i);
    switch (d.kind) {
      case DTypeKind::kBool:
        put<std::uint8_t>(dst, i, static_cast<std::uint8_t>(h >> 63));
        break;
      case DTypeKind::kInt:
      case DTypeKind::kUInt:
        // Little-endian hosts keep the low bytes first; copy them as they are.
        switch (d.size) {
          case 1:
            put(dst, i, static_cast<std::uint8_t>(h));
            break;
          case 2:
            put(dst, i, static_cast<std::uint16_t>(h));
            break;
          case 4:
            put(dst, i, static_cast<std::uint32_t>(h));
            break;
          default:
            put(dst, i, h);
            break;
        }
        break;
      case DTypeKind::kFloat:
        switch (d.size) {
          case 2:
            put(dst, i, synth_half(h));
            break;
          case 4:
            put(dst, i, static_cast<float>(synth_real(h, 24)));
            break;
          default:
            put(dst, i, synth_real(h, 53));
            break;
        }
        break;
      case DTypeKind::kComplex: {
        const std::uint64_t h2 = splitmix64(h);
        if (d.size == 8) {
          put(dst, 2 * i, static_cast<float>(synth_real(h, 24)));
          put(dst, 2 * i + 1, static_cast<float>(synth_real(h2, 24)));
        } else {
          put(dst, 2 * i, synth_real(h, 53));
          put(dst, 2 * i + 1, synth_real(h2, 53));
        }
        break;
      }
    }
  }
}

std::vector<std::int64_t> synth_split(std::uint64_t seed, std::int64_t total_rows,
                                      std::int64_t shards) {
  std::vector<std::int64_t> counts;
  if (shards <= 0) return counts;
  // A different stream from the values: key the cuts off seed + 1's mix.
  const std::uint64_t key = splitmix64(splitmix64(seed) ^ 0x5348415244ULL);
  std::vector<std::int64_t> cuts;
  cuts.reserve(static_cast<std::size_t>(shards) + 1);
  cuts.push_back(0);
  for (std::int64_t i = 0; i + 1 < shards; ++i) {
    const std::uint64_t h = splitmix64(key + static_cast<std::uint64_t>(i));
    cuts.push_back(static_cast<std::int64_t>(h % (static_cast<std::uint64_t>(total_rows) + 1)));
  }
  cuts.push_back(total_rows);
  std::sort(cuts.begin(), cuts.end());
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) counts.push_back(cuts[i + 1] - cuts[i]);
  return counts;
}

std::string npy_header_bytes(const NpyWriteSpec& spec) {
  return encode_npy_header(spec.dtype, spec.shape);
}

Status write_npy(const std::string& path, const NpyWriteSpec& spec, std::uint64_t seed,
                 std::uint64_t first_element) {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status(ErrorCode::kIo, path + ": " + what + ": " + std::strerror(err));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("cannot create");
  // The shard's bytes go to the temporary file at its position; a failure keeps its errno.
  const std::string header = npy_header_bytes(spec);
  Status st = detail::write_all(fd, tmp, header.data(), header.size());
  std::uint64_t elements = 1;
  for (const auto d : spec.shape) elements *= static_cast<std::uint64_t>(d);
  constexpr std::size_t kBlock = 1 << 16;
  auto buf = std::make_unique<std::byte[]>(kBlock * spec.dtype.size);
  for (std::uint64_t e = 0; st && e < elements; e += kBlock) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kBlock, elements - e));
    synth_fill(spec.dtype, seed, first_element + e, n, buf.get());
    st = detail::write_all(fd, tmp, buf.get(), n * spec.dtype.size);
  }
  if (!st) {
    ::close(fd);
    errno = st.sys_errno();
    return fail("write failed");
  }
  if (::close(fd) != 0) return fail("close failed");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename failed");
  return Status::ok();
}

}  // namespace shardload
