// What the store tests share: the drivers their fixtures run on, and bytes from text.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>

#include "shardload/storage.hpp"
#include "storage/detail/stores.hpp"
#include "util.hpp"

namespace shardload::testing {

inline std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// A fresh, empty store of the driver a parameterised test names: "memory", or "local" (a store
// opened on `dir`). nullptr, with the failure recorded, when the local store cannot be opened.
inline std::unique_ptr<Store> open_test_store(const std::string& driver, const TempDir& dir) {
  if (driver == "memory") return std::make_unique<detail::MemoryStore>();
  auto s = open_store(dir.path());
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(*s) : nullptr;
}

}  // namespace shardload::testing
