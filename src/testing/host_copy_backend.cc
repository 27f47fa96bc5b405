#include "shardload/host_copy_backend.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <new>
#include <stdexcept>

#include "shardload/io.hpp"

namespace shardload {

namespace {

// FNV-1a: enough to notice that a staging buffer changed under a queued copy.
std::uint64_t hash_bytes(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

struct HostFence {
  std::uint64_t target = 0;  // the op count the fence waits for
};

}  // namespace

HostCopyBackend::HostCopyBackend() : HostCopyBackend(Hooks{}) {}

HostCopyBackend::HostCopyBackend(Hooks hooks) : hooks_(hooks) {
  stream_thread_ = std::thread([this] { run_stream(); });
}

HostCopyBackend::~HostCopyBackend() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  queued_cv_.notify_all();
  stream_thread_.join();
}

void HostCopyBackend::run_stream() {
  std::unique_lock lk(mu_);
  for (;;) {
    queued_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    const Op op = queue_.front();
    lk.unlock();
    Status error;
    if (op.dst != nullptr) {
      if (hooks_.copy_delay.count() > 0) std::this_thread::sleep_for(hooks_.copy_delay);
      if (op.index == hooks_.fail_copy_async) {
        error = Status(ErrorCode::kIo, "host backend: injected failure of copy " +
                                           std::to_string(op.index) + " while it ran");
      } else if (hash_bytes(op.src, op.bytes) != op.hash) {
        overwrites_.fetch_add(1);
        error = Status(ErrorCode::kIo, "host backend: copy " + std::to_string(op.index) +
                                           ": its staging buffer was overwritten before the "
                                           "copy ran (a buffer reused before its fence)");
      } else {
        std::memcpy(op.dst, op.src, op.bytes);
        copied_bytes_.fetch_add(op.bytes);
      }
    }
    lk.lock();
    queue_.pop_front();
    ++completed_;
    if (!error.is_ok() && sticky_.is_ok()) sticky_ = error;
    done_cv_.notify_all();
  }
}

Result<void*> HostCopyBackend::alloc_staging(std::size_t bytes) {
  std::lock_guard lk(mu_);
  if (hooks_.fail_alloc_after >= 0 && alloc_calls_ >= hooks_.fail_alloc_after) {
    return Status(ErrorCode::kIo, "host backend: injected allocation failure (" +
                                      std::to_string(bytes) + " bytes)");
  }
  ++alloc_calls_;
  auto* p = new (std::nothrow) std::byte[bytes];
  if (p == nullptr) {
    return Status(ErrorCode::kIo,
                  "host backend: out of memory (" + std::to_string(bytes) + " bytes)");
  }
  allocations_[p] = bytes;
  return static_cast<void*>(p);
}

void HostCopyBackend::free_staging(void* p) noexcept {
  std::lock_guard lk(mu_);
  auto* b = static_cast<std::byte*>(p);
  // Freeing memory that a queued copy still reads is the bug CUDA would
  // not report; make it loud here.
  for (const auto& op : queue_) {
    if (op.src >= b && op.src < b + allocations_[b]) overwrites_.fetch_add(1);
  }
  allocations_.erase(b);
  delete[] b;
}

Result<CopyBackend::Fence> HostCopyBackend::create_fence() {
  auto* f = new (std::nothrow) HostFence();
  if (f == nullptr) return Status(ErrorCode::kIo, "host backend: out of memory (fence)");
  std::lock_guard lk(mu_);
  fences_.insert(f);
  return static_cast<Fence>(f);
}

void HostCopyBackend::destroy_fence(Fence f) noexcept {
  std::lock_guard lk(mu_);
  fences_.erase(f);
  delete static_cast<HostFence*>(f);
}

Status HostCopyBackend::check_stream(void* stream) {
  if (stream == nullptr) return {ErrorCode::kInvalidArgument, "host backend: null stream"};
  if (stream_ == nullptr) stream_ = stream;
  if (stream != stream_) {
    return {ErrorCode::kInvalidArgument, "host backend: work on a second stream"};
  }
  return Status::ok();
}

Status HostCopyBackend::copy_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  std::unique_lock lk(mu_);
  SHARDLOAD_RETURN_IF_ERROR(check_stream(stream));
  const std::int64_t index = copies_.fetch_add(1);
  if (index == hooks_.fail_copy_enqueue) {
    return {ErrorCode::kIo, "host backend: injected refusal of copy " + std::to_string(index)};
  }
  if (index == hooks_.throw_copy_enqueue) {
    throw std::runtime_error("host backend: injected exception in copy " + std::to_string(index));
  }
  // The pipeline must copy from staging memory, which is what the device can
  // read asynchronously; anything else would be a pageable copy under CUDA.
  const auto* s = static_cast<const std::byte*>(src);
  auto it = allocations_.upper_bound(s);
  if (it == allocations_.begin() || s + bytes > std::prev(it)->first + std::prev(it)->second) {
    return {ErrorCode::kInvalidArgument,
            "host backend: copy source is not inside one staging allocation"};
  }
  if (dst == nullptr) return {ErrorCode::kInvalidArgument, "host backend: null destination"};
  queue_.push_back(Op{dst, src, bytes, hash_bytes(src, bytes), index});
  ++enqueued_;
  std::int64_t queued = 0;
  for (const auto& op : queue_) queued += op.dst != nullptr ? 1 : 0;
  if (queued > max_queued_.load()) max_queued_.store(queued);
  queued_cv_.notify_all();
  return Status::ok();
}

Status HostCopyBackend::record(Fence f, void* stream) {
  std::lock_guard lk(mu_);
  SHARDLOAD_RETURN_IF_ERROR(check_stream(stream));
  if (fences_.count(f) == 0) return {ErrorCode::kInvalidArgument, "host backend: unknown fence"};
  queue_.push_back(Op{});
  static_cast<HostFence*>(f)->target = ++enqueued_;
  queued_cv_.notify_all();
  return Status::ok();
}

Status HostCopyBackend::wait(Fence f) {
  std::unique_lock lk(mu_);
  if (fences_.count(f) == 0) return {ErrorCode::kInvalidArgument, "host backend: unknown fence"};
  const std::uint64_t target = static_cast<HostFence*>(f)->target;
  done_cv_.wait(lk, [&] { return completed_ >= target; });
  return sticky_;
}

Status HostCopyBackend::synchronize(void* stream) {
  std::unique_lock lk(mu_);
  SHARDLOAD_RETURN_IF_ERROR(check_stream(stream));
  const std::uint64_t target = enqueued_;
  done_cv_.wait(lk, [&] { return completed_ >= target; });
  return sticky_;
}

Result<void*> HostCopyBackend::direct_open(const std::string& path) {
  if (!hooks_.direct_reads) return CopyBackend::direct_open(path);
  if (!hooks_.decline_direct.empty() && path.find(hooks_.decline_direct) != std::string::npos) {
    direct_declined_.fetch_add(1);
    return static_cast<void*>(nullptr);
  }
  auto opened = open_regular(path);
  if (!opened) return opened.status();
  const int fd = *opened;
  auto* h = new (std::nothrow) int(fd);
  if (h == nullptr) {
    ::close(fd);
    return Status(ErrorCode::kIo, "host backend: out of memory (direct handle)");
  }
  std::lock_guard lk(mu_);
  handles_.insert(h);
  return static_cast<void*>(h);
}

void HostCopyBackend::direct_close(void* handle) noexcept {
  auto* h = static_cast<int*>(handle);
  {
    std::lock_guard lk(mu_);
    if (handles_.erase(h) == 0) return;
  }
  ::close(*h);
  delete h;
}

Status HostCopyBackend::direct_read(void* handle, std::uint64_t offset, std::size_t bytes,
                                    void* dst) {
  if (!hooks_.direct_reads) return CopyBackend::direct_read(handle, offset, bytes, dst);
  if (hooks_.direct_delay.count() > 0) std::this_thread::sleep_for(hooks_.direct_delay);
  const int fd = *static_cast<int*>(handle);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd, static_cast<std::byte*>(dst) + done, bytes - done,
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return {ErrorCode::kIo, "host backend: direct read of " + std::to_string(bytes) +
                                  " bytes at offset " + std::to_string(offset) + ": got " +
                                  std::to_string(done)};
    }
    done += static_cast<std::size_t>(got);
  }
  direct_reads_.fetch_add(1);
  return Status::ok();
}

std::int64_t HostCopyBackend::live_allocations() const {
  std::lock_guard lk(mu_);
  return static_cast<std::int64_t>(allocations_.size());
}

std::int64_t HostCopyBackend::live_fences() const {
  std::lock_guard lk(mu_);
  return static_cast<std::int64_t>(fences_.size());
}

std::int64_t HostCopyBackend::live_direct_handles() const {
  std::lock_guard lk(mu_);
  return static_cast<std::int64_t>(handles_.size());
}

}  // namespace shardload
