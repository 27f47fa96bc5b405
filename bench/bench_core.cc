// Core benchmarks, each compared side by side with its bound in one run:
//  1. discovery of many small shards (hot page cache);
//  2. host fill of a whole dataset from the page cache, against plain
//     positional reads of the same bytes into the same buffer.
// Usage: bench_core [--dir DIR] [--shards N] [--fill-mib M] [--reps R]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/synth.hpp"

using namespace shardload;
namespace fs = std::filesystem;

using shardload::bench::median;
using shardload::bench::now;

namespace {

void die(const Status& s) {
  std::fprintf(stderr, "bench_core: %s\n", s.message().c_str());
  std::exit(1);
}

// Writes `n` shards of deterministic float32 rows (width 8) unless present.
void make_set(const std::string& dir, int n, std::int64_t total_rows) {
  fs::create_directories(dir);
  const NumberPattern p{"shard_", 4, ".npy"};
  if (fs::exists(dir + "/" + p.format(n - 1)) && !fs::exists(dir + "/" + p.format(n))) return;
  for (const auto& e : fs::directory_iterator(dir)) fs::remove(e.path());
  const auto rows = synth_split(7, total_rows, n);
  std::uint64_t first = 0;
  for (int i = 0; i < n; ++i) {
    NpyWriteSpec spec{*parse_dtype("float32"), {rows[static_cast<std::size_t>(i)], 8}};
    if (Status s = write_npy(dir + "/" + p.format(i), spec, 7, first * 8); !s) die(s);
    first += static_cast<std::uint64_t>(rows[static_cast<std::size_t>(i)]);
  }
}

// The bound: one pread per shard straight into the destination.
double raw_reads(const Layout& l, std::byte* dst) {
  const double t0 = now();
  std::byte* out = dst;
  for (const auto& s : l.shards) {
    const int fd = ::open(s.path.c_str(), O_RDONLY);
    std::size_t left = static_cast<std::size_t>(s.rows) * l.row_bytes;
    std::uint64_t off = s.data_offset;
    while (left > 0) {
      const ssize_t got = ::pread(fd, out, left, static_cast<off_t>(off));
      if (got <= 0) {
        std::perror("pread");
        std::exit(1);
      }
      out += got;
      off += static_cast<std::uint64_t>(got);
      left -= static_cast<std::size_t>(got);
    }
    ::close(fd);
  }
  return now() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "bench-data/core";
  int shards = 10000;
  std::int64_t fill_mib = 1024;
  int reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    if (a == "--shards") shards = std::atoi(argv[i + 1]);
    if (a == "--fill-mib") fill_mib = std::atoll(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
  }

  // 1. Discovery.
  const std::string small = dir + "/small";
  make_set(small, shards, std::int64_t{shards} * 100);
  std::vector<double> disc;
  Layout l;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = now();
    auto res = try_discover(Source::directory(small));
    const double dt = now() - t0;
    if (!res) die(res.status());
    if (r > 0) disc.push_back(dt);  // the first run warms the page cache
    l = std::move(res).value();
  }
  std::printf("discovery: %zu shards, median %.3f s over %d runs (%.1f us per shard)\n",
              l.shards.size(), median(disc), reps, median(disc) / l.shards.size() * 1e6);

  // 2. Host fill against positional reads.
  const std::string big = dir + "/big";
  const std::int64_t rows = fill_mib * (1 << 20) / 32;
  make_set(big, 16, rows);
  auto lb = try_discover(Source::directory(big));
  if (!lb) die(lb.status());
  const std::size_t bytes = lb->total_bytes();
  auto dst = std::unique_ptr<std::byte[]>(new std::byte[bytes]);
  std::memset(dst.get(), 0, bytes);  // fault the pages in before timing
  raw_reads(*lb, dst.get());         // warm the page cache
  std::vector<double> raw;
  std::vector<double> fill;
  for (int r = 0; r < reps; ++r) {
    raw.push_back(raw_reads(*lb, dst.get()));
    const double t0 = now();
    if (Status s = fill_rows(*lb, 0, lb->total_rows(), dst.get()); !s) die(s);
    fill.push_back(now() - t0);
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf("host fill: %.2f GB in %zu shards, %d interleaved runs (medians)\n", gb,
              lb->shards.size(), reps);
  std::printf("  positional-read bound: %.3f s  %.2f GB/s\n", median(raw), gb / median(raw));
  std::printf("  shardload fill_rows:   %.3f s  %.2f GB/s\n", median(fill), gb / median(fill));
  std::printf("  fill / bound:          %.1f%%\n", 100.0 * median(raw) / median(fill));
  return 0;
}
