// Objects on an HTTP server through libcurl: the RemoteIo that posix_io() routes "http://" and
// "https://" URLs to. The snapshot is a HEAD's Content-Length and ETag (its Last-Modified where
// the server sends no ETag); a read is one ranged GET (Range: bytes=a-b) into the caller's
// buffer. A server that ignores the Range answers 200 with the whole object: its bytes are
// taken only where they are exactly the range asked for (from offset 0, the whole object fitting
// the buffer), never copied as if they were the range. HTTP has no listing: every object is
// named by its URL.
#include "readers/detail/http_io.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "readers/detail/store_options.hpp"

namespace shardload::detail {

namespace {

// One easy handle per thread, reused so that its connections are kept alive between requests,
// with the buffer for libcurl's words on a failure (set on the handle, so it lives as long).
struct Handle {
  CURL* curl = nullptr;
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
  if (h.curl == nullptr) return nullptr;
  curl_easy_reset(h.curl);
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

// The headers of one response (a redirect's are replaced by the next response's).
struct Headers {
  std::string etag;
  std::string last_modified;
  std::string content_range;
};

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto* h = static_cast<Headers*>(user);
  const std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) *h = Headers{};  // a new response begins
  const auto value = [&](std::string_view name) { return trim(line.substr(name.size())); };
  if (iequals_prefix(line, "etag:")) h->etag = value("etag:");
  if (iequals_prefix(line, "last-modified:")) h->last_modified = value("last-modified:");
  if (iequals_prefix(line, "content-range:")) h->content_range = value("content-range:");
  return size * count;
}

// Where a GET's body goes: into the caller's buffer only when the answer is the range asked
// for, else (an error's page, a whole object that is not the range) nowhere.
struct Sink {
  CURL* curl = nullptr;
  std::byte* dst = nullptr;
  std::size_t cap = 0;
  std::uint64_t offset = 0;
  std::size_t got = 0;
  bool overflow = false;   // more bytes came than were asked for: not the range
  std::string error_body;  // the first bytes of an error's page, for the message
};

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* s = static_cast<Sink*>(user);
  const std::size_t n = size * count;
  long code = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
  if (code != 206 && code != 200) {
    if (s->error_body.size() < 200) s->error_body.append(data, std::min<std::size_t>(n, 200));
    return n;
  }
  // A 200 is the whole object: the range only when it starts at offset 0.
  if ((code == 200 && s->offset != 0) || s->got + n > s->cap) {
    s->overflow = true;
    return 0;  // stops the transfer (CURLE_WRITE_ERROR)
  }
  std::memcpy(s->dst + s->got, data, n);
  s->got += n;
  return n;
}

// What one request ended in.
struct Outcome {
  CURLcode curl = CURLE_OK;
  long http = 0;
  std::string curl_error;  // libcurl's words for a failed transfer
};

// Transient: worth asking again (a reset, a timeout, a connection refused or cut short, a
// 5xx or a 429 from the server). An answer about the request itself (4xx) is not: asking
// again gets the same.
bool retryable(const Outcome& o) {
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

int errno_of(const Outcome& o) {
  if (o.curl == CURLE_OK) {
    if (o.http == 404 || o.http == 410) return ENOENT;
    if (o.http == 401 || o.http == 403) return EACCES;
  }
  if (o.curl == CURLE_OPERATION_TIMEDOUT) return ETIMEDOUT;
  return EIO;
}

std::string describe(const Outcome& o, const std::string& body) {
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

// The URL's parts: the request URL (shardload's keys taken out of the query, the rest kept:
// a signed URL's query is the server's) and shardload's options.
struct Target {
  std::string request_url;
  StoreOptions options;
};

Result<Target> target_of(const std::string& url) {
  const auto q = url.find('?');
  Target t;
  SHARDLOAD_ASSIGN_OR_RETURN(
      const std::string rest,
      take_store_options(url, q == std::string::npos ? std::string() : url.substr(q), &t.options));
  t.request_url = url.substr(0, q) + rest;
  return t;
}

// Where the CA certificates of https:// are: CURL_CA_BUNDLE, else SSL_CERT_FILE, else
// libcurl's own default. libcurl reads neither variable itself (the curl program does).
const char* ca_bundle() {
  for (const char* name : {"CURL_CA_BUNDLE", "SSL_CERT_FILE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return nullptr;
}

class CurlRemoteIo final : public RemoteIo {
 public:
  Result<int> open(const std::string& url) override {
    FileInfo info;
    return open_stat(url, &info);
  }

  Result<int> open_stat(const std::string& url, FileInfo* info) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Target t, target_of(url));
    std::string etag;
    SHARDLOAD_RETURN_IF_ERROR(head(url, t, info, &etag));
    std::lock_guard lock(mu_);
    const int fd = next_fd_++;
    // A strong ETag makes every ranged GET conditional (If-Match): an object replaced between
    // two reads answers 412 instead of other bytes.
    files_.emplace(
        fd, std::make_shared<const Open>(Open{
                url, std::move(t), etag.starts_with("W/") ? std::string() : etag, info->size}));
    return fd;
  }

  // A fresh HEAD, not what the open saw: the check after the last read asks the server.
  Result<FileInfo> stat(int fd, const std::string& path) override {
    std::string url;
    {
      std::lock_guard lock(mu_);
      auto it = files_.find(fd);
      if (it == files_.end()) return file_error(ErrorCode::kIo, path, "not an open object");
      url = it->second->url;
    }
    return stat_path(url);
  }

  Result<FileInfo> stat_path(const std::string& url) override {
    SHARDLOAD_ASSIGN_OR_RETURN(const Target t, target_of(url));
    FileInfo info;
    std::string etag;
    SHARDLOAD_RETURN_IF_ERROR(head(url, t, &info, &etag));
    return info;
  }

  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) override {
    std::shared_ptr<const Open> file;
    {
      std::lock_guard lock(mu_);
      auto it = files_.find(fd);
      if (it == files_.end()) return -EBADF;
      file = it->second;  // kept while it reads, whatever a close does meanwhile
    }
    t_read_error.clear();
    if (n == 0 || offset >= file->size) return 0;
    // Never past the end the snapshot saw: a range there is a 416, not an end of file.
    n = static_cast<std::size_t>(std::min<std::uint64_t>(n, file->size - offset));
    return read_in_parts(
        [this, &file](void* dst, std::size_t len, std::uint64_t off, std::string* why) {
          return get_range(*file, dst, len, off, why);
        },
        buf, n, offset, static_cast<std::size_t>(file->target.options.request_bytes),
        static_cast<std::size_t>(file->target.options.requests_in_flight), &t_read_error);
  }

  void close(int fd) override {
    std::lock_guard lock(mu_);
    files_.erase(fd);
  }

  Result<std::vector<std::string>> list(const std::string& dir_url) override {
    return file_error(ErrorCode::kLayout, dir_url,
                      "cannot list the directory: HTTP has no directory listing (name each "
                      "object: a URL or a list of URLs)");
  }

  // Every http(s) URL not ending in '/' names an object (the HEAD at the open says whether
  // it is there).
  Result<bool> is_object(const std::string& url) override {
    const std::string base = url.substr(0, url.find('?'));
    if (base.empty() || base.back() == '/') {
      return file_error(ErrorCode::kInvalidArgument, url,
                        "not an object (the URL ends in '/'; HTTP has no directory listing)");
    }
    return true;
  }

  std::uint64_t retries() const override { return retries_.load(std::memory_order_relaxed); }

  std::string last_read_error() const override { return t_read_error; }

 private:
  struct Open {
    std::string url;  // as the user gave it, for messages
    Target target;
    std::string etag;  // for If-Match; empty for none or a weak one
    std::uint64_t size = 0;
  };

  // Runs `attempt` (one request, filling an Outcome) up to max_attempts times while its
  // outcome is transient, sleeping the backoff in between. `*tries`: the attempts made.
  template <typename Attempt>
  Outcome with_retries(const StoreOptions& o, Attempt&& attempt, std::int64_t* tries) {
    Outcome out;
    for (std::int64_t k = 0;; ++k) {
      out = attempt();
      *tries = k + 1;
      if (!retryable(out) || k + 1 >= o.max_attempts) return out;
      retries_.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_delay_ms(o, k)));
    }
  }

  static void common_options(CURL* c, const Target& t, Headers* headers, char* error_buf) {
    curl_easy_setopt(c, CURLOPT_URL, t.request_url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::ceil(t.options.connect_timeout * 1000)));
    // request_timeout: the longest a request may go without receiving data.
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                     static_cast<long>(std::ceil(t.options.request_timeout)));
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, headers);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buf);
    if (const char* ca = ca_bundle()) curl_easy_setopt(c, CURLOPT_CAINFO, ca);
  }

  static Status failed(const std::string& url, const std::string& what, const Outcome& o,
                       const std::string& body, std::int64_t tries) {
    std::string msg = what + ": " + describe(o, body);
    if (tries > 1) msg += " (gave up after " + std::to_string(tries) + " attempts)";
    return file_error(ErrorCode::kIo, url, msg, errno_of(o));
  }

  // The object's snapshot: one HEAD (retried like any request).
  Status head(const std::string& url, const Target& t, FileInfo* info, std::string* etag) {
    SHARDLOAD_RETURN_IF_ERROR(is_object(url).status());
    SHARDLOAD_RETURN_IF_ERROR(init(url));
    Headers headers;
    curl_off_t length = -1;
    std::int64_t tries = 0;
    const Outcome o = with_retries(
        t.options,
        [&] {
          Handle* h = thread_handle();
          if (h == nullptr) return Outcome{CURLE_FAILED_INIT, 0, "no libcurl handle"};
          CURL* c = h->curl;
          headers = Headers{};
          common_options(c, t, &headers, h->error);
          curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
          Outcome r;
          r.curl = curl_easy_perform(c);
          if (r.curl != CURLE_OK) {
            r.curl_error = h->error;
            return r;
          }
          curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.http);
          curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
          return r;
        },
        &tries);
    if (o.curl != CURLE_OK || o.http != 200) return failed(url, "cannot open", o, {}, tries);
    if (length < 0) {
      return file_error(ErrorCode::kIo, url,
                        "cannot open: the server's HEAD answer has no Content-Length");
    }
    *info = FileInfo{};
    info->size = static_cast<std::uint64_t>(length);
    info->regular = true;
    *etag = headers.etag;
    info->inode =
        fnv1a(headers.etag.empty() ? "last-modified:" + headers.last_modified : headers.etag);
    return Status::ok();
  }

  // One ranged GET (retried) into `dst`: its byte count or -errno, and the words in `why`.
  std::int64_t get_range(const Open& f, void* dst, std::size_t n, std::uint64_t offset,
                         std::string* why) {
    const std::string range = std::to_string(offset) + "-" + std::to_string(offset + n - 1);
    Sink sink;
    Headers headers;
    std::int64_t tries = 0;
    const Outcome o = with_retries(
        f.target.options,
        [&] {
          Handle* h = thread_handle();
          if (h == nullptr) return Outcome{CURLE_FAILED_INIT, 0, "no libcurl handle"};
          CURL* c = h->curl;
          headers = Headers{};
          sink = Sink{};
          sink.curl = c;
          sink.dst = static_cast<std::byte*>(dst);
          sink.cap = n;
          sink.offset = offset;
          common_options(c, f.target, &headers, h->error);
          curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
          curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
          curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
          curl_slist* extra = nullptr;
          if (!f.etag.empty()) {
            extra = curl_slist_append(extra, ("If-Match: " + f.etag).c_str());
            curl_easy_setopt(c, CURLOPT_HTTPHEADER, extra);
          }
          Outcome r;
          r.curl = curl_easy_perform(c);
          curl_slist_free_all(extra);
          curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.http);
          if (r.curl != CURLE_OK) r.curl_error = h->error;
          // A whole object that is not the range: no retry makes it one.
          if (sink.overflow) r.curl = CURLE_OK;
          return r;
        },
        &tries);
    const auto fail = [&](const std::string& what, int err) -> std::int64_t {
      *why = what;
      if (tries > 1) *why += " (gave up after " + std::to_string(tries) + " attempts)";
      return -err;
    };
    if (sink.overflow) {
      return fail("the server ignored the Range request (HTTP " + std::to_string(o.http) +
                      " with more than the " + std::to_string(n) + " bytes asked for at offset " +
                      std::to_string(offset) + "): not read as the range",
                  EIO);
    }
    if (o.curl != CURLE_OK) return fail(describe(o, {}), errno_of(o));
    if (o.http == 412) {
      return fail(
          "HTTP 412: the object changed (its ETag differs from the one it was opened "
          "with)",
          EIO);
    }
    if (o.http == 200) {
      // The whole object, from offset 0, and all of it fitted: exactly the bytes asked for
      // (n is clamped to the snapshot's size), or fewer if the object shrank.
      return static_cast<std::int64_t>(sink.got);
    }
    if (o.http != 206) return fail(describe(o, sink.error_body), errno_of(o));
    // A 206 must be the range asked for: "bytes FIRST-LAST/TOTAL" starting at `offset`.
    std::uint64_t first = 0;
    const std::string& cr = headers.content_range;
    const auto digits = cr.find_first_of("0123456789");
    const bool parsed =
        digits != std::string::npos &&
        std::from_chars(cr.data() + digits, cr.data() + cr.size(), first).ec == std::errc();
    if (!parsed || first != offset) {
      return fail("the server answered 206 with Content-Range '" + cr + "', not bytes " + range,
                  EIO);
    }
    return static_cast<std::int64_t>(sink.got);
  }

  Status init(const std::string& url) {
    std::call_once(init_once_, [this] { init_code_ = curl_global_init(CURL_GLOBAL_DEFAULT); });
    if (init_code_ != CURLE_OK) {
      return file_error(
          ErrorCode::kIo, url,
          std::string("cannot initialize libcurl: ") + curl_easy_strerror(init_code_));
    }
    return Status::ok();
  }

  std::mutex mu_;
  std::once_flag init_once_;
  CURLcode init_code_ = CURLE_OK;
  std::unordered_map<int, std::shared_ptr<const Open>> files_;
  int next_fd_ = kHttpFdBase;
  std::atomic<std::uint64_t> retries_{0};
  static thread_local std::string t_read_error;
};

thread_local std::string CurlRemoteIo::t_read_error;

}  // namespace

void register_http_io() {
  // Never destroyed: objects may be open in other threads until the very end.
  static auto* io = new CurlRemoteIo();
  set_http_io(io);
}

}  // namespace shardload::detail
