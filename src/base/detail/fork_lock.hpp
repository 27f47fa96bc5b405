// Process-wide locks that a thread holds only for a moment (a map's look-up, never across a
// request or while taking another lock): a fork() while a thread of the parent held one would
// leave the child a copy held by a thread it does not have, and its first use waiting for
// ever. A lock handed to hold_across_fork is taken before every fork() and given back after
// it, in the parent and in the child, so the child's copy is always free.
#pragma once

#include <mutex>

namespace shardload::detail {

// `m` must live until the process ends (a static) and must never be held while its holder
// waits on anything else.
void hold_across_fork(std::mutex* m);

// The process's one T (a struct whose std::mutex `mu` guards the rest of it), made at the first
// call and never destroyed (threads may ask for it until the process ends), its `mu` held across
// every fork() as above.
template <class T>
T& fork_held() {
  static T* const made = [] {
    auto* t = new T;
    hold_across_fork(&t->mu);
    return t;
  }();
  return *made;
}

}  // namespace shardload::detail
