// libFuzzer target: numbering patterns and file-name matching, which see
// user strings and directory entries. A name that matches must format back
// to itself, and natural order must be a strict weak order on the pair.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "shardload/source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const auto cut = all.find('\n');
  const std::string_view pattern = all.substr(0, cut);
  const std::string_view name = cut == std::string_view::npos ? "" : all.substr(cut + 1);
  if (shardload::natural_less(pattern, name) && shardload::natural_less(name, pattern)) {
    std::abort();
  }
  if (shardload::natural_less(name, name)) std::abort();
  auto p = shardload::NumberPattern::parse(pattern);
  if (!p) return 0;
  const std::int64_t n = p->match(name);
  if (n >= 0 && p->format(n) != name) std::abort();
  return 0;
}
