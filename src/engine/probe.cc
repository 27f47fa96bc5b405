#include "engine/detail/probe.hpp"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/detail/links.hpp"
#include "engine/detail/lanes.hpp"
#include "shardload/formats.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/shard_source.hpp"

namespace shardload::detail {

std::string anchored_path(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.find("://") != std::string::npos ||
      !path_traits(path).kernel_files) {
    return path;
  }
  std::string cwd(PATH_MAX + 1, '\0');
  if (::getcwd(cwd.data(), cwd.size()) == nullptr) return path;
  cwd.resize(std::char_traits<char>::length(cwd.c_str()));
  if (cwd.back() != '/') cwd += '/';
  return cwd + path;
}

unsigned probe_threads(const FormatDescriptor* d, const ReaderContext& ctx, std::size_t count,
                       unsigned requested, bool remote) {
  if (requested > 0) return static_cast<unsigned>(std::min<std::size_t>(requested, count));
  if (ctx.source != nullptr && ctx.source != ShardSource::files()) return 1;
  if (d == nullptr || !d->capabilities.parallel_probe) return 1;
  if (remote) {
    return static_cast<unsigned>(std::clamp<std::size_t>(count, 1, kRemoteProbeThreads));
  }
  // Each probe is an open, an fstat, one small read and a close: from the page cache a few
  // microseconds of CPU, so threads pay off only for many shards; on a network file system
  // each is a round trip, so more threads than cores keep the server busy.
  constexpr std::size_t kShardsPerThread = 512;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t by_count = count / kShardsPerThread;
  return static_cast<unsigned>(std::clamp<std::size_t>(by_count, 1, std::max(4u, cores)));
}

namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A remote Zarr store's chunk objects are judged by their Last-Modified against the server's
// Date when its metadata was read (Shard::server_snapshot_s), both in whole seconds: a chunk
// written later in that same second would pass. So discovery returns only once that second is
// over on the server's clock, and every write after it has a later Last-Modified. The answer
// that carried the Date was sent by the time it arrived (`arrived`, this host's steady clock),
// so its second was over a second after that at the latest; 50 ms more for clocks that run a
// little apart. Probing takes that second anyway where it lasts longer; a small store waits
// for most of it. kIo (ECANCELED) where an interrupt ends the wait.
Status wait_out_server_second(std::int64_t arrived) {
  if (arrived == 0) return Status::ok();
  const std::int64_t until = arrived + 1'050'000'000;
  while (!interrupt_requested()) {
    const std::int64_t left = until - steady_ns();
    if (left <= 0) return Status::ok();
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<std::int64_t>(left, 20'000'000)));
  }
  return Status(ErrorCode::kIo, "discovery stopped: interrupted").with_errno(ECANCELED);
}

}  // namespace

Result<ProbeResults> probe_shards(const std::vector<std::string>& paths, Format format,
                                  const FormatOptions& options, const ReaderContext& ctx,
                                  unsigned threads) {
  const std::size_t n = paths.size();
  ProbeResults out(n);
  // Each shard's position among the shards of its directory (ShardReader::probe_at), keyed as
  // a reader keys its sidecar: the directory the kernel resolves, however it is spelled
  // ("D/a.bin", "E/../D/b.bin"), whose sidecar's "rows" list counts its shards together.
  std::vector<std::size_t> position(n);
  {
    std::map<std::string, std::string> key_of;  // asked once per spelling
    std::map<std::string, std::size_t> seen;
    for (std::size_t i = 0; i < n; ++i) {
      auto [spelled, fresh] = key_of.try_emplace(directory_key(paths[i]));
      if (fresh) {
        spelled->second = ctx.source == nullptr || ctx.source->traits(paths[i]).kernel_files
                              ? detail::resolved_directory_key(spelled->first)
                              : spelled->first;
      }
      position[i] = seen[spelled->second]++;
    }
  }
  // Each lane has a reader of its own: readers keep scratch and caches (the first's siblings
  // share what is the same for every shard). A reader that cannot be made past the first
  // leaves fewer lanes.
  std::vector<std::unique_ptr<ShardReader>> readers;
  {
    auto first = make_reader(format, options, ctx);
    if (!first) return Status(ErrorCode::kLayout, first.status().message());
    readers.push_back(std::move(first).value());
  }
  try {
    for (unsigned t = 1; t < threads; ++t) {
      if (auto s = readers.front()->sibling()) {
        readers.push_back(std::move(s));
        continue;
      }
      auto r = make_reader(format, options, ctx);
      if (!r) break;
      readers.push_back(std::move(r).value());
    }
  } catch (const std::exception&) {
    // No memory for more readers: the ones there are do the probes.
  }
  // Shards taken 64 at a time (one atomic per 64 cheap probes), fewer when there are few per
  // thread, so that every thread gets some (8 objects on 8 threads: one each).
  const std::size_t chunk = std::clamp<std::size_t>(n / (std::max(1u, threads) * 4), 1, 64);
  // When the last probe that took a server's time (Shard::server_snapshot_s) had its answer.
  std::atomic<std::int64_t> server_answered{0};
  run_in_lanes(n, readers.size(), chunk, [&](std::size_t lane, std::size_t i) {
    auto& slot = out[i];
    try {
      slot.emplace(readers[lane]->probe_at(paths[i], position[i]));
    } catch (...) {  // only an allocation of the result itself can get here
      slot.emplace(Status(ErrorCode::kLayout, paths[i] + ": out of memory while probing"));
    }
    if (slot->is_ok() && (**slot).shard.server_snapshot_s > 0) {
      const std::int64_t now = steady_ns();
      std::int64_t seen = server_answered.load();
      while (seen < now && !server_answered.compare_exchange_weak(seen, now)) {
      }
    }
    return slot->is_ok();
  });
  SHARDLOAD_RETURN_IF_ERROR(wait_out_server_second(server_answered.load()));
  return out;
}

}  // namespace shardload::detail
