// libFuzzer target: the Arrow IPC footer and record batch metadata parsers on arbitrary bytes
// taken as a whole file. They must return a status for anything, and the blocks they accept
// must lie inside the file, where the batches' metadata is then parsed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "readers/detail/ipc_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shardload::detail;
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  if (size < 10) return 0;
  auto len = ipc_footer_length("fuzz", file.last(10));
  if (!len) return 0;
  const auto n = static_cast<std::uint64_t>(*len);
  if (n > size - 10) return 0;
  auto blocks =
      parse_ipc_footer("fuzz", file.subspan(size - 10 - n, n), static_cast<std::int64_t>(size));
  if (!blocks) return 0;
  for (const IpcBlock& b : *blocks) {
    if (b.offset < 8 || b.metadata < 8 || b.body < 0 ||
        b.end() > static_cast<std::int64_t>(size - 10 - n)) {
      std::abort();
    }
    auto rows = parse_ipc_batch_rows("fuzz", file.subspan(static_cast<std::size_t>(b.offset),
                                                          static_cast<std::size_t>(b.metadata)));
    if (rows && *rows < 0) std::abort();
  }
  return 0;
}
