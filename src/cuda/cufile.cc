#include "cuda/detail/cufile.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>

#include "shardload/io.hpp"

namespace shardload::detail {

namespace {

Status load_into(CuFileApi* api) {
  // RTLD_NODELETE and no dlclose: see the header.
  void* lib = dlopen(api->library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (lib == nullptr) {
    const char* e = dlerror();
    return {ErrorCode::kIo, std::string("cuFile: ") + (e != nullptr ? e : "dlopen failed")};
  }
  auto sym = [&](const char* name, auto* fn) {
    *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(dlsym(lib, name));
    return *fn != nullptr;
  };
  if (!sym("cuFileDriverOpen", &api->driver_open) ||
      !sym("cuFileHandleRegister", &api->handle_register) ||
      !sym("cuFileHandleDeregister", &api->handle_deregister) || !sym("cuFileRead", &api->read)) {
    return {ErrorCode::kIo, "cuFile: " + api->library + " lacks an entry point this build needs"};
  }
  const CUfileError_t e = api->driver_open();
  if (e.err != 0) {
    return {ErrorCode::kIo, "cuFile: cuFileDriverOpen failed: error " + std::to_string(e.err) +
                                " (CUDA driver " + std::to_string(e.cu_err) + ")"};
  }
  return Status::ok();
}

}  // namespace

Result<const CuFileApi*> load_cufile(const std::string& library) {
  // Never destroyed: the loaded libraries outlive every static destructor.
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, std::unique_ptr<CuFileApi>>();
  const std::lock_guard lock(mu);
  auto it = loaded->find(library);
  if (it != loaded->end()) return it->second.get();
  auto api = std::unique_ptr<CuFileApi>(new (std::nothrow) CuFileApi());
  if (!api) return Status(ErrorCode::kIo, "cuFile: out of memory");
  api->library = library;
  SHARDLOAD_RETURN_IF_ERROR(load_into(api.get()));
  const CuFileApi* p = api.get();
  (*loaded)[library] = std::move(api);
  return p;
}

Result<CuFileHandle*> cufile_open(const CuFileApi& api, const std::string& path) {
  auto h = std::unique_ptr<CuFileHandle>(new (std::nothrow) CuFileHandle());
  if (!h) return Status(ErrorCode::kIo, "cuFile: out of memory");
  h->path = path;
  // Opened like every other shard: without blocking, regular files only.
  int err = 0;
  auto opened = open_regular(path, O_DIRECT, &err);
  if (!opened && err == EINVAL) {
    // No O_DIRECT on this file system (tmpfs): cuFile may still serve it in compatibility
    // mode; its registration says whether it will.
    opened = open_regular(path);
  }
  if (!opened) return opened.status();
  h->fd = *opened;
  CUfileDescr_t d{};
  d.type = 1;
  d.handle.fd = h->fd;
  const CUfileError_t e = api.handle_register(&h->handle, &d);
  if (e.err != 0) {
    // Not an error: this file system is not one cuFile serves; the staged path reads it.
    ::close(h->fd);
    return static_cast<CuFileHandle*>(nullptr);
  }
  return h.release();
}

void cufile_close(const CuFileApi& api, CuFileHandle* h) noexcept {
  if (h == nullptr) return;
  if (h->handle != nullptr) api.handle_deregister(h->handle);
  if (h->fd >= 0) ::close(h->fd);
  delete h;
}

Status cufile_read(const CuFileApi& api, const CuFileHandle& h, std::uint64_t offset,
                   std::size_t bytes, void* dst) {
  return cufile_read(api, h, offset, bytes, bytes, dst);
}

Status cufile_read(const CuFileApi& api, const CuFileHandle& h, std::uint64_t offset,
                   std::size_t bytes, std::size_t required, void* dst) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t got = api.read(h.handle, dst, bytes - done, static_cast<off_t>(offset + done),
                                 static_cast<off_t>(done));
    if (got < 0) {
      const std::string why =
          got == -1 ? std::string(std::strerror(errno)) : "cuFile error " + std::to_string(-got);
      return {ErrorCode::kIo, h.path + ": cuFileRead of " + std::to_string(bytes) +
                                  " bytes at offset " + std::to_string(offset) + " failed after " +
                                  std::to_string(done) + " bytes: " + why};
    }
    if (got == 0) {
      if (done >= required) break;  // the end of the file, past what is wanted
      return {ErrorCode::kIo, h.path + ": short read at offset " + std::to_string(offset) +
                                  ": expected " + std::to_string(required) + " bytes, got " +
                                  std::to_string(done) + " (file truncated?)"};
    }
    done += static_cast<std::size_t>(got);
  }
  return Status::ok();
}

AlignedRange aligned_range(std::uint64_t offset, std::size_t bytes, std::size_t align) {
  AlignedRange r;
  r.offset = offset / align * align;
  r.skip = static_cast<std::size_t>(offset - r.offset);
  const std::uint64_t end = offset + bytes;
  const std::uint64_t aligned_end = (end + align - 1) / align * align;
  r.bytes = static_cast<std::size_t>(aligned_end - r.offset);
  return r;
}

bool is_aligned(std::uint64_t offset, std::size_t bytes, const void* dst, std::size_t align) {
  return offset % align == 0 && bytes % align == 0 &&
         reinterpret_cast<std::uintptr_t>(dst) % align == 0;
}

}  // namespace shardload::detail
