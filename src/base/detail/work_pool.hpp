// The threads the engine's work runs on: a pool of threads that takes jobs, and parallel loops
// over it whose caller takes part. The process's pool is owned by the resource owner
// (storage/detail/context.hpp: StorageContext::process().pool()); nothing else in the library
// starts a thread for its work.
//
// Contract:
// - Threads are started on demand, when a job is queued and no thread is idle, up to the pool's
//   `max_threads`, and each ends after `idle` without a job (a process that loads nothing keeps
//   none). How many run at once is therefore the width the callers ask for (the load's
//   `threads`, the probes' and checks' own widths, a store's `max_requests`), as it was when each
//   caller started its own threads; the machine bounds it only through `max_threads`.
// - A waiter never waits on a job that has not started: Job::wait() runs a job that no thread
//   has taken on the caller's thread, and run() runs its lanes 1..n-1 the same way. A job that
//   waits on other jobs (a parallel loop inside a parallel loop: a discovery whose probes each
//   list, a load whose tiles fetch ahead) therefore finishes even when every thread of the pool
//   is busy or none can be started: each wait is either for a job already running on some
//   thread, or runs the job itself.
// - A job's exception reaches the one who waits on it (wait() rethrows it), never the thread.
// - A thread that cannot be started is not an error: the job then runs on its waiter.
// - Each thread's CPU affinity is set to the CPUs of the process as started (its main
//   thread's), never inherited from the thread that happened to start it (a runtime's worker
//   pinned to one core).
// - The pool is never destroyed while jobs may run (the process's lives to the end, its idle
//   threads blocked on a condition variable, which exit does not wait for). After a fork the
//   child holds none of the parent's threads: the owner makes a new pool in the child (see
//   StorageContext) and leaves the parent's copy untouched.
// - Interrupts (shardload/interrupt.hpp) are seen by the work itself (each request ends with
//   ECANCELED); a loop then ends as soon as its running items have ended.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

namespace shardload::detail {

class WorkPool;

// One queued piece of work, run once: by a pool thread or by its waiter.
class Job {
 public:
  // `unclaimed`, where given, is a count this job adds one to now and takes back when it is
  // claimed (the pool's count of queued jobs that no thread or waiter has taken).
  explicit Job(std::function<void()> fn,
               std::shared_ptr<std::atomic<std::size_t>> unclaimed = nullptr);
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Runs the job on this thread if no thread has taken it yet; true when it did. Never
  // throws: the job's exception is kept for wait().
  bool run_if_queued() noexcept;
  // Returns once the job has run: runs it here if no thread has taken it, else waits for the
  // thread that did. Rethrows the job's exception (to one waiter only).
  void wait();
  // Whether it has run.
  bool done() const;

 private:
  friend class WorkPool;
  enum class State { kQueued, kRunning, kDone };
  bool claim() noexcept;  // true: this caller runs it
  void run() noexcept;    // the caller claimed it
  std::function<void()> fn_;
  std::shared_ptr<std::atomic<std::size_t>> unclaimed_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kQueued;
  std::exception_ptr error_;
};

class WorkPool {
 public:
  static constexpr std::size_t kMaxThreads = 1024;
  static constexpr std::chrono::seconds kIdle{30};

  explicit WorkPool(std::size_t max_threads = kMaxThreads, std::chrono::milliseconds idle = kIdle);
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;
  // Only a pool with no job queued or running may be destroyed (a test's); it waits for its
  // idle threads to end.
  ~WorkPool();

  // Queues fn; a thread takes it (one is started where none is idle and the pool has room).
  // Throws std::bad_alloc only.
  std::shared_ptr<Job> submit(std::function<void()> fn);

  // fn(k) for every k in [0, width), each once, at the same time as far as threads allow:
  // k = 0 on the caller, the others as jobs, any that no thread took by the time fn(0)
  // returned run on the caller after it. Returns once every fn(k) has returned; rethrows the
  // exception of the lowest k that threw. fn must suit any number of lanes running at once,
  // one included (lanes share their work: the run_in_lanes pattern of engine/detail/lanes.hpp).
  void run(std::size_t width, const std::function<void(std::size_t)>& fn);

  // The threads started and not ended, those of them waiting for a job, and the most there
  // were at once.
  std::size_t threads() const;
  std::size_t idle_threads() const;
  std::size_t most_threads() const;
  std::size_t max_threads() const { return max_threads_; }

 private:
  void work() noexcept;
  void start_thread_locked();
  const std::size_t max_threads_;
  const std::chrono::milliseconds idle_wait_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable ended_;  // a thread ended (the destructor waits for it)
  // Jobs queued and not yet taken. The queue also holds jobs their waiters took first, until a
  // thread pops them: threads are started for the jobs not taken, not for the queue's length.
  std::deque<std::shared_ptr<Job>> queue_;
  const std::shared_ptr<std::atomic<std::size_t>> unclaimed_ =
      std::make_shared<std::atomic<std::size_t>>(0);
  std::atomic<std::size_t> busy_{0};  // threads running a job they took
  std::size_t threads_ = 0;           // started, not ended
  std::size_t idle_ = 0;              // waiting for a job
  std::size_t starting_ = 0;          // started, not yet waiting or working
  std::size_t most_ = 0;
  bool closing_ = false;
};

}  // namespace shardload::detail
