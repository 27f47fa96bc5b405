// What the remote backends (s3_io.cc, http_io.cc) share: shardload's own keys in a URL's query
// (retries, timeouts, request size), the ETag hash of a snapshot and the split of one large read
// into ranged requests in flight at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "shardload/io.hpp"
#include "shardload/status.hpp"
#include "shardload/store_options.hpp"

namespace shardload::detail {

// The characters of a region's name: AWS's (lower-case letters, digits and '-'), and what the
// custom names of S3-compatible servers may hold besides (upper-case letters and '_').
inline constexpr std::string_view kAwsRegionChars = "abcdefghijklmnopqrstuvwxyz0123456789-";
inline constexpr std::string_view kRegionChars =
    "abcdefghijklmnopqrstuvwxyz0123456789-ABCDEFGHIJKLMNOPQRSTUVWXYZ_";

// Whether `s` can be a region's name written with `alphabet` (kAwsRegionChars, kRegionChars): 1
// to 63 of its characters. A region goes into the host name of AWS's endpoint
// (BUCKET.s3.REGION.amazonaws.com), so no other character may pass: one could name another
// host ("x@HOST:PORT/#", "evil.example/").
inline bool is_region_name(std::string_view s, std::string_view alphabet) {
  return !s.empty() && s.size() <= 63 && s.find_first_not_of(alphabet) == std::string_view::npos;
}

// FNV-1a: the same hash of an ETag in every process of a run (discovery and the tasks may
// be different processes), which std::hash does not promise.
std::uint64_t fnv1a(std::string_view s);

// An ETag in the one form every comparison of two ETags uses (a PUT's answer with a later
// HEAD's, a snapshot's with a GET's): the answers of one S3-compatible store or gateway may
// spell one ETag differently (unquoted, upper-case hex, a "W/" prefix), and comparing the text
// took the object the save wrote for another writer's. The form: the opaque tag in quotes, its
// hex digits in lower case where it is an MD5-like tag (hex digits, then a multipart upload's
// "-N"; another tag's case is kept, as RFC 9110 makes it significant). AWS's own spelling is
// its own form, so the hashes of snapshots made before (in manifests) are unchanged. "" stays
// "" (no ETag). The weak prefix is dropped on purpose: the question asked of an ETag here is
// whether an object is still the version written or read, which RFC 9110's weak comparison
// answers from the opaque tag alone; a gateway that re-encodes answers marks the origin's
// strong tag weak, and the size is compared beside it everywhere.
std::string normalized_etag(std::string_view etag);
// Whether two ETags name one version (normalized_etag of both equal; "" only equals "").
bool same_etag(std::string_view a, std::string_view b);
// The hash of an ETag as snapshots keep it (FileInfo::inode): fnv1a of normalized_etag.
std::uint64_t etag_hash(std::string_view etag);
// The inode of a remote snapshot told by something other than an ETag (a Last-Modified, or
// nothing at all but its size): a hash of `validator` under a mark in its high 32 bits, so
// that etag_snapshot() can tell it from an ETag's hash (which meets the mark once in 2^32,
// and is then only taken for an unsure one).
std::uint64_t no_etag_hash(std::string_view validator);
// Whether a remote object's snapshot names one version of it: its ETag's hash. One told by a
// Last-Modified names every version a copy made with its time kept (`cp -p`) or a rewrite in
// the same second; one told by its size alone, every version of that size. What a process
// keeps of an object across reads (parsed footers, HDF5's metadata) is kept by such a
// snapshot only: a read checks the object against its snapshot, which then cannot tell.
bool etag_snapshot(const FileInfo& snapshot);

// An endpoint (endpoint_override's value, percent-encoded or not, or an AWS_ENDPOINT_URL*
// variable's) whose scheme is http or https in any case, with that scheme in lower case: a
// scheme is case-insensitive (RFC 3986 3.1; boto3 takes HTTP://H:P), and the AWS SDK, which
// compares it as written, took "HTTP" for the host. Any other value as it is.
std::string lowercase_scheme(std::string endpoint);

// Splits shardload's keys (the rows of kStoreOptionTable with a field, shardload/
// store_options.hpp) out of `query` ("?a=b&c=d" or ""): returns the query left for the store
// (kInvalidArgument naming `url` for a bad value). `credentials`: an s3:// URL's query (an
// http(s) URL's is the server's): the s3 rows too, and every item must be KEY=VALUE; else the
// rows http(s) takes.
Result<std::string> take_store_options(const std::string& url, const std::string& query,
                                       StoreOptions* out, bool credentials = false);

// An http(s):// URL as its request is sent: each "credentials=HANDLE" of its query replaced by
// what the handle stands for (seal_credentials): the user part put back before the host, the
// query's secret span back where the handle is. The URL as it is where it names no handle;
// kInvalidArgument naming `url` for a handle this process holds nothing for (or an s3:// one).
// Only the transport's request is made from it; nothing shown is.
Result<std::string> unsealed_http_url(const std::string& url);

// A query parsed: its options (the defaults for keys it does not name) and what is left of it
// for the store (Arrow's client, an http(s) server). Immutable, shared by every request of a
// URL with that query.
struct ParsedStoreQuery {
  StoreOptions options;
  std::string rest;
};

// take_store_options(url, query, ...), parsed and checked once per distinct query (and
// `credentials`) in the process and kept: the transports ask it on each open and request and
// get the parsed options back, not the query split again. A bad query is not kept (its error
// names the `url` that asked).
Result<std::shared_ptr<const ParsedStoreQuery>> parsed_store_query(const std::string& url,
                                                                   const std::string& query,
                                                                   bool credentials = false);

// What parsed_store_query keeps, in bytes of text (its queries, their options' credentials):
// at most a few MiB however many credentials the process is given.
std::size_t parsed_queries_bytes();

// The options of `url`'s query, the defaults for keys it does not name.
Result<StoreOptions> store_options_of(const std::string& url);

// The chunks_in_flight of `url`'s query (its default where the query has none): how many
// items (Zarr chunk objects, IPC record batches) one read fetches at once.
Result<std::size_t> chunks_in_flight_of(const std::string& url);

// The delay before retry number `attempted_retries` + 1: "equal jitter", half the exponential
// delay plus a random part of the other half, so that many tasks refused at once do not come
// back at once.
std::int64_t backoff_delay_ms(const StoreOptions& o, std::int64_t attempted_retries);

// One ranged request into `dst`: its byte count or -errno, and then the store's words in `why`.
using RangeRead =
    std::function<std::int64_t(void* dst, std::size_t n, std::uint64_t offset, std::string* why)>;

// pread's answer for `n` bytes at `offset`, read in parts of `part` bytes with up to
// `in_flight` of them at once: the bytes read contiguously from `offset` up to the first part
// that came back short or failed (the caller asks again from there), or that part's error
// (its words in `why`).
std::int64_t read_in_parts(const RangeRead& read, void* buf, std::size_t n, std::uint64_t offset,
                           std::size_t part, std::size_t in_flight, std::string* why);

// "0xNN" for the first C0 control character or DEL in `value`, "" where it holds none: the
// code alone is shown in a refusal, never the value (it may be secret).
std::string control_character_code(std::string_view value);

// The first character of a credential that no request header may carry: `kind` "a control
// character" (below 0x20, or 0x7F: a CR or LF would add header lines) or "a non-ASCII
// character" (AWS's keys and tokens are ASCII: one beyond it, a C1 control such as U+0085 or a
// look-alike copied from a document, goes into the signed headers as UTF-8, answered by a
// bare 403), and its `code` ("0x0A", "U+0085", "0xE9" where the bytes are no UTF-8). Both
// empty where the value holds none. The code alone is shown, never the value.
struct CredentialCharacter {
  std::string kind;
  std::string code;
  // Why such a character is refused, for the message after the code.
  std::string why() const;
};
CredentialCharacter bad_credential_character(std::string_view value);

}  // namespace shardload::detail
