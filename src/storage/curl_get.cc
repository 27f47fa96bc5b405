#include "storage/detail/curl_get.hpp"

#include "base/detail/environment.hpp"
#include "base/detail/secrets.hpp"
#include "shardload/interrupt.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include <unistd.h>

namespace shardload::detail {

namespace {

// The connections and DNS answers of every thread's handle, in one pool: the threads that make
// requests come and go (a read's helpers live for that read, a discovery's probe threads for
// that discovery), and each new thread's handle used to open connections of its own, a TCP
// (and with https a TLS) handshake per thread and request, closed when the thread ended.
// Never destroyed: handles of threads that end at exit may still use it.
class ConnectionPool {
 public:
  ConnectionPool() : pid_(::getpid()), share_(curl_share_init()) {
    if (share_ == nullptr) return;
    curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, &ConnectionPool::lock);
    curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, &ConnectionPool::unlock);
    curl_share_setopt(share_, CURLSHOPT_USERDATA, this);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  }
  ~ConnectionPool() {
    if (share_ != nullptr) curl_share_cleanup(share_);
  }
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;
  CURLSH* share() const { return share_; }
  pid_t pid() const { return pid_; }

 private:
  static void lock(CURL*, curl_lock_data data, curl_lock_access, void* self) {
    static_cast<ConnectionPool*>(self)->mu_[index(data)].lock();
  }
  static void unlock(CURL*, curl_lock_data data, void* self) {
    static_cast<ConnectionPool*>(self)->mu_[index(data)].unlock();
  }
  static std::size_t index(curl_lock_data data) {
    const auto i = static_cast<std::size_t>(data);
    return i < kLocks ? i : 0;
  }
  static constexpr std::size_t kLocks = CURL_LOCK_DATA_LAST;
  pid_t pid_;
  CURLSH* share_;
  std::mutex mu_[kLocks];
};

// The requests one process has in flight at most, about: 16 probes of 8 requests each.
constexpr long kPooledConnections = 128;

// One pool per process. A child forked from a process that had made requests copied its
// parent's pool: its idle connections are sockets the parent still uses, so the child's request
// could go out on the connection a parent thread had just sent on, and read the answer to the
// parent's request (another object's bytes) or wait behind it for ever; and a lock of the pool
// held by a parent thread at the fork is held for good. The child leaves the parent's pool
// alone (leaked: closing it would close the parent's connections' TLS sessions) and makes its
// own.
CURLSH* connection_pool() {
  static std::atomic<ConnectionPool*> pool{nullptr};
  const pid_t self = ::getpid();
  ConnectionPool* now = pool.load(std::memory_order_acquire);
  while (now == nullptr || now->pid() != self) {
    auto* made = new ConnectionPool();
    if (pool.compare_exchange_strong(now, made, std::memory_order_acq_rel)) return made->share();
    delete made;  // another thread of this process made it first: `now` is that one
  }
  return now->share();
}

// One easy handle per thread, its connections in the process's pool, with the buffer for
// libcurl's words on a failure (set on the handle, so it lives as long).
struct Handle {
  CURL* curl = nullptr;
  pid_t pid = ::getpid();  // the process that made it, whose pool it was given
  char error[CURL_ERROR_SIZE] = {};
  Handle() : curl(curl_easy_init()) {}
  ~Handle() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

// This thread's handle, its options reset (the connections kept); nullptr where libcurl could
// not make one.
Handle* thread_handle() {
  thread_local Handle h;
  if (h.pid != ::getpid()) {
    // Made before this process was forked (the thread that forked): it is tied to the
    // parent's pool, whose locks its clean-up or reset would take; left alone (leaked).
    h.curl = curl_easy_init();
    h.pid = ::getpid();
  }
  if (h.curl == nullptr) return nullptr;
  curl_easy_reset(h.curl);
  // After the reset, which leaves no option set. The pool keeps up to kPooledConnections idle
  // (libcurl's default, 5, closed most of those a discovery's probes had open at once).
  if (CURLSH* pool = connection_pool(); pool != nullptr) {
    curl_easy_setopt(h.curl, CURLOPT_SHARE, pool);
    curl_easy_setopt(h.curl, CURLOPT_MAXCONNECTS, kPooledConnections);
  }
  h.error[0] = '\0';
  return &h;
}

bool iequals_prefix(std::string_view line, std::string_view name) {
  if (line.size() < name.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) !=
        std::tolower(static_cast<unsigned char>(name[i]))) {
      return false;
    }
  }
  return true;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto* h = static_cast<CurlHeaders*>(user);
  const std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) *h = CurlHeaders{};  // a new response begins
  const auto value = [&](std::string_view name) { return trim(line.substr(name.size())); };
  if (iequals_prefix(line, "etag:")) h->etag = value("etag:");
  if (iequals_prefix(line, "last-modified:")) h->last_modified = value("last-modified:");
  if (iequals_prefix(line, "date:")) h->date = value("date:");
  if (iequals_prefix(line, "content-range:")) h->content_range = value("content-range:");
  if (iequals_prefix(line, "content-type:")) {
    h->multipart = iequals_prefix(value("content-type:"), "multipart/");
  }
  if (iequals_prefix(line, "content-length:")) {
    const std::string more = value("content-length:");
    h->content_length = h->has_content_length ? h->content_length + ", " + more : more;
    h->has_content_length = true;
  }
  if (iequals_prefix(line, "content-encoding:")) {
    // Several lines are one list ("gzip" then "identity" is "gzip, identity"): the last
    // alone would hide a coding the body is in.
    const std::string more = value("content-encoding:");
    h->content_encoding = h->content_encoding.empty() ? more : h->content_encoding + ", " + more;
  }
  if (iequals_prefix(line, "x-amz-bucket-region:")) {
    h->bucket_region = value("x-amz-bucket-region:");
  }
  return size * count;
}

// Where a GET's body goes: into the caller's buffer only when the answer is the range asked
// for, else (an error's page, a whole object that is not the range) nowhere.
struct Sink {
  CURL* curl = nullptr;
  const CurlRequest* req = nullptr;
  const CurlHeaders* headers = nullptr;
  std::byte* dst = nullptr;
  std::size_t cap = 0;
  std::uint64_t offset = 0;
  std::size_t got = 0;
  bool checked = false;    // `accept` was asked
  bool overflow = false;   // more bytes came than were asked for: not the range
  bool refused = false;    // `accept` refused the answer
  bool encoded = false;    // the body came in a Content-Encoding
  std::string error_body;  // the first bytes of an error's page, for the message
};

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* s = static_cast<Sink*>(user);
  const std::size_t n = size * count;
  long code = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
  if (s->req->body != nullptr && code >= 200 && code < 300) return n;  // a PUT's answer
  if (code != 206 && code != 200) {
    if (s->error_body.size() < s->req->error_body_cap) {
      s->error_body.append(data, std::min(n, s->req->error_body_cap - s->error_body.size()));
    }
    return n;
  }
  if (!s->checked) {
    s->checked = true;
    // libcurl decodes nothing here (no CURLOPT_ACCEPT_ENCODING): a gzip body would be
    // taken as the bytes of the range, and one no longer than the range read as data.
    if (is_encoded(s->headers->content_encoding)) {
      s->encoded = true;
      return 0;  // stops the transfer (CURLE_WRITE_ERROR)
    }
    if (code == 206 && s->headers->multipart) {
      s->overflow = true;  // parts with their own headers: none of it is the range's bytes
      return 0;            // stops the transfer (CURLE_WRITE_ERROR)
    }
    if (s->req->accept && !s->req->accept(*s->headers)) {
      s->refused = true;
      return 0;  // stops the transfer (CURLE_WRITE_ERROR)
    }
  }
  // A 200 is the whole object (the range only when it starts at offset 0), unless it says
  // which bytes it holds (see curl_perform).
  const bool whole = code == 200 && s->headers->content_range.empty();
  if ((whole && s->offset != 0) || s->got + n > s->cap) {
    s->overflow = true;
    return 0;
  }
  std::memcpy(s->dst + s->got, data, n);
  s->got += n;
  return n;
}

// Where a PUT's body comes from: libcurl reads it in order, and may rewind it (seek to 0)
// when it must send it again on the same request.
struct Source {
  const std::byte* data = nullptr;
  std::size_t size = 0;
  std::size_t pos = 0;
};

std::size_t on_read(char* dst, std::size_t size, std::size_t count, void* user) {
  auto* s = static_cast<Source*>(user);
  const std::size_t n = std::min(size * count, s->size - s->pos);
  std::memcpy(dst, s->data + s->pos, n);
  s->pos += n;
  return n;
}

int on_seek(void* user, curl_off_t offset, int origin) {
  auto* s = static_cast<Source*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<std::size_t>(offset) > s->size) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  s->pos = static_cast<std::size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

// The first of `names` set to a value that is not empty, or "".
std::string first_set(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    std::optional<std::string> v = environment_value(name);
    if (v && !v->empty()) return *std::move(v);
  }
  return {};
}

// Where the CA certificates of https:// are: CURL_CA_BUNDLE, else SSL_CERT_FILE, else ""
// (libcurl's own default). libcurl reads neither variable itself (the curl program does).
std::string ca_bundle() { return first_set({"CURL_CA_BUNDLE", "SSL_CERT_FILE"}); }

// The proxy settings libcurl would read from the environment for `url`, given to it instead
// ("" where none): libcurl reads the variables with getenv on every transfer, on the engine's
// threads, and a getenv while Python added a variable on another thread (setenv moving the
// array) read freed memory and crashed the process. These come from environment_value (the
// copy the call took). The names are libcurl's: http_proxy for http:// (only in lower case),
// https_proxy or HTTPS_PROXY for https://, then all_proxy or ALL_PROXY; no_proxy or NO_PROXY.
struct Proxies {
  std::string proxy;
  std::string no_proxy;
};
Proxies proxies_for(const std::string& url) {
  Proxies p;
  if (iequals_prefix(url, "https://")) {
    p.proxy = first_set({"https_proxy", "HTTPS_PROXY"});
  } else {
    p.proxy = first_set({"http_proxy"});
  }
  if (p.proxy.empty()) p.proxy = first_set({"all_proxy", "ALL_PROXY"});
  p.no_proxy = first_set({"no_proxy", "NO_PROXY"});
  return p;
}

// The bytes a second a request's deadline allows for at least (see request_deadline_ms).
constexpr double kDeadlineRate = 1024.0 * 1024.0;
// Redirects one request follows at most.
constexpr int kMaxRedirects = 5;

// libcurl's progress callback, called at least once a second while a request waits: nonzero
// ends the request (CURLE_ABORTED_BY_CALLBACK) once an interrupt was asked for.
int on_progress(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return interrupt_requested() ? 1 : 0;
}

// Only http:// and https:// for any request libcurl makes (its default takes ftp, file,
// gopher, ...), its own redirects included (none are followed by libcurl: see curl_perform).
void allow_only_http(CURL* c) {
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85.0: the _STR options; the bitmasks are deprecated
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(c, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
}

bool is_redirect(long http) {
  return http == 301 || http == 302 || http == 303 || http == 307 || http == 308;
}

bool has_scheme(std::string_view url, std::string_view scheme) {
  return url.size() > scheme.size() && iequals_prefix(url, scheme);
}

// Why a redirect from `from` to `to` is not followed, or "" where it is.
std::string redirect_refusal(const std::string& from, const std::string& to) {
  const bool tls = has_scheme(from, "https://");
  if (has_scheme(to, "https://")) return {};
  if (has_scheme(to, "http://")) {
    return tls ? "it leaves https for plain http (the data would travel unencrypted)"
               : std::string();
  }
  return tls ? "only https:// is followed from an https:// URL"
             : "only http:// and https:// are followed";
}

std::string seconds_text(std::int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::once_flag g_init_once;
CURLcode g_init_code = CURLE_OK;

}  // namespace

bool curl_retryable(const CurlOutcome& o) {
  switch (o.curl) {
    case CURLE_OK:
      return o.http >= 500 || o.http == 429;
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

int curl_errno(const CurlOutcome& o) {
  if (o.curl == CURLE_OK) {
    // Only a 404 is a missing object (a Zarr chunk then reads as the fill value): a 410 is a
    // server refusing one it had (an expired or revoked link), an error like a 403.
    if (o.http == 404) return ENOENT;
    if (o.http == 401 || o.http == 403) return EACCES;
  }
  if (o.curl == CURLE_OPERATION_TIMEDOUT) return ETIMEDOUT;
  // Not EINTR, which the readers take as "ask again".
  if (o.curl == CURLE_ABORTED_BY_CALLBACK) return ECANCELED;
  return EIO;
}

std::string curl_describe(const CurlOutcome& o, const std::string& body) {
  // shardload's own words: an interrupt, a redirect refused.
  if ((o.curl == CURLE_ABORTED_BY_CALLBACK || o.curl == CURLE_UNSUPPORTED_PROTOCOL ||
       o.curl == CURLE_TOO_MANY_REDIRECTS) &&
      !o.curl_error.empty()) {
    return o.curl_error;
  }
  if (o.curl != CURLE_OK) {
    return std::string(curl_easy_strerror(o.curl)) +
           (o.curl_error.empty() ? std::string() : " (" + o.curl_error + ")");
  }
  std::string d = "HTTP " + std::to_string(o.http);
  std::string b = trim(body.substr(0, 120));
  std::replace(b.begin(), b.end(), '\n', ' ');
  if (!b.empty()) d += ": " + b;
  return d;
}

Status curl_init(const std::string& url) {
  std::call_once(g_init_once, [] { g_init_code = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (g_init_code != CURLE_OK) {
    return file_error(ErrorCode::kIo, url,
                      std::string("cannot initialize libcurl: ") + curl_easy_strerror(g_init_code));
  }
  return Status::ok();
}

std::int64_t request_deadline_ms(const StoreOptions& o, std::uint64_t bytes) {
  const double seconds = std::max(o.request_timeout, static_cast<double>(bytes) / kDeadlineRate);
  return static_cast<std::int64_t>(std::ceil(seconds * 1000));
}

CurlAnswer curl_perform(const CurlRequest& req, void* dst, std::size_t cap, std::uint64_t offset,
                        std::atomic<std::uint64_t>* retries) {
  const StoreOptions& o = *req.options;
  // The bytes the request moves, which its deadline allows for: a GET's range, a PUT's body.
  const std::uint64_t bytes = req.body != nullptr ? req.body_size : req.head ? 0 : cap;
  const std::int64_t deadline_ms = request_deadline_ms(o, bytes);
  CurlAnswer a;
  Sink sink;
  Source source;
  for (std::int64_t k = 0;; ++k) {
    a = CurlAnswer{};
    a.tries = k + 1;
    if (interrupt_requested()) {
      a.outcome = CurlOutcome{CURLE_ABORTED_BY_CALLBACK, 0, "interrupted"};
      return a;
    }
    // The headers first: making them may take a request of its own on this thread's handle
    // (role credentials fetched again near their expiry), which is set up for this one after.
    const std::vector<std::string> lines = req.headers ? req.headers() : std::vector<std::string>();
    // Redirects are followed here, not by libcurl, so that each is checked before it is
    // asked: only http(s), never from https to http, at most kMaxRedirects.
    std::string url = req.url;
    // The store's slot for this attempt (its redirects included), given back before a retry's
    // sleep.
    std::optional<RequestSlot> slot;
    slot.emplace(req.slots);
    if (!slot->held()) {
      a.outcome = CurlOutcome{CURLE_ABORTED_BY_CALLBACK, 0, "interrupted"};
      return a;
    }
    // The attempt's deadline is one end time for all its hops: a deadline set afresh on each
    // redirect let a chain of slow hops hold one attempt for (kMaxRedirects + 1) deadlines.
    const auto attempt_end =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
    for (int hop = 0;; ++hop) {
      Handle* h = thread_handle();
      if (h == nullptr) {
        a.outcome = CurlOutcome{CURLE_FAILED_INIT, 0, "no libcurl handle"};
        return a;
      }
      CURL* c = h->curl;
      a.headers = CurlHeaders{};
      sink = Sink{};
      sink.curl = c;
      sink.req = &req;
      sink.headers = &a.headers;
      sink.dst = static_cast<std::byte*>(dst);
      sink.cap = cap;
      sink.offset = offset;
      curl_easy_setopt(c, CURLOPT_URL, url.c_str());
      // The path as given: libcurl would otherwise resolve "a/../b" to "b", another object
      // than the one named (and, for a signed request, than the one signed).
      curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
      allow_only_http(c);
      curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                       static_cast<long>(std::ceil(o.connect_timeout * 1000)));
      // request_timeout: the longest a request may go without receiving data; the deadline:
      // the longest it may take in all (a server trickling bytes never trips the first).
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(std::ceil(o.request_timeout)));
      const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               attempt_end - std::chrono::steady_clock::now())
                               .count();
      if (left_ms <= 0) {
        a.outcome = CurlOutcome{CURLE_OPERATION_TIMEDOUT, 0,
                                "the request's deadline: " + seconds_text(deadline_ms) + " for " +
                                    std::to_string(bytes) + " bytes, its redirects included, " +
                                    "was spent after " + std::to_string(hop) + " redirects"};
        break;
      }
      curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(left_ms));
      // Called at least once a second while the request waits: ends it on an interrupt.
      curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
      curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
      curl_easy_setopt(c, CURLOPT_HEADERDATA, &a.headers);
      curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->error);
      const std::string ca = ca_bundle();
      if (!ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, ca.c_str());
      // Both set (libcurl copies them), so that libcurl reads neither from the environment; a
      // direct request sets "" (no proxy) and "*" (no host through one).
      const Proxies proxies = req.direct ? Proxies{"", "*"} : proxies_for(url);
      curl_easy_setopt(c, CURLOPT_PROXY, proxies.proxy.c_str());
      curl_easy_setopt(c, CURLOPT_NOPROXY, proxies.no_proxy.c_str());
      if (req.method != nullptr) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method);
      if (req.head) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
      } else {
        // A receive buffer of 512 KiB instead of libcurl's 16: a large range arrives in fewer
        // reads and callbacks.
        curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
      }
      curl_slist* extra = nullptr;
      if (req.body != nullptr) {
        source = Source{static_cast<const std::byte*>(req.body), req.body_size, 0};
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, &source);
        curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(c, CURLOPT_SEEKDATA, &source);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body_size));
        curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
        // No "Expect: 100-continue": a server that does not answer it would hold each large
        // PUT for libcurl's wait (one second) before the body is sent.
        extra = curl_slist_append(extra, "Expect:");
      }
      for (const std::string& line : lines) extra = curl_slist_append(extra, line.c_str());
      if (extra != nullptr) curl_easy_setopt(c, CURLOPT_HTTPHEADER, extra);
      a.outcome = CurlOutcome{};
      a.outcome.curl = curl_easy_perform(c);
      curl_slist_free_all(extra);
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.outcome.http);
      if (a.outcome.curl != CURLE_OK) a.outcome.curl_error = h->error;
      if (a.outcome.curl == CURLE_OPERATION_TIMEDOUT) {
        a.outcome.curl_error += "; the request's deadline: " + seconds_text(deadline_ms) + " for " +
                                std::to_string(bytes) + " bytes" +
                                (hop > 0 ? ", its redirects included" : "");
      }
      if (a.outcome.curl == CURLE_ABORTED_BY_CALLBACK && interrupt_requested()) {
        a.outcome.curl_error = "interrupted";
      }
      a.bad_content_length.clear();
      if (req.head && !parse_content_length(a.headers, &a.content_length)) {
        a.bad_content_length = a.headers.content_length;
      }
      if (!req.follow_redirects || a.outcome.curl != CURLE_OK || !is_redirect(a.outcome.http)) {
        break;
      }
      char* location = nullptr;
      curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &location);
      if (location == nullptr) break;  // a 3xx without Location: the answer itself
      const std::string next = location;
      const std::string code = "HTTP " + std::to_string(a.outcome.http);
      if (const std::string why = redirect_refusal(url, next); !why.empty()) {
        a.outcome =
            CurlOutcome{CURLE_UNSUPPORTED_PROTOCOL, a.outcome.http,
                        "refused the server's redirect (" + code + ") to " + next + ": " + why};
        return a;
      }
      if (hop + 1 > kMaxRedirects) {
        a.outcome = CurlOutcome{CURLE_TOO_MANY_REDIRECTS, a.outcome.http,
                                "more than " + std::to_string(kMaxRedirects) +
                                    " redirects (the last, " + code + ", to " + next + ")"};
        return a;
      }
      url = next;
    }
    // A range answered with a whole object's status and the Content-Range of the bytes it
    // holds (rclone's `serve s3` answers so): it is the 206 it describes, and the callers
    // check its Content-Range against the range they asked for.
    if (a.outcome.curl == CURLE_OK && a.outcome.http == 200 && !req.head && req.body == nullptr &&
        !a.headers.content_range.empty()) {
      a.outcome.http = 206;
    }
    a.got = sink.got;
    a.overflow = sink.overflow;
    a.refused = sink.refused;
    if (sink.encoded) a.encoded = a.headers.content_encoding;
    // The request's own secrets (its URL's, its headers' credentials) out of the answer before
    // a message quotes a cut of it.
    a.error_body = detail::hide_request_secrets(std::move(sink.error_body), {req.url, url}, lines);
    // An answer stopped on purpose (not the range, refused, encoded): no retry makes it
    // another.
    if (a.overflow || a.refused || sink.encoded) {
      a.outcome.curl = CURLE_OK;
      return a;
    }
    if (!curl_retryable(a.outcome) || k + 1 >= o.max_attempts) return a;
    if (retries != nullptr) retries->fetch_add(1, std::memory_order_relaxed);
    slot.reset();
    interruptible_sleep(backoff_delay_ms(o, k));
  }
}

bool is_encoded(const std::string& content_encoding) {
  // Each coding of the list: "identity" is none, and S3 keeps "aws-chunked" of an upload
  // streamed so as metadata while it stores (and sends) the object's own bytes.
  std::string v;
  for (const char c : content_encoding + ",") {
    if (c == ' ' || c == '\t') continue;
    if (c != ',') {
      v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      continue;
    }
    if (!v.empty() && v != "identity" && v != "aws-chunked") return true;
    v.clear();
  }
  return false;
}

bool parse_content_length(const CurlHeaders& headers, curl_off_t* n) {
  *n = -1;
  if (!headers.has_content_length) return true;
  const std::string& v = headers.content_length;
  const char* end = v.data() + v.size();
  curl_off_t got = -1;
  // Digits only (RFC 9110's 1*DIGIT): from_chars alone would take a sign or stop at the first
  // other character; it refuses what overflows.
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos ||
      std::from_chars(v.data(), end, got).ec != std::errc() || got < 0) {
    return false;
  }
  *n = got;
  return true;
}

std::string not_the_range_asked(const CurlHeaders& h, const std::string& who,
                                const std::string& range) {
  if (h.multipart) {
    return who +
           " answered 206 with a multipart body (several ranges in one answer), not the "
           "single range bytes " +
           range;
  }
  return who + " answered 206 with Content-Range '" + h.content_range + "', not bytes " + range;
}

bool parse_content_range(const std::string& value, std::uint64_t* first, std::int64_t* total) {
  // RFC 9110 14.4: "bytes FIRST-LAST/COMPLETE" (COMPLETE a number, or '*' where unknown), or a
  // 416's "bytes */COMPLETE". Nothing looser: an answer that says its bytes otherwise ("items",
  // "bytes=", no '/', two ranges) cannot be held to the range asked or to the snapshot's size.
  const auto number = [](std::string_view text, auto* out) {
    return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos &&
           std::from_chars(text.data(), text.data() + text.size(), *out).ec == std::errc();
  };
  std::string_view v = value;
  if (!iequals_prefix(v, "bytes ")) return false;
  v.remove_prefix(6);
  const auto slash = v.find('/');
  if (slash == std::string_view::npos) return false;
  const std::string_view range = v.substr(0, slash);
  const std::string_view complete = v.substr(slash + 1);
  *total = -1;
  if (complete != "*" && !number(complete, total)) return false;
  if (range == "*") {
    *first = 0;
    return *total >= 0;
  }
  const auto dash = range.find('-');
  std::uint64_t last = 0;
  if (dash == std::string_view::npos || !number(range.substr(0, dash), first) ||
      !number(range.substr(dash + 1), &last) || last < *first) {
    return false;
  }
  return true;
}

void interruptible_sleep(std::int64_t ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!interrupt_requested()) {
    const auto left = until - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(20)));
  }
}

std::int64_t http_date_seconds(const std::string& value) {
  if (value.empty()) return 0;
  const std::time_t t = curl_getdate(value.c_str(), nullptr);
  return t > 0 ? static_cast<std::int64_t>(t) : 0;
}

}  // namespace shardload::detail
