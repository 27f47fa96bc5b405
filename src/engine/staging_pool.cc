// The device fill's staging side: the copy backend's defaults, the staging options (and the
// environment's), and the pool of pinned staging buffers.
#include <cstdlib>
#include <new>
#include <string>

#include "base/detail/environment.hpp"
#include "engine/detail/device_fill.hpp"
#include "shardload/device_fill.hpp"
#include "storage/detail/context.hpp"

namespace shardload {

// ---- backend defaults ----------------------------------------------------------

Result<void*> CopyBackend::direct_open(const std::string& path) {
  return Status(ErrorCode::kInvalidArgument,
                std::string(name()) + " backend: no direct reads (opening " + path + ")");
}

void CopyBackend::direct_close(void* /*handle*/) noexcept {}

Status CopyBackend::direct_read(void* /*handle*/, std::uint64_t /*offset*/, std::size_t /*bytes*/,
                                void* /*dst*/) {
  return {ErrorCode::kInvalidArgument, std::string(name()) + " backend: no direct reads"};
}

namespace {

constexpr std::size_t kMaxBufferBytes = std::size_t{4} << 30;
constexpr std::size_t kMaxTotalBytes = std::size_t{64} << 30;

}  // namespace

Status detail::env_number(const char* var, std::uint64_t lo, std::uint64_t hi, std::uint64_t* out) {
  // Not getenv: a staging pool may be made on an engine thread (base/detail/environment.hpp).
  const std::optional<std::string> text = detail::environment_value(var);
  if (!text) return Status::ok();
  const std::string s(*text);
  std::uint64_t v = 0;
  bool ok = !s.empty() && s.size() <= 19;
  for (const char c : s) {
    if (c < '0' || c > '9') ok = false;
    if (ok) v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (!ok || v < lo || v > hi) {
    return {ErrorCode::kInvalidArgument, std::string(var) + ": expected a whole number in [" +
                                             std::to_string(lo) + ", " + std::to_string(hi) +
                                             "], found '" + s + "'"};
  }
  *out = v;
  return Status::ok();
}

Status validate(const StagingOptions& o) {
  if (o.buffer_bytes < 1 || o.buffer_bytes > kMaxBufferBytes) {
    return {ErrorCode::kInvalidArgument, "staging buffer_bytes: expected 1 to " +
                                             std::to_string(kMaxBufferBytes) + ", found " +
                                             std::to_string(o.buffer_bytes)};
  }
  if (o.buffers < 2 || o.buffers > 1024) {
    return {ErrorCode::kInvalidArgument,
            "staging buffers: expected 2 to 1024 (two at least, so that a read overlaps a "
            "copy), found " +
                std::to_string(o.buffers)};
  }
  if (o.buffer_bytes * static_cast<std::size_t>(o.buffers) > kMaxTotalBytes) {
    return {ErrorCode::kInvalidArgument, "staging total: " + std::to_string(o.buffers) +
                                             " buffers of " + std::to_string(o.buffer_bytes) +
                                             " bytes exceed " + std::to_string(kMaxTotalBytes) +
                                             " bytes"};
  }
  return Status::ok();
}

Status staging_options_from_env(StagingOptions* o) {
  std::uint64_t bytes = o->buffer_bytes;
  std::uint64_t count = static_cast<std::uint64_t>(o->buffers);
  SHARDLOAD_RETURN_IF_ERROR(
      detail::env_number("SHARDLOAD_STAGING_BYTES", 1, kMaxBufferBytes, &bytes));
  SHARDLOAD_RETURN_IF_ERROR(detail::env_number("SHARDLOAD_STAGING_BUFFERS", 2, 1024, &count));
  o->buffer_bytes = static_cast<std::size_t>(bytes);
  o->buffers = static_cast<int>(count);
  return validate(*o);
}

// ---- staging pool --------------------------------------------------------------

Result<std::unique_ptr<StagingPool>> StagingPool::create(CopyBackend& backend,
                                                         const StagingOptions& options) {
  SHARDLOAD_RETURN_IF_ERROR(validate(options));
  std::unique_ptr<StagingPool> pool(new (std::nothrow) StagingPool(backend));
  if (!pool) return Status(ErrorCode::kIo, "staging pool: out of host memory");
  pool->buffer_bytes_ = options.buffer_bytes;
  pool->slots_.reserve(static_cast<std::size_t>(options.buffers));
  // On failure the pool's destructor frees what was allocated so far.
  for (int i = 0; i < options.buffers; ++i) {
    auto mem = backend.alloc_staging(options.buffer_bytes);
    if (!mem) {
      return mem.status().with_context("staging pool: buffer " + std::to_string(i) + " of " +
                                       std::to_string(options.buffers) + " (" +
                                       std::to_string(options.buffer_bytes) + " bytes each)");
    }
    pool->slots_.push_back(Slot{static_cast<std::byte*>(*mem), nullptr, false});
    auto fence = backend.create_fence();
    if (!fence) return fence.status().with_context("staging pool: fence " + std::to_string(i));
    pool->slots_.back().fence = *fence;
  }
  return pool;
}

StagingPool::~StagingPool() {
  for (auto& s : slots_) {
    // A copy may still read this memory only if a failed fill could not
    // wait for it; wait here rather than free memory under a transfer.
    if (s.pending && s.fence != nullptr) (void)backend_->wait(s.fence);
    if (s.fence != nullptr) backend_->destroy_fence(s.fence);
    backend_->free_staging(s.data);
  }
}

// ---- the process's device resources -------------------------------------------

Result<DeviceResources*> device_resources(
    const std::string& device,
    const std::function<Result<std::unique_ptr<CopyBackend>>()>& make_backend) {
  return detail::StorageContext::process().keep<DeviceResources>(
      "device fill " + device, [&]() -> Result<std::unique_ptr<DeviceResources>> {
        std::unique_ptr<DeviceResources> r(new (std::nothrow) DeviceResources());
        if (!r) return Status(ErrorCode::kIo, "device resources: out of host memory");
        StagingOptions staging;
        SHARDLOAD_RETURN_IF_ERROR(staging_options_from_env(&staging));
        SHARDLOAD_RETURN_IF_ERROR(device_fill_options_from_env(&r->options));
        SHARDLOAD_ASSIGN_OR_RETURN(r->backend, make_backend());
        if (!r->backend) return Status(ErrorCode::kIo, "device resources: no copy backend");
        SHARDLOAD_ASSIGN_OR_RETURN(r->pool, StagingPool::create(*r->backend, staging));
        r->options.readers = nullptr;  // the work pool's threads
        return r;
      });
}

}  // namespace shardload
