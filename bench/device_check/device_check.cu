// The device check: in one run, on one GPU, side by side,
//   (a) the pinned host-to-device ceiling: cudaMemcpyAsync from page-locked memory;
//   (b) the naive path: the dataset read into a pageable buffer (fill_rows, one
//       thread), then cudaMemcpy to the device;
//   (c) the engine: fill_device from the page cache through the staging pool,
//       at the defaults and at a few other settings;
//   (d) with --gds, fill_device through cuFile, saying whether cuFile ran in direct or
//       compatibility mode;
// with the data of (b) and (c) checked on the GPU (a kernel's checksum against the
// host's). Prints each row as it is measured, then the ratios and whether the goals hold:
// (c) >= 80% of (a) and >= 1.5x (b). Exit status: 0 goals met, 3 goals missed, 1 a failure
// (data wrong, a CUDA or I/O error), 2 cannot run here (no CUDA device, no room for the data)
// or an invalid argument.
//
// Usage: device_check --info
//        device_check --dir DIR [--dir DIR2 ...] [--name NAME] [--gib G | --size SIZE]
//                     [--shards N] [--reps R] [--budget SECONDS] [--gds]
//        device_check --cufile-mode LIBRARY --dir DIR
// --info prints the driver, the runtime and the GPUs (exit 2 without a device). Otherwise the
// data goes to DIR/NAME for the first DIR that takes all of --gib (default 4) given the free
// space and the host and device memory left, else to the one that takes the most; NAME
// (default shardload-device-check-PID) is removed at exit. --size SIZE fixes the data's size
// instead (8 or 8G is GiB, 512M MiB; from 64 MiB to 64 GiB): host memory no longer cuts it (a
// freshly started machine may report little MemAvailable), only the free space and the
// device's memory, and a size over what host memory allows is said, not cut. Settings that would
// overrun --budget (default 240 s) are skipped and say so. stdout is line-buffered: every row is
// written as it is measured. --plan-only DEVICE_GIB only prints that choice, for a device with
// that much free memory, without touching a GPU (CI checks the sizing with it), and with it
// --plan-host-gib H assumes H GiB of host memory left instead of reading it. --check-args only
// checks the arguments (exit 0, or 2 saying what is wrong). --cufile-mode prints the (d) row's
// text for LIBRARY and a file in DIR, without a GPU or a figure (CI checks it against the
// stand-in cuFile).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cuda/detail/cufile.hpp"
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

// The data's folder, removed at exit however the program ends short of a signal (run.sh
// removes it after a time-out).
std::string g_data_dir;

void remove_data() {
  if (g_data_dir.empty()) return;
  std::error_code ec;
  fs::remove_all(g_data_dir, ec);
}

[[noreturn]] void die(int code, const std::string& what) {
  std::fflush(stdout);
  std::fprintf(stderr, "device_check: %s\n", what.c_str());
  std::exit(code);  // runs remove_data
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

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
// The data's size, fixed or capped: at least one 4 KiB row per shard of 16 and room for the
// 64 MiB copies of (a); at most what --gib always allowed.
constexpr std::uint64_t kMinBytes = 64 * kMiB;
constexpr std::uint64_t kMaxBytes = 64 * kGiB;

struct Args {
  std::vector<std::string> dirs;  // candidates, in order of preference
  std::string name;               // the data's folder inside the chosen one
  double gib = 4;                 // at most this much; less where memory or room is short
  bool gib_given = false;
  std::uint64_t size = 0;  // > 0: exactly this many bytes (--size), host memory notwithstanding
  std::string size_text;   // as given, for messages
  int shards = 16;
  int reps = 3;
  double budget = 240;  // seconds for everything after --info
  bool gds = false;
  bool info = false;
  bool check_args = false;
  std::string cufile_library;  // --cufile-mode: only describe the (d) row for this library
  double plan_device_gib = 0;  // > 0: only choose the data's size and place, for that much
  double plan_host_gib = -1;   // >= 0 with --plan-only: the host memory left to assume
};

constexpr const char* kUsage =
    "usage: device_check --info | --dir DIR [--dir DIR2 ...] [--name NAME] [--gib G | --size "
    "SIZE] [--shards N] [--reps R] [--budget SECONDS] [--gds] [--plan-only DEVICE_GIB "
    "[--plan-host-gib H]] [--check-args] | --cufile-mode LIBRARY --dir DIR";

[[noreturn]] void usage_error(const std::string& what) { die(2, what + " (" + kUsage + ")"); }

// The whole text, a plain decimal number: atof read "4x" as 4 and "x" as 0, so junk passed.
std::optional<double> parse_decimal(const std::string& text) {
  std::size_t digits = 0, dots = 0;
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++digits;
    } else if (c == '.') {
      ++dots;
    } else {
      return std::nullopt;
    }
  }
  if (digits == 0 || dots > 1) return std::nullopt;
  errno = 0;
  const double v = std::strtod(text.c_str(), nullptr);
  if (errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<long> parse_integer(const std::string& text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::strtol(text.c_str(), nullptr, 10);
}

std::string gib_text(std::uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / double(kGiB));
  return b;
}

// --size: "8", "0.5", "8G", "8GiB" (GiB), "512M", "512MiB" (MiB), the unit's case aside;
// rounded down to whole 4 KiB rows. Exit 2 naming the text and what was expected.
std::uint64_t parse_size(const std::string& text) {
  std::size_t n = 0;
  while (n < text.size() && (std::isdigit(static_cast<unsigned char>(text[n])) || text[n] == '.')) {
    ++n;
  }
  std::string unit = text.substr(n);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto value = parse_decimal(text.substr(0, n));
  double scale = 0;
  if (unit.empty() || unit == "g" || unit == "gib") {
    scale = double(kGiB);
  } else if (unit == "m" || unit == "mib") {
    scale = double(kMiB);
  }
  if (!value || scale == 0) {
    usage_error("--size '" + text +
                "': expected a size such as 8 or 0.5 (GiB), 8G, 8GiB, 512M or 512MiB");
  }
  const double bytes = *value * scale;
  if (!(bytes >= double(kMinBytes) && bytes <= double(kMaxBytes))) {
    char b[64];
    std::snprintf(b, sizeof b, "%.6g GiB", bytes / double(kGiB));
    usage_error("--size '" + text + "' is " + b + ": expected from 64 MiB to 64 GiB");
  }
  const std::uint64_t row = 4 * kWidth;
  return static_cast<std::uint64_t>(bytes) / row * row;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("missing value after " + k);
      return argv[++i];
    };
    auto decimal = [&]() {
      const std::string v = val();
      const auto d = parse_decimal(v);
      if (!d) usage_error(k + " '" + v + "': expected a number such as 4 or 0.5");
      return *d;
    };
    auto integer = [&]() {
      const std::string v = val();
      const auto n = parse_integer(v);
      if (!n) usage_error(k + " '" + v + "': expected a whole number such as 16");
      return static_cast<int>(*n);
    };
    if (k == "--dir") {
      a.dirs.push_back(val());
    } else if (k == "--name") {
      a.name = val();
    } else if (k == "--gib") {
      a.gib = decimal();
      a.gib_given = true;
    } else if (k == "--size") {
      a.size_text = val();
      a.size = parse_size(a.size_text);
    } else if (k == "--shards") {
      a.shards = integer();
    } else if (k == "--reps") {
      a.reps = integer();
    } else if (k == "--budget") {
      a.budget = decimal();
    } else if (k == "--gds") {
      a.gds = true;
    } else if (k == "--info") {
      a.info = true;
    } else if (k == "--check-args") {
      a.check_args = true;
    } else if (k == "--cufile-mode") {
      a.cufile_library = val();
      if (a.cufile_library.empty()) usage_error("--cufile-mode: expected a library");
    } else if (k == "--plan-only") {
      a.plan_device_gib = decimal();
      if (!(a.plan_device_gib > 0)) usage_error("--plan-only: expected a device size above 0");
    } else if (k == "--plan-host-gib") {
      a.plan_host_gib = decimal();
    } else {
      usage_error("unknown argument " + k);
    }
  }
  if (a.info) return a;
  if (a.dirs.empty()) usage_error("--dir is required");
  if (a.name.empty()) a.name = "shardload-device-check-" + std::to_string(::getpid());
  if (a.name.find('/') != std::string::npos || a.name == "." || a.name == "..") {
    usage_error("--name must be a folder's name, not '" + a.name + "'");
  }
  if (a.size > 0 && a.gib_given) {
    usage_error(
        "--gib and --size both given: --gib caps the size chosen by what is free, --size "
        "fixes it; pass one");
  }
  if (a.plan_host_gib >= 0 && a.plan_device_gib <= 0) {
    usage_error("--plan-host-gib goes with --plan-only");
  }
  if (!(a.gib > 0 && a.gib <= 64) || a.shards < 1 || a.shards > 4096 || a.reps < 1 ||
      !(a.budget >= 10)) {
    usage_error("out of range: --gib (0, 64], --shards [1, 4096], --reps >= 1, --budget >= 10");
  }
  return a;
}

// The part of host memory this process may still use: MemAvailable, bounded by the cgroup's
// limit where one is set (a container's limit is often far below the machine's memory).
std::uint64_t host_memory_left() {
  std::uint64_t left = mem_available();
  std::ifstream maxf("/sys/fs/cgroup/memory.max"), curf("/sys/fs/cgroup/memory.current");
  std::string max_text;
  std::uint64_t current = 0;
  if (maxf >> max_text && max_text != "max" && curf >> current) {
    const std::uint64_t limit = std::strtoull(max_text.c_str(), nullptr, 10);
    left = std::min(left, limit > current ? limit - current : 0);
  }
  return left;
}

struct Place {
  std::string dir;
  bool tmpfs = false;
  std::uint64_t free = 0;
  std::uint64_t bytes = 0;        // the most data this place allows
  std::string bound;              // what set that bound
  std::uint64_t host_allows = 0;  // what host memory alone allows
};

// How much data fits at `dir`, given the host and device memory left: (b) holds a pageable copy
// of the data, tmpfs holds the files in memory too, and (c) wants the files in the page cache;
// the device holds one copy. Headroom: 2 GiB of host memory (pinned buffers, the process),
// 1 GiB of device memory, a tenth of the file system. With `fixed` (--size) host memory bounds
// nothing: a machine just started may report little of it available, and the one who fixed the
// size knows better; free space and device memory still bound, since past them the run fails.
Place place_for(const std::string& dir, std::uint64_t cap, bool fixed, std::uint64_t host_left,
                std::uint64_t dev_free) {
  Place p;
  p.dir = dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    p.bound = "cannot statvfs";
    return p;
  }
  p.free = std::uint64_t(vfs.f_bavail) * vfs.f_frsize;
  struct statfs sfs {};
  p.tmpfs = ::statfs(dir.c_str(), &sfs) == 0 && sfs.f_type == 0x01021994;
  const std::uint64_t host = host_left > 2 * kGiB ? host_left - 2 * kGiB : 0;
  p.host_allows = host / 2;
  struct Limit {
    std::uint64_t bytes;
    const char* what;
  };
  const Limit limits[] = {
      {cap, fixed ? "--size" : "--gib"},
      {p.free / 10 * 9, "free space"},
      {fixed ? cap : p.host_allows, p.tmpfs ? "host memory (pageable copy + tmpfs files)"
                                            : "host memory (pageable copy + page cache)"},
      {dev_free > kGiB ? dev_free - kGiB : 0, "device memory"},
  };
  p.bytes = cap;
  p.bound = limits[0].what;
  for (const auto& l : limits) {
    if (l.bytes < p.bytes) {
      p.bytes = l.bytes;
      p.bound = l.what;
    }
  }
  return p;
}

// Writes the shards in parallel: float32 (rows, 1024), uneven row counts.
void write_shards(const std::string& dir, int shards, std::int64_t total_rows) {
  fs::create_directories(dir);
  const auto rows = synth_split(5, total_rows, shards);
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
      for (int i = next++; i < shards && !bad; i = next++) {
        const NpyWriteSpec spec{*parse_dtype("float32"),
                                {rows[static_cast<std::size_t>(i)], kWidth}};
        Status s = write_npy(dir + "/" + NumberPattern{"shard_", 4, ".npy"}.format(i), spec, 5,
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

// Each row is printed, and flushed, as soon as it is measured: a time-out or a crash later
// loses nothing already measured.
void row(const std::string& what, double gbps, const std::string& note) {
  if (gbps > 0) {
    std::printf("%-62s %9.2f  %s\n", what.c_str(), gbps, note.c_str());
  } else {
    std::printf("%-62s %9s  %s\n", what.c_str(), "-", note.c_str());
  }
  std::fflush(stdout);
}

// The driver, the runtime and every device, before anything can fail on them.
int print_info() {
  int driver = 0, runtime = 0;
  const cudaError_t de = cudaDriverGetVersion(&driver);
  const cudaError_t re = cudaRuntimeGetVersion(&runtime);
  std::printf("CUDA runtime %d.%d (static)", runtime / 1000, runtime % 1000 / 10);
  if (re != cudaSuccess) std::printf(" [%s]", cudaGetErrorName(re));
  if (de == cudaSuccess && driver > 0) {
    std::printf(", driver supports CUDA %d.%d\n", driver / 1000, driver % 1000 / 10);
  } else {
    std::printf(", no CUDA driver answered (%s)\n",
                de == cudaSuccess ? "version 0" : cudaGetErrorName(de));
  }
  std::fflush(stdout);
  if (Status s = cuda_device_available(); !s) {
    std::fprintf(stderr, "device_check: %s\n", s.message().c_str());
    return 2;
  }
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, d), "cudaGetDeviceProperties");
    check_cuda(cudaSetDevice(d), "cudaSetDevice");
    std::size_t free = 0, total = 0;
    check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    char bus[32];
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky; only the bus is unknown
      std::snprintf(bus, sizeof bus, "unknown");
    }
    std::printf("GPU %d: %s, compute capability %d.%d, %d SMs, %.1f GiB (%.1f GiB free), PCI %s\n",
                d, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                total / double(kGiB), free / double(kGiB), bus);
  }
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  std::fflush(stdout);
  return 0;
}

// cufile.h's CUfileDrvProps_t (the same since cuFile 1.0), declared here as cuda/detail/cufile.hpp
// declares the rest, so that the bundle needs neither the header nor the library to build. The
// reserve keeps a later library that fills a longer struct from writing past ours.
struct CuFileDrvProps {
  struct {
    unsigned int major_version;
    unsigned int minor_version;
    std::size_t poll_thresh_size;
    std::size_t max_direct_io_size;
    unsigned int dstatusflags;
    unsigned int dcontrolflags;
  } nvfs;
  unsigned int fflags;
  unsigned int max_device_cache_size;
  unsigned int per_buffer_cache_size;
  unsigned int max_device_pinned_mem_size;
  unsigned int max_batch_io_size;
  unsigned int max_batch_io_timeout_msecs;
  unsigned char reserve[256];
};
constexpr int kCuFileParamForceCompatMode = 2;  // CUFILE_PARAM_FORCE_COMPAT_MODE (cuFile 1.14)
constexpr unsigned kCuFileAllowCompatMode = 1;  // CU_FILE_ALLOW_COMPAT_MODE, a dcontrolflags bit

// The file systems nvidia-fs serves, by their bit in dstatusflags (CUfileDriverStatusFlags).
std::string served_file_systems(unsigned flags) {
  static const char* const names[] = {
      "Lustre",        "WekaFS", "NFS",    "GPFS",        "NVMe",     "NVMeOF", "SCSI",
      "ScaleFlux CSD", "NVMesh", "BeeGFS", "YRCloudFile", "NVMe P2P", "ScateFS"};
  std::string out;
  for (unsigned bit = 0; bit < 32; ++bit) {
    if ((flags & (1u << bit)) == 0) continue;
    if (!out.empty()) out += ", ";
    out += bit < std::size(names) ? names[bit] : "bit " + std::to_string(bit);
  }
  return out.empty() ? "none listed" : out;
}

std::string file_system_name(const std::string& path) {
  struct statfs sfs {};
  if (::statfs(path.c_str(), &sfs) != 0) return "an unknown file system";
  switch (static_cast<unsigned long>(sfs.f_type)) {
    case 0x01021994:
      return "tmpfs";
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x6969:
      return "nfs";
    case 0x0BD00BD0:
      return "lustre";
    case 0x794C7630:
      return "overlayfs";
    case 0x47504653:
      return "gpfs";
    case 0x19830326:
      return "beegfs";
    default: {
      char b[48];
      std::snprintf(b, sizeof b, "file system 0x%lx", static_cast<unsigned long>(sfs.f_type));
      return b;
    }
  }
}

// How cuFile reads `file` (one of the data's files), as cuFile itself reports it: whether it
// registers the file at all (else the fill stages it, no cuFile read), then direct mode (DMA
// from storage to the GPU through nvidia-fs) or compatibility mode (cuFile reads into host
// memory and copies, as staging does). nvidia-fs not loaded, force_compat_mode set in
// cufile.json, or a file on tmpfs (no O_DIRECT) each mean compatibility mode. The text starts
// with "cuFile direct mode", "cuFile compatibility mode", "cuFile declined" or "cuFile mode
// unknown".
std::string cufile_mode(const detail::CuFileApi& api, const std::string& file) {
  auto opened = detail::cufile_open(api, file);
  if (!opened) return "cuFile mode unknown: " + opened.status().message();
  if (*opened == nullptr) {
    return "cuFile declined the files (cuFileHandleRegister refused " + file_system_name(file) +
           "): the fill staged them through pinned memory, no cuFile read";
  }
  detail::cufile_close(api, *opened);

  // load_cufile left the library loaded; RTLD_NOLOAD finds it without loading another.
  void* lib = ::dlopen(api.library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) return "cuFile mode unknown: " + api.library + " is not loaded";
  using GetProperties = detail::CUfileError_t (*)(CuFileDrvProps*);
  using GetParameterBool = detail::CUfileError_t (*)(int, bool*);
  auto get_properties = reinterpret_cast<GetProperties>(::dlsym(lib, "cuFileDriverGetProperties"));
  auto get_bool = reinterpret_cast<GetParameterBool>(::dlsym(lib, "cuFileGetParameterBool"));
  ::dlclose(lib);  // only the reference RTLD_NOLOAD took: load_cufile's keeps it loaded
  if (get_properties == nullptr) {
    return "cuFile mode unknown: " + api.library + " has no cuFileDriverGetProperties";
  }
  CuFileDrvProps props{};
  const detail::CUfileError_t e = get_properties(&props);
  if (e.err != 0) {
    return "cuFile mode unknown: cuFileDriverGetProperties failed: error " + std::to_string(e.err) +
           " (CUDA driver " + std::to_string(e.cu_err) + ")";
  }
  const std::string where = file_system_name(file);
  if (props.nvfs.major_version == 0 && props.nvfs.minor_version == 0) {
    return "cuFile compatibility mode: nvidia-fs is not loaded (cuFileDriverGetProperties: "
           "version 0.0), so cuFile reads the files (on " +
           where + ") into host memory and copies them";
  }
  const std::string nvfs = "nvidia-fs " + std::to_string(props.nvfs.major_version) + "." +
                           std::to_string(props.nvfs.minor_version);
  bool forced = false;
  if (get_bool != nullptr && get_bool(kCuFileParamForceCompatMode, &forced).err != 0) {
    forced = false;  // a cuFile before 1.14 has no such parameter: not forced
  }
  if (forced) {
    return "cuFile compatibility mode: force_compat_mode is set (cufile.json), though " + nvfs +
           " is loaded";
  }
  if (where == "tmpfs") {
    return "cuFile compatibility mode: the data is on tmpfs, which has no O_DIRECT and which " +
           nvfs + " does not serve";
  }
  std::string text = "cuFile direct mode: " + nvfs + " loaded, serving " +
                     served_file_systems(props.nvfs.dstatusflags) + "; the data is on " + where;
  if (props.nvfs.dcontrolflags & (1u << kCuFileAllowCompatMode)) {
    text +=
        " (with allow_compat_mode on, a file system it does not serve runs in compatibility "
        "mode)";
  }
  return text;
}

constexpr const char* kGdsRow = "(d) fill_device through cuFile (GDS, --gds)";

// --cufile-mode LIBRARY: the (d) row's text for LIBRARY and a file in DIR/NAME, without a GPU
// or a figure.
int print_cufile_mode(const Args& a) {
  auto api = detail::load_cufile(a.cufile_library);
  if (!api) {
    row(kGdsRow, 0, api.status().message());
    return 1;
  }
  const std::string dir = a.dirs.front() + "/" + a.name;
  g_data_dir = dir;
  std::atexit(remove_data);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) die(1, dir + ": cannot create: " + ec.message());
  const std::string file = dir + "/shard_0000.npy";
  {
    std::ofstream f(file, std::ios::binary);
    const std::string block(4096, '\0');
    f.write(block.data(), static_cast<std::streamsize>(block.size()));
    if (!f) die(1, file + ": cannot write 4096 bytes");
  }
  row(kGdsRow, 0, "not measured (--cufile-mode, no GPU used); " + cufile_mode(**api, file));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Line-buffered even through a pipe (run.sh | tee): every row reaches the log as it is printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const double t_start = now();
  const Args a = parse(argc, argv);
  if (a.check_args) return 0;
  if (a.info) return print_info();
  if (!a.cufile_library.empty()) return print_cufile_mode(a);
  const bool plan_only = a.plan_device_gib > 0;
  if (!plan_only) {
    if (Status s = cuda_device_available(); !s) die(2, s.message());
  }
  const double deadline = t_start + a.budget;
  auto time_left = [&] { return deadline - now(); };

  cudaDeviceProp prop{};
  std::size_t dev_free = 0, dev_total = 0;
  if (plan_only) {
    std::snprintf(prop.name, sizeof prop.name, "(planned, no GPU used)");
    dev_free = dev_total = static_cast<std::size_t>(a.plan_device_gib * double(kGiB));
  } else {
    int dev_id = 0;
    check_cuda(cudaGetDevice(&dev_id), "cudaGetDevice");
    check_cuda(cudaGetDeviceProperties(&prop, dev_id), "cudaGetDeviceProperties");
    check_cuda(cudaMemGetInfo(&dev_free, &dev_total), "cudaMemGetInfo");
  }

  // Where the data goes and how much: the first candidate that takes all of --gib (or of
  // --size), else, for --gib only, the one that takes the most.
  const std::uint64_t row_bytes = kWidth * 4;
  const bool fixed = a.size > 0;
  const std::uint64_t cap = fixed ? a.size : static_cast<std::uint64_t>(a.gib * double(kGiB));
  const std::uint64_t host_left = a.plan_host_gib >= 0
                                      ? static_cast<std::uint64_t>(a.plan_host_gib * double(kGiB))
                                      : host_memory_left();
  std::printf("host memory left %.1f GiB%s, device memory free %.1f GiB\n",
              host_left / double(kGiB), a.plan_host_gib >= 0 ? " (--plan-host-gib)" : "",
              dev_free / double(kGiB));
  if (fixed) {
    std::printf("size: %s fixed by --size %s (host memory does not cut it)\n",
                gib_text(cap).c_str(), a.size_text.c_str());
    if (dev_free < cap + kGiB) {
      die(2, "--size " + a.size_text + " (" + gib_text(cap) + ") does not fit the device: " +
                 gib_text(dev_free) + " free, of which 1 GiB is kept for the check itself");
    }
  }
  Place best;
  for (const auto& d : a.dirs) {
    const Place p = place_for(d, cap, fixed, host_left, dev_free);
    std::printf("  candidate %s%s: %.1f GiB free, allows %.2f GiB (bound: %s)\n", d.c_str(),
                p.tmpfs ? " (tmpfs)" : "", p.free / double(kGiB), p.bytes / double(kGiB),
                p.bound.c_str());
    if (p.bytes > best.bytes) best = p;
    if (p.bytes >= cap) break;
  }
  if (fixed && best.bytes < cap) {
    die(2, "--size " + a.size_text + " (" + gib_text(cap) +
               "): no --dir has that much free space, keeping a tenth free (see the candidates "
               "above)");
  }
  if (best.bytes < kMinBytes) {
    die(2, "no room for even " + std::to_string(kMinBytes >> 20) +
               " MiB of data in any --dir (see the candidates above)");
  }
  const auto total_rows = static_cast<std::int64_t>(best.bytes / row_bytes);
  const std::uint64_t bytes = static_cast<std::uint64_t>(total_rows) * row_bytes;
  const std::string data_dir = best.dir + "/" + a.name;
  std::printf("device_check: %s (%d SMs, %.0f GiB); %.2f GiB in %d shards under %s%s\n", prop.name,
              prop.multiProcessorCount, dev_total / double(kGiB), bytes / double(kGiB), a.shards,
              data_dir.c_str(), best.tmpfs ? " (tmpfs)" : "");
  if (fixed && best.host_allows < bytes) {
    std::printf(
        "note: --size %s is more than host memory allows (%s: half of what is left less "
        "2 GiB); (b)'s pageable copy%s may not fit, and the system may swap or end the "
        "check\n",
        gib_text(bytes).c_str(), gib_text(best.host_allows).c_str(),
        best.tmpfs ? " beside the tmpfs files" : " and the page cache");
  } else if (!best.tmpfs && host_left < 2 * bytes + 2 * kGiB) {
    std::printf("note: the page cache may not hold all %.2f GB; (c) may read from the disk\n",
                bytes / kGB);
  }
  if (plan_only) return 0;

  double t = now();
  g_data_dir = data_dir;
  std::atexit(remove_data);
  write_shards(data_dir, a.shards, total_rows);
  std::printf("wrote %d shards, %.2f GB, in %.1f s; %.0f s of the budget left\n", a.shards,
              bytes / kGB, now() - t, time_left());
  auto layout = try_discover(Source::directory(data_dir));
  if (!layout) die(1, layout.status().message());
  std::vector<Piece> pieces;
  pieces_for_rows(layout->offsets, 0, layout->total_rows(), &pieces);

  void* dev = nullptr;
  check_cuda(cudaMalloc(&dev, bytes), "cudaMalloc");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  bool data_ok = true;
  bool partial = false;

  std::printf("\n%-62s %9s  %s\n", "what (best of the repetitions)", "GB/s", "");
  std::fflush(stdout);

  // (a) the ceiling: cudaMemcpyAsync from one pinned 256 MiB buffer, 64 MiB at a time,
  // over the same number of bytes.
  double ceiling = 0;
  {
    const std::size_t pinned_bytes = std::size_t{256} << 20, chunk = std::size_t{64} << 20;
    void* pinned = nullptr;
    check_cuda(cudaHostAlloc(&pinned, pinned_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    std::memset(pinned, 1, pinned_bytes);
    double best_t = 1e30;
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
      best_t = std::min(best_t, now() - t0);
    }
    check_cuda(cudaFreeHost(pinned), "cudaFreeHost");
    ceiling = bytes / best_t / kGB;
    row("(a) ceiling: cudaMemcpyAsync from pinned, 64 MiB copies", ceiling, "");
  }

  // (b) the naive path; its first read also warms the page cache and gives the host's checksum.
  std::uint64_t want = 0;
  double naive = 0;
  {
    std::unique_ptr<std::byte[]> host(new std::byte[bytes]);
    std::memset(host.get(), 0, bytes);  // fault the pages in outside the timing
    const double tw = now();
    if (Status s = fill_rows(*layout, 0, layout->total_rows(), host.get()); !s) {
      die(1, s.message());  // the warm-up read
    }
    const double warm = now() - tw;
    want = host_checksum(host.get(), bytes);
    double best_read = 1e30, best_copy = 1e30, best_total = 1e30;
    for (int r = 0; r < a.reps; ++r) {
      if (r > 0 && time_left() < 2 * best_total + 60) break;  // keep time for (c)
      const double t0 = now();
      if (Status s = fill_rows(*layout, 0, layout->total_rows(), host.get()); !s) {
        die(1, s.message());
      }
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
    char note[96];
    std::snprintf(note, sizeof note, "%s (first read %.2f GB/s, not counted)",
                  ok ? "checksum ok" : "CHECKSUM MISMATCH", bytes / warm / kGB);
    row("(b) naive: fill_rows (1 thread) to pageable + cudaMemcpy", naive, note);
    row("    of which the read", bytes / best_read / kGB, "");
    row("    of which the pageable cudaMemcpy", bytes / best_copy / kGB, "");
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
  double engine = 0, engine_best = 0;
  std::string best_setting;
  double config_time = 0;  // what the last setting took, all repetitions
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    const Config c = configs[ci];
    char what[160];
    std::snprintf(what, sizeof what, "(c) fill_device %zu MiB x %d, %d readers%s", c.mib, c.buffers,
                  c.readers, ci == 0 ? " (defaults)" : "");
    if (ci > 0 && time_left() < 1.5 * config_time + 15) {
      row(what, 0, "skipped: out of the time budget");
      partial = true;
      continue;
    }
    const double tc = now();
    auto pool = StagingPool::create(**backend, StagingOptions{c.mib << 20, c.buffers});
    if (!pool) die(1, pool.status().message());
    auto readers = ReaderThreads::create(c.readers);
    if (!readers) die(1, readers.status().message());
    DeviceFillOptions o;
    o.readers = readers->get();
    double best_t = 1e30;
    bool ok = true;
    for (int r = 0; r < a.reps; ++r) {
      check_cuda(cudaMemsetAsync(dev, 0, bytes, stream), "cudaMemsetAsync");
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const double t0 = now();
      Status s = fill_device(*layout, pieces, dev, bytes, stream, **pool, o);
      const double dt = now() - t0;
      if (!s) die(1, s.message());
      best_t = std::min(best_t, dt);
      ok = ok && device_checksum(dev, bytes) == want;
    }
    data_ok = data_ok && ok;
    const double gbps = bytes / best_t / kGB;
    if (ci == 0) engine = gbps;
    if (gbps > engine_best) {
      engine_best = gbps;
      best_setting = what;
    }
    row(what, gbps, ok ? "checksum ok" : "CHECKSUM MISMATCH");
    config_time = now() - tc;
  }

  if (a.gds) {
    CudaBackendOptions bo;
    bo.direct_reads = true;
    auto gds = CudaCopyBackend::create(bo);
    if (!gds) die(1, gds.status().message());
    if (!(*gds)->has_direct_reads()) {
      row(kGdsRow, 0, (*gds)->direct_status());
    } else if (time_left() < config_time + 15) {
      row(kGdsRow, 0, "skipped: out of the time budget");
      partial = true;
    } else {
      // The backend loaded the default library and opened its driver; the same, cached.
      auto api = detail::load_cufile();
      const std::string mode = api ? cufile_mode(**api, layout->shards.front().path)
                                   : "cuFile mode unknown: " + api.status().message();
      auto pool = StagingPool::create(**gds);
      if (!pool) die(1, pool.status().message());
      DeviceFillOptions o;
      o.direct = DirectReads::kOn;
      check_cuda(cudaMemsetAsync(dev, 0, bytes, stream), "cudaMemsetAsync");
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const double t0 = now();
      Status s = fill_device(*layout, pieces, dev, bytes, stream, **pool, o);
      const double dt = now() - t0;
      const bool ok = s && device_checksum(dev, bytes) == want;
      data_ok = data_ok && ok;
      row(kGdsRow, s ? bytes / dt / kGB : 0,
          (s ? (ok ? "checksum ok" : "CHECKSUM MISMATCH") : s.message()) + "; " + mode);
    }
  }

  const double vs_ceiling = engine / ceiling, vs_naive = engine / naive;
  const bool goals = vs_ceiling >= 0.80 && vs_naive >= 1.5;
  std::printf("\n(c) defaults / (a) ceiling: %5.1f%%  (goal >= 80%%)  %s\n", 100 * vs_ceiling,
              vs_ceiling >= 0.80 ? "met" : "MISSED");
  std::printf("(c) defaults / (b) naive:   %5.2fx  (goal >= 1.5x)  %s\n", vs_naive,
              vs_naive >= 1.5 ? "met" : "MISSED");
  std::printf("(c) best: %s: %.1f%% of (a), %.2fx (b)\n", best_setting.c_str(),
              100 * engine_best / ceiling, engine_best / naive);
  std::printf("data: %s\n", data_ok ? "every checksum matches the host's" : "MISMATCH");
  if (partial) std::printf("partial: some settings were skipped to stay within the budget\n");
  std::fflush(stdout);

  check_cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  check_cuda(cudaFree(dev), "cudaFree");
  if (!data_ok) return 1;
  return goals ? 0 : 3;
}
