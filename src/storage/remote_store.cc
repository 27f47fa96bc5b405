// The s3:// and http(s):// drivers: thin wrappers over the registered RemoteIo (s3_io.cc,
// http_io.cc) and, for deletes and listings that tell objects from prefixes, the s3://
// ObjectStore (object_store.hpp). The same requests the readers send, so the same retries,
// deadlines and errors.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/detail/interrupt_aside.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/md5.hpp"
#include "storage/detail/object_store.hpp"
#include "storage/detail/store_options.hpp"
#include "storage/detail/store_schemes.hpp"
#include "storage/detail/stores.hpp"

namespace shardload::detail {
namespace {

// A key written through one upload (ObjectStore::open_writer: one PUT, or a multipart upload,
// as the store chooses by its size). The bytes that continue what was sent go out at once;
// bytes ahead of them wait in memory until the gap is written, or finish() fills it with zeros.
class ObjectSink final : public KeySink {
 public:
  ObjectSink(std::unique_ptr<ObjectWriter> writer, std::string shown, std::uint64_t size,
             ObjectStore* objects, std::string url)
      : writer_(std::move(writer)),
        shown_(std::move(shown)),
        size_(size),
        objects_(objects),
        url_(std::move(url)) {}
  ~ObjectSink() override { abort(); }

  Status write(std::uint64_t offset, std::span<const std::byte> data) override {
    std::lock_guard lock(mu_);
    SHARDLOAD_RETURN_IF_ERROR(usable());
    if (offset > size_ || data.size() > size_ - offset) {
      return refuse("write of " + std::to_string(data.size()) + " bytes at offset " +
                    std::to_string(offset) + " passes the key's size of " + std::to_string(size_) +
                    " bytes");
    }
    if (data.empty()) return Status::ok();
    if (offset < sent_) {
      return refuse("write at offset " + std::to_string(offset) + ": an object is uploaded in " +
                    "order, and its bytes up to offset " + std::to_string(sent_) +
                    " were sent already");
    }
    if (offset > sent_) {
      pending_[offset].assign(reinterpret_cast<const char*>(data.data()), data.size());
      return Status::ok();
    }
    SHARDLOAD_RETURN_IF_ERROR(send(data.data(), data.size()));
    return drain();
  }

  Status finish() override {
    std::lock_guard lock(mu_);
    SHARDLOAD_RETURN_IF_ERROR(usable());
    // What waits for a gap gets it as zeros, then the object is padded to its size.
    while (!pending_.empty()) {
      SHARDLOAD_RETURN_IF_ERROR(zeros(pending_.begin()->first - sent_));
      SHARDLOAD_RETURN_IF_ERROR(drain());
    }
    SHARDLOAD_RETURN_IF_ERROR(zeros(size_ - sent_));
    // Every byte is sent: the commit's request (the PUT, or the multipart completion) may make
    // the object whatever its answer, and the digest tells it for the one who cleans up.
    sent_md5_ = md5_.hex();
    const Status st = writer_->commit();
    if (!st) {
      writer_->abort();
      failed_ = st;
      return st;
    }
    // The ETag the upload was answered with; where the writer was not told it (Arrow's
    // multipart stream), what a HEAD right after the completion finds (docs/save.md: a limit).
    etag_ = writer_->etag();
    writer_.reset();
    finished_ = true;
    if (etag_.empty()) {
      if (auto h = objects_->head(url_); h && h->size == size_) etag_ = h->etag;
    }
    return Status::ok();
  }

  [[nodiscard]] std::string etag() const override {
    std::lock_guard lock(mu_);
    return etag_;
  }

  [[nodiscard]] std::string sent_md5() const override {
    std::lock_guard lock(mu_);
    return sent_md5_;
  }

  void abort() noexcept override {
    std::lock_guard lock(mu_);
    pending_.clear();
    if (writer_ != nullptr) {
      writer_->abort();
      writer_.reset();
    }
  }

  [[nodiscard]] std::uint64_t size() const override { return size_; }

 private:
  [[nodiscard]] Status usable() const {
    if (!failed_.is_ok()) return failed_;
    if (writer_ == nullptr) {
      return file_error(ErrorCode::kInvalidArgument, shown_,
                        finished_ ? "the sink is finished" : "the sink is aborted", EBADF);
    }
    return Status::ok();
  }
  [[nodiscard]] Status refuse(const std::string& why) const {
    return file_error(ErrorCode::kInvalidArgument, shown_, why, EINVAL);
  }

  // Appends to the upload; a failure fails the sink.
  Status send(const void* data, std::size_t n) {
    if (n == 0) return Status::ok();
    const Status st = writer_->append(data, n);
    if (!st) {
      failed_ = st;
      return st;
    }
    md5_.update(std::span(static_cast<const std::byte*>(data), n));
    sent_ += n;
    return Status::ok();
  }

  // Sends the waiting pieces that now continue what was sent (a piece that overlaps the sent
  // bytes sends its rest).
  Status drain() {
    while (!pending_.empty() && pending_.begin()->first <= sent_) {
      auto node = pending_.extract(pending_.begin());
      const std::string& bytes = node.mapped();
      const std::uint64_t skip = sent_ - node.key();
      if (skip < bytes.size()) {
        SHARDLOAD_RETURN_IF_ERROR(send(bytes.data() + skip, bytes.size() - skip));
      }
    }
    return Status::ok();
  }

  Status zeros(std::uint64_t n) {
    static const std::byte kZeros[std::size_t{1} << 16] = {};
    while (n > 0) {
      const auto piece = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof kZeros));
      SHARDLOAD_RETURN_IF_ERROR(send(kZeros, piece));
      n -= piece;
    }
    return Status::ok();
  }

  mutable std::mutex mu_;
  std::unique_ptr<ObjectWriter> writer_;
  std::string shown_;  // the key's URL, its secrets hidden
  std::uint64_t size_;
  ObjectStore* objects_;
  std::string url_;       // with the query: not for messages
  std::string etag_;      // after finish
  Md5 md5_;               // of the bytes sent
  std::string sent_md5_;  // once every byte was sent
  std::uint64_t sent_ = 0;
  std::map<std::uint64_t, std::string> pending_;
  Status failed_ = Status::ok();
  bool finished_ = false;
};

class RemoteStore final : public Store, public TransportStore {
 public:
  RemoteStore(std::string base, std::string query, RemoteIo* io)
      : base_(std::move(base)), query_(std::move(query)), io_(io) {
    scheme_ = base_.substr(0, base_.find("://"));
    // Shown as it is: a password in the user part ("s3://AK:PASSWORD@B/P/") hidden too.
    shown_ = redact_secrets(base_);
  }

  // The RemoteIo its keys are read and written through: the readers read through it too
  // (the adapter, store_schemes.cc).
  [[nodiscard]] RemoteIo* transport() const override { return io_; }

  [[nodiscard]] std::string_view scheme() const override { return scheme_; }
  [[nodiscard]] const std::string& location() const override { return shown_; }
  [[nodiscard]] std::string describe(std::string_view key) const override {
    return shown_ + std::string(key);
  }

  // s3:// writes through its ObjectStore (none in a build without Arrow); http(s):// is
  // read-only. The same words as the refusal of a key's write or sink.
  [[nodiscard]] Status check_writable() const override {
    const std::string dir = base_ + query_;
    if (object_store_for(dir) != nullptr) return check_object_key(dir);
    if (scheme_ == "s3") return writable_object_store(dir).status();
    return file_error(ErrorCode::kIo, shown_,
                      "this store cannot write (" + scheme_ + " is read-only)", ENOTSUP);
  }

  Result<KeyInfo> stat(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    SHARDLOAD_ASSIGN_OR_RETURN(const FileInfo info, io_->stat_path(url(key)));
    return KeyInfo{info.size, generation_of(info)};
  }

  Result<std::size_t> read(std::string_view key, std::uint64_t offset, std::span<std::byte> dst,
                           std::string_view if_generation) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    const std::string u = url(key);
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(File file, File::open_stat(*io_, u, &info));
    if (!if_generation.empty() && generation_of(info) != if_generation) {
      return file_error(ErrorCode::kChanged, u,
                        "changed: generation " + generation_of(info) + ", expected " +
                            std::string(if_generation));
    }
    if (offset >= info.size || dst.empty()) return std::size_t{0};
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(dst.size(), info.size - offset));
    // read_exact: the backend's retries, and its word on a failed read in the message.
    SHARDLOAD_RETURN_IF_ERROR(file.read_exact(dst.data(), n, offset));
    return n;
  }

  Result<std::vector<std::string>> list(std::string_view prefix) override {
    SHARDLOAD_RETURN_IF_ERROR(detail::check_store_prefix(prefix));
    if (!prefix.empty()) SHARDLOAD_RETURN_IF_ERROR(check_key(prefix));
    const std::string dir = base_ + std::string(prefix) + query_;
    std::vector<std::string> keys;
    if (ObjectStore* const objects = object_store_for(dir); objects != nullptr) {
      SHARDLOAD_ASSIGN_OR_RETURN(const auto entries, objects->list_entries(dir));
      for (const ObjectEntry& e : entries) {
        keys.push_back(std::string(prefix) + e.name + (e.prefix ? "/" : ""));
      }
    } else {
      SHARDLOAD_ASSIGN_OR_RETURN(const auto names, io_->list(dir));
      for (const std::string& name : names) keys.push_back(std::string(prefix) + name);
    }
    return keys;
  }

  Status write(std::string_view key, std::span<const std::byte> data) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    const std::string u = url(key);
    SHARDLOAD_RETURN_IF_ERROR(check_object_key(u));
    const Status st = io_->write_object(u, data.data(), data.size());
    if (st || st.code() == ErrorCode::kInvalidArgument) return st;
    return settle_write(key, data, st);
  }

  Result<std::unique_ptr<KeySink>> open_key_sink(std::string_view key,
                                                 std::uint64_t size) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    const std::string u = url(key);
    ObjectStore* const objects = object_store_for(u);
    if (objects == nullptr) return Store::open_key_sink(key, size);
    SHARDLOAD_RETURN_IF_ERROR(check_object_key(u));
    if (size > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return file_error(ErrorCode::kInvalidArgument, describe(key),
                        "a key of " + std::to_string(size) + " bytes cannot be uploaded", EFBIG);
    }
    SHARDLOAD_ASSIGN_OR_RETURN(auto writer,
                               objects->open_writer(u, static_cast<std::int64_t>(size)));
    return std::unique_ptr<KeySink>(
        new ObjectSink(std::move(writer), describe(key), size, objects, u));
  }

  Result<WrittenKey> version(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    const std::string u = url(key);
    ObjectStore* const objects = object_store_for(u);
    if (objects == nullptr) return Store::version(key);
    SHARDLOAD_ASSIGN_OR_RETURN(const ObjectHead h, objects->head(u));
    return WrittenKey{std::string(key), h.size, h.etag};
  }

  Status remove(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    const std::string u = url(key);
    ObjectStore* const objects = object_store_for(u);
    if (objects == nullptr) {
      return file_error(ErrorCode::kIo, u,
                        "this store cannot delete (" + scheme_ + " is read-only)", ENOTSUP);
    }
    SHARDLOAD_RETURN_IF_ERROR(check_object_key(u));
    return objects->remove(u);
  }

  // s3:// writes in place: the keys under their final names, the commit key last (the commit
  // protocol of docs/save.md); http(s):// is refused (read-only).
  Result<Staging> stage(std::string_view name, const PublishSteps& steps) override {
    if (!name.empty()) SHARDLOAD_RETURN_IF_ERROR(check_key(name));
    Staging s;
    s.name = std::string(name);
    s.prefix = name.empty() ? std::string() : std::string(name) + "/";
    s.location = base_ + s.prefix + query_;
    s.in_place = true;
    ObjectStore* const objects = object_store_for(s.location);
    if (objects == nullptr) return Store::stage(name, steps);
    // Before any request: the prefix checked is the one every write and delete uses.
    SHARDLOAD_RETURN_IF_ERROR(check_object_key(s.location));
    if (steps.check) SHARDLOAD_RETURN_IF_ERROR(steps.check(&s.replaced));
    // The old commit key goes first: a reader that trusts it must not take it for the new
    // keys, which replace the old ones under the same names.
    if (!steps.commit_key.empty() &&
        std::any_of(s.replaced.begin(), s.replaced.end(),
                    [&](const ReplacedKey& r) { return r.key == steps.commit_key; })) {
      SHARDLOAD_RETURN_IF_ERROR(objects->remove(base_ + s.prefix + steps.commit_key + query_));
    }
    return s;
  }

  Status publish(const Staging& staging, const PublishSteps& steps, bool* published) override {
    *published = false;
    ObjectStore* const objects = object_store_for(base_ + query_);
    if (objects == nullptr) return Store::publish(staging, steps, published);
    if (!staging.in_place || staging.location != base_ + staging.prefix + query_) {
      return Status(ErrorCode::kInvalidArgument,
                    "save: expected a staging of " + describe(staging.prefix) + ", found another");
    }
    // The old dataset's keys that no new one replaced (shards beyond the new count, another
    // format's, a store's chunks beyond its new count), before the commit key: that is made
    // from what the prefix then holds, exactly the new dataset, and a reader without it sees
    // that too from then on. A store emptied so goes last, with any marker a delete left.
    std::set<std::string> keep(steps.keys.begin(), steps.keys.end());
    if (!steps.commit_key.empty()) keep.insert(steps.commit_key);
    const auto refused = [&](const std::string& old, const Status& st) {
      return file_error(ErrorCode::kIo, describe(staging.prefix),
                        "cannot delete the old dataset's object '" + old + "' (" + st.message() +
                            "); the new dataset's manifest was not written",
                        st.sys_errno());
    };
    for (const bool prefixes : {false, true}) {
      for (const ReplacedKey& old : staging.replaced) {
        const bool is_prefix = !old.key.empty() && old.key.back() == '/';
        if (keep.count(old.key) != 0 || is_prefix != prefixes) continue;
        const std::string u = base_ + staging.prefix + old.key + query_;
        const Status st = is_prefix ? objects->remove_empty_prefix(u) : objects->remove(u);
        if (!st) return refused(old.key, st);
      }
    }
    if (steps.seal) SHARDLOAD_RETURN_IF_ERROR(steps.seal(staging.location));
    *published = true;
    return Status::ok();
  }

  // A save to an empty prefix deletes what it may have written; an overwrite leaves the keys
  // as they are (a new one may have replaced an old one of its name: docs/save.md).
  void discard(const Staging& staging, const PublishSteps& steps) noexcept override {
    ObjectStore* const objects = object_store_for(base_ + query_);
    if (objects == nullptr || !staging.in_place || steps.overwrite ||
        staging.location != base_ + staging.prefix + query_) {
      return;
    }
    try {
      // The prefix was empty when the save began, but another writer may have put an object
      // at one of the names since: with the save's own keys known, a key is deleted only
      // while a HEAD still shows the size and ETag its upload was answered with.
      std::map<std::string, const WrittenKey*> own;
      for (const WrittenKey& w : steps.own) own.emplace(staging.prefix + w.key, &w);
      for (const bool prefixes : {false, true}) {
        for (const std::string& key : steps.keys) {
          const bool is_prefix = !key.empty() && key.back() == '/';
          if (is_prefix != prefixes) continue;
          const std::string full = staging.prefix + key;
          const std::string u = base_ + full + query_;
          if (is_prefix) {
            (void)objects->remove_empty_prefix(u);
            continue;
          }
          if (steps.own_known) {
            const auto it = own.find(full);
            if (it == own.end()) continue;  // never finished by this save: not its own
            auto now = objects->head(u);
            if (!now) {
              if (now.status().sys_errno() != ENOENT && steps.kept) {
                steps.kept(describe(full),
                           "cannot be looked at (" + now.status().message() + "), so it is left");
              }
              continue;
            }
            const WrittenKey& w = *it->second;
            if (w.etag.empty()) {
              if (steps.kept) {
                steps.kept(describe(full),
                           "was not answered with an ETag, so whose it is now is unknown; it is "
                           "left");
              }
              continue;
            }
            if (now->size != w.size || !same_etag(now->etag, w.etag)) {
              if (steps.kept) {
                steps.kept(describe(full),
                           "changed since this save wrote it (another writer?): "
                           "ETag " +
                               w.etag + " written, " + now->etag + " found; it is left");
              }
              continue;
            }
          }
          (void)objects->remove(u);
        }
      }
    } catch (...) {  // best effort on a failure path
    }
  }

 private:
  // A write that failed after its request went out may still have been stored: its answer
  // lost (a connection cut after the body, a timeout, a Ctrl-C ending the wait), or a 5xx
  // after the store committed. A save's manifest is the commit point, so "not written" there
  // means "not published", and a job runner acts on it: the key is looked at (a HEAD, then a
  // GET of that version) and, holding exactly the bytes sent, the write is done (an object of
  // those very bytes is what this write leaves, whoever else may have sent them). Otherwise
  // the failure stands, saying what the key holds. A Ctrl-C that ended the write ends every
  // request while it is pending, so it is set aside for the look and asked for again after
  // it (the caller then reports the interrupt, after a write that was done).
  //
  // Only a write the store refused (an answer of 401/403, or 404: no bucket; EACCES, ENOENT)
  // is known not to be stored where the look finds nothing. After any other failure a 404 is
  // no proof: a store whose reads lag its writes (a caching proxy, an eventually consistent
  // store) answers it for a while after a PUT it took, as its listings lag. The look is then
  // asked again twice (0.5 s and 1 s after, as the save's listing is), and finding nothing
  // still, the failure says that whether the key was stored cannot be told: a save's
  // clean-up (abandon_remote_save) then deletes nothing, since its manifest may yet appear,
  // and that manifest must not name deleted shards.
  //
  // A Ctrl-C is set aside for one look only, and for kInterruptedLook at most: the interrupt is
  // asked for again then, which ends the look's request as it ends any other. Its attempts and
  // their request_timeout (150 s with the defaults, on a store gone quiet) held the interrupt;
  // a look that cannot tell says so, and the caller says the dataset may be published.
  static constexpr std::chrono::seconds kInterruptedLook{5};
  Status settle_write(std::string_view key, std::span<const std::byte> data, const Status& failed) {
    const detail::InterruptSetAside again(kInterruptedLook);
    const bool interrupted = again.interrupted();
    const auto failed_and = [&](const std::string& more) {
      return Status(failed.code(), failed.message() + "; " + more)
          .with_path(failed.path())
          .with_errno(failed.sys_errno());
    };
    const bool refused = failed.sys_errno() == EACCES || failed.sys_errno() == ENOENT;
    // "" where the key holds the bytes sent, else what it holds; ENOENT where a HEAD, or the
    // GET after it, finds nothing.
    const auto look = [&]() -> Result<std::string> {
      SHARDLOAD_ASSIGN_OR_RETURN(const KeyInfo there, stat(key));
      if (there.size != data.size()) {
        return "(" + std::to_string(there.size) + " bytes, not the " + std::to_string(data.size()) +
               " sent)";
      }
      std::vector<std::byte> back(data.size());
      SHARDLOAD_ASSIGN_OR_RETURN(const std::size_t got, read(key, 0, back, there.generation));
      if (got == data.size() && std::equal(back.begin(), back.end(), data.begin())) {
        return std::string();
      }
      return "(of " + std::to_string(data.size()) + " bytes, but not the bytes sent)";
    };
    try {
      Result<std::string> found = look();
      for (int n = 1;
           !refused && !interrupted && n < 3 && !found && found.status().sys_errno() == ENOENT;
           ++n) {
        pause_ms(250 << n);
        found = look();
      }
      if (!found) {
        if (found.status().sys_errno() != ENOENT) {
          return failed_and("whether it was stored cannot be told (" + found.status().message() +
                            ")")
              .with_stored_untold();
        }
        if (refused) {
          return failed_and("a look after it found no object there: it was not stored");
        }
        if (interrupted) {
          return failed_and(
                     "whether it was stored cannot be told: the store did not refuse the write, "
                     "and the one look a Ctrl-C allows found no object there, as a store whose "
                     "reads lag its writes (a caching proxy, an eventually consistent store) "
                     "answers for a while")
              .with_stored_untold();
        }
        return failed_and(
                   "whether it was stored cannot be told: the store did not refuse the write, and "
                   "3 looks over 1.5 s after it found no object there, as a store whose reads lag "
                   "its writes (a caching proxy, an eventually consistent store) answers for a "
                   "while")
            .with_stored_untold();
      }
      if (found->empty()) return Status::ok();
      return failed_and("a look after it found another object there " + *found);
    } catch (...) {
      return failed;
    }
  }

  // Sleeps `ms`, less where an interrupt is asked for (a second Ctrl-C during a look's pause:
  // the look after it then fails, and its failure says so).
  static void pause_ms(int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!interrupt_requested() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // An s3:// key holding a '?' (where the URL's options begin) would reach another key:
  // refused, as a listing's or a manifest's names are (location.hpp). Over http(s) a key's
  // '%', '#' and '?' are percent-encoded in its URL instead (url_key).
  [[nodiscard]] Status check_key(std::string_view key) const {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string why = unnameable_key(base_, key);
    if (why.empty()) return Status::ok();
    return Status(ErrorCode::kInvalidArgument,
                  "store key '" + path_for_message(std::string(key)) + "': " + why);
  }

  [[nodiscard]] std::string url(std::string_view key) const {
    return base_ + url_key(base_, key) + query_;
  }

  std::string base_;   // "s3://B/P/": the prefix, ending in '/'
  std::string shown_;  // base_, its secrets hidden (location())
  std::string query_;  // "?endpoint_override=...", or ""
  std::string scheme_;
  RemoteIo* io_;
};

}  // namespace

Result<std::unique_ptr<Store>> make_remote_store(std::string_view location, RemoteIo* io) {
  const std::size_t q = location.find('?');
  std::string base(location.substr(0, q));
  std::string query(q == std::string_view::npos ? std::string_view() : location.substr(q));
  // The location as given is named (before the '/' is added): "s3://B/keep/.." is refused as
  // the user spelled it.
  SHARDLOAD_RETURN_IF_ERROR(check_object_key(std::string(location)));
  if (base.back() != '/') base.push_back('/');
  return std::unique_ptr<Store>(new RemoteStore(std::move(base), std::move(query), io));
}

}  // namespace shardload::detail
