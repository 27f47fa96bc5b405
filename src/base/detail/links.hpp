// Symbolic links whose target is gone, told from no entry at all.
#pragma once

#include <sys/stat.h>

#include <string>

namespace shardload::detail {

// For a path whose stat (which follows links) said ENOENT: whether a link is there. Only no
// entry at all means "none there"; a link left by a moved target or an unmounted volume taken
// for none would lose what the file says (a sidecar's header size, a chunk's rows, the
// verification a _meta.json asks for) without a word.
[[nodiscard]] inline bool is_dangling_link(const std::string& path) {
  struct ::stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

}  // namespace shardload::detail
