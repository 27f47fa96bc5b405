// Symbolic links whose target is gone, told from no entry at all.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <string>

namespace shardload::detail {

// For a path whose stat (which follows links) said ENOENT: whether a link whose target is gone
// is on it, the path itself or a directory above it (a chunk directory or a group linked from a
// pool that was deleted; the path's own lstat then says ENOENT as for no entry). Only no entry
// at all means "none there"; a link left by a moved target or an unmounted volume taken for
// none would lose what the file says (a sidecar's header size, a chunk's rows, a virtual
// dataset's source, the verification a _meta.json asks for) without a word.
// `link`, where given, gets that link's path: `path` or the part of it up to that directory.
// The walk stops at the deepest part that is there: a link there whose target is there (or a
// directory) leaves the entry below it missing, which is none there.
[[nodiscard]] inline bool is_dangling_link(const std::string& path, std::string* link = nullptr) {
  std::string at = path;
  while (true) {
    // "link/" would follow the link: each part is looked at without its trailing '/'s.
    while (at.size() > 1 && at.back() == '/') at.pop_back();
    struct ::stat st {};
    if (::lstat(at.c_str(), &st) == 0) {
      if (!S_ISLNK(st.st_mode)) return false;
      struct ::stat target {};
      if (::stat(at.c_str(), &target) == 0 || errno != ENOENT) return false;
      if (link != nullptr) *link = at;
      return true;
    }
    if (errno != ENOENT) return false;
    const std::size_t slash = at.rfind('/');
    if (slash == std::string::npos || slash == 0) return false;
    at.resize(slash);
  }
}

// The directory `dir` (a local path) as the kernel resolves it, its device and inode, where it
// can be stat'ed; else `dir` as spelled. One directory spelled two ways ("D", "E/../D", a link to
// D) is one key, as the sidecar that both spellings find is one file.
[[nodiscard]] inline std::string resolved_directory_key(const std::string& dir) {
  struct ::stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return dir;
  // A NUL leads the key: no spelling holds one, so no spelled key equals it.
  return std::string(1, '\0') + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

}  // namespace shardload::detail
