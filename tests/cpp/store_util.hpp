// What the store tests share: the drivers their fixtures run on, and bytes from text.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
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

// Every regular file below `root` written to `store` as the key `prefix` + its path below
// `root`: the files a test's Python writer made (h5py, zarr, pyarrow), as a store's keys.
inline ::testing::AssertionResult put_tree(Store& store, const std::filesystem::path& root,
                                           const std::string& prefix) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const std::string key = prefix + std::filesystem::relative(e.path(), root).generic_string();
    if (const Status st = store.write(key, bytes_of(bytes)); !st) {
      return ::testing::AssertionFailure() << key << ": " << st.message();
    }
  }
  return ::testing::AssertionSuccess();
}

// The bytes of `key`, or "<missing>" / "<error>".
inline std::string read_key(Store& store, const std::string& key) {
  auto info = store.stat(key);
  if (!info) return "<missing>";
  std::string out(info->size, '\0');
  auto got = store.read(key, 0, std::as_writable_bytes(std::span<char>(out)), "");
  if (!got) return "<error>";
  out.resize(*got);
  return out;
}

// Every key of the store below `prefix` with its bytes and generation, prefixes (directories)
// with '/' and no bytes: what a test compares before and after.
inline void walk(Store& store, const std::string& prefix, std::map<std::string, std::string>* out) {
  auto keys = store.list(prefix);
  if (!keys) return;
  for (const std::string& k : *keys) {
    if (k.back() == '/') {
      (*out)[k] = "";
      walk(store, k, out);
    } else {
      auto info = store.stat(k);
      (*out)[k] = read_key(store, k) + "@" + (info ? info->generation : "?");
    }
  }
}

inline std::map<std::string, std::string> everything(Store& store) {
  std::map<std::string, std::string> out;
  walk(store, "", &out);
  return out;
}

// A parameterised test's fresh store (the driver its parameter names) holding one key beside
// what a test writes ("keep/x", "mine"), which nothing the test does may touch.
class StoreWithAKeyBeside : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    store_ = open_test_store(GetParam(), dir_);
    ASSERT_NE(store_, nullptr);
    ASSERT_TRUE(store_->write("keep/x", bytes_of("mine")));
  }
  TempDir dir_;
  std::unique_ptr<Store> store_;
};

}  // namespace shardload::testing
