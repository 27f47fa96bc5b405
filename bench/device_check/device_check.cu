// The device check: in one run, on one GPU, side by side,
//   (a) the pinned host-to-device ceiling: cudaMemcpyAsync from page-locked memory;
//   (b) the naive path: the dataset read into a pageable buffer (fill_rows, one
//       thread), then cudaMemcpy to the device;
//   (c) the engine: fill_device from the page cache through the staging pool,
//       at the defaults and at a few other settings;
// with the data of (b) and (c) checked on the GPU (a kernel's checksum against the
// host's). Prints a table, the ratios and whether the goals hold: (c) >= 80% of (a)
// and >= 1.5x (b). Exit status: 0 goals met, 3 goals missed, 1 data wrong, 2 cannot
// run here (no CUDA device, not enough memory or disk).
//
// Usage: device_check --dir DIR [--gib G] [--shards N] [--reps R] [--gds]
#include <cuda_runtime.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardload/cuda_backend.hpp"
#include "shardload/device_fill.hpp"
#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/synth.hpp"

using namespace shardload;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kWidth = 1024;  // float32 columns: 4 KiB rows
constexpr double kGB = 1e9;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(int code, const std::string& what) {
  std::fprintf(stderr, "device_check: %s\n", what.c_str());
  std::exit(code);
}

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) {
    die(1, std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }
}

// A position-dependent checksum of 64-bit words, the same on host and device,
// so that a chunk copied to the wrong offset changes it.
__host__ __device__ inline std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

__global__ void checksum_kernel(const std::uint64_t* w, std::size_t n, unsigned long long* out) {
  std::uint64_t acc = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    acc += mix(w[i] + i * 0x9E3779B97F4A7C15ULL);
  }
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xFFFFFFFFu, acc, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, static_cast<unsigned long long>(acc));
}

std::uint64_t device_checksum(const void* dev, std::size_t bytes) {
  unsigned long long* out = nullptr;
  check_cuda(cudaMalloc(&out, sizeof(*out)), "cudaMalloc");
  check_cuda(cudaMemset(out, 0, sizeof(*out)), "cudaMemset");
  checksum_kernel<<<1024, 256>>>(static_cast<const std::uint64_t*>(dev), bytes / 8, out);
  check_cuda(cudaGetLastError(), "checksum_kernel launch");
  unsigned long long v = 0;
  check_cuda(cudaMemcpy(&v, out, sizeof(v), cudaMemcpyDeviceToHost), "cudaMemcpy checksum");
  check_cuda(cudaFree(out), "cudaFree");
  return v;
}

std::uint64_t host_checksum(const std::byte* p, std::size_t bytes) {
  const std::size_t n = bytes / 8;
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::uint64_t> part(threads, 0);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::uint64_t acc = 0;
      for (std::size_t i = n * t / threads; i < n * (t + 1) / threads; ++i) {
        std::uint64_t w;
        std::memcpy(&w, p + i * 8, 8);
        acc += mix(w + i * 0x9E3779B97F4A7C15ULL);
      }
      part[t] = acc;
    });
  }
  for (auto& t : pool) t.join();
  std::uint64_t sum = 0;
  for (auto v : part) sum += v;
  return sum;
}

std::uint64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

struct Args {
  std::string dir;
  double gib = 8;
  int shards = 16;
  int reps = 3;
  bool gds = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(2, "missing value after " + k);
      return argv[++i];
    };
    if (k == "--dir")
      a.dir = val();
    else if (k == "--gib")
      a.gib = std::atof(val().c_str());
    else if (k == "--shards")
      a.shards = std::atoi(val().c_str());
    else if (k == "--reps")
      a.reps = std::atoi(val().c_str());
    else if (k == "--gds")
      a.gds = true;
    else
      die(2, "unknown argument " + k +
                 " (usage: --dir DIR [--gib G] [--shards N] "
                 "[--reps R] [--gds])");
  }
  if (a.dir.empty()) die(2, "--dir is required");
  if (!(a.gib > 0 && a.gib <= 64) || a.shards < 1 || a.shards > 4096 || a.reps < 1) {
    die(2, "out of range: --gib (0, 64], --shards [1, 4096], --reps >= 1");
  }
  return a;
}

// Writes the shards in parallel: float32 (rows, 1024), uneven row counts.
void write_shards(const Args& a, std::int64_t total_rows) {
  fs::create_directories(a.dir);
  const auto rows = synth_split(5, total_rows, a.shards);
  std::vector<std::uint64_t> first(rows.size(), 0);
  for (std::size_t i = 1; i < rows.size(); ++i) {
    first[i] = first[i - 1] + static_cast<std::uint64_t>(rows[i - 1] * kWidth);
  }
  std::atomic<int> next{0};
  std::atomic<bool> bad{false};
  std::string error;
  std::mutex mu;
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < a.shards && !bad; i = next++) {
        const NpyWriteSpec spec{*parse_dtype("float32"),
                                {rows[static_cast<std::size_t>(i)], kWidth}};
        Status s = write_npy(a.dir + "/" + NumberPattern{"shard_", 4, ".npy"}.format(i), spec, 5,
                             first[static_cast<std::size_t>(i)]);
        if (!s) {
          std::lock_guard lk(mu);
          error = s.message();
          bad = true;
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  if (bad) die(1, error);
}

struct Row {
  std::string what;
  double gbps = 0;
  std::string note;
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (Status s = cuda_device_available(); !s) die(2, s.message());
  int dev_id = 0;
  check_cuda(cudaGetDevice(&dev_id), "cudaGetDevice");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, dev_id), "cudaGetDeviceProperties");

  const auto total_rows =
      static_cast<std::int64_t>(a.gib * double(1ULL << 30) / double(kWidth * 4));
  const std::uint64_t bytes = static_cast<std::uint64_t>(total_rows) * kWidth * 4;

  // Room first: the files, a pageable copy of the data for (b), the device buffer.
  fs::create_directories(a.dir);
  struct statvfs vfs {};
  if (::statvfs(a.dir.c_str(), &vfs) != 0) die(2, a.dir + ": cannot statvfs");
  const std::uint64_t disk_free = std::uint64_t(vfs.f_bavail) * vfs.f_frsize;
  struct statfs sfs {};
  const bool tmpfs = ::statfs(a.dir.c_str(), &sfs) == 0 && sfs.f_type == 0x01021994;
  const std::uint64_t host_need = bytes + (tmpfs ? bytes : 0) + (std::uint64_t{2} << 30);
  std::size_t dev_free = 0, dev_total = 0;
  check_cuda(cudaMemGetInfo(&dev_free, &dev_total), "cudaMemGetInfo");
  if (disk_free < bytes + bytes / 20) {
    die(2, a.dir + ": " + std::to_string(disk_free >> 20) + " MiB free, need " +
               std::to_string((bytes + bytes / 20) >> 20) + " (lower --gib)");
  }
  if (mem_available() < host_need) {
    die(2, "host memory: " + std::to_string(mem_available() >> 20) + " MiB available, need " +
               std::to_string(host_need >> 20) + " (lower --gib)");
  }
  if (dev_free < bytes + (std::uint64_t{1} << 30)) {
    die(2, "device memory: " + std::to_string(dev_free >> 20) + " MiB free, need " +
               std::to_string((bytes >> 20) + 1024) + " (lower --gib)");
  }
  if (!tmpfs && mem_available() < 2 * bytes + (std::uint64_t{2} << 30)) {
    std::fprintf(stderr,
                 "device_check: warning: the page cache may not hold all %.1f GB; "
                 "(c) may read from the disk\n",
                 bytes / kGB);
  }

  std::printf("device_check: %s (%d SMs, %.0f GiB), %s%s\n", prop.name, prop.multiProcessorCount,
              dev_total / double(1ULL << 30), a.dir.c_str(), tmpfs ? " (tmpfs)" : "");
  double t = now();
  write_shards(a, total_rows);
  std::printf("wrote %d shards, %.2f GB, in %.1f s\n", a.shards, bytes / kGB, now() - t);
  auto layout = discover(Source::dir(a.dir));
  if (!layout) die(1, layout.status().message());
  std::vector<Piece> pieces;
  pieces_for_rows(layout->offsets, 0, layout->total_rows(), &pieces);

  void* dev = nullptr;
  check_cuda(cudaMalloc(&dev, bytes), "cudaMalloc");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<Row> rows;
  bool data_ok = true;

  // (b) first: it also warms the page cache and gives the host's checksum.
  std::uint64_t want = 0;
  double naive = 0;
  {
    std::unique_ptr<std::byte[]> host(new std::byte[bytes]);
    std::memset(host.get(), 0, bytes);  // fault the pages in outside the timing
    if (Status s = fill_rows(*layout, 0, layout->total_rows(), host.get()); !s) {
      die(1, s.message());  // the warm-up read
    }
    want = host_checksum(host.get(), bytes);
    double best_read = 1e30, best_copy = 1e30, best_total = 1e30;
    for (int r = 0; r < a.reps; ++r) {
      const double t0 = now();
      if (Status s = fill_rows(*layout, 0, layout->total_rows(), host.get()); !s)
        die(1, s.message());
      const double t1 = now();
      check_cuda(cudaMemcpy(dev, host.get(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
      const double t2 = now();
      best_read = std::min(best_read, t1 - t0);
      best_copy = std::min(best_copy, t2 - t1);
      best_total = std::min(best_total, t2 - t0);
    }
    const bool ok = device_checksum(dev, bytes) == want;
    data_ok = data_ok && ok;
    naive = bytes / best_total / kGB;
    rows.push_back({"(b) naive: fill_rows (1 thread) to pageable + cudaMemcpy", naive,
                    ok ? "checksum ok" : "CHECKSUM MISMATCH"});
    rows.push_back({"    of which the read", bytes / best_read / kGB, ""});
    rows.push_back({"    of which the pageable cudaMemcpy", bytes / best_copy / kGB, ""});
  }

  // (a) the ceiling: cudaMemcpyAsync from one pinned 256 MiB buffer, 64 MiB at a time,
  // over the same number of bytes.
  double ceiling = 0;
  {
    const std::size_t pinned_bytes = std::size_t{256} << 20, chunk = std::size_t{64} << 20;
    void* pinned = nullptr;
    check_cuda(cudaHostAlloc(&pinned, pinned_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    std::memset(pinned, 1, pinned_bytes);
    double best = 1e30;
    for (int r = 0; r < a.reps; ++r) {
      const double t0 = now();
      for (std::uint64_t off = 0; off < bytes; off += chunk) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, bytes - off));
        check_cuda(cudaMemcpyAsync(static_cast<char*>(dev) + off,
                                   static_cast<char*>(pinned) + off % pinned_bytes, n,
                                   cudaMemcpyHostToDevice, stream),
                   "cudaMemcpyAsync");
      }
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      best = std::min(best, now() - t0);
    }
    check_cuda(cudaFreeHost(pinned), "cudaFreeHost");
    ceiling = bytes / best / kGB;
    rows.insert(rows.begin(),
                {"(a) ceiling: cudaMemcpyAsync from pinned, 64 MiB copies", ceiling, ""});
  }

  // (c) the engine, at its defaults (the goal) and a few other settings.
  auto backend = CudaCopyBackend::create();
  if (!backend) die(1, backend.status().message());
  struct Config {
    std::size_t mib;
    int buffers;
    int readers;
  };
  const StagingOptions defaults;
  const DeviceFillOptions default_fill;
  std::vector<Config> configs = {
      {defaults.buffer_bytes >> 20, defaults.buffers, default_fill.reader_threads},
      {4, 16, 8},
      {16, 16, 8},
      {8, 8, 4},
      {8, 24, 12},
  };
  double engine = 0;
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    const Config c = configs[ci];
    auto pool = StagingPool::create(**backend, StagingOptions{c.mib << 20, c.buffers});
    if (!pool) die(1, pool.status().message());
    auto readers = ReaderThreads::create(c.readers);
    if (!readers) die(1, readers.status().message());
    DeviceFillOptions o;
    o.readers = readers->get();
    double best = 1e30;
    bool ok = true;
    for (int r = 0; r < a.reps; ++r) {
      check_cuda(cudaMemsetAsync(dev, 0, bytes, stream), "cudaMemsetAsync");
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const double t0 = now();
      Status s = fill_device(*layout, pieces, dev, bytes, stream, **pool, o);
      const double dt = now() - t0;
      if (!s) die(1, s.message());
      best = std::min(best, dt);
      ok = ok && device_checksum(dev, bytes) == want;
    }
    data_ok = data_ok && ok;
    const double gbps = bytes / best / kGB;
    if (ci == 0) engine = gbps;
    char what[160];
    std::snprintf(what, sizeof what, "(c) fill_device %zu MiB x %d, %d readers%s", c.mib, c.buffers,
                  c.readers, ci == 0 ? " (defaults)" : "");
    rows.push_back({what, gbps, ok ? "checksum ok" : "CHECKSUM MISMATCH"});
  }

  if (a.gds) {
    CudaBackendOptions bo;
    bo.direct_reads = true;
    auto gds = CudaCopyBackend::create(bo);
    if (!gds) die(1, gds.status().message());
    if (!(*gds)->has_direct_reads()) {
      rows.push_back({"(d) fill_device with cuFile direct reads", 0, (*gds)->direct_status()});
    } else {
      auto pool = StagingPool::create(**gds);
      if (!pool) die(1, pool.status().message());
      DeviceFillOptions o;
      o.direct = DirectReads::kOn;
      check_cuda(cudaMemsetAsync(dev, 0, bytes, stream), "cudaMemsetAsync");
      const double t0 = now();
      Status s = fill_device(*layout, pieces, dev, bytes, stream, **pool, o);
      const double dt = now() - t0;
      const bool ok = s && device_checksum(dev, bytes) == want;
      data_ok = data_ok && ok;
      rows.push_back({"(d) fill_device with cuFile direct reads", s ? bytes / dt / kGB : 0,
                      s ? (ok ? "checksum ok" : "CHECKSUM MISMATCH") : s.message()});
    }
  }

  std::printf("\n%-62s %9s  %s\n", "what", "GB/s", "");
  for (const auto& r : rows)
    std::printf("%-62s %9.2f  %s\n", r.what.c_str(), r.gbps, r.note.c_str());
  const double vs_ceiling = engine / ceiling, vs_naive = engine / naive;
  const bool goals = vs_ceiling >= 0.80 && vs_naive >= 1.5;
  std::printf("\n(c) defaults / (a) ceiling: %5.1f%%  (goal >= 80%%)  %s\n", 100 * vs_ceiling,
              vs_ceiling >= 0.80 ? "met" : "MISSED");
  std::printf("(c) defaults / (b) naive:   %5.2fx  (goal >= 1.5x)  %s\n", vs_naive,
              vs_naive >= 1.5 ? "met" : "MISSED");
  std::printf("data: %s\n", data_ok ? "every checksum matches the host's" : "MISMATCH");

  cudaStreamDestroy(stream);
  cudaFree(dev);
  if (!data_ok) return 1;
  return goals ? 0 : 3;
}
