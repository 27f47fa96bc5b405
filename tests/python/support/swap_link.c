/* Fault injection for tests: loaded with LD_PRELOAD into a test's subprocess, it plays a
 * publisher that re-points a "current" link while a reader discovers the directory. At the
 * opens it is told of, it re-points the symbolic link SWAP_LINK as `ln -sfn` does (a new link
 * made beside it and renamed over it) before the open goes on, so the open and everything after
 * it reach the other version. SWAP_LINK_STEPS is "NAME=TARGET,NAME=TARGET,...": at the first
 * open of a path whose last part is NAME, the link is pointed at TARGET; each step once, in
 * order. SWAP_LINK_MODE=exchange: SWAP_LINK is a directory and TARGET one beside it, the
 * two exchanged instead (a directory renamed into place). SWAP_LINK_MODE=write: SWAP_LINK is a
 * directory and TARGET a file name: a new file TARGET.N (N counting from 0) is made in it instead,
 * as another writer makes files beside a dataset, which is no new version of it.
 * SWAP_LINK_EVERY=NAME instead re-points
 * the link at every open of NAME, between the two targets of SWAP_LINK_STEPS (a publisher that
 * never pauses). Each swap is written to stderr. A swap that lands between discovery's listing and
 * its probes, or between a sidecar's read and the files', lands there every time, where a second
 * process could only hit that window by chance. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_STEPS 8

static int parsed = 0;
static int n_steps = 0;
static int next_step = 0;
static char names[MAX_STEPS][256];
static char targets[MAX_STEPS][256];
static int flip = 0;

static void parse(void) {
  if (parsed) return;
  parsed = 1;
  const char* steps = getenv("SWAP_LINK_STEPS");
  if (steps == NULL) return;
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", steps);
  char* save = NULL;
  for (char* step = strtok_r(buf, ",", &save); step != NULL && n_steps < MAX_STEPS;
       step = strtok_r(NULL, ",", &save)) {
    char* eq = strchr(step, '=');
    if (eq == NULL) continue;
    *eq = '\0';
    snprintf(names[n_steps], sizeof names[0], "%s", step);
    snprintf(targets[n_steps], sizeof targets[0], "%s", eq + 1);
    ++n_steps;
  }
}

static const char* last_part(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash == NULL ? path : slash + 1;
}

static int written = 0;

static void repoint(const char* link, const char* target) {
  const char* mode = getenv("SWAP_LINK_MODE");
  if (mode != NULL && strcmp(mode, "write") == 0) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%d", link, target, written++);
    static int (*real_open_write)(const char*, int, ...) = NULL;
    if (real_open_write == NULL) real_open_write = dlsym(RTLD_NEXT, "open");
    const int fd = real_open_write(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || write(fd, "x", 1) != 1 || close(fd) != 0) {
      fprintf(stderr, "swap_link: the write failed\n");
      abort();
    }
    fprintf(stderr, "swap_link: wrote %s\n", path);
    return;
  }
  if (mode != NULL && strcmp(mode, "exchange") == 0) {
    /* SWAP_LINK is a directory, TARGET another beside it: the two exchanged in one step, as a
     * save with overwrite=True puts a new version in place (renameat2's RENAME_EXCHANGE). */
    char other[4096];
    const char* slash = strrchr(link, '/');
    snprintf(other, sizeof other, "%.*s%s", slash == NULL ? 0 : (int)(slash - link + 1), link,
             target);
    if (renameat2(AT_FDCWD, link, AT_FDCWD, other, RENAME_EXCHANGE) != 0) {
      fprintf(stderr, "swap_link: the exchange failed\n");
      abort();
    }
    fprintf(stderr, "swap_link: %s <-> %s\n", link, other);
    return;
  }
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.swap", link);
  unlink(tmp);
  if (symlink(target, tmp) != 0 || rename(tmp, link) != 0) {
    fprintf(stderr, "swap_link: the swap failed\n");
    abort();
  }
  fprintf(stderr, "swap_link: %s -> %s\n", link, target);
}

static void maybe_swap(const char* path) {
  const char* link = getenv("SWAP_LINK");
  if (link == NULL || path == NULL) return;
  parse();
  const char* name = last_part(path);
  const char* every = getenv("SWAP_LINK_EVERY");
  if (every != NULL) {
    if (strcmp(name, every) == 0 && n_steps >= 2) {
      repoint(link, targets[flip]);
      flip = 1 - flip;
    }
    return;
  }
  if (next_step < n_steps && strcmp(name, names[next_step]) == 0) {
    repoint(link, targets[next_step]);
    ++next_step;
  }
}

typedef int (*open_fn)(const char*, int, ...);
typedef int (*openat_fn)(int, const char*, int, ...);

#define REAL(fn, type)          \
  static type real_##fn = NULL; \
  if (real_##fn == NULL) real_##fn = (type)dlsym(RTLD_NEXT, #fn)

int open(const char* path, int flags, ...) {
  REAL(open, open_fn);
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  maybe_swap(path);
  return real_open(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  REAL(open64, open_fn);
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  maybe_swap(path);
  return real_open64(path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  REAL(openat, openat_fn);
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  maybe_swap(path);
  return real_openat(dirfd, path, flags, mode);
}
