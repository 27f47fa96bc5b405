#include "engine/detail/probe.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "shardload/formats.hpp"
#include "shardload/io.hpp"

namespace shardload::detail {

unsigned probe_threads(const FormatDescriptor* d, const ReaderContext& ctx, std::size_t count,
                       unsigned requested, bool remote) {
  if (requested > 0) return static_cast<unsigned>(std::min<std::size_t>(requested, count));
  if (ctx.io != nullptr && ctx.io != &posix_io()) return 1;
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

Result<ProbeResults> probe_shards(const std::vector<std::string>& paths, Format format,
                                  const FormatOptions& options, const ReaderContext& ctx,
                                  unsigned threads) {
  const std::size_t n = paths.size();
  ProbeResults out(n);
  // Each shard's position among the shards of its directory (ShardReader::probe_at): a URL's
  // query is the store's options, not part of its directory's name, but tells it apart.
  std::vector<std::size_t> position(n);
  {
    std::map<std::string, std::size_t> seen;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& p = paths[i];
      const std::size_t q = is_remote_url(p) ? p.find('?') : std::string::npos;
      const std::size_t slash = p.substr(0, q).rfind('/');
      std::string dir = slash == std::string::npos ? std::string(".") : p.substr(0, slash);
      if (q != std::string::npos) dir += p.substr(q);
      position[i] = seen[dir]++;
    }
  }
  // Each thread has a reader of its own: readers keep scratch and caches.
  auto first = make_reader(format, options, ctx);
  if (!first) return Status(ErrorCode::kLayout, first.status().message());
  // The lowest index whose probe failed so far, n while none did. Workers skip chunks that
  // start past it; every index below it is still probed, so the final value is the lowest
  // failing index whatever the timing.
  std::atomic<std::size_t> first_bad{n};
  std::atomic<std::size_t> next{0};
  // Shards taken 64 at a time (one atomic per 64 cheap probes), fewer when there are few per
  // thread, so that every thread gets some (8 objects on 8 threads: one each).
  const std::size_t chunk = std::clamp<std::size_t>(n / (std::max(1u, threads) * 4), 1, 64);
  const auto work = [&](ShardReader& reader) {
    for (std::size_t a = next.fetch_add(chunk); a < n; a = next.fetch_add(chunk)) {
      const std::size_t b = std::min(n, a + chunk);
      for (std::size_t i = a; i < b && i <= first_bad.load(std::memory_order_relaxed); ++i) {
        auto& slot = out[i];
        try {
          slot.emplace(reader.probe_at(paths[i], position[i]));
        } catch (...) {  // only an allocation of the result itself can get here
          slot.emplace(Status(ErrorCode::kLayout, paths[i] + ": out of memory while probing"));
        }
        if (!slot->is_ok()) {
          std::size_t seen = first_bad.load();
          while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
          }
          break;
        }
      }
    }
  };
  std::vector<std::unique_ptr<ShardReader>> readers;
  std::vector<std::thread> pool;
  if (threads > 1) {
    try {
      // Room first: a vector growing after a thread started would destroy a joinable thread.
      readers.reserve(threads - 1);
      pool.reserve(threads - 1);
      for (unsigned t = 1; t < threads; ++t) {
        auto r = make_reader(format, options, ctx);
        if (!r) break;
        readers.push_back(std::move(r).value());
        ShardReader* reader = readers.back().get();
        pool.emplace_back([&work, reader] { work(*reader); });
      }
    } catch (const std::exception&) {
      // No more threads (or no memory for them): the ones started and this one do the rest.
    }
  }
  work(**first);
  for (auto& t : pool) t.join();
  return out;
}

}  // namespace shardload::detail
