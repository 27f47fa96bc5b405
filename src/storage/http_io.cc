// Objects on an HTTP server through libcurl: the transport the "http://" and "https://" driver's
// Store reads through (transports.hpp). The snapshot is a HEAD's Content-Length and ETag (its
// Last-Modified where the server sends no ETag); a read is one ranged GET (Range: bytes=a-b) into
// the caller's buffer. A server that ignores the Range answers 200 with the whole object: its bytes
// are taken only where they are exactly the range asked for (from offset 0, the whole object
// fitting the buffer), never copied as if they were the range. HTTP has no listing: every object is
// named by its URL.
#include "storage/detail/http_io.hpp"
#include "storage/detail/transports.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "base/detail/fork_lock.hpp"
#include "shardload/location.hpp"
#include "storage/detail/context.hpp"
#include "storage/detail/curl_get.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail {

namespace {

// The URL's parts: the request URL (shardload's keys taken out of the query, the rest kept:
// a signed URL's query is the server's) and shardload's options.
struct Target {
  std::string request_url;
  StoreOptions options;
  // The store (the URL's origin with these options) in the storage context: its limit on
  // requests in flight, which every request for the URL holds a slot of.
  std::shared_ptr<StoreResources> store;
  RequestSlots* slots() const { return &store->requests; }
};

// "scheme://host[:port]" of `url` (up to the first '/', '?' or '#' after the authority); any
// user information stays in it, as a key only, never shown.
std::string origin_of(std::string_view url) {
  const auto scheme = url.find("://");
  const std::size_t from = scheme == std::string_view::npos ? 0 : scheme + 3;
  const auto end = url.find_first_of("/?#", from);
  return std::string(url.substr(0, end));
}

// The bytes a URL the user writes keeps as they are: a space, a control or a byte past ASCII is
// in no URL (libcurl refuses the first two), so it is percent-encoded; '%' and what is encoded
// already stay as written.
bool kept_in_written_url(unsigned char b) { return b > 0x20 && b < 0x7F; }

// `url` up to its query, with each space, control and byte past ASCII of its path
// percent-encoded: a user who names "https://h/a b.npy" means the object "a b.npy".
std::string encode_raw_path(std::string_view url) {
  const auto scheme = url.find("://");
  const auto path = url.find('/', scheme == std::string_view::npos ? 0 : scheme + 3);
  if (path == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, path)) + percent_encode(url.substr(path), kept_in_written_url);
}

// `sealed` (a path: its user part and its query's secrets by handle) as the request is made:
// the secrets are put back here only, into the request URL, which nothing shows.
Result<Target> target_of(const std::string& sealed) {
  SHARDLOAD_ASSIGN_OR_RETURN(const std::string url, unsealed_http_url(sealed));
  const auto q = url.find('?');
  Target t;
  SHARDLOAD_ASSIGN_OR_RETURN(
      const auto parsed,
      parsed_store_query(sealed, q == std::string::npos ? std::string() : url.substr(q)));
  t.options = parsed->options;
  // The query's spaces, controls and bytes past ASCII likewise: libcurl refused the first two
  // ("URL using bad/illegal format"), and a token sent with raw UTF-8 came back from a server
  // that reads latin-1 as mojibake, which no redaction recognises.
  t.request_url = encode_raw_path(std::string_view(url).substr(0, q)) +
                  percent_encode(parsed->rest, kept_in_written_url);
  t.store = StorageContext::process().store(origin_of(url), t.options);
  return t;
}

class CurlRemoteIo final : public RemoteIo {
 public:
  CurlRemoteIo() { hold_across_fork(&mu_); }  // never destroyed (register_http_io)

  Result<int> open(const std::string& url) override {
    FileInfo info;
    return open_stat(url, &info);
  }

  Result<int> open_stat(const std::string& url, FileInfo* info) override {
    SHARDLOAD_ASSIGN_OR_RETURN(Target t, target_of(url));
    CurlHeaders validators;
    SHARDLOAD_RETURN_IF_ERROR(head(url, t, info, &validators));
    std::lock_guard lock(mu_);
    const int fd = next_fd_++;
    files_.emplace(fd, std::make_shared<const Open>(
                           Open{url, std::move(t), std::move(validators), info->size}));
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
    CurlHeaders validators;
    SHARDLOAD_RETURN_IF_ERROR(head(url, t, &info, &validators));
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
    CurlHeaders snapshot;  // the HEAD's ETag and Last-Modified
    std::uint64_t size = 0;
    // A strong ETag makes every ranged GET conditional (If-Match): a server that honours it
    // answers 412 for an object replaced since, instead of other bytes.
    std::string if_match() const {
      return snapshot.etag.starts_with("W/") ? std::string() : snapshot.etag;
    }
  };

  // Why a GET's answer is not of the version the snapshot saw, or "": its ETag, else its
  // Last-Modified, differs from the HEAD's, or its Content-Range total from the snapshot's size.
  // A server that ignores If-Match (or a weak or missing ETag, which no If-Match guards) and
  // whose HEAD lags its GETs (a cache or a replica in front) would otherwise serve another
  // version's bytes as the snapshot's.
  static std::string other_version(const Open& f, const CurlHeaders& got) {
    const CurlHeaders& want = f.snapshot;
    // Each validator where both answers carry it: a weak and a strong form of one tag agree
    // (a server may weaken its ETag on some answers: same_etag); where either lacks an ETag,
    // Last-Modified is compared.
    if (!want.etag.empty() && !got.etag.empty()) {
      if (!same_etag(want.etag, got.etag)) {
        return "its ETag " + got.etag + " differs from the snapshot's " + want.etag;
      }
    } else if (!want.last_modified.empty() && !got.last_modified.empty()) {
      if (want.last_modified != got.last_modified) {
        return "its Last-Modified '" + got.last_modified + "' differs from the snapshot's '" +
               want.last_modified + "'";
      }
    } else if (!want.etag.empty()) {
      // A 206 carries the ETag a 200 would (RFC 9110); one without it, and without a
      // Last-Modified to compare, could be any version: a lagging server that also ignores
      // If-Match served another version's bytes here unchecked.
      return "it carries no ETag (nor a Last-Modified to compare), where the snapshot's is " +
             want.etag + ": its version cannot be told";
    } else if (!want.last_modified.empty()) {
      // The HEAD's one validator was its Last-Modified: an answer without it is as untold.
      return "it carries no Last-Modified (nor an ETag to compare), where the snapshot's is '" +
             want.last_modified + "': its version cannot be told";
    }
    std::uint64_t first = 0;
    std::int64_t total = -1;
    if (!got.content_range.empty() && parse_content_range(got.content_range, &first, &total) &&
        total >= 0 && static_cast<std::uint64_t>(total) != f.size) {
      return "its Content-Range '" + got.content_range + "' gives a size of " +
             std::to_string(total) + " bytes, which differs from the snapshot's " +
             std::to_string(f.size);
    }
    if (want.etag.empty() && want.last_modified.empty() && !got.content_range.empty() &&
        total < 0) {
      // The size is the snapshot's only identity here: an answer that does not say it (a
      // streamed or proxied body's "bytes A-B/*") could be any version.
      return "its Content-Range '" + got.content_range +
             "' gives no complete length, and the snapshot has no ETag or Last-Modified: its "
             "version cannot be told";
    }
    return {};
  }

  static Status failed(const std::string& url, const std::string& what, const CurlOutcome& o,
                       const std::string& body, std::int64_t tries) {
    std::string msg = what + ": " + curl_describe(o, body);
    if (tries > 1) msg += " (gave up after " + std::to_string(tries) + " attempts)";
    return file_error(ErrorCode::kIo, url, msg, curl_errno(o));
  }

  // The object's snapshot: a HEAD (retried like any request); its validators in `validators`.
  // A Last-Modified tells versions apart only once the clock that stamped it has left its
  // second (RFC 9110 8.8.2.2): before that, an object written again within the same second
  // keeps it, and its new bytes would be read as the snapshot's. So does an ETag made of it
  // (nginx's is the Last-Modified's second and the size), also where the server sends it
  // without the Last-Modified. Such a snapshot is taken again once that second is over (at
  // most two seconds later; a few times, for an object rewritten every second).
  Status head(const std::string& url, const Target& t, FileInfo* info, CurlHeaders* validators) {
    SHARDLOAD_RETURN_IF_ERROR(head_once(url, t, info, validators));
    // The validator (the Last-Modified, else the ETag) a second or more has passed since a
    // HEAD gave: one this process waited out for this URL before (an open at discovery, then
    // each at reading) tells versions apart already.
    std::string waited_out;
    {
      std::lock_guard lock(mu_);
      if (const auto it = waited_out_.find(url); it != waited_out_.end()) waited_out = it->second;
    }
    for (int again = 0; again < kWeakSnapshotRetakes; ++again) {
      const std::int64_t ms = ms_until_strong(*validators, info->size, waited_out);
      if (ms == 0) break;
      waited_out = weak_validator(*validators);
      interruptible_sleep(ms);
      SHARDLOAD_RETURN_IF_ERROR(head_once(url, t, info, validators));
    }
    if (!waited_out.empty() && weak_validator(*validators) == waited_out) {
      std::lock_guard lock(mu_);
      if (waited_out_.size() >= kWaitedOutKept) waited_out_.clear();
      waited_out_[url] = waited_out;
    }
    return Status::ok();
  }

  // URLs whose validator was waited out kept at most (then forgotten, and waited out again).
  static constexpr std::size_t kWaitedOutKept = 1 << 16;

  static constexpr int kWeakSnapshotRetakes = 3;

  // Whether `etag` is a digest of the object's bytes, which tells versions apart at once: an
  // S3-compatible store's MD5 ("<32 hex digits>", a multipart upload's "<32 hex>-<parts>").
  // Any other may be made of the Last-Modified's second and the size (nginx:
  // "<mtime hex>-<size hex>"), and is taken to be.
  static bool is_digest_etag(const std::string& etag) {
    if (etag.size() < 34 || etag.front() != '"' || etag.back() != '"') return false;
    const std::string_view v(etag.data() + 1, etag.size() - 2);
    for (std::size_t i = 0; i < 32; ++i) {
      if (!std::isxdigit(static_cast<unsigned char>(v[i]))) return false;
    }
    if (v.size() == 32) return true;
    if (v[32] != '-' || v.size() == 33) return false;
    for (std::size_t i = 33; i < v.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(v[i]))) return false;
    }
    return true;
  }

  // The validator whose second a snapshot waits out: its Last-Modified, else its ETag.
  static const std::string& weak_validator(const CurlHeaders& h) {
    return h.last_modified.empty() ? h.etag : h.last_modified;
  }

  // The second in nginx's ETag, "<mtime hex>-<size hex>" (or W/ that), whose size is the
  // object's `size`; -1 for any other ETag.
  static constexpr std::uint64_t kLastSecondOf9999 = 253402300799;
  static std::time_t nginx_etag_seconds(const std::string& etag, std::uint64_t size) {
    std::string_view v = etag;
    if (v.starts_with("W/")) v.remove_prefix(2);
    if (v.size() < 5 || v.front() != '"' || v.back() != '"') return -1;
    v = v.substr(1, v.size() - 2);
    const std::size_t dash = v.find('-');
    if (dash == std::string_view::npos) return -1;
    const auto hex = [](std::string_view part, std::uint64_t* out) {
      if (part.empty() || part.size() > 16) return false;
      for (const char c : part) {
        if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
      }
      const auto r = std::from_chars(part.data(), part.data() + part.size(), *out, 16);
      return r.ec == std::errc() && r.ptr == part.data() + part.size();
    };
    std::uint64_t seconds = 0;
    std::uint64_t tagged_size = 0;
    if (!hex(v.substr(0, dash), &seconds) || !hex(v.substr(dash + 1), &tagged_size) ||
        tagged_size != size || seconds > kLastSecondOf9999) {
      return -1;
    }
    return static_cast<std::time_t>(seconds);
  }

  // How long until `h`'s snapshot tells versions apart, in ms; 0 where it does already: its
  // ETag is a digest of the bytes, its Date is a second past its Last-Modified, a second has
  // passed since a HEAD gave the same validator (`waited_out`), it has neither validator (its
  // size alone is compared), or a date cannot be read (then compared as text, as before).
  // Without a Date (a server without a clock) this host's clock stands in for it. A
  // Last-Modified more than a second ahead of the Date was stamped by a clock ahead of the
  // server's (another host's, an NFS server's): that clock read at least the Last-Modified
  // when the HEAD was answered, so a second after the HEAD it has left that second, whatever
  // its lead. A clock behind the server's cannot be told from an old write.
  // Without a Last-Modified, nginx's ETag (of an object of `size` bytes) gives the second in
  // its stead; an ETag of another make, which may hold a second nobody can read from it (a
  // server's W/"<mtime>", a hash of the time and the size), is waited out a second after its
  // HEAD whenever it comes, by whatever clock stamps it: a write after a HEAD a second later
  // that gave the same ETag carries a later second.
  static std::int64_t ms_until_strong(const CurlHeaders& h, std::uint64_t size,
                                      const std::string& waited_out) {
    const std::string& validator = weak_validator(h);
    if (validator.empty() || is_digest_etag(h.etag)) return 0;
    if (!waited_out.empty() && validator == waited_out) return 0;
    std::time_t modified = -1;
    if (!h.last_modified.empty()) {
      modified = curl_getdate(h.last_modified.c_str(), nullptr);
      if (modified < 0) return 0;
    } else {
      modified = nginx_etag_seconds(h.etag, size);
      if (modified < 0) return 1050;
    }
    std::time_t date = h.date.empty() ? -1 : curl_getdate(h.date.c_str(), nullptr);
    if (date < 0) date = std::time(nullptr);
    if (date >= modified + 1) return 0;
    if (modified - date > 1) return 1050;
    // The second left on the server's clock, one more where the Last-Modified is ahead.
    return static_cast<std::int64_t>(modified + 1 - date) * 1000 + 50;
  }

  Status head_once(const std::string& url, const Target& t, FileInfo* info,
                   CurlHeaders* validators) {
    SHARDLOAD_RETURN_IF_ERROR(is_object(url).status());
    SHARDLOAD_RETURN_IF_ERROR(curl_init(url));
    CurlRequest req;
    req.url = t.request_url;
    req.options = &t.options;
    req.slots = t.slots();
    req.head = true;
    const CurlAnswer a = curl_perform(req, nullptr, 0, 0, &retries_);
    const CurlOutcome& o = a.outcome;
    // A server that refuses HEAD (a presigned URL signed for GET alone answers 403, some
    // servers 405): the snapshot is taken from a GET of the object's first byte instead.
    if (o.curl == CURLE_OK && (o.http == 403 || o.http == 405)) {
      return head_by_get(url, t, o.http, info, validators);
    }
    if (o.curl != CURLE_OK || o.http != 200) return failed(url, "cannot open", o, {}, a.tries);
    if (!a.bad_content_length.empty()) {
      return file_error(ErrorCode::kIo, url,
                        "cannot open: the server's HEAD answer has Content-Length '" +
                            a.bad_content_length +
                            "', which is not a number of bytes (expected decimal digits only)");
    }
    if (a.content_length < 0) {
      return file_error(ErrorCode::kIo, url,
                        "cannot open: the server's HEAD answer has no Content-Length");
    }
    SHARDLOAD_RETURN_IF_ERROR(check_not_encoded(url, "HEAD", a.headers));
    snapshot(a.headers, static_cast<std::uint64_t>(a.content_length), info, validators);
    return Status::ok();
  }

  static Status check_not_encoded(const std::string& url, const char* what, const CurlHeaders& h) {
    if (!is_encoded(h.content_encoding)) return Status::ok();
    return file_error(ErrorCode::kIo, url,
                      std::string("cannot open: the server's ") + what +
                          " answer has Content-Encoding '" + h.content_encoding +
                          "': it would send an encoding of the object, not its bytes (serve "
                          "the object without an encoding)");
  }

  static void snapshot(const CurlHeaders& h, std::uint64_t size, FileInfo* info,
                       CurlHeaders* validators) {
    *info = FileInfo{};
    info->size = size;
    info->regular = true;
    validators->etag = h.etag;
    validators->last_modified = h.last_modified;
    validators->date = h.date;
    info->inode =
        h.etag.empty() ? no_etag_hash("last-modified:" + h.last_modified) : etag_hash(h.etag);
    info->modified_s = http_date_seconds(h.last_modified);
    info->answered_s = http_date_seconds(h.date);
  }

  // The snapshot from "Range: bytes=0-0" where the HEAD was refused (HTTP `refused`): the
  // size is the Content-Range's total (of a 206, or of a 416 for an empty object), else a
  // whole object's Content-Length (a 200 from a server that ignores ranges); the validators
  // are the answer's ETag and Last-Modified, which every later GET is held to as a HEAD's.
  Status head_by_get(const std::string& url, const Target& t, long refused, FileInfo* info,
                     CurlHeaders* validators) {
    const std::string what = "cannot open (its HEAD was refused with HTTP " +
                             std::to_string(refused) + ", and the GET of its first byte instead";
    CurlRequest req;
    req.url = t.request_url;
    req.options = &t.options;
    req.slots = t.slots();
    req.headers = [] { return std::vector<std::string>{"Range: bytes=0-0"}; };
    std::byte first{};
    const CurlAnswer a = curl_perform(req, &first, 1, 0, &retries_);
    const CurlOutcome& o = a.outcome;
    if (!a.encoded.empty()) return check_not_encoded(url, "GET", a.headers);
    if (o.curl != CURLE_OK || (o.http != 200 && o.http != 206 && o.http != 416)) {
      return failed(url, what + " failed)", o, a.error_body, a.tries);
    }
    std::int64_t size = -1;
    const std::string& cr = a.headers.content_range;
    if (o.http == 200) {
      curl_off_t n = -1;
      if (parse_content_length(a.headers, &n)) size = n;
    } else {
      std::uint64_t from = 0;
      std::int64_t total = -1;
      // A 206 of byte 0 ("bytes 0-0/N"), or a 416 of an empty object ("bytes */0").
      if (parse_content_range(cr, &from, &total) && from == 0 &&
          (o.http == 206 ? total >= 1 : total == 0)) {
        size = total;
      }
    }
    if (size < 0) {
      return file_error(
          ErrorCode::kIo, url,
          what + " answered HTTP " + std::to_string(o.http) +
              (o.http == 200 ? " with Content-Length '" + a.headers.content_length + "'"
                             : " with Content-Range '" + cr + "'") +
              ", which gives no size)");
    }
    snapshot(a.headers, static_cast<std::uint64_t>(size), info, validators);
    return Status::ok();
  }

  // One ranged GET (retried) into `dst`: its byte count or -errno, and the words in `why`.
  std::int64_t get_range(const Open& f, void* dst, std::size_t n, std::uint64_t offset,
                         std::string* why) {
    const std::string range = std::to_string(offset) + "-" + std::to_string(offset + n - 1);
    CurlRequest req;
    req.url = f.target.request_url;
    req.options = &f.target.options;
    req.slots = f.target.slots();
    req.headers = [&] {
      std::vector<std::string> h{"Range: bytes=" + range};
      if (const std::string tag = f.if_match(); !tag.empty()) h.push_back("If-Match: " + tag);
      return h;
    };
    std::string other;  // why the answer is another version's, where it is
    req.accept = [&](const CurlHeaders& got) {
      other = other_version(f, got);
      return other.empty();
    };
    const CurlAnswer a = curl_perform(req, dst, n, offset, &retries_);
    const CurlOutcome& o = a.outcome;
    const auto fail = [&](const std::string& what, int err) -> std::int64_t {
      *why = what;
      if (a.tries > 1) *why += " (gave up after " + std::to_string(a.tries) + " attempts)";
      return -err;
    };
    if (a.refused) {
      return fail("the server's answer (HTTP " + std::to_string(o.http) +
                      ") is another version of the object than its snapshot: " + other +
                      "; nothing of it was read (a cache or a replica in front of the server "
                      "may lag behind it)",
                  EIO);
    }
    if (!a.encoded.empty()) {
      return fail("the server's answer (HTTP " + std::to_string(o.http) +
                      ") has Content-Encoding '" + a.encoded +
                      "': an encoding of the bytes asked for, not the bytes; nothing of it was "
                      "read (serve the object without an encoding)",
                  EIO);
    }
    // A multipart answer is longer than the range: said as what it is, not as an ignored
    // Range.
    if (o.http == 206 && a.headers.multipart) {
      return fail(not_the_range_asked(a.headers, "the server", range), EIO);
    }
    if (a.overflow) {
      return fail("the server ignored the Range request (HTTP " + std::to_string(o.http) +
                      " with more than the " + std::to_string(n) + " bytes asked for at offset " +
                      std::to_string(offset) + "): not read as the range",
                  EIO);
    }
    if (o.curl != CURLE_OK) return fail(curl_describe(o, {}), curl_errno(o));
    if (o.http == 412) {
      return fail(
          "HTTP 412: the object changed (its ETag differs from the one it was opened "
          "with)",
          EIO);
    }
    if (o.http == 200) {
      // The whole object, from offset 0, and all of it fitted: exactly the bytes asked for
      // (n is clamped to the snapshot's size), or fewer if the object shrank.
      return static_cast<std::int64_t>(a.got);
    }
    if (o.http != 206) return fail(curl_describe(o, a.error_body), curl_errno(o));
    // A 206 must be the range asked for: "bytes FIRST-LAST/TOTAL" starting at `offset`.
    std::uint64_t first = 0;
    std::int64_t total = -1;
    const std::string& cr = a.headers.content_range;
    if (!parse_content_range(cr, &first, &total) || first != offset) {
      return fail(not_the_range_asked(a.headers, "the server", range), EIO);
    }
    return static_cast<std::int64_t>(a.got);
  }

  std::mutex mu_;
  std::unordered_map<int, std::shared_ptr<const Open>> files_;
  // URL -> the validator a second or more passed between two HEADs of it that gave it (by mu_).
  std::unordered_map<std::string, std::string> waited_out_;
  int next_fd_ = kTransportFdBase;
  std::atomic<std::uint64_t> retries_{0};
  static thread_local std::string t_read_error;
};

thread_local std::string CurlRemoteIo::t_read_error;

}  // namespace

void register_http_io() {
  // Never destroyed: objects may be open in other threads until the very end.
  static auto* io = new CurlRemoteIo();
  set_http_transport(io);
}

}  // namespace shardload::detail
