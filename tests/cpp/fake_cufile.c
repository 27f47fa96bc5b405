/* A stand-in libcufile.so for the tests of src/cuda/detail/cufile.hpp, which run without a GPU:
 * "device" memory is host memory, cuFileRead is pread, and cuFileHandleRegister refuses the
 * files whose path contains "refused" (as cuFile refuses a file system it does not serve).
 * fake_cufile_driver_opens() and fake_cufile_handles() say what was called.
 * cuFileDriverGetProperties and cuFileGetParameterBool report the mode FAKE_CUFILE_MODE names:
 * "compat" (the default: nvidia-fs not loaded, version 0.0, which is what this pread stand-in
 * is), "direct" (nvidia-fs 2.17 serving NVMe and NVMeOF), "forced" (nvidia-fs loaded, but
 * force_compat_mode set) or "error" (cuFileDriverGetProperties fails). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct {
  int err;
  int cu_err;
} CUfileError_t;

typedef struct {
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
} CUfileDescr_t;

typedef struct {
  struct {
    unsigned int major_version;
    unsigned int minor_version;
    size_t poll_thresh_size;
    size_t max_direct_io_size;
    unsigned int dstatusflags;
    unsigned int dcontrolflags;
  } nvfs;
  unsigned int fflags;
  unsigned int max_device_cache_size;
  unsigned int per_buffer_cache_size;
  unsigned int max_device_pinned_mem_size;
  unsigned int max_batch_io_size;
  unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

#define EXPORT __attribute__((visibility("default")))

static int driver_opens = 0;
static int handles = 0;
static int fds[64];

EXPORT int fake_cufile_driver_opens(void) { return driver_opens; }
EXPORT int fake_cufile_handles(void) { return handles; }

EXPORT CUfileError_t cuFileDriverOpen(void) {
  CUfileError_t e = {0, 0};
  ++driver_opens;
  return e;
}

EXPORT CUfileError_t cuFileHandleRegister(void** handle, CUfileDescr_t* d) {
  CUfileError_t refused = {5030, 0}; /* CU_FILE_IO_NOT_SUPPORTED */
  CUfileError_t ok = {0, 0};
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", d->handle.fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n < 0) return refused;
  path[n] = '\0';
  if (strstr(path, "refused") != NULL) return refused;
  for (int i = 0; i < 64; ++i) {
    if (fds[i] == 0) {
      /* Its own descriptor, without the caller's O_DIRECT (pread into any buffer). */
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) return refused;
      fds[i] = fd + 1;
      *handle = &fds[i];
      ++handles;
      return ok;
    }
  }
  return refused;
}

EXPORT void cuFileHandleDeregister(void* handle) {
  close(*(int*)handle - 1);
  *(int*)handle = 0;
  --handles;
}

/* Reads at most 1000 bytes a call, so that the caller's loop is exercised. */
EXPORT ssize_t cuFileRead(void* handle, void* dev, size_t size, off_t file_offset,
                          off_t dev_offset) {
  size_t n = size < 1000 ? size : 1000;
  return pread(*(int*)handle - 1, (char*)dev + dev_offset, n, file_offset);
}

static const char* mode(void) {
  const char* m = getenv("FAKE_CUFILE_MODE");
  return m != NULL && *m != '\0' ? m : "compat";
}

EXPORT CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t* props) {
  CUfileError_t ok = {0, 0};
  CUfileError_t failed = {5001, 0}; /* CU_FILE_DRIVER_NOT_INITIALIZED */
  if (strcmp(mode(), "error") == 0) return failed;
  memset(props, 0, sizeof *props);
  props->nvfs.dcontrolflags = 1u << 1; /* CU_FILE_ALLOW_COMPAT_MODE */
  if (strcmp(mode(), "compat") != 0) {
    props->nvfs.major_version = 2;
    props->nvfs.minor_version = 17;
    props->nvfs.dstatusflags = (1u << 4) | (1u << 5); /* NVMe, NVMeOF */
  }
  return ok;
}

EXPORT CUfileError_t cuFileGetParameterBool(int param, bool* value) {
  CUfileError_t ok = {0, 0};
  CUfileError_t invalid = {5022, 0}; /* a parameter this stand-in does not know */
  /* 1: CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE, 2: CUFILE_PARAM_FORCE_COMPAT_MODE */
  if (param == 1) {
    *value = true;
  } else if (param == 2) {
    *value = strcmp(mode(), "forced") == 0;
  } else {
    return invalid;
  }
  return ok;
}
