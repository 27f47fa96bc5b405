#include "base/detail/fork_lock.hpp"

#include <pthread.h>

#include <vector>

namespace shardload::detail {

namespace {

struct Held {
  std::mutex mu;  // over `locks`; itself taken first and given back last around a fork
  std::vector<std::mutex*> locks;
};

Held& held() {
  static auto* h = new Held();  // never destroyed: a fork may come at exit
  return *h;
}

void before_fork() {
  Held& h = held();
  h.mu.lock();
  for (std::mutex* m : h.locks) m->lock();
}

void after_fork() {
  Held& h = held();
  for (auto it = h.locks.rbegin(); it != h.locks.rend(); ++it) (*it)->unlock();
  h.mu.unlock();
}

}  // namespace

void hold_across_fork(std::mutex* m) {
  static const bool registered = [] {
    held();
    ::pthread_atfork(&before_fork, &after_fork, &after_fork);
    return true;
  }();
  (void)registered;
  Held& h = held();
  std::lock_guard lock(h.mu);
  h.locks.push_back(m);
}

}  // namespace shardload::detail
