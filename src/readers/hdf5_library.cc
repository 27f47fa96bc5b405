// The HDF5 library, loaded privately (detail/hdf5_api.hpp says why), its lock and its
// error stack.
#include <dlfcn.h>
#include <pthread.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/detail/environment.hpp"
#include "readers/detail/hdf5.hpp"

#ifndef SHARDLOAD_HDF5_LIBRARY
#error "SHARDLOAD_HDF5_LIBRARY (the libhdf5 the headers belong to) must be defined"
#endif

namespace shardload::detail {

namespace hdf5 {
void close_at_exit();
// H5close, for close_at_exit: a plain pointer, which no static destructor ends before it runs.
herr_t (*g_close)() = nullptr;
}  // namespace hdf5

namespace {

Result<Hdf5Api> load_api() {
  Hdf5Api api;
  api.path = SHARDLOAD_HDF5_LIBRARY;
  int flags = RTLD_NOW | RTLD_LOCAL;
#if defined(RTLD_DEEPBIND) && !defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer refuses RTLD_DEEPBIND; sanitizer builds run without Legate.
  flags |= RTLD_DEEPBIND;
#endif
  void* h = ::dlopen(api.path, flags);
  if (h == nullptr) {
    const char* e = ::dlerror();
    return Status(ErrorCode::kFormat, std::string("hdf5: cannot load the HDF5 library ") +
                                          api.path + ": " + (e ? e : "unknown error") +
                                          " (install Debian's libhdf5-dev, see scripts/setup.sh)");
  }
  // HDF5 reads its variables as it starts (HDF5_EXTFILE_PREFIX, HDF5_VDS_PREFIX,
  // HDF5_USE_FILE_LOCKING, on the engine thread that opens the process's first HDF5 file):
  // its getenv waits for the environment's writers as the other libraries' do.
  guard_environment_of_loaded_libraries();
  std::string missing;
  // dlsym on the handle searches only this library and its dependencies.
#define SHARDLOAD_HDF5_LOAD(name)                                     \
  api.name = reinterpret_cast<decltype(api.name)>(::dlsym(h, #name)); \
  if (api.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
  SHARDLOAD_HDF5_FUNCTIONS(SHARDLOAD_HDF5_LOAD)
#undef SHARDLOAD_HDF5_LOAD
  api.H5Pset_file_locking =
      reinterpret_cast<decltype(api.H5Pset_file_locking)>(::dlsym(h, "H5Pset_file_locking"));
  api.H5Pset_efile_prefix =
      reinterpret_cast<decltype(api.H5Pset_efile_prefix)>(::dlsym(h, "H5Pset_efile_prefix"));
  api.H5Pset_virtual_prefix =
      reinterpret_cast<decltype(api.H5Pset_virtual_prefix)>(::dlsym(h, "H5Pset_virtual_prefix"));
  api.H5Dget_chunk_storage_size = reinterpret_cast<decltype(api.H5Dget_chunk_storage_size)>(
      ::dlsym(h, "H5Dget_chunk_storage_size"));
  api.H5Dread_chunk = reinterpret_cast<decltype(api.H5Dread_chunk)>(::dlsym(h, "H5Dread_chunk"));
  api.H5Dget_chunk_info_by_coord = reinterpret_cast<decltype(api.H5Dget_chunk_info_by_coord)>(
      ::dlsym(h, "H5Dget_chunk_info_by_coord"));
  api.H5Oget_info2 = reinterpret_cast<decltype(api.H5Oget_info2)>(::dlsym(h, "H5Oget_info2"));
  api.H5Pget_chunk_opts =
      reinterpret_cast<decltype(api.H5Pget_chunk_opts)>(::dlsym(h, "H5Pget_chunk_opts"));
  if (!missing.empty()) {
    return Status(ErrorCode::kFormat, std::string("hdf5: ") + api.path +
                                          " lacks functions shardload needs: " + missing);
  }
  // HDF5's own exit handler takes HDF5's lock: in a child forked while a parent thread was
  // inside HDF5 that lock is held for good, and the child never ended through a normal exit
  // (sys.exit, an uncaught exception), even without an HDF5 call of its own. The library's
  // end at exit is ours to run (close_at_exit), and not in such a child.
  api.H5dont_atexit();
  if (api.H5open() < 0 ||
      api.H5get_libversion(&api.version[0], &api.version[1], &api.version[2]) < 0) {
    return Status(ErrorCode::kFormat, std::string("hdf5: ") + api.path + ": H5open failed");
  }
  hdf5::g_close = api.H5close;
  std::atexit(&hdf5::close_at_exit);
  // The headers' structs and version-mapped names (H5Dopen2, H5Lvisit, ...)
  // hold within one major.minor release only.
  if (api.version[0] != H5_VERS_MAJOR || api.version[1] != H5_VERS_MINOR) {
    return Status(ErrorCode::kFormat,
                  std::string("hdf5: ") + api.path + ": library version " +
                      std::to_string(api.version[0]) + "." + std::to_string(api.version[1]) + "." +
                      std::to_string(api.version[2]) + " differs from the headers' " +
                      std::to_string(H5_VERS_MAJOR) + "." + std::to_string(H5_VERS_MINOR));
  }
  // The globals are valid only after H5open().
#define SHARDLOAD_HDF5_GLOBAL_LOAD(name)                              \
  if (const auto* p = static_cast<const hid_t*>(::dlsym(h, #name))) { \
    api.name = *p;                                                    \
  } else {                                                            \
    missing += std::string(missing.empty() ? "" : ", ") + #name;      \
  }
  SHARDLOAD_HDF5_GLOBALS(SHARDLOAD_HDF5_GLOBAL_LOAD)
#undef SHARDLOAD_HDF5_GLOBAL_LOAD
  if (!missing.empty()) {
    return Status(ErrorCode::kFormat,
                  std::string("hdf5: ") + api.path + " lacks globals shardload needs: " + missing);
  }
  // HDF5 keeps one open file per path and refuses to open it again with other file locking
  // ("file locking flag values don't match"). The reader opens shards and checks virtual
  // dataset sources with locks off (a file a writer holds open reads), but HDF5 1.10 opens a
  // virtual dataset's sources itself with a copy of the library's default file access list,
  // which does not carry the shard's locking: a source one thread's discovery checked while
  // another thread's read had it open was refused, or its rows read as the fill value. The
  // default list gets the reader's setting, so that every open of a file in the process, the
  // library's own included, takes one (HDF5_USE_FILE_LOCKING still overrides it for all).
  if (api.H5Pset_file_locking != nullptr) {
    const auto* defaults = static_cast<const hid_t*>(::dlsym(h, "H5P_LST_FILE_ACCESS_ID_g"));
    if (defaults == nullptr || api.H5Pset_file_locking(*defaults, 0, 1) < 0) {
      return Status(ErrorCode::kFormat,
                    std::string("hdf5: ") + api.path +
                        ": cannot turn file locks off in the default file access list, which "
                        "HDF5 opens virtual dataset sources with");
    }
  }
  hbool_t ts = 0;
  api.thread_safe = api.H5is_library_threadsafe(&ts) >= 0 && ts;
  return api;
}

}  // namespace

namespace hdf5 {

std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

namespace {

// The HDF5 calls in flight (every Hdf5Lock's span), as a fork() finds them. A fork while
// another thread was inside HDF5 (a read in flight, for seconds from object storage) copied
// that call's lock, HDF5's own or hdf5_mutex, held into the child, with no thread there to
// let it go: the child's first HDF5 call waited forever (a DataLoader worker forked during a
// load). Such a child now refuses every HDF5 call instead. (fork() does not wait for the
// calls to end: Python forks holding its GIL, which a call in flight may be waiting for.)
struct ForkGate {
  std::mutex m;
  std::size_t active = 0;
  bool copied_in_use = false;  // this process was forked while a call was in flight
};

ForkGate& gate() {
  static ForkGate* const g = [] {
    auto* made = new ForkGate();  // never destroyed: the fork handlers use it
    ::pthread_atfork([] { gate().m.lock(); }, [] { gate().m.unlock(); },
                     [] {
                       ForkGate& c = gate();
                       c.copied_in_use = c.copied_in_use || c.active > 0;
                       c.active = 0;
                       c.m.unlock();
                     });
    return made;
  }();
  return *g;
}

}  // namespace

void hdf5_enter() {
  ForkGate& g = gate();
  std::lock_guard lock(g.m);
  if (g.copied_in_use) {
    throw std::runtime_error(
        "HDF5 cannot be used in this process: it was forked (a DataLoader worker, "
        "multiprocessing's 'fork') while another thread was inside HDF5, whose lock it copied "
        "held; fork while no other thread reads HDF5 (a feed's DataLoader workers: made before "
        "other loads start), or start such processes with 'spawn' or 'forkserver'");
  }
  ++g.active;
}

// Registered once the library is open (so it runs where HDF5's own handler would have): the
// library ends as before, except where another thread is inside HDF5 at the program's end or
// was at the fork that made this process: then it is left as it is (its files are read-only;
// the process's end closes them).
void close_at_exit() {
  ForkGate& g = gate();
  {
    std::lock_guard lock(g.m);
    // A call in flight (another thread's, at the program's end) holds HDF5's lock, which
    // H5close would wait for as long as that call takes, or for ever.
    if (g.copied_in_use || g.active > 0) return;
  }
  if (g_close != nullptr) g_close();
}

void hdf5_leave() {
  ForkGate& g = gate();
  std::lock_guard lock(g.m);
  --g.active;
}

// The HDF5 error stack of this thread, outermost and innermost message
// ("can't read data: inflate() failed"), then cleared.
std::string take_error(const Hdf5Api& api) {
  std::vector<std::string> msgs;
  api.H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(e->desc ? e->desc : "");
        return 0;
      },
      &msgs);
  api.H5Eclear2(H5E_DEFAULT);
  if (msgs.empty()) return "HDF5 reported no detail";
  if (msgs.size() == 1 || msgs.front() == msgs.back()) return "HDF5: " + msgs.front();
  return "HDF5: " + msgs.front() + ": " + msgs.back();
}

}  // namespace hdf5

Result<const Hdf5Api*> hdf5_api() {
  // Loaded once per process: the library handle is the one piece of state
  // every reader shares, and it lives until exit.
  static const Result<Hdf5Api> api = load_api();
  if (!api) return api.status();
  return &api.value();
}

}  // namespace shardload::detail
