// The two parts of an Arrow IPC file (Feather v2) a remote read needs before Arrow decodes
// anything: where the footer says each record batch lies, and how many rows a batch's
// metadata says it has. Arrow's reader exposes neither (it reads a batch's body to report its
// rows), so an object's batches would cost a request each to count and could not be fetched as
// one range. Both are read here from the flatbuffers themselves, every offset bounds-checked:
// the bytes come from a store and may be anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardload/status.hpp"

namespace shardload::detail {

// A record batch's place in the file: its encapsulated message (prefix and flatbuffer,
// `metadata` bytes) at `offset`, its body right after it.
struct IpcBlock {
  std::int64_t offset = 0;
  std::int64_t metadata = 0;
  std::int64_t body = 0;
  [[nodiscard]] std::int64_t end() const { return offset + metadata + body; }
};

// The footer's length from a file's last 10 bytes (int32 length, "ARROW1"): the footer is the
// `length` bytes before them. kFormat naming `path` for another ending.
Result<std::int64_t> ipc_footer_length(const std::string& path, std::span<const std::byte> last10);

// The record batches' blocks from the footer's bytes, of a file of `file_size` bytes: every
// block inside the file after its 8-byte magic and before the footer.
Result<std::vector<IpcBlock>> parse_ipc_footer(const std::string& path,
                                               std::span<const std::byte> footer,
                                               std::int64_t file_size);

// The rows of the record batch whose encapsulated message (a block's first `metadata` bytes)
// is `message`. kFormat naming `where` for a message that is not a record batch's.
// `top_nodes`: where each top-level column's field node is among the batch's nodes (one per
// field of the schema, depth first: schema_top_nodes); each must count the batch's rows, as
// Arrow's validation of a decoded batch holds each column to its batch's length. A batch that
// claims other rows than its columns (0 rows of columns of 3: a batch no read would decode) is
// refused here, before any of its rows is placed.
Result<std::int64_t> parse_ipc_batch_rows(const std::string& where,
                                          std::span<const std::byte> message,
                                          std::span<const std::size_t> top_nodes = {});

}  // namespace shardload::detail
