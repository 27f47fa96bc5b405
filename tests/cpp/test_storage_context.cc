// The storage context (storage/detail/context.hpp): a store's limit on requests in flight
// holds under many threads, and one store (place and options) is one set of resources; the
// work pool it owns (base/detail/work_pool.hpp) runs every job once, gives the first error,
// finishes loops nested in loops of the same pool, lets an interrupt end a loop's waits, and
// is made again in a forked child.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shardload/interrupt.hpp"
#include "storage/detail/context.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload {
namespace {

TEST(RequestSlots, NeverMoreInFlightThanTheLimit) {
  for (const std::size_t limit : {1u, 3u}) {
    detail::RequestSlots slots(limit);
    std::atomic<int> now{0};
    std::atomic<int> most{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int k = 0; k < 20; ++k) {
          const detail::RequestSlot slot(&slots);
          ASSERT_TRUE(slot.held());
          const int n = ++now;
          int m = most.load();
          while (n > m && !most.compare_exchange_weak(m, n)) {
          }
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          --now;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_LE(most.load(), static_cast<int>(limit));
    EXPECT_LE(slots.most_in_flight(), limit);
    EXPECT_EQ(slots.in_flight(), 0u);
  }
}

TEST(StorageContext, OneStoreOneLimitPerPlaceAndOptions) {
  auto& context = detail::StorageContext::process();
  StoreOptions a;
  a.max_requests = 3;
  StoreOptions b = a;
  b.max_requests = 5;
  const auto s1 = context.store("http://127.0.0.1:1", a);
  EXPECT_EQ(s1, context.store("http://127.0.0.1:1", a));
  EXPECT_NE(s1, context.store("http://127.0.0.1:2", a));
  const auto s2 = context.store("http://127.0.0.1:1", b);
  EXPECT_NE(s1, s2);
  EXPECT_EQ(s1->requests.limit(), 3u);
  EXPECT_EQ(s2->requests.limit(), 5u);
  EXPECT_EQ(StoreOptions{}.max_requests, 64);
}

// Two strings of one 64-bit FNV-1a hash.
constexpr const char* kFnvCollisionA = "42c60238ac236e04";
constexpr const char* kFnvCollisionB = "94cab0c9d7c6e936";

// Two option sets never share a store, however their values are made: two timeouts that agree
// to six decimals, two secrets whose 64-bit FNV-1a hashes collide (found by a cycle search; the
// store's key held that hash of a secret before) each get their own store, whose options are
// theirs.
TEST(StorageContext, TwoOptionSetsNeverShareAStore) {
  auto& context = detail::StorageContext::process();
  const auto own_store = [&](const StoreOptions& a, const StoreOptions& b) {
    const auto sa = context.store("s3://same-bucket", a);
    const auto sb = context.store("s3://same-bucket", b);
    EXPECT_NE(sa.get(), sb.get());
    EXPECT_EQ(sa->options.secret_key, a.secret_key);
    EXPECT_EQ(sb->options.secret_key, b.secret_key);
    EXPECT_EQ(sa->options.request_timeout, a.request_timeout);
    EXPECT_EQ(sb->options.request_timeout, b.request_timeout);
  };
  StoreOptions c, d;
  c.request_timeout = 0.1234567;
  d.request_timeout = 0.1234568;
  own_store(c, d);
  StoreOptions e, f;
  e.access_key = f.access_key = "AK";
  e.secret_key = kFnvCollisionA;
  f.secret_key = kFnvCollisionB;
  ASSERT_EQ(detail::fnv1a(e.secret_key), detail::fnv1a(f.secret_key));
  own_store(e, f);
}

// A store per credential set (a role's, given anew every hour): the ones nothing holds are let
// go of beyond the recent ones, their secrets with them; one held stays the same object, its
// limit the one every holder shares, however many others come and go.
TEST(StorageContext, StoresOfCredentialsNothingHoldsAreLetGoOf) {
  auto& context = detail::StorageContext::process();
  StoreOptions held_options;
  held_options.access_key = "AK";
  held_options.secret_key = "held";
  held_options.max_requests = 2;
  const auto held = context.store("s3://held-bucket?credentials=h0", held_options);
  const std::size_t before = context.stores_made();
  for (int i = 0; i < 2000; ++i) {
    StoreOptions o;
    o.access_key = "AK";
    o.secret_key = std::to_string(i) + std::string(1000, 's');
    const auto s = context.store("s3://b?credentials=" + std::to_string(i), o);
    EXPECT_EQ(s->options.secret_key, o.secret_key);
    EXPECT_EQ(s, context.store("s3://b?credentials=" + std::to_string(i), o));  // while held
  }
  EXPECT_LE(context.stores_made(), before + detail::StorageContext::kRecentStores);
  EXPECT_EQ(held, context.store("s3://held-bucket?credentials=h0", held_options));
  EXPECT_EQ(held->requests.limit(), 2u);
  // One asked for again and again stays among the recent ones, nothing else holding it.
  StoreOptions o;
  o.secret_key = "again";
  const detail::StoreResources* first = context.store("s3://again", o).get();
  for (int i = 0; i < 500; ++i) {
    StoreOptions other;
    other.secret_key = "other" + std::to_string(i);
    (void)context.store("s3://b", other);
    if (i % 8 == 0) EXPECT_EQ(first, context.store("s3://again", o).get()) << i;
  }
}

// Runs f on a thread of its own; a wait that never ends (a deadlock) fails the test program
// after `limit` instead of hanging it. Not a measure of speed: the limit is a minute.
template <class F>
void finishes_or_abort(const char* what, F f,
                       std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([f = std::move(f), done]() mutable {
    f();
    done->set_value();
  }).detach();
  if (finished.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "%s: still waiting after %lld s: a deadlock\n", what,
                 static_cast<long long>(limit.count()));
    std::abort();
  }
}

TEST(WorkPool, EveryJobAndEveryLaneRunsOnce) {
  detail::WorkPool pool(4);
  std::vector<std::atomic<int>> ran(300);
  std::vector<std::shared_ptr<detail::Job>> jobs;
  for (std::size_t i = 0; i < ran.size(); ++i) jobs.push_back(pool.submit([&, i] { ++ran[i]; }));
  for (auto& j : jobs) j->wait();
  for (auto& r : ran) EXPECT_EQ(r.load(), 1);
  EXPECT_LE(pool.most_threads(), 4u);
  // Lanes their caller ran itself (no thread took them in time) start no threads later on: a
  // loop of two lanes run many times one after the other never needs more than a few.
  detail::WorkPool wide;
  std::atomic<int> sum{0};
  for (int i = 0; i < 5000; ++i) wide.run(2, [&](std::size_t) { ++sum; });
  EXPECT_EQ(sum.load(), 10000);
  EXPECT_LE(wide.most_threads(), 2u);
  for (const std::size_t width : {0u, 1u, 2u, 7u, 40u}) {
    std::vector<std::atomic<int>> lanes(width);
    pool.run(width, [&](std::size_t k) { ++lanes[k]; });
    for (auto& l : lanes) EXPECT_EQ(l.load(), 1) << width;
  }
}

TEST(WorkPool, TheLowestLanesErrorWinsAndEveryLaneEnds) {
  detail::WorkPool pool(8);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> ended{0};
    try {
      pool.run(6, [&](std::size_t k) {
        struct End {
          std::atomic<int>& n;
          ~End() { ++n; }
        } end{ended};
        // Lane 4 fails at once, lane 2 later: lane 2's error is the one that comes back.
        if (k == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(round % 3));
          throw std::runtime_error("lane 2");
        }
        if (k == 4) throw std::runtime_error("lane 4");
      });
      ADD_FAILURE() << "no error came back";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "lane 2");
    }
    EXPECT_EQ(ended.load(), 6);  // run returned after every lane, not at the first error
  }
  // A job's error reaches its waiter.
  auto job = pool.submit([] { throw std::runtime_error("job"); });
  EXPECT_THROW(job->wait(), std::runtime_error);
}

// The classic failure: loops inside loops of the same pool, with fewer threads than waiting
// lanes. A pool whose waiters only waited would hang here: both threads run an outer lane,
// each waits for inner lanes queued behind the other outer lanes, and no thread is left.
TEST(WorkPool, NestedLoopsFinishWithEveryThreadWaiting) {
  finishes_or_abort("nested loops on a pool of 2 threads", [] {
    detail::WorkPool pool(2);
    std::atomic<int> inner{0};
    pool.run(6, [&](std::size_t) {
      pool.run(6, [&](std::size_t) {
        pool.run(3, [&](std::size_t) { ++inner; });
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
    });
    EXPECT_EQ(inner.load(), 6 * 6 * 3);
    // A job that waits on jobs of its own pool, as a discovery's look-ahead inside a probe.
    std::vector<std::shared_ptr<detail::Job>> outer;
    std::atomic<int> leaves{0};
    for (int i = 0; i < 8; ++i) {
      outer.push_back(pool.submit([&] {
        std::vector<std::shared_ptr<detail::Job>> mine;
        for (int j = 0; j < 8; ++j) mine.push_back(pool.submit([&] { ++leaves; }));
        for (auto& m : mine) m->wait();
      }));
    }
    for (auto& o : outer) o->wait();
    EXPECT_EQ(leaves.load(), 64);
  });
}

// Ctrl-C while a loop's lanes wait for a store's request slots: every lane ends without its
// slot and the loop returns.
TEST(WorkPool, AnInterruptEndsTheWaitsOfALoop) {
  finishes_or_abort("lanes waiting for request slots", [] {
    detail::RequestSlots slots(1);
    const detail::RequestSlot held(&slots);  // none left for the lanes
    std::atomic<int> waiting{0};
    std::atomic<int> refused{0};
    std::thread asker([&] {
      while (waiting.load() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      request_interrupt();
    });
    detail::StorageContext::process().pool().run(4, [&](std::size_t) {
      ++waiting;
      const detail::RequestSlot slot(&slots);
      if (!slot.held()) ++refused;
    });
    asker.join();
    clear_interrupt();
    EXPECT_EQ(refused.load(), 4);
  });
}

// The training feed's DataLoader workers fork after their parent has loaded: the child's pool
// must run work on threads of its own (the parent's are not in the child).
TEST(WorkPool, AForkedChildGetsAPoolOfItsOwn) {
  auto& pool = detail::StorageContext::process().pool();
  std::atomic<int> warm{0};
  pool.run(4, [&](std::size_t) { ++warm; });  // the parent's threads exist now
  ASSERT_EQ(warm.load(), 4);
  // As after a load: the parent's threads idle, waiting for work.
  for (int i = 0; i < 10000 && (pool.threads() == 0 || pool.idle_threads() < pool.threads()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GT(pool.idle_threads(), 0u);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Lane 0 waits (up to 20 s) for lane 1 to start on another thread: only a pool with a
    // thread of its own in this process can run it.
    std::atomic<bool> started{false};
    std::atomic<bool> saw{false};
    const auto me = std::this_thread::get_id();
    detail::StorageContext::process().pool().run(2, [&](std::size_t k) {
      if (k == 1) {
        if (std::this_thread::get_id() != me) started = true;
        return;
      }
      for (int i = 0; i < 20000 && !started.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      saw = started.load();
    });
    ::_exit(saw.load() ? 0 : 3);
  }
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && done == 0; ++i) {
    done = ::waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (done == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "the forked child did not finish its loop";
  }
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's lane 1 never ran on a thread of its own";
}

}  // namespace
}  // namespace shardload
