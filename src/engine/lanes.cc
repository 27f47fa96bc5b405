#include "engine/detail/lanes.hpp"

#include <algorithm>
#include <atomic>
#include <vector>

#include "storage/detail/context.hpp"

namespace shardload::detail {

void run_in_lanes(std::size_t n, std::size_t lanes, std::size_t chunk,
                  const std::function<bool(std::size_t lane, std::size_t i)>& item) {
  chunk = std::max<std::size_t>(chunk, 1);
  // The lowest failing index so far, n while none failed.
  std::atomic<std::size_t> first_bad{n};
  std::atomic<std::size_t> next{0};
  const auto lane = [&](std::size_t k) {
    for (std::size_t a = next.fetch_add(chunk); a < n; a = next.fetch_add(chunk)) {
      const std::size_t b = std::min(n, a + chunk);
      for (std::size_t i = a; i < b && i <= first_bad.load(std::memory_order_relaxed); ++i) {
        if (item(k, i)) continue;
        std::size_t seen = first_bad.load();
        while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
        }
        break;
      }
    }
  };
  // The context's pool: lane 0 on this thread, the others as jobs; a lane no thread took runs
  // here after lane 0 (and finds nothing left), so the loop finishes even inside another.
  // No more lanes than chunks: a lane with nothing to take would only be a job to wait for.
  const std::size_t chunks = n / chunk + (n % chunk != 0 ? 1 : 0);
  StorageContext::process().pool().run(
      std::clamp<std::size_t>(chunks, 1, std::max<std::size_t>(lanes, 1)), lane);
}

Status first_failure_in_lanes(std::size_t n, std::size_t lanes,
                              const std::function<Status(std::size_t lane, std::size_t i)>& item) {
  std::vector<Status> done(n);
  run_in_lanes(n, lanes, 1, [&](std::size_t lane, std::size_t i) {
    done[i] = item(lane, i);
    return done[i].is_ok();
  });
  for (Status& st : done) {
    if (!st.is_ok()) return std::move(st);
  }
  return Status::ok();
}

}  // namespace shardload::detail
