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

int rename(const char* from, const char* to) {
  static int (*real)(const char*, const char*) = NULL;
  static int done = 0;
  if (real == NULL) real = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  const int rc = real(from, to);
  const char* with = getenv("SWAP_MANIFEST_WITH");
  const char* mode = getenv("SWAP_MANIFEST_MODE");
  if (rc != 0 || done || with == NULL || mode == NULL || !ends_with(to, "/shardload.manifest") ||
      strstr(from, "/.shardload.manifest.") == NULL || strstr(to, ".shardload-tmp") == NULL) {
    return rc;
  }
  done = 1;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.swap", to);
  const int made = strcmp(mode, "link") == 0 ? link(with, tmp) : copy_file(with, tmp);
  if (made != 0 || real(tmp, to) != 0) {
    fprintf(stderr, "swap_manifest: the swap failed\n");
    abort();
  }
  fprintf(stderr, "swap_manifest: swapped %s\n", to);
  return rc;
}
