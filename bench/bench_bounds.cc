// Same-run bounds for the load benchmark (bench/bench_load.py):
//   memcpy BYTES THREADS      copy BYTES between two pre-faulted buffers with THREADS threads
//   read THREADS FILE...      read every file whole with large positional reads, THREADS
//                             threads taking files (and 64 MiB pieces of them) from a queue
//   reread THREADS COUNT FILE read one file whole COUNT times (open, pread, close) into COUNT
//                             consecutive slices, THREADS threads: the per-file calls of `read`
//                             with a source that stays in the CPU caches, which tells the cost
//                             of the page-cache copy from memory apart from that of the calls
// Prints one line: "<seconds> <GB/s>" (median of the runs given by --reps, default 3).
#include <fcntl.h>
#include <unistd.h>

#include <sys/stat.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"

using shardload::bench::median;
using shardload::bench::now;

namespace {

double memcpy_once(std::byte* dst, const std::byte* src, std::size_t bytes, int threads) {
  const double t0 = now();
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    const std::size_t a = bytes * static_cast<std::size_t>(i) / static_cast<std::size_t>(threads);
    const std::size_t b =
        bytes * static_cast<std::size_t>(i + 1) / static_cast<std::size_t>(threads);
    pool.emplace_back([=] { std::memcpy(dst + a, src + a, b - a); });
  }
  for (auto& t : pool) t.join();
  return now() - t0;
}

struct Job {
  std::string path;
  std::uint64_t offset;
  std::uint64_t bytes;
};

double read_once(const std::vector<Job>& jobs, std::byte* dst, int threads) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const double t0 = now();
  std::vector<std::thread> pool;
  std::vector<std::uint64_t> dst_off(jobs.size() + 1, 0);
  for (std::size_t i = 0; i < jobs.size(); ++i) dst_off[i + 1] = dst_off[i] + jobs[i].bytes;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&] {
      for (std::size_t j = next++; j < jobs.size(); j = next++) {
        const int fd = ::open(jobs[j].path.c_str(), O_RDONLY);
        std::uint64_t done = 0;
        while (fd >= 0 && done < jobs[j].bytes) {
          const ssize_t got = ::pread(fd, dst + dst_off[j] + done, jobs[j].bytes - done,
                                      static_cast<off_t>(jobs[j].offset + done));
          if (got <= 0) break;
          done += static_cast<std::uint64_t>(got);
        }
        if (fd >= 0) ::close(fd);
        if (done != jobs[j].bytes) failed = true;
      }
    });
  }
  for (auto& t : pool) t.join();
  if (failed) {
    std::fprintf(stderr, "bench_bounds: a read failed\n");
    std::exit(1);
  }
  return now() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  int reps = 3;
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--reps") {
      reps = std::atoi(args[i + 1].c_str());
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      break;
    }
  }
  if (args.size() >= 3 && args[0] == "memcpy") {
    const auto bytes = static_cast<std::size_t>(std::atoll(args[1].c_str()));
    const int threads = std::atoi(args[2].c_str());
    auto src = std::unique_ptr<std::byte[]>(new std::byte[bytes]);
    auto dst = std::unique_ptr<std::byte[]>(new std::byte[bytes]);
    std::memset(src.get(), 1, bytes);
    std::memset(dst.get(), 2, bytes);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) t.push_back(memcpy_once(dst.get(), src.get(), bytes, threads));
    std::printf("%.6f %.3f\n", median(t), static_cast<double>(bytes) / median(t) / 1e9);
    return 0;
  }
  if (args.size() >= 3 && args[0] == "read") {
    const int threads = std::atoi(args[1].c_str());
    std::vector<Job> jobs;
    std::uint64_t total = 0;
    constexpr std::uint64_t kPiece = std::uint64_t{64} << 20;
    for (std::size_t i = 2; i < args.size(); ++i) {
      struct stat st {};
      if (::stat(args[i].c_str(), &st) != 0) {
        std::perror(args[i].c_str());
        return 1;
      }
      const auto size = static_cast<std::uint64_t>(st.st_size);
      for (std::uint64_t off = 0; off < size; off += kPiece) {
        jobs.push_back({args[i], off, std::min(kPiece, size - off)});
      }
      total += size;
    }
    auto dst = std::unique_ptr<std::byte[]>(new std::byte[total]);
    std::memset(dst.get(), 0, total);
    // One timed run per call: the caller controls the page cache between runs.
    const double t = read_once(jobs, dst.get(), threads);
    std::printf("%.6f %.3f\n", t, static_cast<double>(total) / t / 1e9);
    return 0;
  }
  if (args.size() == 4 && args[0] == "reread") {
    const int threads = std::atoi(args[1].c_str());
    const auto count = static_cast<std::size_t>(std::atoll(args[2].c_str()));
    struct stat st {};
    if (::stat(args[3].c_str(), &st) != 0) {
      std::perror(args[3].c_str());
      return 1;
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const std::vector<Job> jobs(count, Job{args[3], 0, size});
    auto dst = std::unique_ptr<std::byte[]>(new std::byte[size * count]);
    std::memset(dst.get(), 0, size * count);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) t.push_back(read_once(jobs, dst.get(), threads));
    std::printf("%.6f %.3f\n", median(t), static_cast<double>(size * count) / median(t) / 1e9);
    return 0;
  }
  std::fprintf(stderr,
               "usage: bench_bounds [--reps R] memcpy BYTES THREADS | read THREADS FILE... | "
               "reread THREADS COUNT FILE\n");
  return 2;
}
