// Object storage through Arrow's S3 file system (the one inside the pinned pyarrow's libarrow):
// the transport the s3:// driver's Store reads and writes through (transports.hpp). A read is one
// ranged GET (RandomAccessFile::ReadAt) into the caller's buffer; nothing downloads a whole object.
// Where the credentials are known without the AWS SDK (s3_signed.hpp; the region given, or
// the bucket's own as its HEAD says), objects are opened and read by GETs signed here and sent
// through libcurl instead: a GET that also says the object's size and ETag and shows its
// Content-Encoding, which Arrow's cannot; there deletes, and uploads of objects within
// multipart_threshold (one PUT each), and the HEAD that tells an object from a prefix, are
// signed here too. Listing and multipart uploads stay on Arrow. Arrow's client follows
// redirects (to plain http too), so an https endpoint is never reached through it alone.
#include "storage/detail/s3_io.hpp"
#include "base/detail/environment.hpp"
#include "shardload/interrupt.hpp"
#include "storage/detail/context.hpp"
#include "storage/detail/object_store.hpp"
#include "storage/detail/store_options.hpp"
#include "storage/detail/transports.hpp"
#if SHARDLOAD_S3_SIGNED
#include "storage/detail/curl_get.hpp"
#include "storage/detail/s3_signed.hpp"
#endif

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arrow/filesystem/filesystem.h>
#include <arrow/filesystem/s3fs.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/future.h>
#include <arrow/util/io_util.h>
#include <arrow/util/key_value_metadata.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace shardload::detail {

namespace {

// The errno that best says what Arrow's error was, for Python's exception classes and for
// "missing" (a Zarr chunk's fill value, a delete of what is already gone), told from Arrow's
// own words only. Its messages quote the object's key and bucket, which may hold any words (a
// Zarr store under `NoSuchKey/` or `does not exist/`): a 403 or 5xx on such a key read as
// "missing" was a chunk of fill values without an error. So the errno Arrow attaches comes
// first (its "Path does not exist", ENOENT), and otherwise the AWS error type it names
// ("AWS Error NO_SUCH_KEY", "UNKNOWN (HTTP status 404)") is looked for only after every quoted
// form of the URL's bucket and key is taken out of the message.
int errno_of(const arrow::Status& st, const std::string& url) {
  if (const int e = arrow::internal::ErrnoFromStatus(st); e > 0) return e;
  std::string m = st.message();
  const std::string base = url.substr(0, url.find('?'));
  std::string path = base.rfind("s3://", 0) == 0 ? base.substr(5) : base;
  while (!path.empty() && path.back() == '/') path.pop_back();
  const auto slash = path.find('/');
  const std::string bucket = path.substr(0, slash);
  const std::string key = slash == std::string::npos ? std::string() : path.substr(slash + 1);
  // The path first, as the key is within it. Arrow quotes a prefix's key with or without its
  // '/': what is left after the key ("/'") says nothing. Only where a quote opens with it, so
  // that a short key ("A") takes no letter out of Arrow's own words.
  for (const std::string& quoted : {"'" + path, "'" + key, "'" + bucket + "'"}) {
    if (quoted.size() < 2) continue;
    for (auto at = m.find(quoted); at != std::string::npos; at = m.find(quoted)) {
      m.erase(at, quoted.size());
    }
  }
  const auto says = [&m](std::initializer_list<const char*> words) {
    return std::any_of(words.begin(), words.end(),
                       [&m](const char* w) { return m.find(w) != std::string::npos; });
  };
  if (says({"AWS Error NO_SUCH_KEY ", "AWS Error NO_SUCH_BUCKET ", "AWS Error RESOURCE_NOT_FOUND ",
            "(HTTP status 404)"})) {
    return ENOENT;
  }
  if (says({"AWS Error ACCESS_DENIED ", "AWS Error INVALID_ACCESS_KEY_ID ",
            "AWS Error SIGNATURE_DOES_NOT_MATCH ", "AWS Error INVALID_SIGNATURE ",
            "AWS Error INVALID_CLIENT_TOKEN_ID ", "(HTTP status 403)"})) {
    return EACCES;
  }
  return EIO;
}

// What the AWS SDK says when an answer's body does not fit the buffer it was to be read into.
constexpr const char* kAnswerDidNotFit = "Failed to flush response stream";

// The pattern written over a range's last bytes before Arrow's client reads into it
// (read_range): random per process, so that no object's bytes are made to equal it.
constexpr std::size_t kMarkBytes = 8;
const std::array<std::uint8_t, kMarkBytes>& mark() {
  static const auto m = [] {
    std::random_device rd;
    std::array<std::uint8_t, kMarkBytes> a{};
    for (auto& b : a) b = static_cast<std::uint8_t>(rd());
    return a;
  }();
  return m;
}

// Set by the retry strategy on the thread whose request it gave up on after its last
// attempt: the sync requests (HEAD, ranged GET) fail on the caller's thread, so the error
// built right after can say so. Cleared before each request.
thread_local std::int64_t t_gave_up_after = 0;

Status remote_error(ErrorCode code, const std::string& url, const std::string& what,
                    const arrow::Status& st) {
  std::string msg = what + ": " + st.message();
  if (t_gave_up_after > 0) {
    msg += " (gave up after " + std::to_string(t_gave_up_after) + " attempts)";
  }
  return file_error(code, url, msg, errno_of(st, url));
}

// The one-level listing of the directory at `path` (an object key prefix, its trailing '/'
// dropped as Arrow wants it).
arrow::fs::FileSelector directory_selector(std::string path, bool allow_not_found) {
  while (!path.empty() && path.back() == '/') path.pop_back();
  arrow::fs::FileSelector sel;
  sel.base_dir = std::move(path);
  sel.recursive = false;
  sel.allow_not_found = allow_not_found;
  return sel;
}

// An object or prefix directly under the listed one, named by its base name. A key with an
// empty segment (`d//x.npy`) makes a LIST of `d/` answer the common prefix `d//`, which Arrow
// names like `d/` itself: no name reaches it, and taken by its base name it would be a phantom
// entry `d/d`, so it is left out, as a key with an empty segment is everywhere else.
bool listed_entry(const arrow::fs::FileInfo& fi, const arrow::fs::FileSelector& sel) {
  if (fi.type() != arrow::fs::FileType::File && fi.type() != arrow::fs::FileType::Directory) {
    return false;
  }
  const std::string& base = fi.base_name();
  return !base.empty() && fi.path() == sel.base_dir + "/" + base;
}

// Calls into Arrow's S3 client, counted, so that fork() waits for those in flight. Arrow's
// clients share a process-wide lock, held shared by every request and exclusively to make a
// client or finalize S3: a fork while a parent thread was inside a request left the child's
// copy held for ever, and the child's first client (or its exit's finalization) waited for it.
// fork() waits here for a moment with no call in flight, and no call starts until the fork is
// made. A call's count lasts as long as its requests may (an upload from its open to its end, a
// listing to its last page, whose later pages Arrow asks for ahead). Where calls are still in
// flight after kForkWait (a request that does not end, a listing's page waiting for a request
// slot held by a thread that waits for the fork), the fork goes ahead and the child refuses
// Arrow's client, naming why, rather than waiting for ever.
class ArrowCalls {
 public:
  static constexpr auto kForkWait = std::chrono::seconds(10);
  static constexpr auto kExitWait = std::chrono::seconds(5);

  static ArrowCalls& process() {
    static auto* calls = new ArrowCalls();  // never destroyed: calls may end at exit
    return *calls;
  }

  // One call in flight, from its construction to its destruction.
  class Call {
   public:
    Call() { process().enter(); }
    ~Call() { process().leave(); }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
  };

  // Registered once the first client is made, after the locks its making takes (the region's
  // look-up, the context's stores, ...) registered theirs: fork() runs the handlers in
  // reverse, so this wait comes before any of them is held, and no call waits for the fork.
  void wait_at_fork() {
    static std::once_flag once;
    std::call_once(once, [] {
      ::pthread_atfork([] { process().before_fork(); }, [] { process().after_fork_parent(); },
                       [] { process().after_fork_child(); });
    });
  }

  // In a child forked while calls were still in flight: Arrow's client there may wait for ever.
  bool unusable() const { return unusable_; }

  void before_fork() {
    std::unique_lock lock(mu_);
    (void)idle_->wait_for(lock, kForkWait, [&] { return in_flight_ == 0; });
    lock.release();  // held across the fork: no call starts
  }
  void after_fork_parent() { mu_.unlock(); }

  // At exit, before S3 is finalized (which would end the clients under the calls in flight of
  // a daemon thread: a crash): no call starts any more (the thread waits there for the
  // process's end), and those in flight are waited for, up to kExitWait. True where none is.
  bool close_at_exit() {
    std::unique_lock lock(mu_);
    closing_ = true;
    return idle_->wait_for(lock, kExitWait, [&] { return in_flight_ == 0; });
  }
  void after_fork_child() {
    unusable_ = unusable_ || in_flight_ != 0;
    in_flight_ = 0;                         // the parent's threads', not here
    idle_ = new std::condition_variable();  // the parent's had a waiter that is not here
    mu_.unlock();
  }

 private:
  void enter() {
    std::unique_lock lock(mu_);
    if (closing_) {
      lock.unlock();
      for (;;) ::pause();
    }
    ++in_flight_;
  }
  void leave() {
    std::lock_guard lock(mu_);
    if (--in_flight_ == 0) idle_->notify_all();
  }

  std::mutex mu_;
  std::condition_variable* idle_ = new std::condition_variable();  // never destroyed
  std::int64_t in_flight_ = 0;
  bool unusable_ = false;
  bool closing_ = false;
};

using ArrowCall = ArrowCalls::Call;

// A listing past this many entries is refused: a server's keys without end would otherwise
// fill the memory. A dataset's directory holds far fewer shards.
constexpr std::size_t kMaxListed = 10'000'000;

// The entries of a LIST of `sel`, page by page as Arrow's generator yields them, instead of
// GetFileInfo(selector), which asks for pages until the server says there are no more: a
// server whose LIST pages never stop saying "truncated" (a continuation token that leads back
// to a page already given, or new keys without end) kept it asking for ever, where neither a
// request's deadline nor Ctrl-C reached. Here an interrupt is seen while a page is awaited, a
// page that holds only names listed already ends the listing as an error, and so does a
// listing past kMaxListed entries; the generator, dropped, asks for no page after.
// `failed` makes the error of a failed request (Arrow's status).
template <typename Failed>
Result<arrow::fs::FileInfoVector> list_pages(arrow::fs::FileSystem& fs,
                                             const arrow::fs::FileSelector& sel,
                                             const std::string& url, ErrorCode code,
                                             const std::string& what, RequestSlots* slots,
                                             Failed failed) {
  const ArrowCall call;  // the listing asks for its pages ahead of this loop
  // Made under the first page's slot: Arrow's generator sends that page's LIST when it is made.
  arrow::fs::FileInfoGenerator next;
  arrow::fs::FileInfoVector all;
  std::unordered_set<std::string> seen;
  for (std::int64_t page = 1;; ++page) {
    // Seen between pages too: a page asked ahead is ready at once, with no wait to look in.
    if (interrupt_requested()) return file_error(code, url, what + ": interrupted", ECANCELED);
    // The page's LIST holds one of the store's slots while it is awaited.
    const RequestSlot slot(slots);
    if (!slot.held()) return file_error(code, url, what + ": interrupted", ECANCELED);
    if (!next) next = fs.GetFileInfoGenerator(sel);
    arrow::Future<arrow::fs::FileInfoVector> got = next();
    while (!got.Wait(0.05)) {
      if (interrupt_requested()) return file_error(code, url, what + ": interrupted", ECANCELED);
    }
    const arrow::Result<arrow::fs::FileInfoVector>& infos = got.result();
    if (!infos.ok()) return failed(infos.status());
    if (infos->empty()) return all;  // the generator's end
    bool added = false;
    for (const arrow::fs::FileInfo& fi : *infos) {
      if (seen.insert(fi.path()).second) {
        all.push_back(fi);
        added = true;
      }
    }
    if (!added) {
      return file_error(code, url,
                        what + ": the server's LIST page " + std::to_string(page) +
                            " lists again only names it listed before ('" +
                            infos->front().base_name() +
                            "', ...) and says there are more: its listing would never end",
                        EIO);
    }
    if (all.size() > kMaxListed) {
      return file_error(code, url,
                        what + ": more than " + std::to_string(kMaxListed) +
                            " entries under the prefix (a listing without end?)",
                        EIO);
    }
  }
}

// Bounded retries with exponential backoff, counted. What is retried: what the AWS SDK
// classifies as retryable (5xx, throttling such as S3's SlowDown, network errors: a reset or
// a body cut short, a timeout), plus those codes by name in case a store answers them without
// the SDK's classification. Never an answer about the request itself (403, 404, a bad range):
// asking again gets the same.
class CountingRetryStrategy final : public arrow::fs::S3RetryStrategy {
 public:
  CountingRetryStrategy(const StoreOptions& o, std::atomic<std::uint64_t>* retries)
      : options_(o), retries_(retries) {}

  bool ShouldRetry(const AWSErrorDetail& error, std::int64_t attempted_retries) override {
    if (!retryable(error)) return false;
    if (attempted_retries + 1 >= options_.max_attempts) {
      t_gave_up_after = attempted_retries + 1;
      return false;
    }
    retries_->fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  std::int64_t CalculateDelayBeforeNextRetry(const AWSErrorDetail&,
                                             std::int64_t attempted_retries) override {
    return backoff_delay_ms(options_, attempted_retries);
  }

 private:
  static bool retryable(const AWSErrorDetail& e) {
    if (e.should_retry) return true;
    // A ranged GET reads into the caller's buffer of the range's size: an error answer's body
    // larger than that (a 500's or a SlowDown's XML into a short range) fails to be stored, and
    // the SDK then reports this instead of the answer. Bounded by the attempts like the rest.
    if (e.message.find(kAnswerDidNotFit) != std::string::npos) return true;
    for (const char* name : {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout",
                             "Throttling", "ThrottlingException", "RequestTimeTooSkewed"}) {
      if (e.exception_name == name) return true;
    }
    return false;
  }

  StoreOptions options_;
  std::atomic<std::uint64_t>* retries_;
};

// One object's upload through Arrow's output stream: a multipart upload whose parts are sent
// in the background (on Arrow's I/O threads) as they fill. Bytes go in slices of kSliceBytes,
// each a part of its own once the first has filled (Arrow uploads a write that large
// directly, from a copy); every kInFlightBytes the writer waits for the parts sent so far, so
// that an upload never holds more than that in copies, whatever the object's size.
class ArrowObjectWriter final : public ObjectWriter {
 public:
  static constexpr std::size_t kSliceBytes = std::size_t{8} << 20;
  static constexpr std::size_t kInFlightBytes = std::size_t{32} << 20;

  ArrowObjectWriter(std::string url, std::shared_ptr<arrow::io::OutputStream> out,
                    std::unique_ptr<ArrowCall> call)
      : url_(std::move(url)), out_(std::move(out)), call_(std::move(call)) {}
  ~ArrowObjectWriter() override { abort(); }

  Status append(const void* data, std::size_t n) override {
    if (!out_) return file_error(ErrorCode::kIo, url_, "cannot write: the upload has ended");
    const auto* p = static_cast<const std::uint8_t*>(data);
    while (n > 0) {
      const std::size_t k = std::min(n, kSliceBytes);
      t_gave_up_after = 0;
      auto st = out_->Write(p, static_cast<std::int64_t>(k));
      if (!st.ok()) return fail("cannot write", st);
      p += k;
      n -= k;
      unflushed_ += k;
      if (unflushed_ >= kInFlightBytes) {
        st = out_->Flush();  // waits for the parts in flight
        if (!st.ok()) return fail("cannot write", st);
        unflushed_ = 0;
      }
    }
    return Status::ok();
  }

  // The parts sent so far are waited for first, while the upload can still be aborted: a
  // failed Close ends Arrow's stream without aborting the upload, so only a failure of the
  // last part (sent by Close) leaves an incomplete upload behind (never an object).
  Status commit() override {
    if (!out_) return file_error(ErrorCode::kIo, url_, "cannot write: the upload has ended");
    t_gave_up_after = 0;
    auto st = out_->Flush();
    if (!st.ok()) return fail("cannot write", st);
    t_gave_up_after = 0;
    st = out_->Close();
    if (!st.ok()) return fail("cannot complete the upload", st);
    out_.reset();
    call_.reset();
    return Status::ok();
  }

  // Never Close here: Arrow's stream completes the upload when closed, also from its
  // destructor, with whatever was sent.
  void abort() noexcept override {
    if (!out_) return;
    (void)out_->Abort();
    out_.reset();
    call_.reset();
  }

 private:
  Status fail(const std::string& what, const arrow::Status& st) {
    abort();
    return remote_error(ErrorCode::kIo, url_, what, st);
  }

  std::string url_;
  std::shared_ptr<arrow::io::OutputStream> out_;
  std::unique_ptr<ArrowCall> call_;  // from the open to the upload's end: its parts' requests
  std::size_t unflushed_ = 0;
};

#if SHARDLOAD_S3_SIGNED
// One object's upload on the signed path, of a size known before its first byte and within
// the URL's multipart_threshold: its bytes held until commit sends them in one PUT. One PUT is
// one request where a multipart upload is three or more, and the store need not join parts.
class SignedObjectWriter final : public ObjectWriter {
 public:
  SignedObjectWriter(std::string url, std::shared_ptr<const S3Endpoint> ep, std::string key,
                     std::size_t size, std::atomic<std::uint64_t>* retries)
      : url_(std::move(url)),
        ep_(std::move(ep)),
        key_(std::move(key)),
        size_(size),
        retries_(retries) {}

  Status append(const void* data, std::size_t n) override {
    if (done_) return file_error(ErrorCode::kIo, url_, "cannot write: the upload has ended");
    if (n > size_ - held_.size()) return fail(mismatch(held_.size() + n));
    try {
      if (held_.empty()) held_.reserve(size_);
      const auto* p = static_cast<const std::byte*>(data);
      held_.insert(held_.end(), p, p + n);
    } catch (const std::bad_alloc&) {
      return fail(file_error(
          ErrorCode::kNoMemory, url_,
          "cannot hold the object's " + std::to_string(size_) + " bytes for its upload", ENOMEM));
    }
    return Status::ok();
  }

  Status commit() override {
    if (done_) return file_error(ErrorCode::kIo, url_, "cannot write: the upload has ended");
    if (held_.size() != size_) return fail(mismatch(held_.size()));
    done_ = true;
    const Status st = s3_put(*ep_, url_, key_, held_.data(), held_.size(), retries_, &etag_);
    std::vector<std::byte>().swap(held_);
    return st;
  }

  [[nodiscard]] std::string etag() const override { return etag_; }

  void abort() noexcept override {
    done_ = true;
    std::vector<std::byte>().swap(held_);
  }

 private:
  Status mismatch(std::size_t got) const {
    return file_error(ErrorCode::kInvalidArgument, url_,
                      "the upload was given " + std::to_string(got) + " bytes for an object of " +
                          std::to_string(size_),
                      EINVAL);
  }

  Status fail(Status st) {
    abort();
    return st;
  }

  std::string url_;
  std::shared_ptr<const S3Endpoint> ep_;
  std::string key_;
  std::size_t size_;
  std::atomic<std::uint64_t>* retries_;
  std::vector<std::byte> held_;
  bool done_ = false;
  std::string etag_;  // the PUT's answer's
};

// The first bytes of an object that its open (discovery's) asks for: the size and ETag come
// with them, a header within them costs no other request, and a small object comes whole.
constexpr std::size_t kFirstBytes = 64 * 1024;
// The most an open_whole asks for in its one GET: a larger object costs a second GET, and
// this much (per chunk in flight) is all the buffer an open holds before its reads.
constexpr std::size_t kWholeBytesMax = 8 * 1024 * 1024;
#endif

// An object open on the signed path: the snapshot each answer is compared with, and what an
// answer said that differed from it, for the stat after the reads.
struct SignedOpen {
#if SHARDLOAD_S3_SIGNED
  std::shared_ptr<const S3Endpoint> ep;
#endif
  std::string key;
  FileInfo snapshot;
  std::string first;           // bytes of the object from the open's GET: its first, or its last
  std::uint64_t first_at = 0;  // the object offset of `first`
  std::mutex mu;
  bool differs = false;     // an answer's ETag or size was not the snapshot's: `seen`
  bool unverified = false;  // an answer without an ETag: the stat asks the store
  FileInfo seen;
};

class ArrowRemoteIo;
ArrowRemoteIo* the_s3_io();

class ArrowRemoteIo final : public RemoteIo, public ObjectStore {
 public:
  Result<int> open(const std::string& url) override {
    FileInfo info;
    return open_stat(url, &info);
  }

  Result<int> open_stat(const std::string& url, FileInfo* info) override {
#if SHARDLOAD_S3_SIGNED
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(url));
    if (where.ep != nullptr) return signed_open(url, where, info);
#endif
    SHARDLOAD_ASSIGN_OR_RETURN(auto file, open_object(url, info));
    return add_open(url, std::move(file));
  }

  // On the signed path the open's GET asks for the bytes expected (up to kWholeBytesMax), so
  // a chunk object arrives whole with its snapshot; Arrow's path makes its HEAD as open_stat.
  Result<int> open_whole(const std::string& url, FileInfo* info, std::size_t expected) override {
#if SHARDLOAD_S3_SIGNED
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(url));
    if (where.ep != nullptr) {
      return signed_open(url, where, info, std::clamp(expected, kFirstBytes, kWholeBytesMax));
    }
#endif
    return open_stat(url, info);
  }

  // On the signed path the open's GET asks for the object's last bytes (a suffix range, whose
  // answer says the size and ETag as a range's does), so that a footer read next is in them.
  Result<int> open_tail(const std::string& url, FileInfo* info, std::size_t tail) override {
#if SHARDLOAD_S3_SIGNED
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(url));
    if (where.ep != nullptr) {
      return signed_open(url, where, info, std::clamp(tail, kFirstBytes, kWholeBytesMax), true);
    }
#endif
    return open_stat(url, info);
  }

  // No HEAD: Arrow takes the size it is given, and reads past it come back short. On the
  // signed path each GET's ETag is compared with the snapshot's.
  Result<int> open_known(const std::string& url, const FileInfo& snapshot) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve_object(url));
#if SHARDLOAD_S3_SIGNED
    if (where.ep != nullptr) {
      auto s = std::make_shared<SignedOpen>();
      s->ep = where.ep;
      s->key = key_of(where.path);
      s->snapshot = snapshot;
      return add_signed(url, std::move(s));
    }
#endif
    arrow::fs::FileInfo known(where.path, arrow::fs::FileType::File);
    known.set_size(static_cast<std::int64_t>(snapshot.size));
    t_gave_up_after = 0;
    auto file = [&] {
      const ArrowCall call;
      return where.fs->OpenInputFile(known);
    }();
    if (!file.ok()) return remote_error(ErrorCode::kIo, url, "cannot open", file.status());
    return add_open(url, *std::move(file));
  }

  // On Arrow's path a fresh request, not what the open saw: the check after the last read
  // asks the store. On the signed path what the answers said: each GET's ETag was compared
  // with the snapshot's, so a HEAD would only repeat it (one is made where an answer had no
  // ETag).
  Result<FileInfo> stat(int fd, const std::string& path) override {
    std::string url;
    std::shared_ptr<SignedOpen> s;
    {
      std::lock_guard lock(mu_);
      auto it = files_.find(fd);
      if (it == files_.end()) return file_error(ErrorCode::kIo, path, "not an open object");
      url = it->second.url;
      s = it->second.signed_open;
    }
    if (s != nullptr) {
      std::lock_guard lock(s->mu);
      if (s->differs) return s->seen;
      if (!s->unverified) return s->snapshot;
    }
    return stat_path(url);
  }

  Result<FileInfo> stat_path(const std::string& url) override {
#if SHARDLOAD_S3_SIGNED
    {
      SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(url));
      if (where.ep != nullptr) {
        if (where.path.empty() || where.path.back() == '/') {
          return file_error(ErrorCode::kIo, url, "not an object (the URL ends in '/')");
        }
        return s3_head(*where.ep, url, key_of(where.path), &retries_);
      }
    }
#endif
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(auto file, open_object(url, &info));
    return info;
  }

  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) override {
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    std::string url;
    std::shared_ptr<SignedOpen> s;
    std::size_t part = 0;
    std::size_t in_flight = 1;
    std::shared_ptr<StoreResources> store;  // held for the reads: a close may come meanwhile
    {
      std::lock_guard lock(mu_);
      auto it = files_.find(fd);
      if (it == files_.end()) return -EBADF;
      file = it->second.file;
      store = it->second.store;
      url = it->second.url;
      s = it->second.signed_open;
      part = it->second.request_bytes;
      in_flight = it->second.requests_in_flight;
    }
    t_read_error.clear();
#if SHARDLOAD_S3_SIGNED
    if (s != nullptr) return signed_pread(*s, buf, n, offset, part, in_flight);
#endif
    RequestSlots* const slots = store != nullptr ? &store->requests : nullptr;
    const std::int64_t got = read_in_parts(
        [&file, &url, slots](void* dst, std::size_t len, std::uint64_t off, std::string* why) {
          const RequestSlot slot(slots);
          if (!slot.held()) {
            *why = "interrupted";
            return std::int64_t{-ECANCELED};
          }
          return read_range(*file, url, dst, len, off, why);
        },
        buf, n, offset, part, in_flight, &t_read_error);
    if (got < 0 && t_read_error.find(kAnswerDidNotFit) != std::string::npos) {
      return explain_unfit_answer(url, got);
    }
    return got;
  }

  void close(int fd) override {
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    {
      std::lock_guard lock(mu_);
      auto it = files_.find(fd);
      if (it == files_.end()) return;
      file = std::move(it->second.file);
      files_.erase(it);
    }
    if (file != nullptr) {
      // The object may hold the last reference to a client let go of (resolve()).
      const ArrowCall call;
      (void)file->Close();
      file.reset();
    }
  }

  Result<std::vector<std::string>> list(const std::string& dir_url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(dir_url));
    auto& fs = where.fs;
    const arrow::fs::FileSelector sel = directory_selector(where.path, /*allow_not_found=*/false);
    auto infos =
        list_pages(*fs, sel, dir_url, ErrorCode::kLayout, "cannot list the directory", where.slots,
                   [&](const arrow::Status& st) {
                     const int err = errno_of(st, dir_url);
                     return file_error(ErrorCode::kLayout, dir_url,
                                       std::string(err == ENOENT ? "shard directory not found"
                                                                 : "cannot list the directory") +
                                           " (" + st.message() + ")",
                                       err);
                   });
    if (!infos) return infos.status();
    // The prefixes directly under it too, as a local directory lists its subdirectories: a
    // directory of stores (Zarr) is a list of prefixes, each named like a shard.
    std::vector<std::string> names;
    for (const auto& fi : *infos) {
      if (listed_entry(fi, sel)) names.push_back(fi.base_name());
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  }

  std::uint64_t retries() const override { return retries_.load(std::memory_order_relaxed); }

  std::string last_read_error() const override { return t_read_error; }

  Status write_object(const std::string& url, const void* data, std::size_t n) override;

  Result<std::unique_ptr<ObjectWriter>> open_writer(const std::string& url,
                                                    std::int64_t size) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve_object(url));
#if SHARDLOAD_S3_SIGNED
    if (one_put(where, size)) {
      return std::unique_ptr<ObjectWriter>(std::make_unique<SignedObjectWriter>(
          url, where.ep, key_of(where.path), static_cast<std::size_t>(size), &retries_));
    }
#endif
    t_gave_up_after = 0;
    auto call = std::make_unique<ArrowCall>();
    auto out = where.fs->OpenOutputStream(where.path);
    if (!out.ok()) return remote_error(ErrorCode::kIo, url, "cannot write", out.status());
    return std::unique_ptr<ObjectWriter>(
        std::make_unique<ArrowObjectWriter>(url, *std::move(out), std::move(call)));
  }

  Status remove(const std::string& url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(url));
#if SHARDLOAD_S3_SIGNED
    // Arrow's delete makes an empty marker object for the key's "directory" when it may have
    // emptied it (a prefix of shards shows it as an object named '', a store's prefix as an
    // empty store); a DELETE of one's own makes none.
    if (where.ep != nullptr) return s3_delete(*where.ep, url, key_of(where.path), &retries_);
#endif
    t_gave_up_after = 0;
    const auto st = [&] {
      const ArrowCall call;
      return where.fs->DeleteFile(where.path);
    }();
    if (st.ok() || errno_of(st, url) == ENOENT) return Status::ok();
    return remote_error(ErrorCode::kIo, url, "cannot delete", st);
  }

  Status remove_empty_prefix(const std::string& dir_url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(dir_url));
    std::string path = where.path;
    while (!path.empty() && path.back() == '/') path.pop_back();
#if SHARDLOAD_S3_SIGNED
    if (where.ep != nullptr) {
      // Its own deletes leave no marker, but another client may have made one (rclone mkdir,
      // s3fs, the S3 console's "Create folder", Arrow's delete of a store's last object): left
      // there, a listing shows an empty store beside the new dataset, whose manifest's index
      // then refuses the prefix (two kinds of shards, or a gap in the numbering).
      const std::string marker = key_of(path) + "/";
      auto head = s3_head(*where.ep, dir_url, marker, &retries_);
      if (!head) return head.status().sys_errno() == ENOENT ? Status::ok() : head.status();
      if (head->size != 0) {
        // A marker holds no bytes: an object of this name that does is a user's, kept.
        return file_error(ErrorCode::kIo, dir_url,
                          "is an object of " + std::to_string(head->size) +
                              " bytes (expected an empty directory marker); not deleted",
                          EEXIST);
      }
      SHARDLOAD_ASSIGN_OR_RETURN(const bool empty, nothing_below(where, path, dir_url));
      if (!empty) return Status::ok();
      return s3_delete(*where.ep, dir_url, marker, &retries_);
    }
#endif
    t_gave_up_after = 0;
    auto info = [&] {
      const ArrowCall call;
      return where.fs->GetFileInfo(path);
    }();
    if (!info.ok()) return remote_error(ErrorCode::kIo, dir_url, "cannot look at", info.status());
    if (info->type() != arrow::fs::FileType::Directory) return Status::ok();
    // Arrow's DeleteDir takes what is below too: only a prefix with nothing under it.
    SHARDLOAD_ASSIGN_OR_RETURN(const bool empty, nothing_below(where, path, dir_url));
    if (!empty) return Status::ok();
    const auto st = [&] {
      const ArrowCall call;
      return where.fs->DeleteDir(path);
    }();
    if (st.ok() || errno_of(st, dir_url) == ENOENT) return Status::ok();
    return remote_error(ErrorCode::kIo, dir_url, "cannot delete the empty prefix's marker", st);
  }

  // A HEAD of its own on the signed path; Arrow's look-up of the object's metadata otherwise.
  Result<ObjectHead> head(const std::string& url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve_object(url));
    ObjectHead out;
#if SHARDLOAD_S3_SIGNED
    if (where.ep != nullptr) {
      SHARDLOAD_ASSIGN_OR_RETURN(const FileInfo info,
                                 s3_head(*where.ep, url, key_of(where.path), &retries_, &out.etag));
      out.size = info.size;
      return out;
    }
#endif
    SHARDLOAD_ASSIGN_OR_RETURN(ArrowLook look,
                               arrow_look(where, url, "cannot look at", "cannot look at"));
    out.size = look.size;
    out.etag = std::move(look.etag);
    return out;
  }

  Result<std::vector<ObjectEntry>> list_entries(const std::string& dir_url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(dir_url));
    auto& fs = where.fs;
    // A prefix with nothing under it yet lists as empty.
    const arrow::fs::FileSelector sel = directory_selector(where.path, /*allow_not_found=*/true);
    t_gave_up_after = 0;
    auto infos = list_pages(*fs, sel, dir_url, ErrorCode::kIo, "cannot list", where.slots,
                            [&](const arrow::Status& st) {
                              return remote_error(ErrorCode::kIo, dir_url, "cannot list", st);
                            });
    if (!infos) return infos.status();
    if (infos->empty()) {
      // Nothing there, or no bucket: a listing that allows a missing prefix may not tell.
      const std::string bucket = sel.base_dir.substr(0, sel.base_dir.find('/'));
      t_gave_up_after = 0;
      auto b = [&] {
        const ArrowCall call;
        return fs->GetFileInfo(bucket);
      }();
      if (!b.ok()) return remote_error(ErrorCode::kIo, dir_url, "cannot list", b.status());
      if (b->type() != arrow::fs::FileType::Directory) {
        return file_error(ErrorCode::kIo, dir_url,
                          "cannot list: the bucket '" + bucket + "' does not exist", ENOENT);
      }
    }
    std::vector<ObjectEntry> out;
    for (const auto& fi : *infos) {
      if (listed_entry(fi, sel)) {
        out.push_back({fi.base_name(), fi.type() == arrow::fs::FileType::Directory});
      }
    }
    std::sort(out.begin(), out.end(), [](const ObjectEntry& a, const ObjectEntry& b) {
      return a.name != b.name ? a.name < b.name : a.prefix < b.prefix;
    });
    return out;
  }

  Result<bool> is_object(const std::string& url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(url));
#if SHARDLOAD_S3_SIGNED
    // On the signed path an object is told by a HEAD of its own, which follows no redirect
    // (Arrow's client follows one, to plain http too); a key that is no object is then a
    // prefix where a LIST finds something under it, as Arrow's look-up asks.
    const auto slash = where.path.find('/');
    if (where.ep != nullptr && slash != std::string::npos && slash + 1 < where.path.size() &&
        where.path.back() != '/') {
      auto head = s3_head(*where.ep, url, key_of(where.path), &retries_);
      if (head) return true;
      if (head.status().sys_errno() != ENOENT) return head.status();
      return is_prefix(where, url);
    }
#endif
    t_gave_up_after = 0;
    auto info = [&] {
      const ArrowCall call;
      return where.fs->GetFileInfo(where.path);
    }();
    if (!info.ok()) return remote_error(ErrorCode::kIo, url, "cannot look up", info.status());
    switch (info->type()) {
      case arrow::fs::FileType::File:
        return true;
      case arrow::fs::FileType::Directory:
        return false;
      default:
        return file_error(ErrorCode::kIo, url, "no such object or prefix", ENOENT);
    }
  }

 private:
  struct Open {
    std::shared_ptr<arrow::io::RandomAccessFile> file;  // Arrow's path
    std::string url;
    std::size_t request_bytes = 0;
    std::size_t requests_in_flight = 1;
    std::shared_ptr<SignedOpen> signed_open;  // the signed path
    std::shared_ptr<StoreResources> store;    // Arrow's path: the store's limit
  };

  // Where a URL leads: Arrow's file system for its bucket and query, the object's path in it
  // ("bucket/key"), and the endpoint of the signed path where it is taken (else null).
  struct Where {
    std::shared_ptr<arrow::fs::FileSystem> fs;
    std::string path;
    // The store's limit on requests in flight (StorageContext), held with the Where (the
    // context lets go of stores nothing holds): Arrow's HEADs, ranged GETs and LISTs hold a
    // slot as the signed path's do.
    std::shared_ptr<StoreResources> store;
    RequestSlots* slots = nullptr;  // store's
#if SHARDLOAD_S3_SIGNED
    std::shared_ptr<const S3Endpoint> ep;
#else
    const void* ep = nullptr;
#endif
  };

  static std::string key_of(const std::string& path) { return path.substr(path.find('/') + 1); }

  // Whether no object is under the prefix `path` ("bucket/key", no '/' at its end), its
  // marker object aside.
  Result<bool> nothing_below(const Where& where, const std::string& path,
                             const std::string& dir_url) {
    arrow::fs::FileSelector sel;
    sel.base_dir = path;
    sel.recursive = true;
    sel.allow_not_found = true;
    auto below = list_pages(*where.fs, sel, dir_url, ErrorCode::kIo, "cannot list", where.slots,
                            [&](const arrow::Status& st) {
                              return remote_error(ErrorCode::kIo, dir_url, "cannot list", st);
                            });
    if (!below) return below.status();
    return below->empty();
  }

  // Whether anything is listed under the key `where` names, taken as a prefix: the first page
  // of its LIST only.
  Result<bool> is_prefix(const Where& where, const std::string& url) {
    const arrow::fs::FileSelector sel = directory_selector(where.path, /*allow_not_found=*/true);
    t_gave_up_after = 0;
    const RequestSlot slot(where.slots);
    if (!slot.held()) return file_error(ErrorCode::kIo, url, "interrupted", ECANCELED);
    const ArrowCall call;
    arrow::fs::FileInfoGenerator next = where.fs->GetFileInfoGenerator(sel);
    arrow::Future<arrow::fs::FileInfoVector> got = next();
    while (!got.Wait(0.05)) {
      if (interrupt_requested()) return file_error(ErrorCode::kIo, url, "interrupted", ECANCELED);
    }
    const arrow::Result<arrow::fs::FileInfoVector>& infos = got.result();
    if (!infos.ok()) return remote_error(ErrorCode::kIo, url, "cannot look up", infos.status());
    if (infos->empty()) return file_error(ErrorCode::kIo, url, "no such object or prefix", ENOENT);
    return false;
  }

#if SHARDLOAD_S3_SIGNED
  // Whether an object of `size` bytes (-1: not known) goes up in one signed PUT: on the signed
  // path, within the URL's multipart_threshold.
  static bool one_put(const Where& where, std::int64_t size) {
    return where.ep != nullptr && size >= 0 && size <= where.ep->options.multipart_threshold;
  }
#endif

  Result<int> add_open(const std::string& url, std::shared_ptr<arrow::io::RandomAccessFile> file,
                       std::shared_ptr<SignedOpen> s = nullptr) {
    const auto q = url.find('?');  // checked already by resolve
    SHARDLOAD_ASSIGN_OR_RETURN(
        const auto parsed,
        parsed_store_query(url, q == std::string::npos ? std::string() : url.substr(q),
                           /*credentials=*/true));
    const StoreOptions& options = parsed->options;
    std::shared_ptr<StoreResources> store;  // the signed path's requests hold the endpoint's
    if (file != nullptr) {
      SHARDLOAD_ASSIGN_OR_RETURN(const Where where, resolve(url));
      store = where.store;
    }
    std::lock_guard lock(mu_);
    const int fd = next_fd_++;
    files_.emplace(fd, Open{std::move(file), url, static_cast<std::size_t>(options.request_bytes),
                            static_cast<std::size_t>(options.requests_in_flight), std::move(s),
                            std::move(store)});
    return fd;
  }

  Result<int> add_signed(const std::string& url, std::shared_ptr<SignedOpen> s) {
    return add_open(url, nullptr, std::move(s));
  }

#if SHARDLOAD_S3_SIGNED
  // The open of discovery (and of a Zarr chunk): one GET of the first bytes (or, `tail`, of
  // the last), whose answer says the object's size (Content-Range) and ETag; later reads
  // within them cost nothing.
  Result<int> signed_open(const std::string& url, const Where& where, FileInfo* info,
                          std::size_t first_bytes = kFirstBytes, bool tail = false) {
    if (where.path.empty() || where.path.back() == '/') {
      return file_error(ErrorCode::kIo, url, "not an object (the URL ends in '/')");
    }
    auto s = std::make_shared<SignedOpen>();
    s->ep = where.ep;
    s->key = key_of(where.path);
    s->first.resize(first_bytes);
    S3Get g =
        tail ? s3_get_tail(*s->ep, s->key, s->first.data(), first_bytes, &retries_)
             : s3_get_range(*s->ep, s->key, s->first.data(), first_bytes, 0, false, 0, &retries_);
    if (g.status == 416) {
      // An empty object has no byte 0 to ask for: its snapshot from a HEAD.
      SHARDLOAD_ASSIGN_OR_RETURN(s->snapshot, s3_head(*s->ep, url, s->key, &retries_));
      s->first.clear();
    } else if (g.got < 0) {
      return file_error(ErrorCode::kIo, url, "cannot open: " + g.why, static_cast<int>(-g.got));
    } else if (!g.state.has_size) {
      return file_error(ErrorCode::kIo, url,
                        "cannot open: the store's answer to a ranged GET has no Content-Range");
    } else {
      s->first.resize(static_cast<std::size_t>(g.got));
      s->first.shrink_to_fit();
      s->first_at = g.first;
      s->snapshot.size = g.state.size;
      s->snapshot.regular = true;
      s->snapshot.inode = g.state.has_etag ? g.state.inode : no_etag_hash("");
      s->snapshot.modified_s = g.state.modified_s;
      s->snapshot.answered_s = g.state.answered_s;
      s->unverified = !g.state.has_etag;
    }
    *info = s->snapshot;
    return add_signed(url, std::move(s));
  }

  // What an answer said that differs from the snapshot, for the stat after the reads.
  static void note(SignedOpen& s, const FileInfo& now) {
    std::lock_guard lock(s.mu);
    if (now == s.snapshot || s.differs) return;
    s.differs = true;
    s.seen = now;
  }

  std::int64_t signed_pread(SignedOpen& s, void* buf, std::size_t n, std::uint64_t offset,
                            std::size_t part, std::size_t in_flight) {
    if (n == 0 || offset >= s.snapshot.size) return 0;
    // Never past the end the snapshot saw: a range there is a 416, not an end of file.
    n = static_cast<std::size_t>(std::min<std::uint64_t>(n, s.snapshot.size - offset));
    std::size_t done = 0;
    if (offset >= s.first_at && offset - s.first_at < s.first.size()) {
      // From the open's bytes; what a read needs past them (after an object's first bytes)
      // comes by GETs below. A read that begins before them (the tail) is asked whole.
      const auto at = static_cast<std::size_t>(offset - s.first_at);
      done = std::min<std::size_t>(n, s.first.size() - at);
      std::memcpy(buf, s.first.data() + at, done);
      if (done == n) return static_cast<std::int64_t>(done);
    }
    const std::int64_t got = read_in_parts(
        [this, &s](void* dst, std::size_t len, std::uint64_t off, std::string* why) {
          S3Get g = s3_get_range(*s.ep, s.key, dst, len, off, true, s.snapshot.inode, &retries_);
          if (g.changed) {
            FileInfo now = s.snapshot;
            now.inode = g.state.inode;
            if (g.state.has_size) now.size = g.state.size;
            note(s, now);
          } else if (g.status == 416) {
            // The object is shorter than the snapshot: what it is now, for the message.
            auto now = s3_head(*s.ep, "", s.key, &retries_);
            if (now) note(s, *now);
          } else if (g.got >= 0 && g.state.has_size && g.state.size != s.snapshot.size) {
            FileInfo now = s.snapshot;
            now.size = g.state.size;
            if (g.state.has_etag) now.inode = g.state.inode;
            note(s, now);
          } else if (g.got >= 0 && !g.state.has_etag) {
            std::lock_guard lock(s.mu);
            s.unverified = true;
          }
          *why = std::move(g.why);
          return g.got;
        },
        static_cast<std::byte*>(buf) + done, n - done, offset + done, part, in_flight,
        &t_read_error);
    if (got < 0) return done > 0 ? static_cast<std::int64_t>(done) : got;
    return static_cast<std::int64_t>(done) + got;
  }
#endif

  // A ranged GET's answer that did not fit the range's buffer: an error answer whose body (a
  // 403's or a 5xx's XML) is longer than the range, as with a small object or a tile's few
  // rows. The AWS SDK then reports the failed write instead of the answer and drops its
  // status (and, since such a failure may be a 5xx, it was retried). The object's HEAD, whose
  // answer has no body, tells a refusal of the object (403, 404) from a failure of that one
  // request: its words then say what the store answers, with its errno (EACCES for a 403).
  std::int64_t explain_unfit_answer(const std::string& url, std::int64_t got) {
    std::string why = t_read_error +
                      "; the store's answer did not fit the range's buffer: an error answer, "
                      "whose status the client does not pass on";
    auto head = stat_path(url);
    if (head) {
      t_read_error = why + " (a HEAD of the object succeeds)";
      return got;
    }
    const std::string said = message_after_path(head.status(), url);
    t_read_error = why + "; a HEAD of the object answers: " + said;
    const int err = head.status().sys_errno();
    return err > 0 ? -err : got;
  }

  // One ranged GET into `dst`: its byte count or -errno, and then the store's words in `why`.
  // Arrow's client shows no answer's headers, so an answer in a Content-Encoding (a proxy that
  // gzips unasked) cannot be told by its header, and its ReadAt says the range's length
  // whatever the answer's was (it counts the buffer, not the bytes written into it). An answer
  // shorter than the range (a gzip of it, as a rule) is told by the range's last bytes: a
  // pattern written there first is still there after the read. Where the object's own bytes
  // equal it, the range is asked again with the pattern's complement, which they cannot
  // equal too. An answer longer than the range fails in the client (kAnswerDidNotFit). An
  // encoding exactly as long as the range still passes (docs/object_storage.md, "Not yet").
  static std::int64_t read_range(arrow::io::RandomAccessFile& file, const std::string& url,
                                 void* dst, std::size_t n, std::uint64_t offset, std::string* why) {
    const auto size = file.GetSize();  // known since the open: no request
    std::uint64_t want = n;
    if (size.ok()) {
      const auto total = static_cast<std::uint64_t>(*size);
      want = offset >= total ? 0 : std::min<std::uint64_t>(n, total - offset);
    }
    const std::size_t k = std::min<std::uint64_t>(want, kMarkBytes);
    auto* tail = static_cast<std::uint8_t*>(dst) + (want - k);
    std::int64_t got = 0;
    for (const bool flipped : {false, true}) {
      for (std::size_t i = 0; i < k; ++i) tail[i] = flipped ? ~mark()[i] : mark()[i];
      t_gave_up_after = 0;
      auto r = [&] {
        const ArrowCall call;
        return file.ReadAt(static_cast<std::int64_t>(offset), static_cast<std::int64_t>(n), dst);
      }();
      if (!r.ok()) {
        *why = r.status().message();
        if (t_gave_up_after > 0) {
          *why += " (gave up after " + std::to_string(t_gave_up_after) + " attempts)";
        }
        return -errno_of(r.status(), url);
      }
      got = *r;
      bool untouched = k > 0;
      for (std::size_t i = 0; i < k && untouched; ++i) {
        untouched = tail[i] == static_cast<std::uint8_t>(flipped ? ~mark()[i] : mark()[i]);
      }
      if (!untouched) break;
      if (flipped) {
        *why = "the store's answer to a ranged GET of " + std::to_string(want) +
               " bytes at offset " + std::to_string(offset) +
               " was shorter than the range: not the range asked for (an answer in a "
               "Content-Encoding, or an object that changed); not read as the object's bytes";
        return -EIO;
      }
    }
    return got;
  }

  // The file system for `url` (one per bucket and query, made once: each holds an S3 client)
  // and the object's path in it ("bucket/key").
  // resolve() of a URL that must name an object, not a prefix.
  Result<Where> resolve_object(const std::string& url) {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve(url));
    if (where.path.empty() || where.path.back() == '/') {
      return file_error(ErrorCode::kIo, url, "not an object (the URL ends in '/')");
    }
    return where;
  }

#if SHARDLOAD_S3_SIGNED
  struct Renewed;
#endif
  struct Made {
    std::shared_ptr<arrow::fs::FileSystem> fs;
    std::shared_ptr<StoreResources> store;
#if SHARDLOAD_S3_SIGNED
    std::shared_ptr<const S3Endpoint> signed_ep;  // with its store; null: Arrow's path only
    std::shared_ptr<Renewed> renewed;             // Arrow's client given a role's keys
#endif
  };

  // Arrow's options or client refused: an IOError is a request that failed (the HeadBucket
  // that looks up the bucket's region where none is given: no network, DNS, a timeout, a
  // refusal), not a bad option, and is an I/O error naming the URL; the rest are the options'.
  static Status options_error(const std::string& url, const arrow::Status& st) {
    if (st.IsIOError()) {
      return file_error(ErrorCode::kIo, url, "cannot make the S3 client: " + st.message(),
                        errno_of(st, url));
    }
    return file_error(ErrorCode::kInvalidArgument, url,
                      "bad object-storage URL or options: " + st.message());
  }

#if SHARDLOAD_S3_SIGNED
  // Arrow's client given a role's (or a credential_process's) keys as explicit ones: the keys
  // expire, and Arrow's options take a provider of the AWS SDK's type only (whose headers
  // pyarrow does not ship), so the client is made again with the new keys when the role's
  // change. What it was made of, to make it again (no AWS SDK object: these outlive S3's
  // finalization at exit).
  struct Renewed {
    std::shared_ptr<RoleCredentials> role;
    std::string fs_query;  // with the region Arrow's client settled on
    StoreOptions retry;
    AwsCredentials creds;  // the keys the client now holds (under mu_)
  };

  static bool same_keys(const AwsCredentials& a, const AwsCredentials& b) {
    return a.access_key == b.access_key && a.secret_key == b.secret_key &&
           a.session_token == b.session_token;
  }

  // The key's Arrow client made again where its role's keys changed since it was made.
  void renew_arrow_client(const std::string& key, Renewed& renewed,
                          std::shared_ptr<arrow::fs::FileSystem>* fs) {
    const AwsCredentials now = renewed.role->current();
    {
      std::lock_guard lock(mu_);
      if (same_keys(now, renewed.creds)) return;
    }
    auto options =
        arrow::fs::S3Options::FromUri("s3://" + key.substr(0, key.find('?')) + renewed.fs_query);
    if (!options.ok()) return;
    options->ConfigureAccessKey(now.access_key, now.secret_key, now.session_token);
    options->retry_strategy = std::make_shared<CountingRetryStrategy>(renewed.retry, &retries_);
    options->connect_timeout = renewed.retry.connect_timeout;
    options->request_timeout = renewed.retry.request_timeout;
    const ArrowCall call;
    auto made = arrow::fs::S3FileSystem::Make(*options);
    // A client that cannot be made again keeps the old keys: the store then says they
    // expired, naming the URL.
    if (!made.ok()) return;
    std::shared_ptr<arrow::fs::FileSystem> old;
    {
      std::lock_guard lock(mu_);
      const auto it = fs_.find(key);
      if (it == fs_.end() || renewed_.count(key) == 0) return;
      old = std::exchange(it->second, *std::move(made));
      renewed.creds = now;
      *fs = it->second;
    }
  }
#endif

  // A bucket's file system and store, made without mu_ held (resolve() lets one thread at a
  // time make a key's).
  Result<Made> make_store(const std::string& url, const std::string& bucket, const std::string& key,
                          const std::string& arrow_query, const StoreOptions& retry) {
    std::string fs_query = arrow_query;
    SHARDLOAD_RETURN_IF_ERROR(check_environment(url, arrow_query, retry));
    // The environment's endpoint with its scheme in capitals goes to Arrow's client as the
    // option, in lower case: the AWS SDK reads the variable itself, and took "HTTP" of
    // HTTP://H:P for the host.
    if (!query_value(arrow_query, "endpoint_override")) {
      for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
        const std::string v = environment_value(name).value_or(std::string());
        if (v.empty()) continue;
        if (std::string lowered = lowercase_scheme(v); lowered != v) {
          std::string encoded;
          for (const char c : lowered) {
            encoded += c == '%'   ? std::string("%25")
                       : c == '&' ? std::string("%26")
                                  : std::string(1, c);
          }
          fs_query += (fs_query.empty() ? "?endpoint_override=" : "&endpoint_override=") + encoded;
        }
        break;
      }
    }
#if SHARDLOAD_S3_SIGNED
    // Found here for both clients: a source the environment names that gives none stops the
    // load (the AWS SDK's chain, handed the same source, would follow a container endpoint's
    // redirect and sign with what another host gave), and what is found is handed to Arrow's
    // client as explicit keys, so its chain never fetches it again on its own terms.
    SHARDLOAD_ASSIGN_OR_RETURN(const S3Credentials creds, s3_credentials(url, retry));
    // The environment's were checked above: a credential here holding a control character
    // came from the shared credentials file (a credential_process's or a role's are checked
    // as they are fetched).
    if (!creds.sdk_only && !retry.anonymous && retry.access_key.empty() && !creds.role) {
      for (const std::string* v :
           {&creds.creds.access_key, &creds.creds.secret_key, &creds.creds.session_token}) {
        SHARDLOAD_RETURN_IF_ERROR(refuse_control_character(url, creds.where, *v));
      }
    }
    std::shared_ptr<const S3Endpoint> signed_ep;
    auto ep = s3_signed_endpoint(bucket, arrow_query, retry, creds);
    // A Ctrl-C during the bucket's HEAD left it unanswered: nothing is kept for the bucket
    // (its region would be a guess), so that the next call asks again.
    if (interrupt_requested()) {
      return file_error(ErrorCode::kIo, url, "interrupted", ECANCELED);
    }
    if (ep) {
      // The environment's region was checked above: one that is no name came from the config
      // file.
      if (!ep->region_in_options && !is_region_name(ep->region, kRegionChars)) {
        return file_error(ErrorCode::kInvalidArgument, url,
                          "bad object-storage URL or options: the region of the shared config "
                          "file's profile (AWS_CONFIG_FILE or ~/.aws/config) must be a region's "
                          "name (up to 63 letters, digits, '-' and '_'), found another "
                          "character in it",
                          EINVAL);
      }
      SHARDLOAD_RETURN_IF_ERROR(curl_init(url));
      // The region found elsewhere than in the options (the environment, the config file,
      // the bucket's HEAD), for Arrow's client too (LIST, multipart uploads): the same region
      // as the signed requests', and no HEAD of its own.
      if (!ep->region_in_options) {
        fs_query += (fs_query.empty() ? "?region=" : "&region=") + ep->region;
      }
      signed_ep = std::make_shared<const S3Endpoint>(*std::move(ep));
    }
#endif
    auto options = arrow::fs::S3Options::FromUri("s3://" + bucket + fs_query);
    if (!options.ok()) return options_error(url, options.status());
    if (retry.anonymous) {
      options->ConfigureAnonymousCredentials();
    } else if (!retry.access_key.empty()) {
      options->ConfigureAccessKey(retry.access_key, retry.secret_key, retry.session_token);
    }
#if SHARDLOAD_S3_SIGNED
    std::shared_ptr<Renewed> renewed;
    if (!retry.anonymous && retry.access_key.empty() && !creds.sdk_only) {
      const AwsCredentials now = creds.role ? creds.role->current() : creds.creds;
      options->ConfigureAccessKey(now.access_key, now.secret_key, now.session_token);
      if (creds.role) {
        renewed = std::make_shared<Renewed>();
        renewed->role = creds.role;
        renewed->retry = retry;
        renewed->creds = now;
      }
    }
    const bool arrows_only = signed_ep == nullptr;
#else
    const bool arrows_only = true;
#endif
    if (arrows_only) {
      if (Status st = refuse_an_https_endpoint(url, arrow_query, *options); !st.is_ok()) {
        return st;
      }
    }
    options->retry_strategy = std::make_shared<CountingRetryStrategy>(retry, &retries_);
    options->connect_timeout = retry.connect_timeout;
    options->request_timeout = retry.request_timeout;
    if (ArrowCalls::process().unusable()) {
      return file_error(
          ErrorCode::kIo, url,
          "cannot make an S3 client in this process: it was forked while another thread of "
          "its parent was inside Arrow's S3 client for more than " +
              std::to_string(ArrowCalls::kForkWait.count()) +
              " s, and that client's lock was copied held; fork before, or start the process "
              "with 'spawn' or 'forkserver'",
          EDEADLK);
    }
    auto fs = [&] {
      const ArrowCall call;
      return arrow::fs::S3FileSystem::Make(*options);
    }();
    if (!fs.ok()) return options_error(url, fs.status());
    Made made;
    made.fs = *std::move(fs);
#if SHARDLOAD_S3_SIGNED
    if (renewed != nullptr) {
      // Made again with the region this client settled on: no HeadBucket of its own again.
      const auto* s3 = dynamic_cast<const arrow::fs::S3FileSystem*>(made.fs.get());
      renewed->fs_query = fs_query;
      if (s3 != nullptr && !query_value(fs_query, "region")) {
        renewed->fs_query += (fs_query.empty() ? "?region=" : "&region=") + s3->region();
      }
      made.renewed = std::move(renewed);
    }
#endif
    ArrowCalls::process().wait_at_fork();
    // The bucket with its query is one store: one limit on its requests in flight.
    made.store = StorageContext::process().store("s3://" + key, retry);
#if SHARDLOAD_S3_SIGNED
    if (signed_ep != nullptr) {
      auto ep_with_store = std::make_shared<S3Endpoint>(*signed_ep);
      ep_with_store->store = made.store;
      made.signed_ep = std::move(ep_with_store);
    }
#endif
    return made;
  }

  // The shared credentials and config files where the environment puts them now, each stat()ed
  // once per resolve: the store's key (credential_sources) and the refusal of what is no
  // regular file or too large (refuse_blocking_shared_files) read the same look.
  struct SharedFile {
    const char* variable;
    const char* name;
    bool found = false;  // a path, and stat() answered for it
    std::string path;
    struct stat st {};
  };
  using SharedFiles = std::array<SharedFile, 2>;
  static SharedFiles shared_files() {
    SharedFiles files = {SharedFile{"AWS_SHARED_CREDENTIALS_FILE", "credentials"},
                         SharedFile{"AWS_CONFIG_FILE", "config"}};
    for (SharedFile& file : files) {
      file.path = aws_file(file.variable, file.name);
      file.found = !file.path.empty() && ::stat(file.path.c_str(), &file.st) == 0;
    }
    return files;
  }

  // What the credentials chain reads where the options give no key pair, as the environment and
  // the shared files stand now: the key pair and session token, the profile and the files'
  // paths, and each file's identity (device, inode, size, modification and change times: a
  // file rewritten in place or renamed over). A store made of other values is made again
  // (resolve()), so that a load after the user corrected the environment or a tool renewed the
  // file signs with the new credentials; with nothing changed the store, and what it found
  // (a credential_process's, a role's), is kept. The values stay in this process's memory, as
  // the environment's do.
  static std::string credential_sources(const SharedFiles& files) {
    std::string out;
    const auto value = [&out](const char* name) {
      out += environment_value(name).value_or(std::string());
      out += '\0';
    };
    for (const char* name :
         {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
          "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
          "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
          "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_DISABLED",
          "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
          "AWS_ROLE_SESSION_NAME"}) {
      value(name);
    }
    value("HOME");
    for (const SharedFile& file : files) {
      value(file.variable);
      if (!file.found) {
        out += "none";
      } else {
        const struct stat& st = file.st;
        for (const auto n :
             {static_cast<long long>(st.st_dev), static_cast<long long>(st.st_ino),
              static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtim.tv_sec),
              static_cast<long long>(st.st_mtim.tv_nsec), static_cast<long long>(st.st_ctim.tv_sec),
              static_cast<long long>(st.st_ctim.tv_nsec)}) {
          out += std::to_string(n) + ',';
        }
      }
      out += '\0';
    }
    return out;
  }

  // Which server a store of the environment's choosing talks to: the endpoint and region
  // variables as they stand now, read whatever the options say (one they override only makes
  // a store again when it changes). A store made under others is made again (resolve()): a
  // process that pointed AWS_ENDPOINT_URL at another server read, listed and wrote the first
  // one's objects under the same names, without an error.
  static std::string server_sources() {
    std::string out;
    for (const char* name :
         {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"}) {
      out += environment_value(name).value_or(std::string());
      out += '\0';
    }
    return out;
  }

  // Every request's URL passes here first: none with a dot segment in its key is sent.
  Result<Where> resolve(const std::string& url) {
    SHARDLOAD_RETURN_IF_ERROR(check_object_key(url));
    const auto q = url.find('?');
    const std::string base = url.substr(0, q);
    const std::string query = q == std::string::npos ? std::string() : url.substr(q);
    SHARDLOAD_ASSIGN_OR_RETURN(const auto parsed,
                               parsed_store_query(url, query, /*credentials=*/true));
    const StoreOptions& retry = parsed->options;
    const std::string& arrow_query = parsed->rest;
    if (retry.access_key.empty() != retry.secret_key.empty() ||
        (retry.access_key.empty() && !retry.session_token.empty())) {
      return file_error(ErrorCode::kInvalidArgument, url,
                        "bad object-storage URL or options: access_key and secret_key go "
                        "together (and session_token with them)");
    }
    const std::string path = base.substr(5);  // after "s3://"
    const std::string bucket = path.substr(0, path.find('/'));
    if (bucket.empty()) {
      return Status(ErrorCode::kInvalidArgument, url + ": the URL names no bucket");
    }
    const SharedFiles files = shared_files();
    // Keys in the options (or none asked for) leave the chain unread.
    const std::string sources =
        server_sources() +
        (retry.anonymous || !retry.access_key.empty() ? std::string() : credential_sources(files));
    SHARDLOAD_RETURN_IF_ERROR(refuse_blocking_shared_files(url, files));
    std::unique_lock lock(mu_);
    if (!initialized_) {
      const auto st = [] {
        const ArrowCall call;
        return arrow::fs::EnsureS3Initialized();
      }();
      if (!st.ok()) return remote_error(ErrorCode::kIo, url, "cannot initialize S3", st);
      initialized_ = true;
      make_clients_static_state();
      // S3 is finalized at exit even where this process never makes a client of its own (its
      // first URL's options refused), else the AWS SDK's state crashed the process at exit.
      register_at_exit();
    }
    const std::string key = bucket + query;
    // A bucket's store is made once, by one thread, outside the lock (its region's HEAD and
    // the credentials take up to their requests' deadlines): a first open of another bucket
    // does not wait behind it, nor does a process forked meanwhile (whose copy of the lock
    // would be held by a thread it does not have); one of the same bucket waits for it.
    auto it = fs_.find(key);
    while (it == fs_.end() && making_.count(key) != 0) {
      made_->wait(lock);
      it = fs_.find(key);
    }
    // A store of a server or credentials the environment or the files no longer name: made
    // again.
    std::vector<std::shared_ptr<arrow::fs::FileSystem>> stale;
    if (it != fs_.end() && made_of_[key] != sources) {
      stale.push_back(std::move(it->second));
      fs_.erase(it);
      stores_.erase(key);
#if SHARDLOAD_S3_SIGNED
      signed_.erase(key);
      renewed_.erase(key);
#endif
      it = fs_.end();
    }
    if (it == fs_.end()) {
      making_.insert(key);
      lock.unlock();
      Result<Made> made = make_store(url, bucket, key, arrow_query, retry);
      lock.lock();
      making_.erase(key);
      made_->notify_all();
      if (!made.is_ok()) {
        made_of_.erase(key);
        lock.unlock();
        if (!stale.empty()) {
          const ArrowCall call;
          stale.clear();
        }
        return made.status();
      }
      made_of_[key] = sources;
      it = fs_.emplace(key, std::move(made->fs)).first;
      stores_.emplace(key, std::move(made->store));
#if SHARDLOAD_S3_SIGNED
      if (made->signed_ep != nullptr) signed_.emplace(key, std::move(made->signed_ep));
      if (made->renewed != nullptr) renewed_.emplace(key, std::move(made->renewed));
#endif
      if (!exit_registered_) {
        // Registered again after the first client of the process's own options was made,
        // and so after any static state of the AWS SDK's that its credentials made: the
        // handlers run in reverse, so this one runs first and lets go of the clients before
        // S3 is finalized (pyarrow's handler, where pyarrow.fs is imported, may have
        // finalized it already: that is harmless).
        register_at_exit();
        exit_registered_ = true;
      }
    }
    Where w;
    w.fs = it->second;
    w.path = path;
    w.store = stores_.at(key);
    w.slots = &w.store->requests;
#if SHARDLOAD_S3_SIGNED
    if (auto e = signed_.find(key); e != signed_.end()) w.ep = e->second;
    std::shared_ptr<Renewed> renewed;
    if (auto r = renewed_.find(key); r != renewed_.end()) renewed = r->second;
#endif
    used_[key] = ++uses_;
    std::vector<std::shared_ptr<arrow::fs::FileSystem>> retired = retire_beyond_kept(key);
    for (auto& fs : stale) retired.push_back(std::move(fs));
    lock.unlock();
#if SHARDLOAD_S3_SIGNED
    if (renewed != nullptr) renew_arrow_client(key, *renewed, &w.fs);
#endif
    if (!retired.empty()) {
      // The last reference to a client may be here: its end (its connections closed) is a
      // call into Arrow's client, which a fork waits for.
      const ArrowCall call;
      retired.clear();
    }
    return w;
  }

  // The clients kept: each holds the AWS SDK's pool of connections (a libcurl handle per
  // connection, with descriptors of its own), open for as long as the client lives. A client
  // was kept per bucket and query for the process's life, so a process that read many buckets
  // (or one spelled many ways) kept every connection it had ever opened.
  static constexpr std::size_t kKeptClients = 8;

  // Under mu_: the stores beyond the kKeptClients used last, `current` never among them, taken
  // out of the maps (a later URL of one makes it again); their clients, for the caller to let
  // go of after mu_ (an open object or a call in flight holds its client until it ends).
  std::vector<std::shared_ptr<arrow::fs::FileSystem>> retire_beyond_kept(
      const std::string& current) {
    std::vector<std::shared_ptr<arrow::fs::FileSystem>> retired;
    while (fs_.size() > kKeptClients) {
      auto oldest = used_.end();
      for (auto u = used_.begin(); u != used_.end(); ++u) {
        if (u->first != current && (oldest == used_.end() || u->second < oldest->second)) {
          oldest = u;
        }
      }
      if (oldest == used_.end()) break;
      const std::string key = oldest->first;
      used_.erase(oldest);
      if (auto f = fs_.find(key); f != fs_.end()) {
        retired.push_back(std::move(f->second));
        fs_.erase(f);
      }
      stores_.erase(key);
      made_of_.erase(key);
#if SHARDLOAD_S3_SIGNED
      signed_.erase(key);
      renewed_.erase(key);
#endif
    }
    return retired;
  }

  // Arrow's client (the AWS SDK's) follows a server's redirects, with no knob to stop it: from
  // an https endpoint to plain http too, taking an object's size from the redirect's own
  // answer. An endpoint named over https is therefore not reached through it alone (where
  // shardload's own client makes the requests, which follows none, it is): the refusal says
  // what takes the URL there. AWS itself (no endpoint, or one of AWS's names) redirects only
  // within https.
  static Status refuse_an_https_endpoint(const std::string& url, const std::string& arrow_query,
                                         const arrow::fs::S3Options& options) {
    std::string endpoint = options.endpoint_override;
    for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
      if (!endpoint.empty()) break;
      endpoint = environment_value(name).value_or(std::string());
    }
    if (endpoint.empty()) return Status::ok();
    std::string scheme = options.scheme;
    if (const auto sep = endpoint.find("://"); sep != std::string::npos) {
      scheme = endpoint.substr(0, sep);
      endpoint = endpoint.substr(sep + 3);
    }
    if (scheme != "https") return Status::ok();
    // AWS's own endpoints, named explicitly, are AWS itself.
    const std::string host = endpoint.substr(0, endpoint.find_first_of(":/"));
    for (const std::string aws : {".amazonaws.com", ".amazonaws.com.cn"}) {
      if (host.size() > aws.size() &&
          host.compare(host.size() - aws.size(), aws.size(), aws) == 0) {
        return Status::ok();
      }
    }
    // The options that keep the URL on Arrow's client, to name them.
    std::string arrows;
    for (std::size_t pos = arrow_query.empty() ? 0 : 1; pos < arrow_query.size();) {
      std::size_t amp = arrow_query.find('&', pos);
      if (amp == std::string::npos) amp = arrow_query.size();
      const std::size_t eq = std::min(arrow_query.find('=', pos), amp);
      const std::string k = arrow_query.substr(pos, eq - pos);
      pos = amp + 1;
      if (k.empty() || k == "endpoint_override" || k == "scheme" || k == "region") continue;
      arrows += (arrows.empty() ? "" : ", ") + k;
    }
    const std::string why = arrows.empty()
                                ? "no key pair or role's credentials were found"
                                : "it is given options only Arrow's client takes (" + arrows + ")";
    return file_error(
        ErrorCode::kInvalidArgument, url,
        "refused: the https endpoint " + endpoint +
            " would be reached through Arrow's S3 client (" + why +
            "), which follows a server's redirects, to plain http too, and takes an object's "
            "size from the redirect's answer. Give a key pair (access_key and secret_key, "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the shared credentials file) and "
            "no options but endpoint_override, scheme and region (a private CA through "
            "CURL_CA_BUNDLE, not tls_ca_file_path): shardload's own client, which follows no "
            "redirect, then makes the requests",
        EINVAL);
  }

  // The environment's values are checked as the same values given as options are: a
  // credential goes into request headers (a CR or LF there adds header lines, a trailing
  // newline ends the header block early: a bare 403), a region and an endpoint into the URI
  // Arrow parses ('&k=v' would add an option) and into the signed requests' URL ('#' or '?'
  // would make the bucket and key a fragment or a query). Named by where they came from,
  // never shown: a credential is secret.
  static Status refuse_control_character(const std::string& url, const std::string& where,
                                         const std::string& value) {
    const CredentialCharacter bad = bad_credential_character(value);
    if (bad.kind.empty()) return Status::ok();
    return file_error(ErrorCode::kInvalidArgument, url,
                      "bad object-storage credentials: " + where + " holds " + bad.kind + " (" +
                          bad.code + "; " + bad.why() + ")",
                      EINVAL);
  }

  // An endpoint is [http:// or https://]HOST[:PORT][/...]: '#', '?', a blank or a
  // control character would move the bucket and key out of the request's path ('+' is a
  // blank as a URL's query writes it; no host name holds one).
  static Status refuse_bad_endpoint(const std::string& url, const std::string& where,
                                    const std::string& value) {
    const std::string code = control_character_code(value);
    const auto bad = value.find_first_of("#? +\\");
    std::string found;
    if (!code.empty()) {
      found = "a control character (" + code + ")";
    } else if (bad != std::string::npos) {
      found = "'" + std::string(1, value[bad]) + "'";
    } else {
      // A path is a prefix both clients put before /BUCKET/KEY (path-style): its segments
      // are sent and signed as written, so only characters that need no encoding and no dot
      // segment (a server would resolve it, and the signature name another path).
      const auto sep = value.find("://");
      const std::string rest = sep == std::string::npos ? value : value.substr(sep + 3);
      const auto slash = rest.find('/');
      std::string path = slash == std::string::npos ? std::string() : rest.substr(slash);
      while (!path.empty() && path.back() == '/') path.pop_back();
      for (std::size_t pos = 0; pos < path.size() && found.empty();) {
        const std::size_t end = std::min(path.find('/', pos + 1), path.size());
        const std::string segment = path.substr(pos + 1, end - pos - 1);
        const bool plain = segment.find_first_not_of(
                               "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789-._~") == std::string::npos;
        if (segment.empty() || segment == "." || segment == ".." || !plain) {
          found = "the path segment '" + segment +
                  "' (a path's segments are letters, digits, '-', '.', '_' and '~', not '.' "
                  "or '..' or empty)";
        }
        pos = end;
      }
      if (found.empty()) return Status::ok();
    }
    return file_error(ErrorCode::kInvalidArgument, url,
                      "bad object-storage URL or options: " + where +
                          " must be an endpoint, [http:// or https://]HOST[:PORT][/PATH], "
                          "found " +
                          found + " in it",
                      EINVAL);
  }

  // The value of `key` in "?k=v&..." (percent-decoded), or nullopt where it is absent.
  static std::optional<std::string> query_value(const std::string& query, std::string_view key) {
    for (std::size_t pos = query.empty() ? 0 : 1; pos < query.size();) {
      std::size_t amp = query.find('&', pos);
      if (amp == std::string::npos) amp = query.size();
      const std::size_t eq = std::min(query.find('=', pos), amp);
      if (query.compare(pos, eq - pos, key) == 0 && eq - pos == key.size()) {
        return percent_decoded(eq == amp ? std::string() : query.substr(eq + 1, amp - eq - 1));
      }
      pos = amp + 1;
    }
    return std::nullopt;
  }

  // The shared files are opened and read to their end, here and by the AWS SDK (its
  // initialization reads the config file): a FIFO no one writes held the load in open() for
  // good, and a device that never ends (/dev/zero, /dev/urandom, a terminal) was read with
  // memory growing until the process was killed, Ctrl-C unheard. So only a regular file (a
  // link to one included) or /dev/null (no file) is read, and none larger than a credentials
  // or config file is (kMaxSharedFile). Asked before the SDK is initialized.
  static constexpr off_t kMaxSharedFile = off_t{1} << 20;
  static bool is_dev_null(const struct stat& st) {
    static const std::optional<dev_t> null_device = []() -> std::optional<dev_t> {
      struct stat n {};
      if (::stat("/dev/null", &n) != 0 || !S_ISCHR(n.st_mode)) return std::nullopt;
      return n.st_rdev;
    }();
    return S_ISCHR(st.st_mode) && null_device && st.st_rdev == *null_device;
  }
  static const char* file_kind(mode_t mode) {
    if (S_ISFIFO(mode)) return "FIFO";
    if (S_ISSOCK(mode)) return "socket";
    if (S_ISCHR(mode)) return "character device";
    if (S_ISBLK(mode)) return "block device";
    if (S_ISDIR(mode)) return "directory";
    return "file of another kind";
  }
  static Status refuse_blocking_shared_files(const std::string& url, const SharedFiles& files) {
    for (const SharedFile& file : files) {
      if (!file.found) continue;
      const char* const variable = file.variable;
      const char* const name = file.name;
      const std::string& path = file.path;
      const bool set = !aws_env(variable).empty();
      const struct stat& st = file.st;
      const std::string named = std::string("bad object-storage credentials: the shared ") + name +
                                " file " + path + " (" + variable +
                                (set ? "" : " unset: ~/.aws/" + std::string(name)) + ")";
      if (S_ISREG(st.st_mode)) {
        if (st.st_size > kMaxSharedFile) {
          return file_error(ErrorCode::kInvalidArgument, url,
                            named + " is " + std::to_string(st.st_size) + " bytes, more than the " +
                                std::to_string(kMaxSharedFile) + " (1 MiB) a shared " + name +
                                " file may be",
                            EINVAL);
        }
        continue;
      }
      if (is_dev_null(st)) continue;
      return file_error(ErrorCode::kInvalidArgument, url,
                        named + " is a " + file_kind(st.st_mode) +
                            ", not a regular file (nor /dev/null): it would be read to its end",
                        EINVAL);
    }
    return Status::ok();
  }

  static Status check_environment(const std::string& url, const std::string& arrow_query,
                                  const StoreOptions& options) {
    if (!options.anonymous && options.access_key.empty()) {
      for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                               "AWS_CONTAINER_AUTHORIZATION_TOKEN"}) {
        if (const auto v = environment_value(name)) {
          SHARDLOAD_RETURN_IF_ERROR(refuse_control_character(url, name, *v));
        }
      }
    }
    if (!query_value(arrow_query, "region")) {
      for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
        const std::string v = environment_value(name).value_or(std::string());
        if (v.empty()) continue;
        if (!is_region_name(v, kRegionChars)) {
          return file_error(ErrorCode::kInvalidArgument, url,
                            std::string("bad object-storage URL or options: ") + name +
                                " (environment) must be a region's name (up to 63 letters, "
                                "digits, '-' and '_'), found another character in it",
                            EINVAL);
        }
        break;  // AWS_DEFAULT_REGION is read only where AWS_REGION is unset
      }
    }
    if (const auto option = query_value(arrow_query, "endpoint_override")) {
      return refuse_bad_endpoint(url, "endpoint_override", *option);
    }
    for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
      const std::string v = environment_value(name).value_or(std::string());
      if (v.empty()) continue;
      return refuse_bad_endpoint(url, std::string(name) + " (environment)", v);
    }
    return Status::ok();
  }

  // Opens the object (one HEAD request) and reads its snapshot: size and ETag.
  Result<std::shared_ptr<arrow::io::RandomAccessFile>> open_object(const std::string& url,
                                                                   FileInfo* info) {
    SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve_object(url));
    SHARDLOAD_ASSIGN_OR_RETURN(ArrowLook look,
                               arrow_look(where, url, "cannot open", "cannot stat"));
    *info = FileInfo{};
    info->size = look.size;
    info->regular = true;
    info->inode = etag_hash(look.etag);
    return std::move(look.file);
  }

  // What one HEAD through Arrow's client tells of an object: the file opened, its size and
  // ETag. `opening` names a failure of the open, `looking` one of the metadata's look-up.
  struct ArrowLook {
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    std::uint64_t size = 0;
    std::string etag;
  };
  Result<ArrowLook> arrow_look(const auto& where, const std::string& url, const char* opening,
                               const char* looking) {
    t_gave_up_after = 0;
    const RequestSlot slot(where.slots);  // the HEAD
    if (!slot.held()) return file_error(ErrorCode::kIo, url, "interrupted", ECANCELED);
    const ArrowCall call;
    auto file = where.fs->OpenInputFile(where.path);
    if (!file.ok()) return remote_error(ErrorCode::kIo, url, opening, file.status());
    auto size = (*file)->GetSize();
    if (!size.ok()) return remote_error(ErrorCode::kIo, url, looking, size.status());
    auto meta = (*file)->ReadMetadata();
    if (!meta.ok()) return remote_error(ErrorCode::kIo, url, looking, meta.status());
    ArrowLook look;
    if (*meta != nullptr) {
      auto e = (*meta)->Get("ETag");
      if (e.ok()) look.etag = *e;
    }
    look.size = static_cast<std::uint64_t>(*size);
    look.file = *std::move(file);
    return look;
  }

  // `status`: the program's exit status, or null where it is not known.
  static void finalize_at_exit(const int* status);

  // finalize_at_exit is handed the status the program ends with (glibc's on_exit, whose
  // handlers run in the one list with atexit's, in reverse order of registration).
  static void register_at_exit() {
#if defined(__GLIBC__)
    ::on_exit([](int status, void*) { finalize_at_exit(&status); }, nullptr);
#else
    std::atexit([] { finalize_at_exit(nullptr); });
#endif
  }

  // Arrow makes its static state for S3 clients (the finalizer that every client registers
  // with, the endpoints' cache; the AWS SDK's for a client) when it builds its first client,
  // and FinalizeS3 uses it. That first client may come after the exit handler was registered
  // (the region resolver's, made by a first URL's region look-up, after a URL that made no
  // client), and that state, destroyed before the handler runs, crashed the process at exit.
  // So one client like the resolver's (anonymous, no endpoint; no request is sent) is made
  // and let go of here, when S3 is initialised, before the handler is registered. Under mu_.
  void make_clients_static_state() {
    if (ArrowCalls::process().unusable()) return;
    const ArrowCall call;
    (void)arrow::fs::S3FileSystem::Make(arrow::fs::S3Options::Anonymous());
  }

 public:
  // fork(): the lock is taken before, so that the child's copy is consistent; the child
  // leaves its parent's clients and stores alone (leaked: their requests' threads, slots
  // taken and the AWS SDK's state are not its own) and makes its own at its first open.
  static void before_fork() { the_s3_io()->mu_.lock(); }
  static void after_fork_parent() { the_s3_io()->mu_.unlock(); }
  static void after_fork_child() {
    ArrowRemoteIo* io = the_s3_io();
    new std::map<std::string, std::shared_ptr<arrow::fs::FileSystem>>(std::move(io->fs_));
    io->fs_.clear();
    new std::map<std::string, std::shared_ptr<StoreResources>>(std::move(io->stores_));
    io->stores_.clear();
    io->used_.clear();
    io->made_of_.clear();
#if SHARDLOAD_S3_SIGNED
    new std::map<std::string, std::shared_ptr<const S3Endpoint>>(std::move(io->signed_));
    io->signed_.clear();
    new std::map<std::string, std::shared_ptr<Renewed>>(std::move(io->renewed_));
    io->renewed_.clear();
#endif
    io->making_.clear();                        // by threads the child does not have
    io->made_ = new std::condition_variable();  // the parent's had their waits
    io->mu_.unlock();
  }

 private:
  std::mutex mu_;
  std::set<std::string> making_;  // keys whose store a thread is making (resolve())
  std::condition_variable* made_ = new std::condition_variable();  // never destroyed
  bool initialized_ = false;
  bool exit_registered_ = false;  // again, after the first client made
  std::map<std::string, std::shared_ptr<arrow::fs::FileSystem>> fs_;
  std::map<std::string, std::shared_ptr<StoreResources>> stores_;  // by the same key
  std::map<std::string, std::uint64_t> used_;   // by the same key: when last resolved
  std::map<std::string, std::string> made_of_;  // by the same key: its credential_sources()
  std::uint64_t uses_ = 0;
#if SHARDLOAD_S3_SIGNED
  std::map<std::string, std::shared_ptr<const S3Endpoint>> signed_;  // by the same key
  std::map<std::string, std::shared_ptr<Renewed>> renewed_;          // by the same key
#endif
  std::unordered_map<int, Open> files_;
  int next_fd_ = kTransportFdBase;
  std::atomic<std::uint64_t> retries_{0};
  static thread_local std::string t_read_error;
};

thread_local std::string ArrowRemoteIo::t_read_error;

ArrowRemoteIo* the_s3_io() {
  // Never destroyed: objects may be open in other threads until the very end; its S3
  // clients are let go of at exit, before FinalizeS3.
  static auto* io = [] {
    auto* made = new ArrowRemoteIo();
    ::pthread_atfork(&ArrowRemoteIo::before_fork, &ArrowRemoteIo::after_fork_parent,
                     &ArrowRemoteIo::after_fork_child);
    return made;
  }();
  return io;
}

// One upload of the whole object: a PUT or a multipart upload, either of which S3 makes
// visible only when it completes, so the object appears whole or not at all. A failed write
// is aborted (a multipart upload is cancelled, never completed with what was sent).
Status ArrowRemoteIo::write_object(const std::string& url, const void* data, std::size_t n) {
  SHARDLOAD_ASSIGN_OR_RETURN(auto where, resolve_object(url));
#if SHARDLOAD_S3_SIGNED
  if (one_put(where, static_cast<std::int64_t>(n))) {
    return s3_put(*where.ep, url, key_of(where.path), data, n, &retries_);
  }
#endif
  t_gave_up_after = 0;
  const ArrowCall call;
  auto out = where.fs->OpenOutputStream(where.path);
  if (!out.ok()) return remote_error(ErrorCode::kIo, url, "cannot write", out.status());
  t_gave_up_after = 0;
  auto st = (*out)->Write(data, static_cast<std::int64_t>(n));
  if (st.ok()) {
    t_gave_up_after = 0;
    st = (*out)->Close();
  }
  if (!st.ok()) {
    (void)(*out)->Abort();
    return remote_error(ErrorCode::kIo, url, "cannot write", st);
  }
  return Status::ok();
}

void ArrowRemoteIo::finalize_at_exit(const int* status) {
  // Finalizing waits for the requests in flight: for ever in a child whose copy of Arrow's
  // lock is held (ArrowCalls), and it ends the clients under a daemon thread's calls. Neither
  // finalizes. Nor may the process go on to the static destructors and the exit handlers
  // registered before this one: Arrow's and the AWS SDK's then tear S3 down under the call in
  // flight (or with its lock copied held) and crashed the process. It ends here, with the
  // program's status, once the C streams are flushed; Python's atexit functions and the
  // handlers registered after this one have run already.
  // It is registered more than once (when S3 is initialised, again after the first client):
  // the last registered runs first and does it all; by the time an earlier one runs, the
  // static state made between the two is gone, and it touches nothing.
  static std::atomic<bool> ran{false};
  if (ran.exchange(true)) return;
  ArrowCalls& calls = ArrowCalls::process();
  if (calls.unusable() || !calls.close_at_exit()) {
    if (status == nullptr) return;  // not known here: left to the process's own end
    (void)std::fflush(nullptr);
    ::_exit(*status);
  }
  ArrowRemoteIo* io = the_s3_io();
  {
    std::lock_guard lock(io->mu_);
    io->files_.clear();
    io->fs_.clear();
  }
  (void)arrow::fs::EnsureS3Finalized();
}

}  // namespace

void register_s3_io() {
  set_s3_transport(the_s3_io());
  set_object_store(the_s3_io());
}

}  // namespace shardload::detail
