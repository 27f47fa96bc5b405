// The device fill's reader threads: a pool of threads, pinned to the process's CPUs, that
// runs one job at a time; and the reader thread count from the environment.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <new>
#include <string>

#include "engine/detail/device_fill.hpp"
#include "shardload/device_fill.hpp"

namespace shardload {

Status device_fill_options_from_env(DeviceFillOptions* o) {
  std::uint64_t n = static_cast<std::uint64_t>(std::max(o->reader_threads, 1));
  SHARDLOAD_RETURN_IF_ERROR(detail::env_number("SHARDLOAD_READER_THREADS", 1, 256, &n));
  o->reader_threads = static_cast<int>(n);
  return Status::ok();
}

// ---- reader threads ------------------------------------------------------------

namespace {

// The CPUs of the process as it was started (its main thread's; a Realm worker thread is pinned
// to its own core), or every CPU where that cannot be read. The kernel keeps any of them to
// what the process's cpuset allows.
cpu_set_t process_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(::getpid(), sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return set;
  CPU_ZERO(&set);
  const long n = ::sysconf(_SC_NPROCESSORS_CONF);
  for (long c = 0; c < std::min<long>(n > 0 ? n : 1, CPU_SETSIZE); ++c) CPU_SET(c, &set);
  return set;
}

}  // namespace

Result<std::unique_ptr<ReaderThreads>> ReaderThreads::create(int count, std::span<const int> cpus) {
  if (count < 1 || count > 256) {
    return Status(ErrorCode::kInvalidArgument,
                  "reader threads: expected 1 to 256, found " + std::to_string(count));
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) {
      return Status(ErrorCode::kInvalidArgument, "reader threads: CPU " + std::to_string(c) +
                                                     " out of range [0, " +
                                                     std::to_string(CPU_SETSIZE) + ")");
    }
    CPU_SET(c, &set);
  }
  if (cpus.empty()) set = process_cpus();
  std::unique_ptr<ReaderThreads> r(new (std::nothrow) ReaderThreads());
  if (!r) return Status(ErrorCode::kIo, "reader threads: out of memory");
  try {
    r->threads_.reserve(static_cast<std::size_t>(count));
    r->cpus_ = CPU_COUNT(&set);
    for (int i = 0; i < count; ++i) {
      r->threads_.emplace_back([p = r.get(), i] { p->loop(i); });
      // Set, not inherited: threads created inside a task would share its pinned core. A
      // sandbox that refuses affinity leaves them where they are (not an error).
      const int e = ::pthread_setaffinity_np(r->threads_.back().native_handle(), sizeof set, &set);
      if (e != 0) r->cpus_ = 0;
    }
  } catch (const std::exception& e) {
    // The destructor joins the threads that did start.
    return Status(ErrorCode::kIo, "reader threads: cannot start thread " +
                                      std::to_string(r->threads_.size()) + " of " +
                                      std::to_string(count) + ": " + e.what());
  }
  return r;
}

ReaderThreads::~ReaderThreads() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReaderThreads::loop(int index) {
  std::uint64_t seen = 0;
  std::unique_lock lk(mu_);
  for (;;) {
    wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= job_threads_) continue;
    const auto* job = job_;
    lk.unlock();
    (*job)(index);
    lk.lock();
    if (--running_ == 0) done_.notify_all();
  }
}

void ReaderThreads::run(int n, const std::function<void(int)>& fn) {
  n = std::clamp(n, 0, size());
  if (n == 0) return;
  std::lock_guard turn(run_mu_);
  std::unique_lock lk(mu_);
  job_ = &fn;
  job_threads_ = n;
  running_ = n;
  ++generation_;
  wake_.notify_all();
  done_.wait(lk, [&] { return running_ == 0; });
  job_ = nullptr;
}
}  // namespace shardload
