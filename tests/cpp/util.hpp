// Helpers for the core tests: a scratch directory and hand-made .npy files.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardload/io.hpp"
#include "shardload/source.hpp"

namespace shardload::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "shardload-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// A .npy file with the given dict text (padded and newline-terminated here).
inline std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string d = dict;
  const std::size_t pre = major == 1 ? 10 : 12;
  while ((pre + d.size() + 1) % 64 != 0) d.push_back(' ');
  d.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  const auto len = static_cast<std::uint32_t>(d.size());
  for (std::size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) {
    out.push_back(static_cast<char>((len >> (8 * i)) & 0xFF));
  }
  return out + d + data;
}

inline std::string npy_dict(const std::string& descr, bool fortran, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!s.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

template <typename T>
T bswap_value(T v) {
  std::array<unsigned char, sizeof(T)> b{};
  std::memcpy(b.data(), &v, sizeof(T));
  std::reverse(b.begin(), b.end());
  std::memcpy(&v, b.data(), sizeof(T));
  return v;
}

// Shard i of `dir` (shard_000i.npy) holds the int32 values base, base+1, ...
// in C order with shape (rows, 3, 2): 24-byte rows. Shards written with
// consecutive bases concatenate to 0, 1, 2, ..., so any row range of the
// result must be a run of consecutive integers.
inline void write_iota_shard(const TempDir& dir, int i, std::int32_t base, std::int64_t rows,
                             bool big = false, bool fortran = false) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(rows * 6));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 2; ++b) {
        std::int32_t x = base + static_cast<std::int32_t>(r * 6 + a * 2 + b);
        if (big) x = bswap_value(x);
        // Fortran order: the first index varies fastest.
        const std::int64_t at = fortran ? r + rows * (a + 3 * b) : r * 6 + a * 2 + b;
        v[static_cast<std::size_t>(at)] = x;
      }
    }
  }
  write_file(
      dir.file(NumberPattern{"shard_", 4, ".npy"}.format(i)),
      npy_bytes(npy_dict(big ? ">i4" : "<i4", fortran, "(" + std::to_string(rows) + ", 3, 2)"),
                raw(v)));
}

// Shards that hold every byte 0..255 as bool elements (and, in `u8_dir`, the
// same bytes as uint8: the oracle, which numpy's rule turns into `u8 != 0`).
// Shard 0 is C order (64, 2, 2); shard 1 the same bytes in Fortran order;
// shard 2 is C order (3, 2, 2) starting at byte 7.
inline void write_bool_byte_shards(const TempDir& dir, const TempDir& u8_dir) {
  std::string all(256, '\0');
  for (int i = 0; i < 256; ++i) all[static_cast<std::size_t>(i)] = static_cast<char>(i);
  const struct {
    bool fortran;
    std::string shape;
    std::string data;
  } shards[] = {{false, "(64, 2, 2)", all},
                {true, "(64, 2, 2)", all},
                {false, "(3, 2, 2)", all.substr(7, 12)}};
  for (int i = 0; i < 3; ++i) {
    const auto& s = shards[i];
    const std::string name = NumberPattern{"shard_", 4, ".npy"}.format(i);
    write_file(dir.file(name), npy_bytes(npy_dict("|b1", s.fortran, s.shape), s.data));
    write_file(u8_dir.file(name), npy_bytes(npy_dict("|u1", s.fortran, s.shape), s.data));
  }
}

// An injected backend over real files: reads fail or end early once a
// number of bytes has been served (counted across threads), or come up
// short, or are interrupted.
class FaultyIo final : public IoBackend {
 public:
  enum class Mode { kNone, kErrorAfter, kEofAfter, kEintrEvery, kShortReads };
  explicit FaultyIo(Mode m = Mode::kNone, std::uint64_t after = 0) : mode_(m), after_(after) {}

  Result<int> open(const std::string& p) override { return posix_io().open(p); }
  Result<FileInfo> stat(int fd, const std::string& p) override { return posix_io().stat(fd, p); }
  void close(int fd) override { posix_io().close(fd); }
  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t off) override {
    const int call = ++calls_;
    switch (mode_) {
      case Mode::kNone:
        break;
      case Mode::kErrorAfter:
      case Mode::kEofAfter: {
        const std::uint64_t before = served_.fetch_add(n);
        if (before >= after_) return mode_ == Mode::kErrorAfter ? -EIO : 0;
        n = std::min<std::size_t>(n, after_ - before);
        break;
      }
      case Mode::kEintrEvery:
        if (call % 2 == 1) return -EINTR;
        break;
      case Mode::kShortReads:
        n = std::min<std::size_t>(n, 3);
        break;
    }
    return posix_io().pread(fd, buf, n, off);
  }

 private:
  Mode mode_;
  std::uint64_t after_;
  std::atomic<std::uint64_t> served_{0};
  std::atomic<int> calls_{0};
};

}  // namespace shardload::testing
