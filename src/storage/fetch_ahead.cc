#include "storage/detail/fetch_ahead.hpp"

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "storage/detail/context.hpp"

namespace shardload::detail {

namespace {

Status sequentially(std::size_t n, const FetchItem& fetch, const ConsumeItem& consume) {
  for (std::size_t i = 0; i < n; ++i) {
    Result<std::uint64_t> got = fetch(i);
    if (!got) return got.status();
    SHARDLOAD_RETURN_IF_ERROR(consume(i));
  }
  return Status::ok();
}

struct Shared {
  explicit Shared(std::size_t n) : done(n, 0), bytes(n, 0), status(n) {}
  std::mutex m;
  std::condition_variable cv;
  std::size_t next = 0;       // the next item to claim
  std::size_t consumed = 0;   // items below this are consumed
  std::uint64_t waiting = 0;  // bytes fetched and not yet consumed
  std::size_t running = 0;    // fetches in progress
  bool stop = false;          // a failure is known: claim nothing more
  std::vector<unsigned char> done;
  std::vector<std::uint64_t> bytes;
  std::vector<Status> status;
};

// Stops the helpers and waits for them however the caller leaves (a consume that throws
// included): they refer to what the caller holds. A helper no thread took runs here, sees the
// stop and returns.
struct Helpers {
  Shared& s;
  std::vector<std::shared_ptr<Job>> jobs;
  ~Helpers() {
    {
      std::lock_guard lock(s.m);
      s.stop = true;
    }
    s.cv.notify_all();
    for (auto& j : jobs) {
      try {
        j->wait();
      } catch (...) {  // none: a helper keeps a fetch's exception as the item's status
      }
    }
  }
};

// fetch(i), its exception as the item's status: an exception must not leave a helper thread
// (the process would end), nor the consuming loop with helpers still running.
Result<std::uint64_t> fetch_guarded(const FetchItem& fetch, std::size_t i) {
  try {
    return fetch(i);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kNoMemory, std::string("fetching ahead: ") + e.what());
  }
}

}  // namespace

Status fetch_ahead(std::size_t n, std::size_t in_flight, std::uint64_t window_bytes,
                   const FetchItem& fetch, const ConsumeItem& consume) {
  if (n <= 1 || in_flight <= 1) return sequentially(n, fetch, consume);
  Shared s(n);
  auto work = [&] {
    for (;;) {
      std::size_t i = 0;
      {
        std::unique_lock lock(s.m);
        s.cv.wait(lock, [&] {
          return s.stop || s.next >= n ||
                 (s.running < in_flight && (s.next == s.consumed || s.waiting < window_bytes));
        });
        if (s.stop || s.next >= n) return;
        i = s.next++;
        ++s.running;
      }
      Result<std::uint64_t> got = fetch_guarded(fetch, i);
      {
        std::lock_guard lock(s.m);
        if (got) {
          s.bytes[i] = *got;
          s.waiting += *got;
        } else {
          s.status[i] = got.status();
          s.stop = true;
        }
        s.done[i] = 1;
        --s.running;
      }
      s.cv.notify_all();
    }
  };
  Helpers helpers{s, {}};
  const std::size_t want = in_flight < n ? in_flight : n;
  try {
    helpers.jobs.reserve(want);
    for (std::size_t k = 0; k < want; ++k) {
      helpers.jobs.push_back(StorageContext::process().pool().submit(work));
    }
  } catch (const std::bad_alloc&) {
    // Fewer fetches in flight, the same items.
  }
  if (helpers.jobs.empty()) return sequentially(n, fetch, consume);
  for (std::size_t i = 0; i < n; ++i) {
    Status st;
    bool fetch_here = false;
    {
      std::unique_lock lock(s.m);
      // Item i was claimed or will be: items are claimed in order, none after a failure
      // that comes before i, and the next item to consume is always claimable. Not claimed
      // yet (no helper running: the pool's threads all busy), it is fetched here, so the
      // loop never waits on work that has not started (and never has more than in_flight
      // fetches in progress).
      s.cv.wait(lock, [&] { return s.done[i] != 0 || (s.next == i && s.running < in_flight); });
      if (s.done[i] == 0) {
        s.next = i + 1;
        ++s.running;
        fetch_here = true;
      } else {
        st = std::move(s.status[i]);
      }
    }
    if (fetch_here) {
      Result<std::uint64_t> got = fetch_guarded(fetch, i);
      {
        std::lock_guard lock(s.m);
        --s.running;
        if (!got) {
          s.stop = true;
          st = got.status();
        }
      }
      s.cv.notify_all();  // a helper may claim the next item now
      // Its bytes were never counted as waiting.
    }
    if (st.is_ok()) st = consume(i);
    {
      std::lock_guard lock(s.m);
      s.waiting -= s.bytes[i];
      s.consumed = i + 1;
      if (!st.is_ok()) s.stop = true;
    }
    s.cv.notify_all();
    if (!st.is_ok()) return st;
  }
  return Status::ok();
}

}  // namespace shardload::detail
