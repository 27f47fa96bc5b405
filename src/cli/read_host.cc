// `shardload read` without Legate (bin/shardload-core, an install without the legate extra):
// the same report as under Legate (layout, plan, time and GB/s, the verification against the
// values `shardload write` put there), the dataset filled into host memory by the engine's
// threads (shardload/host_load.hpp).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <new>
#include <vector>

#include "base/detail/bytes.hpp"
#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "shardload/host_load.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/synth.hpp"

namespace shardload::cli {

namespace {

// Elements of the dataset that differ from synth_fill(seed), compared a bounded block at a
// time (the same values the Legate verify task computes per tile). The data begins at the
// written dataset's row `first_row` (a part of it), whose values those are.
std::int64_t count_host_mismatches(const std::byte* data, const Layout& layout, std::uint64_t seed,
                                   std::int64_t first_row) {
  const std::size_t size = layout.dtype.size;
  const std::uint64_t elements = layout.total_bytes() / size;
  const std::uint64_t skipped = static_cast<std::uint64_t>(first_row) * (layout.row_bytes / size);
  constexpr std::uint64_t kBlock = std::uint64_t{1} << 20;
  std::vector<std::byte> want(static_cast<std::size_t>(std::min(elements, kBlock)) * size);
  std::int64_t bad = 0;
  for (std::uint64_t first = 0; first < elements; first += kBlock) {
    const auto count = static_cast<std::size_t>(std::min(kBlock, elements - first));
    synth_fill(layout.dtype, seed, skipped + first, count, want.data());
    const std::byte* got = data + first * size;
    if (std::memcmp(got, want.data(), count * size) == 0) continue;
    for (std::size_t i = 0; i < count; ++i) {
      bad += std::memcmp(got + i * size, want.data() + i * size, size) != 0 ? 1 : 0;
    }
  }
  return bad;
}

}  // namespace

int cmd_read_host(const ReadArgs& a) {
  const char* cmd = "read";
  Result<Source> src = Source::parse(a.source, a.pattern);
  if (!src) return source_error(cmd, src.status());
  DiscoverOptions options = a.discovery;
  options.format = a.format;
  auto found = try_discover(*src, options);
  if (!found) {
    if (auto rc = check_type_options_after_failure(cmd, a.type_options, *src, options)) {
      return *rc;
    }
    return fail(cmd, "loading " + src->describe() + ": " + found.status().message());
  }
  const Layout& layout = *found;
  if (auto rc = check_type_options(cmd, a.type_options, layout.format)) return *rc;
  std::cout << "source:         " << printable(src->describe()) << "\n";
  if (layout.manifest_state != ManifestState::kNone &&
      layout.manifest_state != ManifestState::kAbsent) {
    std::cout << printable_redacted(spell_options(layout.manifest_status, OptionSpelling::kCli))
              << "\n";
  }
  std::cout << describe(layout);
  const std::size_t bytes = layout.total_bytes();
  std::unique_ptr<std::byte[]> data(new (std::nothrow) std::byte[std::max<std::size_t>(bytes, 1)]);
  if (!data) {
    return fail(
        cmd, "the dataset (" + detail::size_string(bytes) + ") does not fit this process's memory");
  }
  HostLoadOptions opts;
  opts.overdecompose = a.overdecompose;
  for (std::int64_t r = 0; r < a.repeat; ++r) {
    TerminalBar bar("read", bytes, layout.total_rows(), "rows");
    opts.on_tile = [&](std::int64_t, std::int64_t, std::int64_t rows_done) {
      bar.update(static_cast<std::uint64_t>(rows_done) * layout.row_bytes, rows_done);
      return true;
    };
    const auto t0 = std::chrono::steady_clock::now();
    Result<HostLoadStats> stats = host_load(layout, data.get(), opts);
    if (stats) {
      bar.finish();
    } else {
      bar.clear();
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!stats) {
      if (interrupt_requested()) return 130;
      return fail(cmd, "error: " + spell_options(stats.status().message(), OptionSpelling::kCli));
    }
    if (r == 0) {
      std::cout << "plan:           " << stats->threads << " host threads (no Legate), K "
                << a.overdecompose << ", tile rows " << stats->plan.tile_rows << ", "
                << stats->plan.tiles << " tiles\n";
    }
    const double gb = static_cast<double>(bytes) / 1e9;
    std::cout << "load:           " << secs << " s, " << (secs > 0 ? gb / secs : 0.0)
              << " GB/s for " << detail::size_string(bytes) << "\n";
  }
  const VerifySeed v = verify_seed(a, layout, std::cout, std::cerr);
  if (!v.seed) return v.rc;
  const std::int64_t bad =
      count_host_mismatches(data.get(), layout, static_cast<std::uint64_t>(*v.seed), v.first_row);
  return report_verify(bad, layout, v, std::cout);
}

}  // namespace shardload::cli
