// The in-memory store: the drivers' reference in the contract tests, and the store a test
// injects faults with (failing, short, changing, slow reads).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "storage/detail/stores.hpp"

namespace shardload::detail {

MemoryStore::MemoryStore(std::string name) : location_(std::move(name)) {}

std::string MemoryStore::describe(std::string_view key) const {
  return location_ + std::string(key);
}

Status MemoryStore::put_locked(const std::string& key, std::string bytes) {
  Entry& e = entries_[key];
  e.bytes = std::move(bytes);
  e.generation = next_generation_++;
  return Status::ok();
}

Result<KeyInfo> MemoryStore::stat(std::string_view key) {
  SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return file_error(ErrorCode::kIo, describe(key), "no such key", ENOENT);
  KeyInfo info{it->second.bytes.size(), "g" + std::to_string(it->second.generation)};
  if (auto f = faults_.find(key); f != faults_.end() && f->second.change_after_stat) {
    // Rewritten right after the stat: the same bytes, a new generation, as a file touched or
    // an object uploaded again between a discovery and a load.
    it->second.generation = next_generation_++;
  }
  return info;
}

Result<std::size_t> MemoryStore::read(std::string_view key, std::uint64_t offset,
                                      std::span<std::byte> dst, std::string_view if_generation) {
  SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
  std::chrono::milliseconds delay{0};
  bool hang = false;
  {
    std::lock_guard lock(mu_);
    ++reads_;
    if (auto f = faults_.find(key); f != faults_.end()) {
      delay = f->second.delay;
      hang = f->second.hang;
    }
  }
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  std::unique_lock lock(mu_);
  if (hang) {
    unhung_.wait(lock, [&] {
      const auto f = faults_.find(key);
      return f == faults_.end() || !f->second.hang;
    });
  }
  std::size_t short_by = 0;
  if (auto f = faults_.find(key); f != faults_.end()) {
    if (f->second.fail_times > 0) {
      --f->second.fail_times;
      return f->second.fail;
    }
    short_by = f->second.short_by;
  }
  auto it = entries_.find(key);
  if (it == entries_.end()) return file_error(ErrorCode::kIo, describe(key), "no such key", ENOENT);
  const std::string generation = "g" + std::to_string(it->second.generation);
  if (!if_generation.empty() && generation != if_generation) {
    return file_error(
        ErrorCode::kChanged, describe(key),
        "changed: generation " + generation + ", expected " + std::string(if_generation));
  }
  const std::string& bytes = it->second.bytes;
  if (offset >= bytes.size()) return std::size_t{0};
  std::size_t n =
      std::min<std::size_t>(dst.size(), bytes.size() - static_cast<std::size_t>(offset));
  n -= std::min(n, short_by);
  std::memcpy(dst.data(), bytes.data() + offset, n);
  return n;
}

Result<std::vector<std::string>> MemoryStore::list(std::string_view prefix) {
  SHARDLOAD_RETURN_IF_ERROR(detail::check_store_prefix(prefix));
  std::lock_guard lock(mu_);
  std::vector<std::string> keys;
  for (auto it = entries_.lower_bound(prefix); it != entries_.end(); ++it) {
    const std::string& key = it->first;
    if (!key.starts_with(prefix)) break;
    const std::size_t slash = key.find('/', prefix.size());
    std::string listed = slash == std::string::npos ? key : key.substr(0, slash + 1);
    if (keys.empty() || keys.back() != listed) keys.push_back(std::move(listed));
  }
  if (keys.empty() && !prefix.empty()) {
    return file_error(ErrorCode::kIo, describe(prefix), "no keys under this prefix", ENOENT);
  }
  return keys;
}

Status MemoryStore::step_locked() {
  const std::uint64_t n = steps_++;
  if (auto f = step_faults_.find(n); f != step_faults_.end()) {
    Status st = std::move(f->second);
    step_faults_.erase(f);
    return st;
  }
  return Status::ok();
}

Status MemoryStore::write(std::string_view key, std::span<const std::byte> data) {
  SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
  std::lock_guard lock(mu_);
  SHARDLOAD_RETURN_IF_ERROR(step_locked());
  return put_locked(std::string(key),
                    std::string(reinterpret_cast<const char*>(data.data()), data.size()));
}

Status MemoryStore::remove(std::string_view key) {
  SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
  std::lock_guard lock(mu_);
  SHARDLOAD_RETURN_IF_ERROR(step_locked());
  if (auto it = entries_.find(key); it != entries_.end()) entries_.erase(it);
  return Status::ok();
}

namespace {

// A key of the memory store being written: a buffer of its size, put in by finish(). Each
// write and the finish are steps of the store (fail_step fails them).
class MemorySink final : public KeySink {
 public:
  MemorySink(MemoryStore* store, std::string key, std::uint64_t size)
      : store_(store), key_(std::move(key)), bytes_(size, '\0') {}

  Status write(std::uint64_t offset, std::span<const std::byte> data) override {
    SHARDLOAD_RETURN_IF_ERROR(usable());
    SHARDLOAD_RETURN_IF_ERROR(
        check_within_key(store_->describe(key_), offset, data.size(), bytes_.size()));
    const Status st = store_->sink_step();
    if (!st) return fail(st);
    if (!data.empty()) std::memcpy(bytes_.data() + offset, data.data(), data.size());
    return Status::ok();
  }

  Status finish() override {
    SHARDLOAD_RETURN_IF_ERROR(usable());
    std::string bytes;
    {
      std::lock_guard lock(mu_);
      bytes.swap(bytes_);
      done_ = true;
    }
    const Status st = store_->sink_finish(key_, std::move(bytes));
    if (!st) return fail(st);
    return st;
  }

  void abort() noexcept override {
    std::lock_guard lock(mu_);
    done_ = true;
    std::string().swap(bytes_);
  }

  [[nodiscard]] std::uint64_t size() const override { return size_; }

 private:
  Status usable() {
    std::lock_guard lock(mu_);
    if (!failed_.is_ok()) return failed_;
    if (done_) {
      return file_error(ErrorCode::kInvalidArgument, store_->describe(key_),
                        "the sink is finished or aborted", EBADF);
    }
    return Status::ok();
  }
  Status fail(const Status& st) {
    std::lock_guard lock(mu_);
    if (failed_.is_ok()) failed_ = st;
    return st;
  }

  MemoryStore* store_;
  std::string key_;
  std::string bytes_;
  std::uint64_t size_ = bytes_.size();
  std::mutex mu_;
  Status failed_ = Status::ok();
  bool done_ = false;
};

}  // namespace

Result<std::unique_ptr<KeySink>> MemoryStore::open_key_sink(std::string_view key,
                                                            std::uint64_t size) {
  SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
  if (size > (std::uint64_t{1} << 40)) {
    return file_error(ErrorCode::kIo, describe(key),
                      "a key of " + std::to_string(size) + " bytes does not fit in memory", ENOMEM);
  }
  return std::unique_ptr<KeySink>(new MemorySink(this, std::string(key), size));
}

namespace {

// A key of the memory store made before, written into in place (reopen_sink): each write a step
// of the store, copied into the key under its lock; nothing to put at finish.
class MemoryReopenedSink final : public KeySink {
 public:
  MemoryReopenedSink(MemoryStore* store, std::string key, std::uint64_t size)
      : store_(store), key_(std::move(key)), size_(size) {}

  Status write(std::uint64_t offset, std::span<const std::byte> data) override {
    {
      std::lock_guard lock(mu_);
      if (!failed_.is_ok()) return failed_;
      if (done_) return closed();
    }
    // Passing the size is the caller's mistake, refused without failing the sink (as a new
    // key's sink does).
    SHARDLOAD_RETURN_IF_ERROR(check_within_key(store_->describe(key_), offset, data.size(), size_));
    const Status st = store_->sink_write_into(key_, offset, data);
    if (!st) {
      std::lock_guard lock(mu_);
      if (failed_.is_ok()) failed_ = st;
    }
    return st;
  }

  Status finish() override {
    std::lock_guard lock(mu_);
    if (done_) return closed();
    done_ = true;
    return failed_;
  }

  void abort() noexcept override {
    std::lock_guard lock(mu_);
    done_ = true;
  }

  [[nodiscard]] std::uint64_t size() const override { return size_; }

 private:
  Status closed() const {
    return file_error(ErrorCode::kInvalidArgument, store_->describe(key_),
                      "the sink is finished or aborted", EBADF);
  }

  MemoryStore* store_;
  std::string key_;
  std::uint64_t size_;
  std::mutex mu_;
  Status failed_ = Status::ok();
  bool done_ = false;
};

}  // namespace

Result<std::unique_ptr<KeySink>> MemoryStore::reopen_key_sink(std::string_view key) {
  SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return file_error(ErrorCode::kIo, describe(key), "cannot open for writing: no such key",
                      ENOENT);
  }
  return std::unique_ptr<KeySink>(
      new MemoryReopenedSink(this, std::string(key), it->second.bytes.size()));
}

Status MemoryStore::sink_write_into(const std::string& key, std::uint64_t offset,
                                    std::span<const std::byte> data) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return file_error(ErrorCode::kIo, describe(key), "cannot write: the key is gone", ENOENT);
  }
  std::string& bytes = it->second.bytes;
  SHARDLOAD_RETURN_IF_ERROR(check_within_key(describe(key), offset, data.size(), bytes.size()));
  SHARDLOAD_RETURN_IF_ERROR(step_locked());
  if (!data.empty()) std::memcpy(bytes.data() + offset, data.data(), data.size());
  it->second.generation = next_generation_++;
  return Status::ok();
}

Status MemoryStore::sink_step() {
  std::lock_guard lock(mu_);
  return step_locked();
}

Status MemoryStore::sink_finish(const std::string& key, std::string bytes) {
  std::lock_guard lock(mu_);
  SHARDLOAD_RETURN_IF_ERROR(step_locked());
  return put_locked(key, std::move(bytes));
}

namespace {

constexpr std::string_view kStagingMark = ".shardload-tmp-memory-";

// The staging prefix's parts: what comes before the destination's last segment, and that
// segment.
std::pair<std::string, std::string> split_name(std::string_view name) {
  const std::size_t slash = name.rfind('/');
  if (slash == std::string_view::npos) return {std::string(), std::string(name)};
  return {std::string(name.substr(0, slash + 1)), std::string(name.substr(slash + 1))};
}

}  // namespace

Result<Staging> MemoryStore::stage(std::string_view name, const PublishSteps& steps) {
  SHARDLOAD_RETURN_IF_ERROR(check_store_key(name));
  {
    std::lock_guard lock(mu_);
    SHARDLOAD_RETURN_IF_ERROR(step_locked());
  }
  if (steps.check) {
    std::vector<ReplacedKey> replaced;
    SHARDLOAD_RETURN_IF_ERROR(steps.check(&replaced));
  }
  std::lock_guard lock(mu_);
  const auto [parent, leaf] = split_name(name);
  Staging s;
  s.name = std::string(name);
  s.prefix = parent + "." + leaf + std::string(kStagingMark) + std::to_string(staged_++) + "/";
  s.location = location_ + s.prefix;
  return s;
}

Status MemoryStore::publish(const Staging& staging, const PublishSteps& steps, bool* published) {
  *published = false;
  SHARDLOAD_RETURN_IF_ERROR(check_store_key(staging.name));
  if (staging.prefix.find(kStagingMark) == std::string::npos || staging.prefix.back() != '/') {
    return Status(ErrorCode::kInvalidArgument,
                  "save: expected a staging prefix, found '" + staging.prefix + "'");
  }
  if (steps.seal) SHARDLOAD_RETURN_IF_ERROR(steps.seal(staging.location));
  {
    std::lock_guard lock(mu_);
    SHARDLOAD_RETURN_IF_ERROR(step_locked());
  }
  std::vector<ReplacedKey> replaced;
  if (steps.check) SHARDLOAD_RETURN_IF_ERROR(steps.check(&replaced));
  std::lock_guard lock(mu_);
  SHARDLOAD_RETURN_IF_ERROR(step_locked());
  const std::string dest = staging.name + "/";
  const auto changed = [&](const std::string& key) {
    return file_error(ErrorCode::kIo, describe(staging.name),
                      "'" + key + "' changed since the check; nothing was replaced", EEXIST);
  };
  if (entries_.count(staging.name) != 0) return changed(staging.name);
  // Everything at the destination must be a replaced key of its checked generation.
  std::map<std::string, std::string> allowed;
  for (const ReplacedKey& r : replaced) allowed.emplace(dest + r.key, r.generation);
  for (auto it = entries_.lower_bound(dest); it != entries_.end() && it->first.starts_with(dest);
       ++it) {
    const auto a = allowed.find(it->first);
    if (a == allowed.end() ||
        (!a->second.empty() && a->second != "g" + std::to_string(it->second.generation))) {
      return changed(it->first.substr(dest.size()));
    }
  }
  // The swap: the old keys out, the staged ones in under their final names.
  entries_.erase(entries_.lower_bound(dest), entries_.lower_bound(staging.name + "0"));
  for (auto it = entries_.lower_bound(staging.prefix);
       it != entries_.end() && it->first.starts_with(staging.prefix);) {
    entries_[dest + it->first.substr(staging.prefix.size())] = std::move(it->second);
    it = entries_.erase(it);
  }
  *published = true;
  return Status::ok();
}

void MemoryStore::discard(const Staging& staging, const PublishSteps& /*steps*/) noexcept {
  if (staging.prefix.find(kStagingMark) == std::string::npos || staging.prefix.back() != '/') {
    return;
  }
  std::lock_guard lock(mu_);
  for (auto it = entries_.lower_bound(staging.prefix);
       it != entries_.end() && it->first.starts_with(staging.prefix);) {
    it = entries_.erase(it);
  }
}

void MemoryStore::fail_step(std::uint64_t n, Status status) {
  std::lock_guard lock(mu_);
  step_faults_[n] = std::move(status);
}

std::uint64_t MemoryStore::steps() const {
  std::lock_guard lock(mu_);
  return steps_;
}

void MemoryStore::inject(std::string key, MemoryFault fault) {
  std::lock_guard lock(mu_);
  faults_[std::move(key)] = std::move(fault);
  unhung_.notify_all();
}

std::uint64_t MemoryStore::reads() const {
  std::lock_guard lock(mu_);
  return reads_;
}

}  // namespace shardload::detail
