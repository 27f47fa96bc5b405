// Discovery from a manifest against discovery from the files, side by side in one run.
//
//   bench_manifest [--synthetic N] [--files M] [--rounds R] [--dir TMPDIR]
//
// Synthetic: a layout of N one-row shards built in memory (the files do not exist), written
// through write_manifest, then read back by read_manifest and by discover(trust_manifest):
// what a million-shard manifest costs with no per-file operation. Files: M real one-row .npy
// files, discovered by probing every file, by the manifest with its check (for .npy the
// header of each file read and compared with the manifest's, and one listing), and by the
// trusted manifest. Medians of R rounds, hot
// page cache; prints one row per case.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"

namespace {

using shardload::bench::median;
using shardload::bench::now;

double time_median(int rounds, const std::function<void()>& f) {
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const double a = now();
    f();
    t.push_back(now() - a);
  }
  return median(t);
}

void die(const shardload::Status& s) {
  std::fprintf(stderr, "bench_manifest: %s\n", s.message().c_str());
  std::exit(1);
}

std::string name(std::int64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard_%07lld.npy", static_cast<long long>(i));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t synthetic = 1000000;
  std::int64_t files = 100000;
  int rounds = 3;
  std::string tmp = std::filesystem::temp_directory_path().string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--synthetic") synthetic = std::atoll(argv[i + 1]);
    if (a == "--files") files = std::atoll(argv[i + 1]);
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (a == "--dir") tmp = argv[i + 1];
  }
  using namespace shardload;
  std::string root = tmp + "/bench-manifest-XXXXXX";
  if (::mkdtemp(root.data()) == nullptr) return 1;
  std::printf("case,shards,seconds\n");

  if (synthetic > 0) {
    const std::string dir = root + "/synthetic";
    std::filesystem::create_directory(dir);
    std::vector<Shard> shards(static_cast<std::size_t>(synthetic));
    for (std::int64_t i = 0; i < synthetic; ++i) {
      auto& s = shards[static_cast<std::size_t>(i)];
      s.path = dir + "/" + name(i);
      s.rows = 1;
      s.data_offset = 128;
      s.snapshot = {140, 1700000000000000000 + i, true, 1700000000000000000 + i,
                    static_cast<std::uint64_t>(1000 + i)};
    }
    auto layout =
        assemble_layout(Format::kNpy, {}, DType{DTypeKind::kFloat, 4}, {3}, std::move(shards));
    if (!layout) die(layout.status());
    const double w = time_median(rounds, [&] {
      if (auto p = write_manifest(*layout, dir); !p) die(p.status());
    });
    std::printf("synthetic: write_manifest,%lld,%.4f\n", static_cast<long long>(synthetic), w);
    const auto bytes = std::filesystem::file_size(manifest_path(dir));
    const double r = time_median(rounds, [&] {
      if (auto m = read_manifest(manifest_path(dir)); !m) die(m.status());
    });
    std::printf("synthetic: read_manifest,%lld,%.4f\n", static_cast<long long>(synthetic), r);
    DiscoverOptions trust;
    trust.trust_manifest = true;
    const double d = time_median(rounds, [&] {
      auto l = try_discover(Source::directory(dir), trust);
      if (!l) die(l.status());
      if (l->shards.size() != static_cast<std::size_t>(synthetic)) std::exit(2);
    });
    std::printf("synthetic: discover(trust_manifest),%lld,%.4f\n",
                static_cast<long long>(synthetic), d);
    std::printf("synthetic: manifest bytes,%lld,%llu\n", static_cast<long long>(synthetic),
                static_cast<unsigned long long>(bytes));
  }

  if (files > 0) {
    const std::string dir = root + "/files";
    std::filesystem::create_directory(dir);
    // A one-row float32 (1, 3) .npy: a 128-byte header and 12 bytes of data.
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }";
    while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
    header.push_back('\n');
    std::string npy("\x93NUMPY\x01\x00", 8);
    npy.push_back(static_cast<char>(header.size() & 0xFF));
    npy.push_back(static_cast<char>(header.size() >> 8));
    npy += header + std::string(12, '\0');
    const double c = now();
    for (std::int64_t i = 0; i < files; ++i) {
      std::FILE* f = std::fopen((dir + "/" + name(i)).c_str(), "wb");
      if (f == nullptr || std::fwrite(npy.data(), 1, npy.size(), f) != npy.size()) return 1;
      std::fclose(f);
    }
    std::printf("files: create,%lld,%.4f\n", static_cast<long long>(files), now() - c);
    DiscoverOptions probe;
    probe.use_manifest = false;
    const Source src = Source::directory(dir, "shard_{:07d}.npy");
    Layout probed;
    const double p = time_median(rounds, [&] {
      auto l = try_discover(src, probe);
      if (!l) die(l.status());
      probed = std::move(*l);
    });
    std::printf("files: discover(probe every file),%lld,%.4f\n", static_cast<long long>(files), p);
    const double w = time_median(rounds, [&] {
      if (auto m = write_manifest(probed, dir); !m) die(m.status());
    });
    std::printf("files: write_manifest,%lld,%.4f\n", static_cast<long long>(files), w);
    DiscoverOptions checked;
    const double k = time_median(rounds, [&] {
      auto l = try_discover(src, checked);
      if (!l) die(l.status());
      if (l->manifest_status.rfind("manifest: used", 0) != 0) {
        std::fprintf(stderr, "%s\n", l->manifest_status.c_str());
        std::exit(2);
      }
    });
    std::printf("files: discover(manifest + checked per file),%lld,%.4f\n",
                static_cast<long long>(files), k);
    DiscoverOptions trust;
    trust.trust_manifest = true;
    const double t = time_median(rounds, [&] {
      auto l = try_discover(src, trust);
      if (!l) die(l.status());
    });
    std::printf("files: discover(trust_manifest),%lld,%.4f\n", static_cast<long long>(files), t);
  }
  std::filesystem::remove_all(root);
  return 0;
}
