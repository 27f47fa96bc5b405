// Decode counts of the device fill: how many decode units (HDF5 chunks, Zarr chunks,
// Parquet row groups) the readers decode when one dataset is filled through the staging
// pipeline (HostCopyBackend: the pipeline without a GPU), against the dataset's unit count.
// Usage: bench_decode_count PATH [--staging-bytes B] [--buffers N] [--readers N]
//                                 [--processors P] [--overdecompose K] [--units on|off]
// With --processors, the fill runs tile by tile over the read plan for (P, K), with the
// chunk-aware tiles unless --units off.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardload/device_fill.hpp"
#include "shardload/host_copy_backend.hpp"
#include "shardload/layout.hpp"
#include "shardload/plan.hpp"

using namespace shardload;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s PATH [--staging-bytes B] [--buffers N] [--readers N] "
                 "[--processors P] [--overdecompose K] [--units on|off]\n",
                 argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  StagingOptions so;
  DeviceFillOptions fo;
  std::int64_t processors = 1, k = 1;
  bool units = true;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const std::string v = argv[i + 1];
    if (a == "--staging-bytes")
      so.buffer_bytes = std::stoull(v);
    else if (a == "--buffers")
      so.buffers = std::stoi(v);
    else if (a == "--readers")
      fo.reader_threads = std::stoi(v);
    else if (a == "--processors")
      processors = std::stoll(v);
    else if (a == "--overdecompose")
      k = std::stoll(v);
    else if (a == "--units")
      units = v == "on";
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  auto layout = try_discover_paths({path});
  if (!layout) {
    std::fprintf(stderr, "%s\n", layout.status().message().c_str());
    return 1;
  }
  const Layout& l = *layout;
  const UnitGrid grid = units ? unit_grid(l.offsets, l.shards) : UnitGrid{};
  auto plan = make_plan(l.offsets, processors, k, grid);
  if (!plan) {
    std::fprintf(stderr, "%s\n", plan.status().message().c_str());
    return 1;
  }
  HostCopyBackend backend;
  auto pool = StagingPool::create(backend, so);
  if (!pool) {
    std::fprintf(stderr, "%s\n", pool.status().message().c_str());
    return 1;
  }
  ReaderStats stats;
  fo.stats = &stats;
  int stream = 0;
  for (std::int64_t t = 0; t < plan->tiles; ++t) {
    const auto pieces = tile_pieces(*plan, l.offsets, t);
    std::vector<std::byte> dst(static_cast<std::size_t>(plan->tile_end(t) - plan->tile_begin(t)) *
                               l.row_bytes);
    Status st = fill_device(l, pieces, dst.data(), dst.size(), &stream, **pool, fo);
    if (!st) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
  }
  std::printf(
      "{\"rows\": %lld, \"unit_rows\": %lld, \"tiles\": %lld, \"tile_rows\": %lld, "
      "\"staging_bytes\": %zu, \"decodes\": %llu, \"cache_hits\": %llu}\n",
      static_cast<long long>(l.total_rows()),
      static_cast<long long>(l.shards.empty() ? 0 : l.shards[0].decode_rows),
      static_cast<long long>(plan->tiles), static_cast<long long>(plan->tile_rows), so.buffer_bytes,
      static_cast<unsigned long long>(stats.decodes.load()),
      static_cast<unsigned long long>(stats.unit_cache_hits.load()));
  return 0;
}
