/* Fault injection for tests: loaded with LD_PRELOAD into a test's subprocess, it plays another
 * writer in a save's staging directory. Right after the rename that puts a save's manifest in
 * place (a temporary ".shardload.manifest.*" renamed onto "shardload.manifest" inside a
 * ".shardload-tmp" staging directory), it renames another file over that manifest, once:
 * SWAP_MANIFEST_MODE=link a hard link to the file SWAP_MANIFEST_WITH, =copy a copy of it. The
 * swap lands between the manifest's write and anything the save does with the path after it,
 * every time, where a second process could only hit that window by chance. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int ends_with(const char* s, const char* tail) {
  const size_t n = strlen(s), k = strlen(tail);
  return n >= k && strcmp(s + n - k, tail) == 0;
}

static int copy_file(const char* from, const char* to) {
  char buf[65536];
  const int in = open(from, O_RDONLY | O_CLOEXEC);
  if (in < 0) return -1;
  const int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    close(in);
    return -1;
  }
  ssize_t got;
  int rc = 0;
  while ((got = read(in, buf, sizeof buf)) > 0) {
    if (write(out, buf, (size_t)got) != got) {
      rc = -1;
      break;
    }
  }
  if (got < 0) rc = -1;
  close(in);
  close(out);
  return rc;
}

static int (*real_rename)(const char*, const char*) = NULL;

/* After a rename of `from` onto `to` (full paths) that succeeded: the swap, once. */
static void swap_after(const char* from, const char* to) {
  static int done = 0;
  const char* with = getenv("SWAP_MANIFEST_WITH");
  const char* mode = getenv("SWAP_MANIFEST_MODE");
  if (done || with == NULL || mode == NULL || !ends_with(to, "/shardload.manifest") ||
      strstr(from, "/.shardload.manifest.") == NULL || strstr(to, ".shardload-tmp") == NULL) {
    return;
  }
  done = 1;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.swap", to);
  const int made = strcmp(mode, "link") == 0 ? link(with, tmp) : copy_file(with, tmp);
  if (made != 0 || real_rename(tmp, to) != 0) {
    fprintf(stderr, "swap_manifest: the swap failed\n");
    abort();
  }
  fprintf(stderr, "swap_manifest: swapped %s\n", to);
}

int rename(const char* from, const char* to) {
  if (real_rename == NULL)
    real_rename = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  const int rc = real_rename(from, to);
  if (rc == 0) swap_after(from, to);
  return rc;
}

/* A name relative to a directory descriptor, as a full path (the manifest is renamed through
 * one: renameat in the directory it was written into). */
static void full_path(int dirfd, const char* name, char* out, size_t n) {
  if (name[0] == '/' || dirfd == AT_FDCWD) {
    snprintf(out, n, "%s", name);
    return;
  }
  char link_name[64], dir[4096];
  snprintf(link_name, sizeof link_name, "/proc/self/fd/%d", dirfd);
  const ssize_t got = readlink(link_name, dir, sizeof dir - 1);
  dir[got > 0 ? got : 0] = '\0';
  snprintf(out, n, "%s/%s", dir, name);
}

int renameat(int olddirfd, const char* from, int newdirfd, const char* to) {
  static int (*real)(int, const char*, int, const char*) = NULL;
  if (real == NULL)
    real = (int (*)(int, const char*, int, const char*))dlsym(RTLD_NEXT, "renameat");
  if (real_rename == NULL)
    real_rename = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  const int rc = real(olddirfd, from, newdirfd, to);
  if (rc == 0) {
    char a[8192], b[8192];
    full_path(olddirfd, from, a, sizeof a);
    full_path(newdirfd, to, b, sizeof b);
    swap_after(a, b);
  }
  return rc;
}
