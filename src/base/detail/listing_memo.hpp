// One discovery may list a remote directory twice: the scan that tells its format and the
// resolve of the numbered pattern it chose. A LIST of a large prefix is a page per thousand
// objects, so while a ListingMemo lives on a thread, a second listing of the same URL on
// that thread is answered from the first. It lives for one discovery only: the next one
// lists again and sees what changed since.
//
// It also asks ahead: a remote directory's discovery asks, one after the other, for its
// manifest, whether it is a store, and its listing, each a round trip to the store.
// look_ahead asks the last two as a job of the process's work pool while the caller asks the
// first (run on the caller when it needs the answers and no thread has taken the job).
#pragma once

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/detail/work_pool.hpp"
#include "shardload/format.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

class ListingMemo {
 public:
  ListingMemo();
  ~ListingMemo();  // waits for what it asked ahead
  ListingMemo(const ListingMemo&) = delete;
  ListingMemo& operator=(const ListingMemo&) = delete;

  // The listing of `url` kept, or asked ahead (waited for), by the innermost memo on this
  // thread; nullopt when it has none.
  static std::optional<Result<std::vector<std::string>>> find(const std::string& url);
  // Keeps `names` for `url` where a memo lives on this thread (else does nothing).
  static void keep(const std::string& url, const std::vector<std::string>& names);
  // Whether `directory` is a store (the format, or kAuto) where this thread's memo asked it
  // ahead (waited for); nullopt when it did not.
  static std::optional<Format> store(const std::string& directory);

  // As a job of the process's work pool: store_of(dir_url) when it is given, then, unless that
  // found a store (whose listing is as long as it has chunks), the listing of the remote
  // directory `dir_url`. Their answers wait for find and store (which run the job themselves
  // where no thread has taken it yet).
  void look_ahead(const std::string& dir_url, std::function<Format(const std::string&)> store_of);

 private:
  using Listing = std::optional<Result<std::vector<std::string>>>;  // nullopt: not listed
  ListingMemo* outer_;
  std::map<std::string, std::vector<std::string>> kept_;
  std::map<std::string, std::shared_future<Listing>> ahead_lists_;
  std::map<std::string, std::shared_future<std::optional<Format>>>
      ahead_stores_;            // nullopt: not asked
  std::shared_ptr<Job> ahead_;  // waited for by the destructor, before the maps go
};

}  // namespace shardload::detail
