#include "storage/detail/read_ranges.hpp"

#include <algorithm>
#include <memory>

#include "storage/detail/fetch_ahead.hpp"

namespace shardload::detail {

std::vector<CoalescedRead> coalesce_ranges(std::span<const ByteRange> ranges,
                                           const CoalesceLimits& limits) {
  std::vector<std::size_t> order(ranges.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return ranges[a].offset < ranges[b].offset;
  });
  std::vector<CoalescedRead> out;
  for (const std::size_t i : order) {
    const ByteRange& r = ranges[i];
    if (!out.empty()) {
      CoalescedRead& c = out.back();
      const std::uint64_t end = c.offset + c.length;
      const std::uint64_t new_end = std::max(end, r.offset + r.length);
      if (r.length == 0 ||
          (r.offset <= end + limits.hole_bytes && new_end - c.offset <= limits.request_bytes)) {
        if (r.length != 0) c.length = new_end - c.offset;
        c.members.push_back(i);
        continue;
      }
    }
    out.push_back(CoalescedRead{r.offset, r.length, {i}});
  }
  return out;
}

Status fetch_ranges(const File& file, std::span<const ByteRange> ranges,
                    const CoalesceLimits& limits, std::size_t in_flight, std::uint64_t window_bytes,
                    const ConsumeRange& consume) {
  const std::vector<CoalescedRead> reads = coalesce_ranges(ranges, limits);
  // A read's bytes: straight into its one range's destination where it has one, else here.
  std::vector<std::unique_ptr<std::byte[]>> held(reads.size());
  const auto target = [&](std::size_t k) -> std::byte* {
    const CoalescedRead& c = reads[k];
    if (c.members.size() == 1 && ranges[c.members[0]].dst != nullptr) {
      return ranges[c.members[0]].dst;
    }
    return held[k].get();
  };
  return fetch_ahead(
      reads.size(), in_flight, window_bytes,
      [&](std::size_t k) -> Result<std::uint64_t> {
        const CoalescedRead& c = reads[k];
        const bool own = c.members.size() != 1 || ranges[c.members[0]].dst == nullptr;
        if (own) held[k] = std::make_unique_for_overwrite<std::byte[]>(c.length);
        std::byte* dst = target(k);
        // A range longer than request_bytes: parts of that size, one request each.
        const std::uint64_t part = std::max<std::uint64_t>(limits.request_bytes, 1);
        for (std::uint64_t at = 0; at < c.length; at += part) {
          const std::uint64_t n = std::min(part, c.length - at);
          SHARDLOAD_RETURN_IF_ERROR(
              file.read_exact(dst + at, static_cast<std::size_t>(n), c.offset + at));
        }
        return own ? c.length : std::uint64_t{0};
      },
      [&](std::size_t k) -> Status {
        const CoalescedRead& c = reads[k];
        const std::byte* bytes = target(k);
        for (const std::size_t i : c.members) {
          const std::uint64_t at = ranges[i].length == 0 ? 0 : ranges[i].offset - c.offset;
          SHARDLOAD_RETURN_IF_ERROR(consume(i, bytes + at));
        }
        held[k].reset();  // out of the window now
        return Status::ok();
      });
}

}  // namespace shardload::detail
