// The element size a chunked dataset's layout message records, read from the dataset's object
// header by the reader itself. HDF5 1.10 sizes every unfiltered chunk it reads by that field
// and never compares it with the dataset's type (newer HDF5s refuse the dataset when they
// differ), and no call of its API returns it: a file that says 16 where float64 needs 8 reads
// each chunk twice as long, and the one next to the end of the file past it, as zeros.
#include <array>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "readers/detail/hdf5.hpp"

namespace shardload::detail::hdf5 {

namespace {

// Bounds on what one header may make the parser read: HDF5's own headers are a few hundred
// bytes, continuation blocks a few KiB (a dataset with thousands of attributes in a version 1
// header: a block of a few MiB). A header past them is refused, not left unchecked: HDF5 1.10
// reads any number of blocks of any size, so a crafted header that hid its layout message
// past a bound would otherwise read its chunks at the size it lies about. A block named twice
// (a loop of continuations) is refused too.
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{64} << 20;
constexpr std::size_t kMaxBlocks = 1024;

constexpr std::uint16_t kLayoutMessage = 0x0008;
constexpr std::uint16_t kContinuationMessage = 0x0010;

std::uint64_t little_endian(const std::byte* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i > 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i - 1]);
  return v;
}

struct Block {
  std::uint64_t offset = 0;  // in the file, the base address added
  std::uint64_t size = 0;
  bool signed_block = false;  // a version 2 continuation block: "OCHK" first, a checksum last
};

// The element size of a layout message's data (`d`, `n` bytes); nullopt where it is not a
// chunked layout or not one of the versions parsed here.
std::optional<std::uint64_t> layout_element_size(const std::byte* d, std::size_t n,
                                                 std::size_t sizeof_addr) {
  if (n < 2) return std::nullopt;
  const unsigned version = std::to_integer<unsigned>(d[0]);
  std::size_t rank = 0, at = 0, width = 4;
  if (version == 1 || version == 2) {
    // Version, dimensionality, class, five reserved bytes, the address, then the dimensions.
    if (n < 8 || std::to_integer<unsigned>(d[2]) != 2) return std::nullopt;
    rank = std::to_integer<std::size_t>(d[1]);
    at = 8 + sizeof_addr;
  } else if (version == 3) {
    // Version, class, dimensionality, the index address, then the dimensions.
    if (n < 3 || std::to_integer<unsigned>(d[1]) != 2) return std::nullopt;
    rank = std::to_integer<std::size_t>(d[2]);
    at = 3 + sizeof_addr;
  } else if (version == 4 || version == 5) {
    // Version, class, flags, dimensionality, the bytes of each dimension, then the dimensions.
    if (n < 5 || std::to_integer<unsigned>(d[1]) != 2) return std::nullopt;
    rank = std::to_integer<std::size_t>(d[3]);
    width = std::to_integer<std::size_t>(d[4]);
    at = 5;
    if (width < 1 || width > 8) return std::nullopt;
  } else {
    return std::nullopt;
  }
  // The dimensions count the element size as the last one.
  if (rank < 2 || at + rank * width > n) return std::nullopt;
  return little_endian(d + at + (rank - 1) * width, width);
}

}  // namespace

Result<std::optional<std::uint64_t>> chunk_layout_element_size(const Hdf5Api& api, hid_t file,
                                                               hid_t dataset,
                                                               const ReadBytes& read) {
  const std::optional<std::uint64_t> unknown;
  if (api.H5Oget_info2 == nullptr) return unknown;
  Hid fcpl(api.H5Fget_create_plist(file), api.H5Pclose);
  std::size_t sizeof_addr = 0, sizeof_size = 0;
  hsize_t userblock = 0;
  if (!fcpl.valid() || api.H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0 ||
      api.H5Pget_userblock(fcpl.get(), &userblock) < 0 || sizeof_addr < 2 || sizeof_addr > 8 ||
      sizeof_size < 2 || sizeof_size > 8) {
    return unknown;
  }
  H5O_info_t info{};
  if (api.H5Oget_info2(dataset, &info, H5O_INFO_BASIC) < 0 || info.addr == HADDR_UNDEF) {
    return unknown;
  }
  // Addresses in the file are relative to its base, which follows the user block.
  const std::uint64_t base = userblock;
  const auto fetch = [&](std::uint64_t offset, std::uint64_t size) {
    std::optional<std::vector<std::byte>> out;
    if (size > kMaxHeaderBytes || offset > UINT64_MAX - size) return out;
    std::vector<std::byte> bytes(static_cast<std::size_t>(size));
    if (read(offset, bytes.size(), bytes.data())) out = std::move(bytes);
    return out;
  };

  // The header's prefix, then its first block of messages.
  const std::uint64_t start = base + info.addr;
  std::optional<std::vector<std::byte>> prefix = fetch(start, 16);
  if (!prefix) return unknown;
  const std::byte* h = prefix->data();
  bool v2 = false;
  std::deque<Block> blocks;
  unsigned header_flags = 0;
  if (std::memcmp(h, "OHDR", 4) == 0) {
    if (std::to_integer<unsigned>(h[4]) != 2) return unknown;
    v2 = true;
    header_flags = std::to_integer<unsigned>(h[5]);
    std::size_t at = 6;
    if (header_flags & 0x20u) at += 16;  // access, modification, change and birth times
    if (header_flags & 0x10u) at += 4;   // attribute storage phase change values
    const std::size_t width = std::size_t{1} << (header_flags & 0x3u);
    std::optional<std::vector<std::byte>> more = fetch(start, at + width);
    if (!more) return unknown;
    blocks.push_back({start + at + width, little_endian(more->data() + at, width), false});
  } else {
    if (std::to_integer<unsigned>(h[0]) != 1) return unknown;
    // Twelve bytes of prefix, the messages aligned to eight.
    blocks.push_back({start + 16, little_endian(h + 8, 4), false});
  }

  // Each block read once, all of it: HDF5 1.10 reads every block to its end whatever a version
  // 1 prefix counts as messages (it does not enforce the count), so the count is not trusted.
  const auto refuse = [](const std::string& why) {
    return Status(ErrorCode::kFormat,
                  "its object header " + why +
                      ": its chunk layout cannot be checked against its type (HDF5 1.10 would "
                      "read each chunk at the size the layout records): the file is damaged");
  };
  std::unordered_set<std::uint64_t> visited;
  std::uint64_t total = 0;
  while (!blocks.empty()) {
    const Block block = blocks.front();
    blocks.pop_front();
    if (visited.size() == kMaxBlocks) {
      return refuse("continues in more than " + std::to_string(kMaxBlocks) + " blocks");
    }
    if (!visited.insert(block.offset).second) {
      return refuse("continues twice into the block at byte " + std::to_string(block.offset) +
                    " (a loop)");
    }
    if (block.size > kMaxHeaderBytes - total) {
      return refuse("holds more than " + std::to_string(kMaxHeaderBytes >> 20) + " MiB");
    }
    total += block.size;
    std::optional<std::vector<std::byte>> bytes = fetch(block.offset, block.size);
    if (!bytes) return unknown;
    std::size_t p = 0, end = bytes->size();
    if (block.signed_block) {
      if (end < 8 || std::memcmp(bytes->data(), "OCHK", 4) != 0) return unknown;
      p = 4;
      end -= 4;  // the checksum
    }
    const std::size_t head = v2 ? ((header_flags & 0x04u) ? 6 : 4) : 8;
    // What is left after the last message of a version 2 block is a gap, not a message.
    while (p + head <= end) {
      const std::byte* m = bytes->data() + p;
      const std::uint16_t type = v2 ? std::to_integer<std::uint16_t>(m[0])
                                    : static_cast<std::uint16_t>(little_endian(m, 2));
      const std::size_t size = little_endian(m + (v2 ? 1 : 2), 2);
      const std::size_t data = p + head;
      if (size > end - data) return unknown;
      if (type == kLayoutMessage) {
        return layout_element_size(bytes->data() + data, size, sizeof_addr);
      }
      if (type == kContinuationMessage) {
        if (size < sizeof_addr + sizeof_size) return unknown;
        const std::uint64_t at = little_endian(bytes->data() + data, sizeof_addr);
        const std::uint64_t length = little_endian(bytes->data() + data + sizeof_addr, sizeof_size);
        if (at > UINT64_MAX - base) return unknown;
        blocks.push_back({base + at, length, v2});
      }
      p = data + size;
    }
  }
  return unknown;
}

Status chunk_element_size_matches(const Hdf5Api& api, hid_t file, hid_t dataset, hid_t type,
                                  const ReadBytes& read) {
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  if (!dcpl.valid() || api.H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return Status::ok();
  SHARDLOAD_ASSIGN_OR_RETURN(const std::optional<std::uint64_t> recorded,
                             chunk_layout_element_size(api, file, dataset, read));
  const std::uint64_t elements = api.H5Tget_size(type);
  if (!recorded || elements == 0 || *recorded == elements) return Status::ok();
  return Status(ErrorCode::kFormat, "its chunk layout records elements of " +
                                        std::to_string(*recorded) +
                                        " bytes, where its type's are " + std::to_string(elements) +
                                        " (HDF5 1.10 would read each chunk at that size): the "
                                        "file is damaged");
}

}  // namespace shardload::detail::hdf5
