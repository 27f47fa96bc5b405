// GPUDirect Storage through cuFile, loaded at run time (dlopen), without CUDA headers: the part
// of CudaCopyBackend that needs no GPU to run, so that tests drive it with a stand-in library.
//
// The library is loaded once per process and name, with RTLD_NODELETE, and never closed: its
// driver is opened once and left open (cuFile closes it at exit), since unloading a library
// whose threads and atexit handlers may still run can crash at exit, and a driver closed by one
// backend would break another's handles.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "shardload/status.hpp"

namespace shardload::detail {

// The part of cufile.h this backend uses, declared here so that the build needs neither the
// header nor the library (the ABI is stable since 1.0).
struct CUfileError_t {
  int err;     // CUfileOpError, CU_FILE_SUCCESS = 0
  int cu_err;  // CUresult
};
struct CUfileDescr_t {
  int type;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
using CUfileHandle_t = void*;

struct CuFileApi {
  std::string library;
  CUfileError_t (*driver_open)() = nullptr;
  CUfileError_t (*handle_register)(CUfileHandle_t*, CUfileDescr_t*) = nullptr;
  void (*handle_deregister)(CUfileHandle_t) = nullptr;
  ssize_t (*read)(CUfileHandle_t, void*, size_t, off_t, off_t) = nullptr;
};

// The library `library` (a SONAME or a path) with its driver open; the same object for every
// call with that name in this process. kIo saying why not (not found, an entry point missing,
// the driver refusing to open); a later call tries again.
Result<const CuFileApi*> load_cufile(const std::string& library = "libcufile.so.0");

// An open file registered with cuFile.
struct CuFileHandle {
  int fd = -1;
  CUfileHandle_t handle = nullptr;
  std::string path;
};

// Opens `path` (regular files only, without blocking, O_DIRECT where the file system has it)
// and registers it. nullptr when cuFile refuses the registration (a file system it does not
// serve): the caller stages that file instead. kIo when the file cannot be opened.
Result<CuFileHandle*> cufile_open(const CuFileApi& api, const std::string& path);
void cufile_close(const CuFileApi& api, CuFileHandle* h) noexcept;

// Reads `bytes` at file `offset` into `dst` (device memory for the real library), as many
// cuFileRead calls as it takes, and at least `required` of them (the end of an aligned range
// may lie past the end of the file). kIo naming the file, offset and bytes on an error or a
// short file.
Status cufile_read(const CuFileApi& api, const CuFileHandle& h, std::uint64_t offset,
                   std::size_t bytes, void* dst);
Status cufile_read(const CuFileApi& api, const CuFileHandle& h, std::uint64_t offset,
                   std::size_t bytes, std::size_t required, void* dst);

// GPUDirect moves data peer-to-peer only when the file offset, the size and the device address
// are multiples of 4 KiB; otherwise cuFile goes through its own bounce buffers. The aligned
// range that covers [offset, offset + bytes): read it into an aligned device buffer, then copy
// the wanted bytes (at `skip` in it) to their place.
struct AlignedRange {
  std::uint64_t offset = 0;  // multiple of align
  std::size_t bytes = 0;     // multiple of align
  std::size_t skip = 0;      // where the wanted bytes start in the range
};
constexpr std::size_t kDirectAlign = 4096;
AlignedRange aligned_range(std::uint64_t offset, std::size_t bytes,
                           std::size_t align = kDirectAlign);
bool is_aligned(std::uint64_t offset, std::size_t bytes, const void* dst,
                std::size_t align = kDirectAlign);

}  // namespace shardload::detail
