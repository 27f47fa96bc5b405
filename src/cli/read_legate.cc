// `shardload read`: loads a dataset under Legate, fences, and reports the
// layout, the plan, the time and GB/s, and a parallel verification against
// the values `shardload write` put there.
#include <chrono>
#include <iostream>
#include <optional>
#include <ostream>

#include "base/detail/bytes.hpp"
#include "cli/commands.hpp"
#include "cli/legate_start.hpp"
#include "cli/progress.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/legate.hpp"
#include "shardload/location.hpp"
#include "shardload/manifest_legate.hpp"
#include "shardload/source.hpp"
#include "shardload/verify.hpp"

namespace shardload::cli {

namespace {

// The warm-up: the smallest non-empty shard, whole, so that loading it first takes the
// runtime's one-time costs (mapper start, first launch, a reader library's start) out of the
// timing. It is the shard exactly as discovered, so every reader's metadata checks accept it
// (a shard cut to fewer rows disagrees with the file's own metadata). Skipped when even the
// smallest shard is a large part of the dataset or of the memory: that load would cost more
// than the start-up it hides. Every rank picks the same shard, as control replication needs.
std::optional<Layout> warmup_layout(const Layout& l) {
  const Shard* best = nullptr;
  for (const auto& s : l.shards) {
    if (s.rows > 0 && (best == nullptr || s.rows < best->rows)) best = &s;
  }
  if (best == nullptr) return std::nullopt;
  constexpr std::uint64_t kMaxWarmupBytes = std::uint64_t{256} << 20;
  const std::uint64_t bytes = static_cast<std::uint64_t>(best->rows) * l.row_bytes;
  if (l.shards.size() < 2 || bytes > kMaxWarmupBytes) return std::nullopt;
  auto w = assemble_layout(l.format, l.options, l.dtype, l.trailing_shape, {*best});
  if (!w) return std::nullopt;
  return std::move(w).value();
}

int run(const ReadArgs& a, std::ostream& out, std::ostream& err) {
  // One point discovers for the whole job (every rank runs this program); see
  // shardload/manifest_legate.hpp.
  std::optional<Layout> discovered;
  try {
    DiscoverOptions options = a.discovery;
    options.format = a.format;
    discovered = discover_once(a.source, a.pattern, options);
  } catch (const LayoutError&) {
    // --astype with a format that reads its stored type: the refusal that names the format.
    if (const auto src = Source::parse(a.source, a.pattern)) {
      DiscoverOptions opts;
      opts.format = a.format;
      if (auto rc = check_type_options_after_failure("read", a.type_options, *src, opts)) {
        return *rc;
      }
    }
    throw;
  }
  const Layout& layout = *discovered;
  if (auto rc = check_type_options("read", a.type_options, layout.format)) return *rc;
  // Before the warm-up, whose load would name only its one shard.
  check_legate_dims(layout);
  out << "source:         " << printable(Source::parse(a.source, a.pattern).value().describe())
      << "\n";
  if (layout.manifest_state != ManifestState::kNone &&
      layout.manifest_state != ManifestState::kAbsent) {
    out << printable_redacted(spell_options(layout.manifest_status, OptionSpelling::kCli)) << "\n";
  }
  out << describe(layout);
  auto* runtime = legate::Runtime::get_runtime();
  LoadOptions opts;
  opts.overdecompose = a.overdecompose;
  LoadInfo info;
  const auto warmup = warmup_layout(layout);
  if (warmup) (void)load(*warmup, opts);
  runtime->issue_execution_fence(true);
  std::optional<legate::LogicalArray> array;
  for (std::int64_t r = 0; r < a.repeat; ++r) {
    array.reset();  // free the previous copy before the next load allocates
    // The tasks report nothing as they end: the bar counts this process's bytes read.
    TerminalBar bar("read", layout.total_bytes());
    IoTicker ticker(&bar, false);
    const auto t0 = std::chrono::steady_clock::now();
    array = load(layout, opts, &info);
    runtime->issue_execution_fence(true);
    ticker.stop();
    bar.finish();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) {
      out << "plan:           " << info.processors << " " << info.target << " processors, K "
          << a.overdecompose << ", tile rows " << info.tile_rows << ", " << info.tiles << " tasks"
          << (warmup ? "" : " (no warm-up load: start-up costs are in the time)") << "\n";
    }
    const double gb = static_cast<double>(layout.total_bytes()) / 1e9;
    out << "load:           " << secs << " s, " << (secs > 0 ? gb / secs : 0.0) << " GB/s for "
        << detail::size_string(layout.total_bytes()) << "\n";
    // Retries are of requests: a store reached by them has a count to show.
    if (!layout.shards.empty() && path_traits(layout.shards.front().path).round_trips) {
      out << "remote retries: " << info.remote_retries << "\n";
    }
  }
  const VerifySeed v = verify_seed(a, layout, out, err);
  if (!v.seed) return v.rc;
  const std::int64_t bad = count_synth_mismatches(*array, layout, info,
                                                  static_cast<std::uint64_t>(*v.seed), v.first_row);
  return report_verify(bad, layout, v, out);
}

}  // namespace

int cmd_read(const ReadArgs& a) {
  const char* cmd = "read";
  start_legate("read");
  interrupt_on_sigint();  // again: the runtime installs a handler of its own
  RankStreams io;
  int rc = 1;
  try {
    rc = run(a, io.out, io.err);
  } catch (const Error& e) {
    // Whatever throw_status made of the failure (LayoutError, ShardReadError, ...); what an
    // interrupt made fail is reported by main as the interrupt.
    if (!interrupt_requested()) {
      io.err << "shardload " << cmd << ": error: " << e.message(OptionSpelling::kCli) << "\n";
    }
  }
  const int finish = legate::finish();
  return rc != 0 ? rc : finish;
}

}  // namespace shardload::cli
