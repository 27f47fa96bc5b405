// Helpers for the core tests: a scratch directory and hand-made .npy files.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
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

#ifdef SHARDLOAD_TEST_PYTHON
// Runs `script` (a test's oracle writer: numpy, h5py, zarr, pyarrow) from a file in `dir` as
// `python write.py out_dir`, with the Python the build found; whether it exited 0.
inline bool run_python_writer(const TempDir& dir, const std::string& script,
                              const std::string& out_dir) {
  const std::string file = dir.file("write.py");
  std::ofstream(file) << script;
  const std::string cmd =
      std::string("'") + SHARDLOAD_TEST_PYTHON + "' '" + file + "' '" + out_dir + "'";
  const bool ok = std::system(cmd.c_str()) == 0;
  std::filesystem::remove(file);
  return ok;
}
#endif

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

// Ways a file changes under a reader.
enum class Change {
  kAppend,          // bytes added at the end: the size differs
  kRewriteInPlace,  // the last bytes rewritten (inverted), size and mtime put back:
                    // only ctime tells
  kTouchInPlace,    // the same bytes written back, size and mtime put back: the
                    // content is as before, only ctime tells
  kTruncate,        // cut to half its size
  kRenameOver,      // a copy renamed over the path: another inode
};

inline void read_whole(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  ASSERT_TRUE(f.good() || f.eof()) << path;
}

// Changes `path` as `how` says. A rewrite puts mtime back and then waits for
// ctime to have moved (each utimensat sets it to the current time), so that
// the change is one that only ctime can show, whatever the clock's
// granularity.
inline void change_file(const std::string& path, Change how) {
  struct ::stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0) << path;
  std::string bytes;
  switch (how) {
    case Change::kAppend: {
      std::ofstream f(path, std::ios::binary | std::ios::app);
      f << "appended";
      ASSERT_TRUE(f.good());
      break;
    }
    case Change::kTruncate:
      ASSERT_EQ(::truncate(path.c_str(), before.st_size / 2), 0);
      break;
    case Change::kRenameOver: {
      read_whole(path, &bytes);
      write_file(path + ".new", bytes);
      ASSERT_EQ(::rename((path + ".new").c_str(), path.c_str()), 0);
      break;
    }
    case Change::kRewriteInPlace:
    case Change::kTouchInPlace: {
      read_whole(path, &bytes);
      const std::size_t n = std::min<std::size_t>(bytes.size(), 16);
      std::string tail = bytes.substr(bytes.size() - n);
      if (how == Change::kRewriteInPlace) {
        for (auto& c : tail) c = static_cast<char>(~c);
      }
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::pwrite(fd, tail.data(), n, static_cast<off_t>(bytes.size() - n)),
                static_cast<ssize_t>(n));
      ::close(fd);
      const struct timespec times[2] = {{0, UTIME_OMIT}, before.st_mtim};
      struct ::stat after {};
      do {
        ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
        ASSERT_EQ(::stat(path.c_str(), &after), 0);
      } while (after.st_ctim.tv_sec == before.st_ctim.tv_sec &&
               after.st_ctim.tv_nsec == before.st_ctim.tv_nsec);
      ASSERT_EQ(after.st_size, before.st_size);
      ASSERT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
      ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
      break;
    }
  }
}

// An injected backend over real files that changes one file in the middle of
// a read: on the `at`-th call (counted from 1) of pread, or of stat for
// readers whose reads go through a library (the stat of the check when the
// file is opened, so the change lands after that check and before the
// library reads), it changes `target` once and then serves the call. Reads
// are served at most `max_read` bytes at a time, so that one read of a
// range takes several calls and the change lands inside it.
class ChangingIo final : public IoBackend {
 public:
  enum class On { kPread, kStat };
  ChangingIo(std::string target, Change how, On on = On::kPread, int at = 2,
             std::size_t max_read = 24)
      : target_(std::move(target)), how_(how), on_(on), at_(at), max_read_(max_read) {}

  Result<int> open(const std::string& p) override { return posix_io().open(p); }
  Result<FileInfo> stat(int fd, const std::string& p) override {
    auto r = posix_io().stat(fd, p);
    if (on_ == On::kStat && ++calls_ == at_) change();
    return r;
  }
  void close(int fd) override { posix_io().close(fd); }
  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t off) override {
    if (on_ == On::kPread && ++calls_ == at_) change();
    return posix_io().pread(fd, buf, std::min(n, max_read_), off);
  }
  [[nodiscard]] bool changed() const { return changed_.load(); }

 private:
  void change() {
    change_file(target_, how_);
    changed_.store(true);
  }
  std::string target_;
  Change how_;
  On on_;
  int at_;
  std::size_t max_read_;
  std::atomic<int> calls_{0};
  std::atomic<bool> changed_{false};
};

// Counts every operation made through the backend (the real files behind it).
class CountingIo final : public IoBackend {
 public:
  Result<int> open(const std::string& p) override {
    ++opens;
    return posix_io().open(p);
  }
  Result<FileInfo> stat(int fd, const std::string& p) override {
    ++stats;
    return posix_io().stat(fd, p);
  }
  Result<FileInfo> stat_path(const std::string& p) override {
    ++path_stats;
    return posix_io().stat_path(p);
  }
  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t off) override {
    ++preads;
    return posix_io().pread(fd, buf, n, off);
  }
  void close(int fd) override { posix_io().close(fd); }
  [[nodiscard]] int total() const { return opens + stats + path_stats + preads; }
  int opens = 0, stats = 0, path_stats = 0, preads = 0;
};

}  // namespace shardload::testing
