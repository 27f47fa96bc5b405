/*
 * ucxshim.c - lets the Legate 26.01 wheels' UCX networking start where UCX has no InfiniBand.
 *
 * Why it exists: Realm's UCX network module always sets the UCX option IB_SEG_SIZE through
 * ucp_config_modify() before it creates its UCP contexts. The libucx-cu12 wheel that the legate
 * 26.01 wheel depends on ships no InfiniBand transport (only cma and cuda modules), so UCX does
 * not know that option, ucp_config_modify() answers UCS_ERR_NO_ELEM, and every rank aborts with
 * "failed to initialized ucp contexts". The option only tunes InfiniBand, which is absent; the
 * transports actually used (UCX_TLS=sm,self,tcp) do not read it. (Debian's own UCX has the IB
 * module but is too old for the libucc the wheels bring.)
 *
 * What it does: scripts/multirank.sh puts this library in LD_PRELOAD, so its ucp_config_modify
 * is the one Realm binds to. It forwards every call to the real ucp_config_modify of the wheel's
 * libucp.so.0 and returns the real result, except that a refused IB_SEG_SIZE counts as success.
 * The real function is looked up in the already loaded libucp.so.0 (RTLD_NOLOAD), not through
 * RTLD_NEXT: the wheel's UCX is loaded RTLD_LOCAL, so RTLD_NEXT would not see it.
 *
 * Nothing else is changed; with no libucp.so.0 loaded the call fails as UCS_ERR_NO_ELEM would.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int ucs_status_t; /* UCS_OK is 0, errors are negative */
#define UCS_OK 0
#define UCS_ERR_NO_ELEM (-12)

typedef ucs_status_t (*config_modify_fn)(void* config, const char* name, const char* value);

__attribute__((visibility("default"))) ucs_status_t ucp_config_modify(void* config,
                                                                      const char* name,
                                                                      const char* value)
{
  static config_modify_fn real = NULL;
  if (real == NULL) {
    void* lib = dlopen("libucp.so.0", RTLD_NOLOAD | RTLD_LAZY);
    if (lib != NULL) real = (config_modify_fn)dlsym(lib, "ucp_config_modify");
    if (real == NULL || real == ucp_config_modify) {
      fprintf(stderr, "ucxshim: no libucp.so.0 loaded; ucp_config_modify(%s) not applied\n",
              name ? name : "(null)");
      real = NULL;
      return UCS_ERR_NO_ELEM;
    }
  }
  ucs_status_t status = real(config, name, value);
  if (status != UCS_OK && name != NULL && strcmp(name, "IB_SEG_SIZE") == 0) return UCS_OK;
  return status;
}
