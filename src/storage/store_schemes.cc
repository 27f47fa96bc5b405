// The registry of store schemes and the one adapter that makes any registered Store readable by
// every reader (shardload/store_schemes.hpp): a RemoteIo over Store's stat, ranged read and list.
#include "shardload/store_schemes.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/detail/secrets.hpp"
#include "base/detail/work_pool.hpp"
#include "shardload/interrupt.hpp"
#include "storage/detail/context.hpp"
#include "storage/detail/store_schemes.hpp"
#include "storage/detail/stores.hpp"
#include "storage/detail/transports.hpp"

namespace shardload {
namespace detail {
namespace {

constexpr const char* kNoAdapter =
    "no store adapter is registered with the I/O layer (the storage layer registers it at load "
    "time)";

// One registered scheme: a store driver's (a factory of Stores, read through the adapter) or a
// built-in driver's (its own RemoteIo). Never freed: a row handed to location.cc stays valid
// after the scheme is registered again or removed (stores opened through it are kept by their
// open files).
struct Entry {
  StoreScheme scheme;  // a store scheme's; no factory for a driver's own RemoteIo
  std::string label;   // "SCHEME://"
  SchemeRow row{};
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Store>, std::less<>> stores;  // by location and query
};

// The schemes in force: a list that is never changed, replaced whole by each registration (the
// old lists are never freed: registrations are few), so that a look-up takes no lock and costs
// what the fixed table of schemes cost (a prefix compared per scheme).
struct Table {
  std::vector<Entry*> entries;
};

std::mutex g_write_mu;
std::atomic<const Table*> g_table{nullptr};

// The lists replaced and the entries removed: a look-up may still be reading them, so they are
// kept here, reachable (and so not reported as leaked), never freed.
struct Retired {
  std::vector<const Table*> tables;
  std::vector<Entry*> entries;
};
Retired& retired() {
  static auto* const r = new Retired();
  return *r;
}

const Table* table() {
  // The built-in drivers' schemes are registered before the first look-up, whatever the order
  // of static initialisers.
  static const bool builtins = (register_built_in_schemes(), true);
  (void)builtins;
  return g_table.load(std::memory_order_acquire);
}

Entry* entry_of(std::string_view path) {
  const Table* const t = table();
  if (t == nullptr) return nullptr;
  for (Entry* const e : t->entries) {
    if (path.starts_with(e->row.prefix)) return e;
  }
  return nullptr;
}

// Puts `e` in force, in place of an entry of its scheme (or, `e` null, removes `label`'s).
// false (nothing changed) where `keep_builtin` and that entry is a built-in driver's.
bool replace_entry(const std::string& label, Entry* e, bool keep_builtin) {
  std::lock_guard lock(g_write_mu);
  const Table* const t = g_table.load(std::memory_order_acquire);
  std::vector<Entry*> entries;
  if (t != nullptr) {
    for (Entry* const old : t->entries) {
      if (old->label != label) {
        entries.push_back(old);
      } else if (keep_builtin && !old->scheme.open) {
        return false;
      } else {
        // The stores it opened are let go; open files keep theirs.
        std::lock_guard stores(old->mu);
        old->stores.clear();
        retired().entries.push_back(old);
      }
    }
  }
  if (e != nullptr) entries.push_back(e);
  if (t != nullptr) retired().tables.push_back(t);
  g_table.store(new Table{std::move(entries)}, std::memory_order_release);
  return true;
}

bool valid_scheme(std::string_view s) {
  if (s.empty() || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
  });
}

// Where a URL of a registered scheme leads.
struct Where {
  Entry* entry = nullptr;
  std::shared_ptr<Store> store;
  std::string key;       // below the store's location ("" for the location itself)
  std::string location;  // "SCHEME://AUTHORITY/", for messages (redacted, no query)
  std::string shown;     // the URL without its query, for messages (redacted)
  // The store's own transport (TransportStore), which is handed the URL as it is named:
  // nullptr where the adapter reads the Store's calls.
  RemoteIo* transport = nullptr;
};

// The store of a built-in driver's URL: the one its driver makes for the location
// ("SCHEME://AUTHORITY/" and the URL's query; no request), read through its transport.
Result<Where> resolve_built_in(Entry* e, std::string_view url) {
  RemoteIo* const t = e->row.transport();
  if (t == nullptr) return file_error(ErrorCode::kIo, std::string(url), e->row.missing, ENOTSUP);
  const auto [name, query] = split_options(url);
  const std::size_t start = name.find("://") + 3;
  const std::size_t slash = std::min(name.find('/', start), name.size());
  SHARDLOAD_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                             make_remote_store(name.substr(0, slash) + "/" + query, t));
  const auto* const reads = dynamic_cast<const TransportStore*>(store.get());
  if (reads == nullptr || reads->transport() == nullptr) {
    return file_error(ErrorCode::kIo, std::string(url), e->row.missing, ENOTSUP);
  }
  Where w;
  w.entry = e;
  w.transport = reads->transport();
  w.store = std::move(store);
  return w;
}

Result<Where> resolve(std::string_view url) {
  Entry* const e = entry_of(url);
  if (e != nullptr && e->row.transport != nullptr) return resolve_built_in(e, url);
  if (e == nullptr || !e->scheme.open) {
    return file_error(ErrorCode::kIo, std::string(url),
                      "no store driver is registered for this scheme", ENOTSUP);
  }
  const auto [name, query] = split_options(url);
  const std::size_t start = name.find("://") + 3;
  const std::size_t slash = std::min(name.find('/', start), name.size());
  if (slash == start) {
    return file_error(ErrorCode::kInvalidArgument, std::string(url),
                      "names no store: write " + e->label + "STORE/KEY", EINVAL);
  }
  Where w;
  w.entry = e;
  const std::string root = name.substr(0, slash) + "/";
  w.key = slash < name.size() ? name.substr(slash + 1) : std::string();
  w.location = redact_secrets(root);
  w.shown = redact_secrets(name);
  const std::string location = root + query;
  std::lock_guard lock(e->mu);
  if (const auto it = e->stores.find(location); it != e->stores.end()) {
    w.store = it->second;
    return w;
  }
  auto opened = e->scheme.open(location);
  if (!opened) return opened.status().with_path(w.location);
  if (*opened == nullptr) {
    return file_error(ErrorCode::kIo, w.location, "the store's driver opened no store");
  }
  w.store = *std::move(opened);
  e->stores.emplace(location, w.store);
  return w;
}

// A store's error as a path's: it names the URL where the store named nothing.
Status named(const Status& st, const Where& w) { return st.with_path(w.shown); }

// Refuses what names no object: a key of the store's checks, and no prefix ("a/").
Status check_object(const Where& w) {
  if (w.key.empty() || w.key.back() == '/') {
    return file_error(ErrorCode::kIo, w.shown, "not an object (the URL ends in '/')", EISDIR);
  }
  return check_store_key(w.key).with_path(w.shown);
}

int errno_of(const Status& st) {
  if (st.code() == ErrorCode::kChanged) return ESTALE;
  return st.sys_errno() != 0 ? st.sys_errno() : EIO;
}

class StoreIo;
StoreIo* the_adapter();

// The adapter: the RemoteIo that posix_io() routes every registered scheme's paths to. It
// reads a key through the Store the registry makes for its URL: a store driver's Store through
// its calls (stat, ranged read under a generation, list), a built-in driver's through the
// transport the Store reads with (TransportStore), handed the URL as the reader named it. Its
// descriptors are at or above kRemoteFdBase (the one range posix_io() routes), and its
// retries are its transports'.
class StoreIo final : public RemoteIo {
 public:
  Result<int> open(const std::string& url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Where w, resolve(url));
    if (w.transport != nullptr) return add_opened(w, w.transport->open(url));
    FileInfo info;
    return open_stat(std::move(w), &info);
  }

  // The open is the stat: its generation conditions every read of this descriptor.
  Result<int> open_stat(const std::string& url, FileInfo* info) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Where w, resolve(url));
    if (w.transport != nullptr) return add_opened(w, w.transport->open_stat(url, info));
    return open_stat(std::move(w), info);
  }

  // A store driver's key is read whole or from its end as any other: the Store has one read.
  Result<int> open_whole(const std::string& url, FileInfo* info, std::size_t expected) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Where w, resolve(url));
    if (w.transport != nullptr) {
      return add_opened(w, w.transport->open_whole(url, info, expected));
    }
    return open_stat(std::move(w), info);
  }

  Result<int> open_tail(const std::string& url, FileInfo* info, std::size_t tail) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Where w, resolve(url));
    if (w.transport != nullptr) return add_opened(w, w.transport->open_tail(url, info, tail));
    return open_stat(std::move(w), info);
  }

  // Where asking a key's state is a request (round_trips), no stat: the snapshot's size bounds
  // the reads, which carry no condition; the caller's check after them (stat) tells a change.
  // Elsewhere the key is asked, as every other open asks it: written since the snapshot it is
  // kChanged here, and its reads are held to the generation found, never another's bytes.
  Result<int> open_known(const std::string& url, const FileInfo& snapshot) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Where w, resolve(url));
    if (w.transport != nullptr) return add_opened(w, w.transport->open_known(url, snapshot));
    SHARDLOAD_RETURN_IF_ERROR(check_object(w));
    if (w.entry->row.traits.round_trips) return add(std::move(w), std::string(), snapshot.size);
    auto k = w.store->stat(w.key);
    if (!k) return named(k.status(), w);
    if (const FileInfo now = generation_info(*k); now != snapshot) {
      return file_error(ErrorCode::kChanged, w.shown,
                        "changed since discovery: " + snapshot_difference(url, snapshot, now));
    }
    return add(std::move(w), k->generation, k->size);
  }

  // A fresh stat: the key's state now, which the readers compare with their snapshot.
  Result<FileInfo> stat(int fd, const std::string& path) override {
    const std::shared_ptr<const Open> o = find(fd);
    if (o == nullptr) return file_error(ErrorCode::kIo, path, "not an open key", EBADF);
    if (o->transport != nullptr) return o->transport->stat(o->transport_fd, path);
    auto k = o->store->stat(o->key);
    if (!k) return k.status().with_path(o->shown);
    return generation_info(*k);
  }

  Result<FileInfo> stat_path(const std::string& url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Where w, resolve(url));
    if (w.transport != nullptr) return w.transport->stat_path(url);
    SHARDLOAD_RETURN_IF_ERROR(check_object(w));
    auto k = w.store->stat(w.key);
    if (!k) return named(k.status(), w);
    return generation_info(*k);
  }

  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) override {
    t_read_error.clear();
    t_read_by = nullptr;
    const std::shared_ptr<const Open> o = find(fd);
    if (o == nullptr) return -EBADF;
    if (o->transport != nullptr) {
      // The transport's own words on a failed read are asked of it (last_read_error).
      t_read_by = o->transport;
      return o->transport->pread(o->transport_fd, buf, n, offset);
    }
    if (n == 0) return 0;
    const Result<std::size_t> got =
        o->deadline.count() > 0
            ? read_by_deadline(*o, buf, n, offset)
            : o->store->read(o->key, offset, std::span<std::byte>(static_cast<std::byte*>(buf), n),
                             o->generation);
    if (!got) {
      const Status& st = got.status();
      t_read_error = message_after_path(st, st.path());
      return -static_cast<std::int64_t>(errno_of(st));
    }
    // Fewer bytes than asked are the key's end, and only that: a store that answers short
    // before it (a lying or broken driver) is refused, never read as data.
    const std::uint64_t due = offset >= o->size ? 0 : std::min<std::uint64_t>(n, o->size - offset);
    if (*got > n || *got < due) {
      t_read_error = "the store returned " + std::to_string(*got) + " of the " + std::to_string(n) +
                     " bytes asked at offset " + std::to_string(offset) + ", where the key's " +
                     std::to_string(o->size) + " bytes hold " + std::to_string(due) +
                     " (a short read before the key's end is refused)";
      return -EIO;
    }
    return static_cast<std::int64_t>(*got);
  }

  void close(int fd) override {
    std::shared_ptr<const Open> o;
    {
      std::lock_guard lock(mu_);
      const auto it = files_.find(fd);
      if (it == files_.end()) return;
      o = std::move(it->second);
      files_.erase(it);
    }
    if (o->transport != nullptr) o->transport->close(o->transport_fd);
  }

  // The keys directly under the prefix, by name (a prefix below it without its '/').
  // A listing that fails is discovery's error (kLayout, ENOENT where nothing is there), as an
  // s3:// listing's is.
  Result<std::vector<std::string>> list(const std::string& dir_url) override {
    const auto refused = [&dir_url](const Status& st) {
      const int err = st.sys_errno();
      return file_error(
          ErrorCode::kLayout, split_options(dir_url).first,
          std::string(err == ENOENT ? "shard directory not found" : "cannot list the directory") +
              " (" + message_after_path(st, st.path()) + ")",
          err);
    };
    auto where = resolve(dir_url);
    if (where && where->transport != nullptr) return where->transport->list(dir_url);
    if (!where) return refused(where.status());
    const Where& w = *where;
    std::string prefix = w.key;
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
    auto keys = w.store->list(prefix);
    if (!keys) return refused(keys.status());
    std::vector<std::string> names;
    for (std::string_view k : *keys) {
      if (k.starts_with(prefix)) k.remove_prefix(prefix.size());
      if (k.ends_with('/')) k.remove_suffix(1);
      if (!k.empty()) names.emplace_back(k);
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  }

  // A key is an object where its stat finds it, a prefix where keys are listed under it.
  Result<bool> is_object(const std::string& url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Where w, resolve(url));
    if (w.transport != nullptr) return w.transport->is_object(url);
    if (!w.key.empty() && w.key.back() != '/') {
      auto k = w.store->stat(w.key);
      if (k) return true;
      if (k.status().sys_errno() != ENOENT) return named(k.status(), w);
    }
    const std::string prefix = w.key.empty() || w.key.back() == '/' ? w.key : w.key + "/";
    auto keys = w.store->list(prefix);
    if (keys && !keys->empty()) return false;
    if (!keys && keys.status().sys_errno() != ENOENT) return named(keys.status(), w);
    return file_error(ErrorCode::kIo, w.shown, "no such object or prefix", ENOENT);
  }

  std::string last_read_error() const override {
    return t_read_by != nullptr ? t_read_by->last_read_error() : t_read_error;
  }

  std::uint64_t retries() const override { return transport_retries(); }

  Status write_object(const std::string& url, const void* data, std::size_t n) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Where w, resolve(url));
    if (w.transport != nullptr) return w.transport->write_object(url, data, n);
    SHARDLOAD_RETURN_IF_ERROR(check_object(w));
    return named(
        w.store->write(w.key, std::span<const std::byte>(static_cast<const std::byte*>(data), n)),
        w);
  }

 private:
  struct Open {
    std::shared_ptr<Store> store;
    std::string key;
    std::string shown;
    std::string generation;  // the reads' condition ("" none)
    std::uint64_t size = 0;
    std::chrono::milliseconds deadline{0};
    std::size_t max_late = 1;       // the scheme's max_late_reads
    std::string location;           // the store's, for messages (redacted)
    RemoteIo* transport = nullptr;  // a built-in driver's store: its transport's descriptor
    int transport_fd = -1;
  };

  // The open of a store driver's key: its stat.
  Result<int> open_stat(Where w, FileInfo* info) {
    SHARDLOAD_RETURN_IF_ERROR(check_object(w));
    auto k = w.store->stat(w.key);
    if (!k) return named(k.status(), w);
    *info = generation_info(*k);
    return add(std::move(w), k->generation, k->size);
  }

  // A key its store's transport opened (its descriptor there, or the open's error).
  Result<int> add_opened(const Where& w, Result<int> opened) {
    if (!opened) return opened.status();
    auto o = std::make_shared<Open>();
    o->store = w.store;
    o->transport = w.transport;
    o->transport_fd = *opened;
    auto fd = insert(std::move(o));
    if (!fd) w.transport->close(*opened);
    return fd;
  }

  Result<int> add(Where w, std::string generation, std::uint64_t size) {
    auto o = std::make_shared<Open>();
    o->store = std::move(w.store);
    o->key = std::move(w.key);
    o->shown = std::move(w.shown);
    o->generation = std::move(generation);
    o->size = size;
    o->deadline = w.entry->scheme.read_deadline;
    o->max_late = std::max<std::size_t>(1, w.entry->scheme.max_late_reads);
    o->location = std::move(w.location);
    return insert(std::move(o));
  }

  // The next free descriptor of the adapter's range (numbers go round it, skipping those
  // still open).
  Result<int> insert(std::shared_ptr<const Open> o) {
    std::lock_guard lock(mu_);
    if (files_.size() >= static_cast<std::size_t>(INT_MAX - kRemoteFdBase)) {
      return file_error(ErrorCode::kIo, o->shown, "too many keys open in this process", EMFILE);
    }
    while (files_.count(next_fd_) != 0)
      next_fd_ = next_fd_ == INT_MAX ? kRemoteFdBase : next_fd_ + 1;
    const int fd = next_fd_;
    next_fd_ = next_fd_ == INT_MAX ? kRemoteFdBase : next_fd_ + 1;
    files_.emplace(fd, std::move(o));
    return fd;
  }

  std::shared_ptr<const Open> find(int fd) {
    std::lock_guard lock(mu_);
    const auto it = files_.find(fd);
    return it == files_.end() ? nullptr : it->second;
  }

  // The read as a job of the process's work pool (the storage context's: no thread of its
  // own) into a buffer of its own, waited for until the deadline (or an interrupt): a read
  // that answers later writes nothing of the caller's. The deadline holds whatever the pool
  // holds: a job that no thread started by then is never run (nor sent), and the waiter never
  // runs it itself (with no limit). A read past its deadline holds a pool thread until the
  // store answers, and counts as the store's late read until then; a store with max_late of
  // them is sent no more reads (refused at once), so that one that hangs holds that many
  // threads of the pool, not all of them (whose jobs every other load of the process shares).
  static Result<std::size_t> read_by_deadline(const Open& o, void* buf, std::size_t n,
                                              std::uint64_t offset) {
    StoreIo* const io = the_adapter();
    if (const std::size_t late = io->late_reads(o.store.get()); late >= o.max_late) {
      return file_error(
          ErrorCode::kIo, o.shown,
          "refused without a request: the store " + o.location + " has not answered " +
              std::to_string(late) + " earlier reads past their read deadline of " +
              std::to_string(o.deadline.count()) +
              " ms, and each still holds a thread of the process's work pool (a store may hold " +
              std::to_string(o.max_late) +
              ", its scheme's max_late_reads); its reads are refused until one of them answers",
          EBUSY);
    }
    struct Pending {
      std::mutex mu;
      std::condition_variable cv;
      std::optional<Result<std::size_t>> got;
      std::vector<std::byte> bytes;
      bool started = false;  // a pool thread sent it
      bool gave_up = false;  // its waiter returned (deadline, interrupt): what it brings is dropped
    };
    auto p = std::make_shared<Pending>();
    std::shared_ptr<Job> job;
    try {
      p->bytes.resize(n);
      job = StorageContext::process().pool().submit(
          [p, io, store = o.store, key = o.key, generation = o.generation, offset] {
            {
              std::lock_guard lock(p->mu);
              if (p->gave_up) return;  // started after its deadline: never sent
              p->started = true;
            }
            Result<std::size_t> r = store->read(key, offset, p->bytes, generation);
            std::lock_guard lock(p->mu);
            if (p->gave_up) {
              io->count_late(store.get(), -1);  // its waiter counted it late
              return;
            }
            p->got.emplace(std::move(r));
            p->cv.notify_all();
          });
    } catch (const std::bad_alloc&) {  // nothing to queue it with: not read without its deadline
      return file_error(ErrorCode::kIo, o.shown, "out of memory to queue the read", ENOMEM);
    }
    const auto until = std::chrono::steady_clock::now() + o.deadline;
    std::unique_lock lock(p->mu);
    // The waiter's end before an answer: a read sent is late from now on; one not sent never
    // will be (claimed here, it ends at once).
    auto give_up = [&](Status st) -> Result<std::size_t> {
      p->gave_up = true;
      if (p->started) io->count_late(o.store.get(), +1);
      lock.unlock();
      (void)job->run_if_queued();
      return st;
    };
    while (!p->got.has_value()) {
      if (interrupt_requested()) {
        return give_up(file_error(ErrorCode::kIo, o.shown, "interrupted", ECANCELED));
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) {
        return give_up(file_error(
            ErrorCode::kIo, o.shown,
            "no answer within the read deadline of " + std::to_string(o.deadline.count()) +
                " ms (a read of " + std::to_string(n) + " bytes at offset " +
                std::to_string(offset) + ")" +
                (p->started ? ""
                            : "; it was never sent: no thread of the process's work pool was "
                              "free to send it"),
            ETIMEDOUT));
      }
      p->cv.wait_until(lock, std::min(until, now + std::chrono::milliseconds(50)));
    }
    if (!*p->got) return p->got->status();
    const std::size_t got = std::min(**p->got, n);
    std::memcpy(buf, p->bytes.data(), got);
    return **p->got;
  }

  // The reads of a store past their deadline that its answer has not ended (read_by_deadline),
  // by store: a store counted here is kept by those reads' jobs.
  std::size_t late_reads(const Store* store) {
    std::lock_guard lock(mu_);
    const auto it = late_.find(store);
    return it == late_.end() ? 0 : it->second;
  }
  void count_late(const Store* store, int by) {
    std::lock_guard lock(mu_);
    std::size_t& n = late_[store];
    n = by > 0 ? n + 1 : n - 1;
    if (n == 0) late_.erase(store);
  }

  std::mutex mu_;
  std::unordered_map<int, std::shared_ptr<const Open>> files_;
  std::unordered_map<const Store*, std::size_t> late_;  // under mu_ (late_reads)
  int next_fd_ = kRemoteFdBase;
  static thread_local std::string t_read_error;
  static thread_local RemoteIo* t_read_by;  // the transport of this thread's last pread

 public:
  // fork(): the lock is held across it, so that the child's copy of the open keys is whole
  // (every remote read passes through here, on any thread, while a DataLoader forks).
  static void before_fork();
  static void after_fork();
  // The child has none of its parent's threads: no read of its own is late.
  static void after_fork_child();
};

thread_local std::string StoreIo::t_read_error;
thread_local RemoteIo* StoreIo::t_read_by = nullptr;

StoreIo* the_adapter() {
  // Never destroyed: keys may be open in other threads until the very end.
  static auto* io = [] {
    auto* made = new StoreIo();
    ::pthread_atfork(&StoreIo::before_fork, &StoreIo::after_fork, &StoreIo::after_fork_child);
    return made;
  }();
  return io;
}

void StoreIo::before_fork() { the_adapter()->mu_.lock(); }
void StoreIo::after_fork() { the_adapter()->mu_.unlock(); }
void StoreIo::after_fork_child() {
  StoreIo* const io = the_adapter();
  io->late_.clear();
  io->mu_.unlock();
}

RemoteIo* the_store_io() { return the_adapter(); }

// A registered store seen from a prefix of it (open_store of "SCHEME://AUTHORITY/PREFIX/").
// A save writes through it in place, as to object storage (a key is written whole by its
// sink; no rename): stage() checks and deletes an old commit key, the keys are written under
// their final names through the inner store's sinks, publish() deletes the replaced keys the
// new set did not overwrite and then seals (the commit key last), discard() deletes the new
// keys of a save to an empty place. A prefix ("a.zarr/") exists only through its keys:
// nothing to delete for it.
class PrefixedStore final : public Store {
 public:
  PrefixedStore(std::shared_ptr<Store> inner, std::string scheme, std::string prefix,
                std::string shown, std::string query)
      : inner_(std::move(inner)),
        scheme_(std::move(scheme)),
        prefix_(std::move(prefix)),
        shown_(std::move(shown)),
        query_(std::move(query)) {}

  [[nodiscard]] Status check_writable() const override { return inner_->check_writable(); }

  Result<Staging> stage(std::string_view name, const PublishSteps& steps) override {
    if (!name.empty()) SHARDLOAD_RETURN_IF_ERROR(check_store_key(name));
    Staging s;
    s.name = std::string(name);
    s.prefix = name.empty() ? std::string() : std::string(name) + "/";
    s.location = staged_location(s.prefix);
    s.in_place = true;
    if (steps.check) SHARDLOAD_RETURN_IF_ERROR(steps.check(&s.replaced));
    // The old commit key first: a reader must not take it for the new keys.
    if (!steps.commit_key.empty() &&
        std::any_of(s.replaced.begin(), s.replaced.end(),
                    [&](const ReplacedKey& r) { return r.key == steps.commit_key; })) {
      SHARDLOAD_RETURN_IF_ERROR(remove(s.prefix + steps.commit_key));
    }
    return s;
  }

  Status publish(const Staging& staging, const PublishSteps& steps, bool* published) override {
    *published = false;
    if (!staging.in_place || staging.location != staged_location(staging.prefix)) {
      return Status(ErrorCode::kInvalidArgument,
                    "save: expected a staging of " + describe(staging.prefix) + ", found another");
    }
    std::set<std::string> keep(steps.keys.begin(), steps.keys.end());
    if (!steps.commit_key.empty()) keep.insert(steps.commit_key);
    for (const ReplacedKey& old : staging.replaced) {
      if (keep.count(old.key) != 0 || old.key.empty() || old.key.back() == '/') continue;
      const Status st = remove(staging.prefix + old.key);
      if (!st) {
        return file_error(ErrorCode::kIo, describe(staging.prefix),
                          "cannot delete the old dataset's key '" + old.key + "' (" + st.message() +
                              "); the new dataset's manifest was not written",
                          st.sys_errno());
      }
    }
    if (steps.seal) SHARDLOAD_RETURN_IF_ERROR(steps.seal(staging.location));
    *published = true;
    return Status::ok();
  }

  void discard(const Staging& staging, const PublishSteps& steps) noexcept override {
    if (!staging.in_place || steps.overwrite ||
        staging.location != staged_location(staging.prefix)) {
      return;
    }
    try {
      for (const std::string& key : steps.keys) {
        if (!key.empty() && key.back() != '/') (void)remove(staging.prefix + key);
      }
    } catch (...) {  // best effort on a failure path
    }
  }

  [[nodiscard]] std::string_view scheme() const override { return scheme_; }
  [[nodiscard]] const std::string& location() const override { return shown_; }
  [[nodiscard]] std::string describe(std::string_view key) const override {
    return shown_ + std::string(key);
  }

  Result<KeyInfo> stat(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    return inner_->stat(prefix_ + std::string(key));
  }
  Result<std::size_t> read(std::string_view key, std::uint64_t offset, std::span<std::byte> dst,
                           std::string_view if_generation) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    return inner_->read(prefix_ + std::string(key), offset, dst, if_generation);
  }
  Result<std::vector<std::string>> list(std::string_view prefix) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_prefix(prefix));
    auto listed = inner_->list(prefix_ + std::string(prefix));
    // The view's own location lists as empty when nothing is below it (as an object store's
    // prefix does), not as a missing prefix of the inner store.
    if (!listed && prefix.empty() && !prefix_.empty() && listed.status().sys_errno() == ENOENT) {
      return std::vector<std::string>{};
    }
    SHARDLOAD_ASSIGN_OR_RETURN(std::vector<std::string> keys, std::move(listed));
    for (std::string& k : keys) {
      if (k.starts_with(prefix_)) k.erase(0, prefix_.size());
    }
    return keys;
  }
  Status write(std::string_view key, std::span<const std::byte> data) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    return inner_->write(prefix_ + std::string(key), data);
  }
  Status remove(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    return inner_->remove(prefix_ + std::string(key));
  }

 protected:
  Result<std::unique_ptr<KeySink>> open_key_sink(std::string_view key,
                                                 std::uint64_t size) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    return inner_->open_sink(inner_staging(), key, size);
  }
  Result<std::unique_ptr<KeySink>> reopen_key_sink(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    return inner_->reopen_sink(inner_staging(), key);
  }

 private:
  // The inner store's keys of this view: a staging whose prefix is the view's.
  [[nodiscard]] Staging inner_staging() const {
    Staging s;
    s.prefix = prefix_;
    s.in_place = true;
    return s;
  }
  // The URL a writer that writes by URL (the manifest's seal) writes `prefix` of the view by.
  [[nodiscard]] std::string staged_location(const std::string& prefix) const {
    return shown_ + prefix + query_;
  }

  std::shared_ptr<Store> inner_;
  std::string scheme_;
  std::string prefix_;
  std::string shown_;
  std::string query_;  // the location's query ("?..."), or ""
};

}  // namespace

FileInfo generation_info(const KeyInfo& k) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char c : k.generation) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  FileInfo info;
  info.size = k.size;
  info.regular = true;
  info.inode = h;
  return info;
}

const SchemeRow* registered_row(std::string_view path) {
  const Entry* const e = entry_of(path);
  return e == nullptr ? nullptr : &e->row;
}

bool is_store_scheme(std::string_view path) {
  const Entry* const e = entry_of(path);
  return e != nullptr && static_cast<bool>(e->scheme.open);
}

void register_remote_scheme(std::string_view scheme, const PathTraits& traits, RemoteIo* (*reads)(),
                            RemoteIo* (*transport)(), const char* missing) {
  auto* e = new Entry();  // never freed (see Entry)
  e->label = std::string(scheme) + "://";
  e->row.prefix = e->label;
  e->row.traits = traits;
  if (e->row.traits.scheme_label.empty()) e->row.traits.scheme_label = e->label;
  e->row.backend = reads;
  e->row.transport = transport;
  e->row.missing = missing;
  add_redacted_scheme(scheme);  // its URLs' user parts hidden wherever a message shows them
  replace_entry(e->label, e, false);
}

void register_store_io() { set_store_io(the_store_io()); }

Result<std::unique_ptr<Store>> open_registered_store(std::string_view location) {
  SHARDLOAD_ASSIGN_OR_RETURN(Where w, resolve(location));
  std::string prefix = w.key;
  if (!prefix.empty()) {
    if (prefix.back() != '/') prefix += '/';
    SHARDLOAD_RETURN_IF_ERROR(check_store_prefix(prefix).with_path(w.shown));
  }
  const std::size_t q = location.find('?');
  std::string query(q == std::string_view::npos ? std::string_view() : location.substr(q));
  return std::unique_ptr<Store>(std::make_unique<PrefixedStore>(
      std::move(w.store), w.entry->scheme.scheme, prefix, w.location + prefix, query));
}

}  // namespace detail

Status register_store_scheme(StoreScheme scheme) {
  const std::string name = scheme.scheme;
  if (!detail::valid_scheme(name)) {
    return Status(ErrorCode::kInvalidArgument,
                  "store scheme '" + path_for_message(name) +
                      "': expected a lower-case letter, then letters, digits, '+', '-' or '.'");
  }
  if (!scheme.open) {
    return Status(ErrorCode::kInvalidArgument,
                  "store scheme '" + name + "': no factory to open its stores");
  }
  const auto builtin = [&name] {
    return Status(ErrorCode::kInvalidArgument,
                  "store scheme '" + name + "': served by a built-in driver");
  };
  if (name == "file") return builtin();
  (void)detail::table();  // the built-in schemes first
  // Its URLs' user parts are hidden wherever a message shows them, mistyped spellings too,
  // before any URL of it can be named.
  detail::add_redacted_scheme(name);
  auto* e = new detail::Entry();  // never freed (see Entry)
  e->scheme = std::move(scheme);
  e->label = name + "://";
  e->row.prefix = e->label;
  e->row.traits = e->scheme.traits;
  e->row.traits.scheme_label = e->label;
  e->row.backend = store_io;
  e->row.missing = detail::kNoAdapter;
  if (!detail::replace_entry(e->label, e, true)) {
    delete e;
    return builtin();
  }
  return Status::ok();
}

void unregister_store_scheme(std::string_view scheme) {
  if (!detail::is_store_scheme(std::string(scheme) + "://")) return;
  detail::replace_entry(std::string(scheme) + "://", nullptr, true);
}

}  // namespace shardload
