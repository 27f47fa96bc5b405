// One discovery may list a remote directory twice: the scan that tells its format and the
// resolve of the numbered pattern it chose. A LIST of a large prefix is a page per thousand
// objects, so while a ListingMemo lives on a thread, a second listing of the same URL on
// that thread is answered from the first. It lives for one discovery only: the next one
// lists again and sees what changed since.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace shardload::detail {

class ListingMemo {
 public:
  ListingMemo();
  ~ListingMemo();
  ListingMemo(const ListingMemo&) = delete;
  ListingMemo& operator=(const ListingMemo&) = delete;

  // The names kept for `url` by the innermost memo on this thread, or nullptr.
  static const std::vector<std::string>* find(const std::string& url);
  // Keeps `names` for `url` where a memo lives on this thread (else does nothing).
  static void keep(const std::string& url, const std::vector<std::string>& names);

 private:
  ListingMemo* outer_;
  std::map<std::string, std::vector<std::string>> kept_;
};

}  // namespace shardload::detail
