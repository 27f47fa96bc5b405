#include "base/detail/environment.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace shardload::detail {

namespace {

using Snapshot = std::unordered_map<std::string, std::string>;

std::mutex g_mu;
std::shared_ptr<const Snapshot> g_snapshot;  // guarded by g_mu; null before the first copy
std::atomic<int (*)()> g_may_read{nullptr};

// Only on a thread that may read the environment.
std::shared_ptr<const Snapshot> read_all() {
  auto s = std::make_shared<Snapshot>();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    // getenv answers with the first of a name given twice.
    s->emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return s;
}

}  // namespace

void take_environment_snapshot() {
  std::shared_ptr<const Snapshot> s = read_all();
  const std::lock_guard lock(g_mu);
  g_snapshot = std::move(s);
}

void read_environment_only_when(int (*may_read_now)()) { g_may_read.store(may_read_now); }

std::optional<std::string> environment_value(const char* name) {
  int (*const may_read)() = g_may_read.load();
  std::shared_ptr<const Snapshot> s;
  if (may_read == nullptr) {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }
  if (may_read() != 0) {
    // The copy is renewed too: the threads this one starts (a discovery's listing with the
    // GIL held) read what it read.
    s = read_all();
    const std::lock_guard lock(g_mu);
    g_snapshot = s;
  } else {
    const std::lock_guard lock(g_mu);
    s = g_snapshot;
  }
  if (s == nullptr) return std::nullopt;
  const auto it = s->find(name);
  if (it == s->end()) return std::nullopt;
  return it->second;
}

}  // namespace shardload::detail
