// The process's resource owner: the pool every thread of the engine's work comes from
// (base/detail/work_pool.hpp), what the layers above keep for the process's life (the device
// fill's staging pools: keep()), and what the remote stores (s3://, http(s)://) share. For each
// store it holds the store's resources: its options (the retries, backoff and deadlines every
// request of the store is made with) and its limit on requests in flight (max_requests), which
// every GET, HEAD, PUT and DELETE the store sends waits on. A store is one place with one set of
// options: an s3:// bucket with its URL's query (the key Arrow's client is made for), an http(s)://
// origin (scheme, host and port) with its options.
//
// Contract: StorageContext::process() is made on first use and never destroyed (requests may
// be in flight on other threads until the very end); its methods are safe from any thread.
// A StoreResources lives as long as the context (shared_ptr: a driver keeps it beside what it
// opened). A request holds its RequestSlot for its attempts, redirects included, never while
// it sleeps between attempts and never while it makes the request's headers (which may take a
// request of its own: role credentials), so no request waits on a slot its own thread holds.
//
// The work pool: one per process, made at the first pool() call, its threads started as work
// asks for them (the widths are the callers' options: the load's `threads`, a store's
// max_requests) up to WorkPool::kMaxThreads, each set to the process's CPUs. Waiting
// callers run queued work themselves, so loops nested in loops of the same pool finish.
// After fork() the child's first pool() call makes a new pool (the parent's threads are not in
// the child; its copy of the old pool is left as it was, never used): the training feed's
// DataLoader workers fork after their parent has loaded. A fork holds the context's locks
// across the fork, so the child never finds one held by a thread it does not have.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <typeinfo>

#include "base/detail/work_pool.hpp"
#include "shardload/status.hpp"
#include "shardload/store_options.hpp"

namespace shardload::detail {

// A counting semaphore of `limit` slots: the requests a store has in flight.
class RequestSlots {
 public:
  explicit RequestSlots(std::size_t limit) : limit_(limit < 1 ? 1 : limit) {}
  RequestSlots(const RequestSlots&) = delete;
  RequestSlots& operator=(const RequestSlots&) = delete;

  // Takes a slot, waiting while all are taken; false (nothing taken) where an interrupt
  // (shardload/interrupt.hpp) comes first.
  bool acquire();
  void release();

  std::size_t limit() const { return limit_; }
  // The slots taken now, and the most taken at once since the store was made.
  std::size_t in_flight() const;
  std::size_t most_in_flight() const;

 private:
  const std::size_t limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::size_t used_ = 0;
  std::size_t most_ = 0;
};

// One slot, held from its construction to its destruction (none for a null `slots`: a request
// that belongs to no store). held() is false where an interrupt ended the wait.
class RequestSlot {
 public:
  explicit RequestSlot(RequestSlots* slots) : slots_(slots) {
    if (slots_ != nullptr && !slots_->acquire()) slots_ = nullptr, interrupted_ = true;
  }
  RequestSlot(const RequestSlot&) = delete;
  RequestSlot& operator=(const RequestSlot&) = delete;
  ~RequestSlot() {
    if (slots_ != nullptr) slots_->release();
  }
  bool held() const { return !interrupted_; }

 private:
  RequestSlots* slots_;
  bool interrupted_ = false;
};

// What one store's requests share.
struct StoreResources {
  explicit StoreResources(const StoreOptions& o)
      : options(o), requests(static_cast<std::size_t>(o.max_requests)) {}
  const StoreOptions options;  // retries, backoff, deadlines, request sizes
  RequestSlots requests;       // options.max_requests in flight at once
};

class StorageContext {
 public:
  // The process's context.
  static StorageContext& process();

  // The resources of the store at `where` (an s3:// bucket and its query, an http(s)://
  // origin) with `options`: made at the first call for that store and those options, the
  // same object for every later call while anything holds it or it is among the
  // kRecentStores asked for last. `where` is a key only, never shown.
  std::shared_ptr<StoreResources> store(const std::string& where, const StoreOptions& options);

  // The stores nothing else holds that stay made: each holds its options, credentials
  // included, and a process that is given new credentials again and again (a role's, every
  // hour) would otherwise keep every set it was ever given.
  static constexpr std::size_t kRecentStores = 64;

  // The stores whose resources exist now (held by a caller or among the recent ones).
  std::size_t stores_made();

  // The process's work pool (see above).
  WorkPool& pool();

  // What the layers above keep for the process's life, one object per name and type: the
  // device fill's staging pool of each device (shardload/device_fill.hpp: device_resources).
  // `make` runs at the first call for the name, under a lock of its own, so once however many
  // threads ask; its failure is returned and the next call tries again. Never destroyed: what
  // it holds (pinned memory) would otherwise be freed after the CUDA runtime shut down; the OS
  // reclaims it at exit.
  template <class T>
  Result<T*> keep(const std::string& name,
                  const std::function<Result<std::unique_ptr<T>>()>& make) {
    std::lock_guard lock(kept_mu_);
    const std::string key = name + "#" + typeid(T).name();
    if (const auto it = kept_.find(key); it != kept_.end()) return static_cast<T*>(it->second);
    Result<std::unique_ptr<T>> made = make();
    if (!made) return made.status();
    T* const p = made->release();
    kept_.emplace(key, p);
    return p;
  }

 private:
  StorageContext();
  static void before_fork();
  static void after_fork_parent();
  static void after_fork_child();
  std::mutex mu_;
  std::mutex pool_mu_;
  std::atomic<WorkPool*> pool_{nullptr};
  std::mutex kept_mu_;
  std::map<std::string, void*> kept_;  // keep's objects, by name and type
  // Under mu_: every store made, by its key, while it exists; the ones asked for last, newest
  // first, held. A store nothing holds leaves the map at the next sweep (sweep_at_: the map's
  // size that starts one, so that each costs a few calls' worth).
  struct Made {
    std::weak_ptr<StoreResources> store;
    bool recent = false;
    std::list<std::pair<std::string, std::shared_ptr<StoreResources>>>::iterator at;
  };
  std::map<std::string, Made> stores_;
  std::list<std::pair<std::string, std::shared_ptr<StoreResources>>> recent_;
  std::size_t sweep_at_ = 2 * kRecentStores;
};

}  // namespace shardload::detail
