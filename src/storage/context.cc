#include "storage/detail/context.hpp"

#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <variant>
#include <vector>

#include "shardload/interrupt.hpp"
#include "storage/detail/credentials_kdf.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail {

bool RequestSlots::acquire() {
  std::unique_lock lock(mu_);
  // Woken by a release, and every 50 ms to see an interrupt.
  while (used_ >= limit_) {
    if (interrupt_requested()) return false;
    cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
  ++used_;
  if (used_ > most_) most_ = used_;
  return true;
}

void RequestSlots::release() {
  {
    std::lock_guard lock(mu_);
    --used_;
  }
  cv_.notify_one();
}

std::size_t RequestSlots::in_flight() const {
  std::lock_guard lock(mu_);
  return used_;
}

std::size_t RequestSlots::most_in_flight() const {
  std::lock_guard lock(mu_);
  return most_;
}

namespace {

StorageContext* g_context = nullptr;

}  // namespace

StorageContext& StorageContext::process() {
  static auto* context = [] {
    auto* c = new StorageContext();
    g_context = c;
    // Registered once, after the context exists: the handlers use it.
    ::pthread_atfork(&before_fork, &after_fork_parent, &after_fork_child);
    return c;
  }();
  return *context;
}

StorageContext::StorageContext() = default;

WorkPool& StorageContext::pool() {
  if (WorkPool* p = pool_.load(std::memory_order_acquire)) return *p;
  std::lock_guard lock(pool_mu_);
  WorkPool* p = pool_.load(std::memory_order_relaxed);
  if (p == nullptr) {
    // Never destroyed: jobs may run on its threads until the process ends.
    p = new WorkPool();
    pool_.store(p, std::memory_order_release);
  }
  return *p;
}

void StorageContext::before_fork() {
  g_context->kept_mu_.lock();
  g_context->pool_mu_.lock();
  g_context->mu_.lock();
}

void StorageContext::after_fork_parent() {
  g_context->mu_.unlock();
  g_context->pool_mu_.unlock();
  g_context->kept_mu_.unlock();
}

void StorageContext::after_fork_child() {
  g_context->mu_.unlock();
  g_context->pool_mu_.unlock();
  g_context->kept_mu_.unlock();
  // The parent's pool, as copied, has threads that are not here and perhaps a lock held by
  // one of them: left alone (leaked), and a new one made at the next pool() call.
  g_context->pool_.store(nullptr, std::memory_order_release);
  // So have its stores' request slots, taken by requests of threads that are not here (the
  // child waited forever for them): left alone too, and the child's stores made anew.
  new std::map<std::string, Made>(std::move(g_context->stores_));
  new std::list<std::pair<std::string, std::shared_ptr<StoreResources>>>(
      std::move(g_context->recent_));
  g_context->stores_.clear();
  g_context->recent_.clear();
  g_context->sweep_at_ = 2 * kRecentStores;
}

namespace {

// The options as part of a store's key: every row with a field, a secret's by its SHA-256.
// Never a short hash: collisions of a 64-bit one can be made, and two credential sets whose
// keys collided would share one store, its options and credentials those of the first.
std::string options_key(const StoreOptions& o) {
  std::string key;
  for (const StoreOptionSpec& row : store_option_table()) {
    if (row.get == nullptr) continue;
    const OptionValue v = row.get(o);
    std::string text;
    if (const auto* n = std::get_if<std::uint64_t>(&v)) {
      text = std::to_string(*n);
    } else if (const auto* d = std::get_if<double>(&v)) {
      char exact[32];  // every double its own text (std::to_string keeps 6 decimals)
      std::snprintf(exact, sizeof exact, "%.17g", *d);
      text = exact;
    } else if (const auto* b = std::get_if<bool>(&v)) {
      text = *b ? "1" : "0";
    } else if (const auto* s = std::get_if<std::string>(&v)) {
      text = row.secret ? kdf_sha256(*s) : *s;
    }
    // Each value after its length, so that a value holding "&name=" cannot stand for rows
    // after it: two option sets never make one key.
    key += std::string("&") + row.name + "=" + std::to_string(text.size()) + ":" + text;
  }
  return key;
}

}  // namespace

std::shared_ptr<StoreResources> StorageContext::store(const std::string& where,
                                                      const StoreOptions& options) {
  const std::string key = std::to_string(where.size()) + ":" + where + options_key(options);
  std::shared_ptr<StoreResources> found;
  // Dropped after the lock (a store, its options, may be freed with them).
  std::vector<std::shared_ptr<StoreResources>> dropped;
  std::lock_guard lock(mu_);
  Made& made = stores_[key];
  found = made.store.lock();
  if (found == nullptr) {
    found = std::make_shared<StoreResources>(options);
    made.store = found;
  }
  if (made.recent) {
    recent_.splice(recent_.begin(), recent_, made.at);
  } else {
    recent_.emplace_front(key, found);
    made.at = recent_.begin();
    made.recent = true;
  }
  while (recent_.size() > kRecentStores) {
    stores_.at(recent_.back().first).recent = false;
    dropped.push_back(std::move(recent_.back().second));
    recent_.pop_back();
  }
  if (stores_.size() >= sweep_at_) {
    // Held by no one now: its next call makes it anew.
    std::erase_if(stores_,
                  [](const auto& kv) { return !kv.second.recent && kv.second.store.expired(); });
    sweep_at_ = 2 * stores_.size() + kRecentStores;
  }
  return found;
}

std::size_t StorageContext::stores_made() {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& kv : stores_) n += kv.second.store.expired() ? 0 : 1;
  return n;
}

}  // namespace shardload::detail
