#include "storage/detail/fetch_ahead.hpp"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

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
  bool stop = false;          // a failure is known: claim nothing more
  std::vector<unsigned char> done;
  std::vector<std::uint64_t> bytes;
  std::vector<Status> status;
};

// Stops the helpers and joins them however the caller leaves (a consume that throws
// included): a joinable std::thread destroyed would end the process.
struct Helpers {
  Shared& s;
  std::vector<std::thread> threads;
  ~Helpers() {
    {
      std::lock_guard lock(s.m);
      s.stop = true;
    }
    s.cv.notify_all();
    for (auto& t : threads) t.join();
  }
};

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
          return s.stop || s.next >= n || s.next == s.consumed || s.waiting < window_bytes;
        });
        if (s.stop || s.next >= n) return;
        i = s.next++;
      }
      Result<std::uint64_t> got = Status(ErrorCode::kIo, "fetching ahead: no result");
      try {
        got = fetch(i);
      } catch (const std::exception& e) {
        // An exception must not leave a helper thread: the process would end.
        got = Status(ErrorCode::kNoMemory, std::string("fetching ahead: ") + e.what());
      }
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
      }
      s.cv.notify_all();
    }
  };
  Helpers helpers{s, {}};
  const std::size_t want = in_flight < n ? in_flight : n;
  for (std::size_t k = 0; k < want; ++k) {
    try {
      helpers.threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no thread to be had: fewer fetches in flight, the same items
    }
  }
  if (helpers.threads.empty()) return sequentially(n, fetch, consume);
  for (std::size_t i = 0; i < n; ++i) {
    Status st;
    {
      std::unique_lock lock(s.m);
      // Item i was claimed or will be: items are claimed in order, none after a failure
      // that comes before i, and the next item to consume is always claimable.
      s.cv.wait(lock, [&] { return s.done[i] != 0; });
      st = std::move(s.status[i]);
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
