// What every point task of a load spends before it reads a byte: turning the launch's
// arguments into its tile's layout and pieces. A layout of N shards is built in memory (the
// files do not exist, nothing is read), planned for P processors at overdecompose K, and each
// of the plan's tiles is prepared as the load task prepared it (the whole layout decoded and
// replanned in every point) and as it does now (the launcher cuts the layout at the tiles with
// encode_tiles, each point decodes its own tile's shards); the figures are the sum over all
// points (what the machine spends in all) and the slowest point.
//
//   bench_tile_prepare [--shards N] [--processors P] [--k K] [--reps R]
//
// Medians of R repetitions; prints one CSV row per case.
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "shardload/codec.hpp"
#include "shardload/layout.hpp"
#include "shardload/plan.hpp"

namespace {

using shardload::bench::median;
using shardload::bench::now;

[[noreturn]] void die(const shardload::Status& s) {
  std::fprintf(stderr, "bench_tile_prepare: %s\n", s.message().c_str());
  std::exit(1);
}

// Shards of uneven rows (so that tiles span shards and the plan takes no uniform shortcut),
// under one long directory, as discovery of a real dataset makes them.
shardload::Layout make_layout(std::int64_t n) {
  using namespace shardload;
  std::vector<Shard> shards(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    auto& s = shards[static_cast<std::size_t>(i)];
    char name[64];
    std::snprintf(name, sizeof name, "/data/datasets/images/train/shard_%07lld.npy",
                  static_cast<long long>(i));
    s.path = name;
    s.rows = 100 + i % 7;
    s.data_offset = 128;
    s.snapshot = {static_cast<std::uint64_t>(128 + s.rows * 12), 1700000000000000000 + i, true,
                  1700000000000000000 + i, static_cast<std::uint64_t>(1000 + i)};
  }
  auto layout =
      assemble_layout(Format::kNpy, {}, DType{DTypeKind::kFloat, 4}, {3}, std::move(shards));
  if (!layout) die(layout.status());
  return std::move(layout).value();
}

// The point task's preparation as the load task does it: decode the whole layout from the
// launch's bytes, plan it, take this tile's pieces.
std::size_t prepare_whole(std::span<const std::uint8_t> bytes, std::int64_t processors,
                          std::int64_t k, std::int64_t tile) {
  using namespace shardload;
  auto layout = decode_layout(bytes);
  if (!layout) die(layout.status());
  auto plan = plan_layout(*layout, processors, k);
  if (!plan) die(plan.status());
  return tile_pieces(*plan, layout->offsets, tile).size();
}

// The point task's preparation since the launch cuts the layout at the tiles: decode this
// tile's shards only, take their pieces.
std::size_t prepare_tile(std::span<const std::uint8_t> bytes, std::span<const std::int64_t> offsets,
                         std::int64_t tile) {
  using namespace shardload;
  auto layout = decode_tile(bytes, offsets, tile);
  if (!layout) die(layout.status());
  std::vector<Piece> pieces;
  pieces_for_rows(layout->offsets, 0, layout->total_rows(), &pieces);
  return pieces.size();
}

// The sum over every point and the slowest point, medians of `reps` repetitions.
template <typename Prepare>
void measure(const char* name, std::int64_t tiles, int reps, Prepare&& prepare) {
  std::vector<double> sums;
  std::vector<double> worst;
  std::size_t pieces = 0;
  for (int r = 0; r < reps; ++r) {
    double sum = 0;
    double slowest = 0;
    for (std::int64_t t = 0; t < tiles; ++t) {
      const double a = now();
      pieces += prepare(t);
      const double d = now() - a;
      sum += d;
      slowest = std::max(slowest, d);
    }
    sums.push_back(sum);
    worst.push_back(slowest);
  }
  if (pieces == 0) std::exit(2);
  std::printf("%s,%.4f,%.5f\n", name, median(sums), median(worst));
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t n = 100000;
  std::int64_t processors = 2;
  std::int64_t k = 64;
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--shards") n = std::atoll(argv[i + 1]);
    if (a == "--processors") processors = std::atoll(argv[i + 1]);
    if (a == "--k") k = std::atoll(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
  }
  using namespace shardload;
  const Layout layout = make_layout(n);
  auto plan = plan_layout(layout, processors, k);
  if (!plan) die(plan.status());
  const std::vector<std::uint8_t> bytes = encode_layout(layout);
  std::printf("shards,processors,k,tiles,encoded bytes\n%lld,%lld,%lld,%lld,%zu\n",
              static_cast<long long>(n), static_cast<long long>(processors),
              static_cast<long long>(k), static_cast<long long>(plan->tiles), bytes.size());
  std::vector<double> launch;
  TileEncoding tiles;
  for (int r = 0; r < reps; ++r) {
    const double a = now();
    auto e = encode_tiles(layout, *plan);
    if (!e) die(e.status());
    launch.push_back(now() - a);
    tiles = std::move(e).value();
  }
  std::printf("launcher: encode_tiles seconds,tile bytes\n%.4f,%zu\n", median(launch),
              tiles.bytes.size());
  std::printf("case,all points seconds,slowest point seconds\n");
  measure("whole layout per point", plan->tiles, reps,
          [&](std::int64_t t) { return prepare_whole(bytes, processors, k, t); });
  measure("own tile per point", plan->tiles, reps,
          [&](std::int64_t t) { return prepare_tile(tiles.bytes, tiles.offsets, t); });
  return 0;
}
