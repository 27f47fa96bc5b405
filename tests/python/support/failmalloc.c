/* Fault injection for tests: allocations whose size lies in
 * [FAILMALLOC_MIN, FAILMALLOC_MAX) bytes fail as if memory had run out; all others go to
 * glibc. Loaded with LD_PRELOAD into a test's subprocess, it makes an allocation that a
 * file's declared sizes ask for fail, without needing a machine that is really short of
 * memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);

static int fails(size_t n) {
  static size_t lo = 0, hi = 0;
  static int ready = 0;
  if (!ready) {
    const char* a = getenv("FAILMALLOC_MIN");
    const char* b = getenv("FAILMALLOC_MAX");
    lo = a ? strtoull(a, NULL, 10) : 0;
    hi = b ? strtoull(b, NULL, 10) : 0;
    ready = 1;
  }
  return n >= lo && n < hi;
}

void* malloc(size_t n) {
  if (fails(n)) { errno = ENOMEM; return NULL; }
  return __libc_malloc(n);
}
void* calloc(size_t k, size_t n) {
  if (n != 0 && k > (size_t)-1 / n) { errno = ENOMEM; return NULL; }
  if (fails(k * n)) { errno = ENOMEM; return NULL; }
  return __libc_calloc(k, n);
}
void* realloc(void* p, size_t n) {
  if (fails(n)) { errno = ENOMEM; return NULL; }
  return __libc_realloc(p, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  if (fails(n)) return ENOMEM;
  void* p = __libc_memalign(align, n);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}
void* aligned_alloc(size_t align, size_t n) {
  if (fails(n)) { errno = ENOMEM; return NULL; }
  return __libc_memalign(align, n);
}
void* memalign(size_t align, size_t n) {
  if (fails(n)) { errno = ENOMEM; return NULL; }
  return __libc_memalign(align, n);
}
