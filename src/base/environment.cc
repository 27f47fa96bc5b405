#include "base/detail/environment.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace shardload::detail {

namespace {

using Snapshot = std::unordered_map<std::string, std::string>;

std::mutex g_mu;
std::shared_ptr<const Snapshot> g_snapshot;  // guarded by g_mu; null before the first copy
std::atomic<int (*)()> g_may_read{nullptr};

// Held shared while the environment's array is walked, alone while it is changed
// (guard_environment_of_loaded_libraries).
pthread_rwlock_t g_env_lock = PTHREAD_RWLOCK_INITIALIZER;

class SharedEnvLock {
 public:
  SharedEnvLock() { ::pthread_rwlock_rdlock(&g_env_lock); }
  ~SharedEnvLock() { ::pthread_rwlock_unlock(&g_env_lock); }
  SharedEnvLock(const SharedEnvLock&) = delete;
  SharedEnvLock& operator=(const SharedEnvLock&) = delete;
};

class SoleEnvLock {
 public:
  SoleEnvLock() { ::pthread_rwlock_wrlock(&g_env_lock); }
  ~SoleEnvLock() { ::pthread_rwlock_unlock(&g_env_lock); }
  SoleEnvLock(const SoleEnvLock&) = delete;
  SoleEnvLock& operator=(const SoleEnvLock&) = delete;
};

// Only on a thread that may read the environment.
std::shared_ptr<const Snapshot> read_all() {
  auto s = std::make_shared<Snapshot>();
  const SharedEnvLock lock;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    // getenv answers with the first of a name given twice.
    s->emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return s;
}

}  // namespace

void take_environment_snapshot() {
  std::shared_ptr<const Snapshot> s = read_all();
  const std::lock_guard lock(g_mu);
  g_snapshot = std::move(s);
}

namespace {

// What the libraries' calls of the environment's functions become. The C library's own
// functions do the work; the value getenv returns stays valid after the lock (setenv never
// frees a string it made, nor does the first environment's go away): only the array moves.
char* guarded_getenv(const char* name) {
  const SharedEnvLock lock;
  return ::getenv(name);
}
char* guarded_secure_getenv(const char* name) {
  const SharedEnvLock lock;
  return ::secure_getenv(name);
}
int guarded_setenv(const char* name, const char* value, int overwrite) {
  const SoleEnvLock lock;
  return ::setenv(name, value, overwrite);
}
int guarded_unsetenv(const char* name) {
  const SoleEnvLock lock;
  return ::unsetenv(name);
}
int guarded_putenv(char* entry) {
  const SoleEnvLock lock;
  return ::putenv(entry);
}
int guarded_clearenv() {
  const SoleEnvLock lock;
  return ::clearenv();
}

struct Guarded {
  const char* name;
  void* with;
};

const Guarded kGuarded[] = {
    {"getenv", reinterpret_cast<void*>(&guarded_getenv)},
    {"secure_getenv", reinterpret_cast<void*>(&guarded_secure_getenv)},
    {"setenv", reinterpret_cast<void*>(&guarded_setenv)},
    {"unsetenv", reinterpret_cast<void*>(&guarded_unsetenv)},
    {"putenv", reinterpret_cast<void*>(&guarded_putenv)},
    {"clearenv", reinterpret_cast<void*>(&guarded_clearenv)},
};

std::atomic<bool> g_guarding{false};
std::mutex g_guard_mu;  // one pass over the loaded libraries at a time

#if defined(__x86_64__)
constexpr std::uint32_t kJumpSlot = R_X86_64_JUMP_SLOT;
constexpr std::uint32_t kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr std::uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT;
constexpr std::uint32_t kGlobDat = R_AARCH64_GLOB_DAT;
#endif

#if defined(__x86_64__) || defined(__aarch64__)
// Where a library has no writable copy of its dynamic section the loader left its addresses
// unrelocated.
template <typename T>
T* at(const dl_phdr_info* info, ElfW(Addr) p) {
  return reinterpret_cast<T*>(p < info->dlpi_addr ? info->dlpi_addr + p : p);
}

bool leave_alone(const dl_phdr_info* info) {
  const std::string_view path = info->dlpi_name == nullptr ? "" : info->dlpi_name;
  const std::string_view base = path.substr(path.rfind('/') + 1);
  if (base.starts_with("libc.so") || base.starts_with("ld-linux") || base.starts_with("ld.so") ||
      base.starts_with("linux-vdso") || base.starts_with("linux-gate")) {
    return true;
  }
  // shardload's own calls are the C library's: the guarded functions call them.
  Dl_info self{};
  return ::dladdr(reinterpret_cast<void*>(&guarded_getenv), &self) != 0 &&
         reinterpret_cast<ElfW(Addr)>(self.dli_fbase) == info->dlpi_addr;
}

// Points the library's slot at `with`: a slot the loader made read-only (RELRO) is made
// writable for the store and read-only again.
void repoint(const dl_phdr_info* info, void** slot, void* with) {
  if (__atomic_load_n(slot, __ATOMIC_RELAXED) == with) return;
  const auto address = reinterpret_cast<std::uintptr_t>(slot);
  bool relro = false;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const std::uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_GNU_RELRO && address >= begin && address < begin + ph.p_memsz) {
      relro = true;
    }
  }
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  void* first = reinterpret_cast<void*>(address & ~(page - 1));
  if (relro && ::mprotect(first, page, PROT_READ | PROT_WRITE) != 0) return;
  __atomic_store_n(slot, with, __ATOMIC_RELEASE);
  if (relro) ::mprotect(first, page, PROT_READ);
}

int guard_library(dl_phdr_info* info, std::size_t, void*) {
  if (leave_alone(info)) return 0;
  const ElfW(Dyn)* dyn = nullptr;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    }
  }
  if (dyn == nullptr) return 0;
  ElfW(Addr) symtab = 0, strtab = 0, jmprel = 0, rela = 0;
  std::size_t jmprel_size = 0, rela_size = 0;
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_SYMTAB:
        symtab = dyn->d_un.d_ptr;
        break;
      case DT_STRTAB:
        strtab = dyn->d_un.d_ptr;
        break;
      case DT_JMPREL:
        jmprel = dyn->d_un.d_ptr;
        break;
      case DT_PLTRELSZ:
        jmprel_size = dyn->d_un.d_val;
        break;
      case DT_RELA:
        rela = dyn->d_un.d_ptr;
        break;
      case DT_RELASZ:
        rela_size = dyn->d_un.d_val;
        break;
      default:
        break;
    }
  }
  if (symtab == 0 || strtab == 0) return 0;
  const auto* syms = at<const ElfW(Sym)>(info, symtab);
  const auto* names = at<const char>(info, strtab);
  for (const auto& [table, size] : {std::pair{jmprel, jmprel_size}, std::pair{rela, rela_size}}) {
    if (table == 0) continue;
    const auto* r = at<const ElfW(Rela)>(info, table);
    for (std::size_t i = 0; i < size / sizeof(ElfW(Rela)); ++i) {
      const auto type = static_cast<std::uint32_t>(ELF64_R_TYPE(r[i].r_info));
      const auto sym = ELF64_R_SYM(r[i].r_info);
      if ((type != kJumpSlot && type != kGlobDat) || sym == 0) continue;
      const char* name = names + syms[sym].st_name;
      for (const Guarded& g : kGuarded) {
        if (std::strcmp(name, g.name) == 0) {
          repoint(info, reinterpret_cast<void**>(info->dlpi_addr + r[i].r_offset), g.with);
        }
      }
    }
  }
  return 0;
}
#endif

}  // namespace

#if defined(__x86_64__) || defined(__aarch64__)
namespace {

// The loader's count of libraries loaded in the process so far (dlpi_adds), and the count the
// last pass over them saw: a library loaded since (a C extension imported after the first
// load, which calls setenv through its own slots) is redirected by the next call.
std::atomic<unsigned long long> g_guarded_adds{0};

int loads_so_far(dl_phdr_info* info, std::size_t size, void* out) {
  if (size >= offsetof(dl_phdr_info, dlpi_subs)) {
    *static_cast<unsigned long long*>(out) = info->dlpi_adds;
  }
  return 1;  // the first entry carries it
}

}  // namespace
#endif

void guard_environment_of_loaded_libraries() {
  if (!g_guarding.load()) return;
#if defined(__x86_64__) || defined(__aarch64__)
  const std::lock_guard lock(g_guard_mu);
  unsigned long long adds = 0;
  ::dl_iterate_phdr(&loads_so_far, &adds);
  ::dl_iterate_phdr(&guard_library, nullptr);
  g_guarded_adds.store(adds);
#endif
}

void read_environment_only_when(int (*may_read_now)()) {
  g_may_read.store(may_read_now);
#if defined(__x86_64__) || defined(__aarch64__)
  if (g_guarding.load()) {
    unsigned long long adds = 0;
    ::dl_iterate_phdr(&loads_so_far, &adds);
    if (adds != g_guarded_adds.load()) guard_environment_of_loaded_libraries();
  }
#endif
  if (g_guarding.exchange(true)) return;
  // A child forked while another thread of its parent held the lock (a getenv, a setenv) has
  // no such thread: its lock is made anew. Nothing waits for the lock at the fork itself.
  ::pthread_atfork(nullptr, nullptr, [] { ::pthread_rwlock_init(&g_env_lock, nullptr); });
  guard_environment_of_loaded_libraries();
}

std::vector<std::string> environment_entries() {
  int (*const may_read)() = g_may_read.load();
  std::shared_ptr<const Snapshot> s;
  if (may_read == nullptr || may_read() != 0) {
    s = read_all();
    if (may_read != nullptr) {
      const std::lock_guard lock(g_mu);
      g_snapshot = s;
    }
  } else {
    const std::lock_guard lock(g_mu);
    s = g_snapshot;
  }
  std::vector<std::string> out;
  if (s == nullptr) return out;
  out.reserve(s->size());
  for (const auto& [name, value] : *s) out.push_back(name + "=" + value);
  return out;
}

std::optional<std::string> environment_value(const char* name) {
  int (*const may_read)() = g_may_read.load();
  std::shared_ptr<const Snapshot> s;
  if (may_read == nullptr) {
    const SharedEnvLock lock;
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }
  if (may_read() != 0) {
    // The copy is renewed too: the threads this one starts (a discovery's listing with the
    // GIL held) read what it read.
    s = read_all();
    const std::lock_guard lock(g_mu);
    g_snapshot = s;
  } else {
    const std::lock_guard lock(g_mu);
    s = g_snapshot;
  }
  if (s == nullptr) return std::nullopt;
  const auto it = s->find(name);
  if (it == s->end()) return std::nullopt;
  return it->second;
}

}  // namespace shardload::detail
