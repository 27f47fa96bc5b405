// libFuzzer target: the .npz reader on arbitrary archives. Discovery must return a status for
// anything, and an archive it accepts must read whole (or fail with a status) without reading
// outside the file or writing outside the destination.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardload/fill.hpp"
#include "shardload/layout.hpp"

namespace {

// One file for every input, removed when the fuzzer exits.
struct TempFile {
  std::string path;
  TempFile() {
    char tmpl[] = "/tmp/npz_fuzz_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) std::abort();
    ::close(fd);
    path = tmpl;
  }
  ~TempFile() { ::unlink(path.c_str()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const TempFile tmp;
  const std::string& path = tmp.path;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  shardload::DiscoverOptions options;
  options.format.format = shardload::Format::kNpz;
  auto layout = shardload::try_discover_paths({path}, options);
  if (!layout) return 0;
  // Deflate expands at most about 1032:1; a larger claim is the reader's to refuse.
  const std::uint64_t bytes = layout->total_bytes();
  if (bytes > (std::uint64_t{1} << 26)) return 0;
  std::vector<std::byte> dst(static_cast<std::size_t>(bytes));
  (void)shardload::fill_rows(*layout, 0, layout->total_rows(), dst.data());
  return 0;
}
