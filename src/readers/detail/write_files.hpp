// The file operations every format writer uses (and save's own small files): new files at
// their final size, positional writes into them, and JSON lists of integers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardload/status.hpp"

namespace shardload::detail {

// kIo naming `path`, "what: strerror(err)", with the errno.
Status sys_error(const std::string& path, const std::string& what, int err);

// A new regular file of `size` bytes starting with `head`. O_EXCL and O_NOFOLLOW: a writer's
// directory is its own and new, so anything already there is an error, never a target.
Status create_file(const std::string& path, const std::string& head, std::int64_t size);

// A new file holding `text`.
Status write_text(const std::string& path, const std::string& text);

// Writes `n` bytes at `offset` into the existing regular file `path`.
Status write_file_at(const std::string& path, std::int64_t offset, const std::byte* src,
                     std::size_t n);

// "[1, 2, 3]": the spelling of an integer list in the metadata shardload writes.
std::string json_int_list(const std::vector<std::int64_t>& values);

}  // namespace shardload::detail
