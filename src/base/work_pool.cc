#include "base/detail/work_pool.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace shardload::detail {

// ---- Job ---------------------------------------------------------------------------

Job::Job(std::function<void()> fn, std::shared_ptr<std::atomic<std::size_t>> unclaimed)
    : fn_(std::move(fn)), unclaimed_(std::move(unclaimed)) {
  if (unclaimed_) unclaimed_->fetch_add(1);
}

void Job::run() noexcept {
  std::exception_ptr error;
  try {
    fn_();
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard lock(mu_);
    error_ = std::move(error);
    state_ = State::kDone;
    // What the job held (its captures) goes with it, before anyone is told it ran.
    std::function<void()>().swap(fn_);
  }
  cv_.notify_all();
}

bool Job::claim() noexcept {
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kQueued) return false;
    state_ = State::kRunning;
  }
  if (unclaimed_) unclaimed_->fetch_sub(1);
  return true;
}

bool Job::run_if_queued() noexcept {
  if (!claim()) return false;
  run();
  return true;
}

void Job::wait() {
  if (!run_if_queued()) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return state_ == State::kDone; });
  }
  std::exception_ptr error;
  {
    std::lock_guard lock(mu_);
    error.swap(error_);
  }
  if (error) std::rethrow_exception(error);
}

bool Job::done() const {
  std::lock_guard lock(mu_);
  return state_ == State::kDone;
}

// ---- WorkPool ----------------------------------------------------------------------

namespace {

// The CPUs of the process as it was started (its main thread's), or none known (the thread
// then stays where it started).
bool process_cpus(cpu_set_t* set) {
  CPU_ZERO(set);
  return ::sched_getaffinity(::getpid(), sizeof *set, set) == 0 && CPU_COUNT(set) > 0;
}

}  // namespace

WorkPool::WorkPool(std::size_t max_threads, std::chrono::milliseconds idle)
    : max_threads_(std::max<std::size_t>(max_threads, 1)), idle_wait_(idle) {}

WorkPool::~WorkPool() {
  std::unique_lock lock(mu_);
  closing_ = true;
  wake_.notify_all();
  ended_.wait(lock, [&] { return threads_ == 0; });
}

void WorkPool::start_thread_locked() {
  try {
    std::thread t([this] { work(); });
    cpu_set_t set;
    if (process_cpus(&set)) {
      // A sandbox that refuses it leaves the thread where it is (not an error).
      (void)::pthread_setaffinity_np(t.native_handle(), sizeof set, &set);
    }
    t.detach();
  } catch (const std::system_error&) {
    return;  // no thread to be had: the job runs on its waiter
  }
  ++threads_;
  ++starting_;
  most_ = std::max(most_, threads_);
}

void WorkPool::work() noexcept {
  std::unique_lock lock(mu_);
  --starting_;
  for (;;) {
    if (queue_.empty()) {
      ++idle_;
      const bool woken =
          wake_.wait_for(lock, idle_wait_, [&] { return closing_ || !queue_.empty(); });
      --idle_;
      if (!woken || (closing_ && queue_.empty())) break;
    }
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    // Taken under the pool's lock, so that submit() counts this thread busy from the moment
    // the job is no longer counted as not taken. Not taken: its waiter ran it first.
    if (job->claim()) {
      busy_.fetch_add(1);
      lock.unlock();
      job->run();
      job.reset();
      lock.lock();
      busy_.fetch_sub(1);
    }
  }
  --threads_;
  // Notified under the lock: a destructor woken by it may free the pool as soon as it can
  // take the lock, and this thread touches nothing of the pool after releasing it.
  ended_.notify_all();
}

std::shared_ptr<Job> WorkPool::submit(std::function<void()> fn) {
  auto job = std::make_shared<Job>(std::move(fn), unclaimed_);
  std::lock_guard lock(mu_);
  queue_.push_back(job);
  // A thread is started for a job not taken when every thread is running one (a thread that
  // only popped a job its waiter took is back in a moment, not busy).
  if (unclaimed_->load() + busy_.load() > threads_ && threads_ < max_threads_) {
    start_thread_locked();
  }
  wake_.notify_one();
  return job;
}

void WorkPool::run(std::size_t width, const std::function<void(std::size_t)>& fn) {
  if (width <= 1) {
    if (width == 1) fn(0);
    return;
  }
  std::vector<std::exception_ptr> errors(width);
  std::vector<std::shared_ptr<Job>> jobs;
  try {
    jobs.reserve(width - 1);
    for (std::size_t k = 1; k < width; ++k) jobs.push_back(submit([&fn, k] { fn(k); }));
  } catch (const std::bad_alloc&) {
    // No memory for more jobs: the lanes not queued run here.
  }
  const auto lane = [&](std::size_t k) {
    try {
      fn(k);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  };
  lane(0);
  for (std::size_t k = jobs.size() + 1; k < width; ++k) lane(k);
  // Every job waited for (or run here), however the lanes here ended: they refer to fn.
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    try {
      jobs[j]->wait();
    } catch (...) {
      errors[j + 1] = std::current_exception();
    }
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::size_t WorkPool::threads() const {
  std::lock_guard lock(mu_);
  return threads_;
}

std::size_t WorkPool::idle_threads() const {
  std::lock_guard lock(mu_);
  return idle_;
}

std::size_t WorkPool::most_threads() const {
  std::lock_guard lock(mu_);
  return most_;
}

}  // namespace shardload::detail
