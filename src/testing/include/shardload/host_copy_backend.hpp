// A CopyBackend over ordinary memory, for running the device-fill pipeline
// where there is no GPU (CI, the Legate CPU tests).
//
// It behaves like a CUDA stream where that matters to the pipeline: copies
// and fence records run later, in order, on a thread of their own, so a
// staging buffer reused before its fence was waited for is caught (its bytes
// change between enqueue and copy; the copy is then counted in overwrites()
// and the next wait() fails). Hooks inject failures: an allocation, a copy
// refused at enqueue, or a copy that fails later, as a transfer error would.
// The "device" is any host memory; the stream argument must be the same
// non-null pointer in every call.
//
// Not part of the product (src/testing): a test double. Owns its worker thread and memory;
// the destructor drains the queue. One fill at a time, as with a CUDA backend.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "shardload/device_fill.hpp"

namespace shardload {

class HostCopyBackend final : public CopyBackend {
 public:
  struct Hooks {
    // Allocations after this many succeed fail (-1: never).
    int fail_alloc_after = -1;
    // The copy with this 0-based index is refused by copy_async (-1: none).
    std::int64_t fail_copy_enqueue = -1;
    // copy_async throws for the copy with this index, as an allocation failing inside a
    // copy path would (-1: none).
    std::int64_t throw_copy_enqueue = -1;
    // The copy with this index fails when it runs; the error is sticky and
    // surfaces in every later wait() and synchronize(), as CUDA's do (-1: none).
    std::int64_t fail_copy_async = -1;
    // Each copy waits this long before it runs, so that a buffer reused too
    // early is overwritten while its copy is still queued.
    std::chrono::microseconds copy_delay{0};
    // Offer direct reads (pread into the "device" memory), as cuFile would.
    bool direct_reads = false;
    // Make direct reads slow, so that DirectReads::kAuto declines them.
    std::chrono::microseconds direct_delay{0};
    // direct_open declines (gives nullptr for) the files whose path contains this, as cuFile
    // refuses to register a file on a file system it does not serve (empty: none).
    std::string decline_direct;
  };

  HostCopyBackend();
  explicit HostCopyBackend(Hooks hooks);
  ~HostCopyBackend() override;

  [[nodiscard]] const char* name() const override { return "host"; }
  Result<void*> alloc_staging(std::size_t bytes) override;
  void free_staging(void* p) noexcept override;
  Result<Fence> create_fence() override;
  void destroy_fence(Fence f) noexcept override;
  Status copy_async(void* dst, const void* src, std::size_t bytes, void* stream) override;
  Status record(Fence f, void* stream) override;
  Status wait(Fence f) override;
  Status synchronize(void* stream) override;

  [[nodiscard]] bool has_direct_reads() const override { return hooks_.direct_reads; }
  Result<void*> direct_open(const std::string& path) override;
  void direct_close(void* handle) noexcept override;
  Status direct_read(void* handle, std::uint64_t offset, std::size_t bytes, void* dst) override;

  // What the checks found and what is still held.
  [[nodiscard]] std::int64_t copies() const { return copies_.load(); }
  [[nodiscard]] std::uint64_t copied_bytes() const { return copied_bytes_.load(); }
  [[nodiscard]] std::int64_t overwrites() const { return overwrites_.load(); }
  [[nodiscard]] std::int64_t direct_reads() const { return direct_reads_.load(); }
  [[nodiscard]] std::int64_t direct_declined() const { return direct_declined_.load(); }
  [[nodiscard]] std::int64_t live_allocations() const;
  [[nodiscard]] std::int64_t live_fences() const;
  [[nodiscard]] std::int64_t live_direct_handles() const;
  // The most copies that were queued and not yet run at one time (> 1 shows
  // that reads overlapped copies).
  [[nodiscard]] std::int64_t max_queued() const { return max_queued_.load(); }

 private:
  struct Op {
    void* dst = nullptr;  // nullptr: a fence record
    const void* src = nullptr;
    std::size_t bytes = 0;
    std::uint64_t hash = 0;  // of src at enqueue
    std::int64_t index = 0;
  };
  Status check_stream(void* stream);
  void run_stream();

  Hooks hooks_;
  mutable std::mutex mu_;
  std::condition_variable queued_cv_, done_cv_;
  std::deque<Op> queue_;
  std::uint64_t enqueued_ = 0;   // ops ever queued
  std::uint64_t completed_ = 0;  // ops ever run
  Status sticky_;
  void* stream_ = nullptr;
  bool stop_ = false;
  std::map<const std::byte*, std::size_t> allocations_;  // start -> bytes
  std::set<void*> fences_;
  std::set<void*> handles_;
  int alloc_calls_ = 0;
  std::atomic<std::int64_t> copies_{0}, overwrites_{0}, direct_reads_{0}, max_queued_{0},
      direct_declined_{0};
  std::atomic<std::uint64_t> copied_bytes_{0};
  std::thread stream_thread_;
};

}  // namespace shardload
