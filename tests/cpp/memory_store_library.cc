// A test-only library (never installed): in-memory stores (detail::MemoryStore) registered under
// a scheme in libshardload's registry of store schemes, with the faults a test injects per key,
// behind a C interface. The Python tests load it with ctypes and read from it through
// shardload.discover and shardload.numpy.load (tests/python/test_store_schemes.py), as a user's
// own store driver would be read.
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "shardload/store_schemes.hpp"
#include "storage/detail/stores.hpp"

namespace {

using shardload::detail::MemoryFault;
using shardload::detail::MemoryStore;

std::mutex g_mu;
std::map<std::string, std::shared_ptr<MemoryStore>> g_stores;  // by scheme

std::shared_ptr<MemoryStore> store_of(const char* scheme) {
  std::lock_guard lock(g_mu);
  const auto it = g_stores.find(scheme);
  return it == g_stores.end() ? nullptr : it->second;
}

}  // namespace

// Registers `scheme` over a new, empty store that serves the location "SCHEME://bucket/" (any
// other is "no such store"), its reads limited to `deadline_ms` (0: none). 1 on success.
extern "C" int shardload_test_memory_register(const char* scheme, int deadline_ms) {
  const std::string root = std::string(scheme) + "://bucket/";
  auto store = std::make_shared<MemoryStore>(root);
  shardload::StoreScheme s;
  s.scheme = scheme;
  s.read_deadline = std::chrono::milliseconds(deadline_ms);
  s.open = [store, root](
               std::string_view location) -> shardload::Result<std::shared_ptr<shardload::Store>> {
    if (location != root) {
      return shardload::file_error(shardload::ErrorCode::kIo, std::string(location),
                                   "no such store", ENOENT);
    }
    return std::shared_ptr<shardload::Store>(store);
  };
  if (!shardload::register_store_scheme(std::move(s)).is_ok()) return 0;
  std::lock_guard lock(g_mu);
  g_stores[scheme] = std::move(store);
  return 1;
}

extern "C" void shardload_test_memory_unregister(const char* scheme) {
  shardload::unregister_store_scheme(scheme);
  std::lock_guard lock(g_mu);
  g_stores.erase(scheme);
}

// Writes `n` bytes as `key` (a new generation). 1 on success.
extern "C" int shardload_test_memory_write(const char* scheme, const char* key, const void* data,
                                           std::size_t n) {
  const auto store = store_of(scheme);
  if (store == nullptr) return 0;
  return store->write(key, std::span<const std::byte>(static_cast<const std::byte*>(data), n))
                 .is_ok()
             ? 1
             : 0;
}

// The next `times` reads of `key` fail with `message` (kIo).
extern "C" int shardload_test_memory_fail(const char* scheme, const char* key, const char* message,
                                          int times) {
  const auto store = store_of(scheme);
  if (store == nullptr) return 0;
  store->inject(key, MemoryFault{.fail = shardload::Status(shardload::ErrorCode::kIo, message),
                                 .fail_times = times});
  return 1;
}

// Each read of `key` returns `by` bytes fewer than it should (a store that lies).
extern "C" int shardload_test_memory_short(const char* scheme, const char* key, std::size_t by) {
  const auto store = store_of(scheme);
  if (store == nullptr) return 0;
  store->inject(key, MemoryFault{.fail = shardload::Status(), .short_by = by});
  return 1;
}

// Each read of `key` sleeps `ms` milliseconds first.
extern "C" int shardload_test_memory_delay(const char* scheme, const char* key, int ms) {
  const auto store = store_of(scheme);
  if (store == nullptr) return 0;
  store->inject(key,
                MemoryFault{.fail = shardload::Status(), .delay = std::chrono::milliseconds(ms)});
  return 1;
}

// Reads served so far by the store of `scheme`.
extern "C" unsigned long long shardload_test_memory_reads(const char* scheme) {
  const auto store = store_of(scheme);
  return store == nullptr ? 0 : store->reads();
}

// Preloaded into another program (LD_PRELOAD, the command line's tests), it registers the scheme
// named by SHARDLOAD_TEST_MEMORY_SCHEME, if set, as the program starts (after the stores above,
// which are defined before it in this file).
namespace {
[[maybe_unused]] const bool g_registered_from_environment = [] {
  const char* scheme = std::getenv("SHARDLOAD_TEST_MEMORY_SCHEME");
  return scheme != nullptr && *scheme != '\0' && shardload_test_memory_register(scheme, 0) == 1;
}();
}  // namespace
