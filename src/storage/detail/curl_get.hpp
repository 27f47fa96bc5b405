// What the libcurl backends share (http_io.cc for http(s):// URLs, s3_signed.cc for s3:// reads
// signed here): one easy handle per thread, the headers an answer is judged by, bounded
// retries of transient failures, and one GET (or HEAD) whose body goes into the caller's
// buffer only when the answer is the range asked for.
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardload/status.hpp"
#include "storage/detail/context.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail {

// The headers of one response (a redirect's are replaced by the next response's).
struct CurlHeaders {
  std::string etag;
  std::string last_modified;
  std::string
      date;  // when the server answered (its clock), which tells how strong Last-Modified is
  std::string content_range;
  std::string content_encoding;  // an encoding of the body (gzip, ...), not the object's bytes
  std::string bucket_region;     // S3's x-amz-bucket-region: where a bucket asked elsewhere is
  // Every Content-Length line's value, joined by ", " (two lines are one list): parsed by
  // curl_perform, strictly, not by libcurl, which reads "0x10" as 0 and "+16" as 16.
  std::string content_length;
  bool has_content_length = false;
  bool multipart = false;  // Content-Type multipart/...: parts with their own headers, not bytes
};

// What one request ended in.
struct CurlOutcome {
  CURLcode curl = CURLE_OK;
  long http = 0;
  std::string curl_error;  // libcurl's words for a failed transfer
};

// Transient: worth asking again (a reset, a timeout, a connection refused or cut short, a
// 5xx or a 429 from the server). An answer about the request itself (4xx) is not: asking
// again gets the same.
bool curl_retryable(const CurlOutcome& o);
// The errno that says what the answer was (ENOENT for 404 and 410, EACCES for 401 and 403).
int curl_errno(const CurlOutcome& o);
// libcurl's words for a failed transfer, else "HTTP CODE" and the start of the body.
std::string curl_describe(const CurlOutcome& o, const std::string& body);

// libcurl's process-wide setup, once; kIo naming `url` when it fails.
Status curl_init(const std::string& url);

// Sleeps `ms` milliseconds, less where an interrupt is asked for (shardload/interrupt.hpp).
void interruptible_sleep(std::int64_t ms);

// The deadline of one attempt of a request that moves `bytes` (a GET's range, a PUT's body; 0
// for a HEAD): max(request_timeout, bytes / 1 MiB per second), in milliseconds. A request of up
// to request_timeout MiB has request_timeout (docs/object_storage.md).
std::int64_t request_deadline_ms(const StoreOptions& o, std::uint64_t bytes);

// One request, retried while its outcome is transient (up to options.max_attempts times,
// the backoff slept in between; each retry counted in `*retries`). Each attempt ends by its
// deadline (request_deadline_ms); an interrupt (shardload/interrupt.hpp) ends it at once,
// CURLE_ABORTED_BY_CALLBACK, and nothing is retried then. Redirects (where followed) stay on
// http(s), never leave https, and are at most 5: a refused one is CURLE_UNSUPPORTED_PROTOCOL
// or CURLE_TOO_MANY_REDIRECTS, its words in curl_error.
struct CurlRequest {
  std::string url;  // as sent
  const StoreOptions* options = nullptr;
  // The store's limit on requests in flight (StorageContext): each attempt holds a slot while
  // it is sent and answered; null for a request that is no store's (the bucket's region, a
  // role's credentials).
  RequestSlots* slots = nullptr;
  // The request's own headers ("Name: value"), made for each attempt (a signature is dated).
  std::function<std::vector<std::string>()> headers;
  bool head = false;             // a HEAD (no body) instead of a GET
  const char* method = nullptr;  // another method without a request body ("DELETE")
  // A PUT of these bytes (sent again whole on a retry); a 2xx answer's body is not kept.
  const void* body = nullptr;
  std::size_t body_size = 0;
  bool follow_redirects = true;      // a signed request is not: the signature names the host
  std::size_t error_body_cap = 200;  // how much of an error answer's body is kept
  // Sent straight to its host, never through a proxy the environment names: a credentials
  // endpoint's (a container's, the instance metadata service), as the SDKs ask them. Through
  // http_proxy the container's token went in plain http to the proxy host, and the proxy's own
  // instance role answered for the instance's.
  bool direct = false;
  // Called once the headers of a 200 or 206 answer are in, before any of its body is kept:
  // false refuses the answer (nothing is written into the buffer; `refused` says so).
  std::function<bool(const CurlHeaders&)> accept;
};

struct CurlAnswer {
  CurlOutcome outcome;
  std::int64_t tries = 0;
  CurlHeaders headers;
  // A HEAD's Content-Length: -1 where it has none, or where it is no plain decimal number of
  // bytes that fits 63 bits ("0x10", "+16", "16 junk", "16, 16"), which bad_content_length
  // then holds as sent.
  curl_off_t content_length = -1;
  std::string bad_content_length;
  std::size_t got = 0;    // body bytes written into the buffer
  bool overflow = false;  // more bytes came than were asked for, or a 200 for a range not at 0
  bool refused = false;   // `accept` said no
  // A 200 or 206 whose body came in a Content-Encoding (its value): other bytes than the
  // object's, of which nothing was kept.
  std::string encoded;
  std::string error_body;
};

// Performs `req`; a GET's body goes to `dst` (`cap` bytes; `offset`: the range's first byte,
// so that a 200, the whole object, is taken only from offset 0).
CurlAnswer curl_perform(const CurlRequest& req, void* dst, std::size_t cap, std::uint64_t offset,
                        std::atomic<std::uint64_t>* retries);

// Whether a Content-Encoding value makes a body other bytes than the object's: any coding
// but "identity" and S3's "aws-chunked" (metadata of an upload, not of the bytes sent).
bool is_encoded(const std::string& content_encoding);

// The answer's Content-Length in `*n` (-1 where it has none); false where it has one that is
// no plain decimal number of bytes fitting 63 bits ("0x10", "+16", "16 junk", "16, 16").
bool parse_content_length(const CurlHeaders& headers, curl_off_t* n);

// "bytes FIRST-LAST/TOTAL" (or a 416's "bytes */TOTAL"): FIRST and TOTAL (-1 where "*");
// false for anything else.
bool parse_content_range(const std::string& value, std::uint64_t* first, std::int64_t* total);

// The refusal's words for a 206 that is not the one range `range` ("A-B") asked for: a
// multipart body said as such (its parts' headers are not the object's bytes), else the
// Content-Range that came. `who`: "the server", "the store".
std::string not_the_range_asked(const CurlHeaders& h, const std::string& who,
                                const std::string& range);

// A date header's value (Date, Last-Modified) in seconds since the epoch: FileInfo::answered_s
// and modified_s. 0 where it is missing or unreadable, which nothing is judged by.
std::int64_t http_date_seconds(const std::string& value);

}  // namespace shardload::detail
