// The options of a store (s3://, http(s)://): retries, time limits, request sizes, the
// credentials and Arrow's S3 client's own options, as one table, the third beside the format
// option table (shardload/format.hpp) and the discovery option table (shardload/layout.hpp).
//
// A source gives them in its URL's query (s3://b/d/?region=x&max_attempts=3), which Python's
// storage_options= and the command line's --storage-option KEY=VALUE add to each URL. The
// table is what every front end derives from: the parser of the query
// (detail::take_store_options), the command line's list of keys under "storage options:",
// the Python bindings' rows (_core.storage_option_rows) and the package's StorageOptions
// TypedDict, and docs/object_storage.md's table of keys (a test holds each to the rows).
// Adding an option is a field of StoreOptions plus a row below; a row of Arrow's is a row with
// no field (the query keeps it for Arrow's client).
//
// Contract: StoreOptions is a value; the table is constant data, safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/format.hpp"
#include "shardload/status.hpp"

namespace shardload {

// The largest object S3 takes in one PUT (5 GiB).
inline constexpr std::int64_t kMaxSinglePut = std::int64_t{5} << 30;

// Defaults: see docs/object_storage.md.
struct StoreOptions {
  std::int64_t max_attempts = 5;       // the first try included
  std::int64_t backoff_ms = 50;        // the first retry's delay; doubled for each further one
  std::int64_t max_backoff_ms = 5000;  // the longest single delay
  double connect_timeout = 5;          // seconds to set up a connection
  double request_timeout = 30;         // seconds a request may go without receiving data
  // A read larger than request_bytes is split into ranged GETs of that size, up to
  // requests_in_flight of them at once (the calling thread and helpers it joins before it
  // returns), so that one GET's latency and one connection's bandwidth need not bound a large
  // piece. One by default: on the only store measured (bench/bench_s3.py, one server process
  // on the same small machine) more in flight was slower, the server being the bottleneck.
  std::int64_t request_bytes = std::int64_t{8} << 20;
  std::int64_t requests_in_flight = 1;
  // The most requests (GET, HEAD, PUT, DELETE) one store has in flight at once, over every
  // reader, tile and thread of the process (the store's limit in the storage context,
  // storage/detail/context.hpp); a request waits for a free slot. The default is above what
  // the readers' own counts (tiles, chunks_in_flight, requests_in_flight) ask of a store on a
  // machine of today, so it bounds a storm without slowing a load (docs/object_storage.md).
  std::int64_t max_requests = 64;
  // How many chunk objects (or a shard's inner chunks) one Zarr read fetches at once, beside
  // the calling thread that decodes them; see docs/object_storage.md for the measured default.
  std::int64_t chunks_in_flight = 8;
  // s3:// writes on the signed path: an object of up to this many bytes is uploaded in one
  // PUT (held in memory until then), a larger one in a multipart upload of parts sent as they
  // fill; 0 uploads every object in parts. See docs/object_storage.md for the measured default.
  std::int64_t multipart_threshold = std::int64_t{64} << 20;
  // s3:// credentials given as options (Arrow's URI has no keys for them): a key pair (and a
  // session token), or anonymous (unsigned requests). Empty and false: the environment's.
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  bool anonymous = false;
};

// The stores a row applies to (StoreOptionSpec::stores).
inline constexpr std::uint32_t kStoreS3 = 1;
inline constexpr std::uint32_t kStoreHttp = 2;

struct StoreOptionSpec {
  const char* name;     // the query's key, storage_options='s key, --storage-option's KEY
  const char* metavar;  // the placeholder of KEY=VALUE in the command line's help
  // kCount: an integer in [lo, hi]; kNumber: seconds in (lo, hi]; kText: a string, percent-
  // decoded from the query; kFlag: true/1 or false/0.
  OptionKind kind;
  std::uint32_t stores;  // kStoreS3 | kStoreHttp: the URLs whose query it is taken from
  // Its value is a credential: shown as *** wherever shardload shows a URL (redact_secrets,
  // whose list of names a test holds to these rows).
  bool secret;
  std::int64_t lo;
  std::int64_t hi;
  const char* help;  // one line: the command line's help and docs/object_storage.md's table
  // The value in `o` (the default in StoreOptions{}), of the row's kind; nullptr for a row of
  // Arrow's client, which has no field here and stays in the query it is given.
  OptionValue (*get)(const StoreOptions& o);
  // Sets a value of the row's kind (checked against lo and hi already); nullptr with get.
  void (*set)(const OptionValue& v, StoreOptions* o);
};

namespace detail {

// A row's getter and setter over a field of StoreOptions (an integer count, seconds, a string
// or a bool).
template <auto Field>
OptionValue get_store_field(const StoreOptions& o) {
  using T = std::remove_cvref_t<decltype(o.*Field)>;
  if constexpr (std::is_same_v<T, std::int64_t>) {
    return OptionValue(static_cast<std::uint64_t>(o.*Field));
  } else {
    return OptionValue(o.*Field);
  }
}

template <auto Field>
void set_store_field(const OptionValue& v, StoreOptions* o) {
  using T = std::remove_cvref_t<decltype(o->*Field)>;
  if constexpr (std::is_same_v<T, std::int64_t>) {
    o->*Field = static_cast<std::int64_t>(std::get<std::uint64_t>(v));
  } else {
    o->*Field = std::get<T>(v);
  }
}

}  // namespace detail

// The rows, in the order the docs list them. Shardload's own rows are taken out of the query;
// Arrow's (get == nullptr) are left in it for Arrow's S3 client (the signed path reads region,
// scheme and endpoint_override from there too; any other of Arrow's sends the store's requests
// through Arrow's client).
inline constexpr StoreOptionSpec kStoreOptionTable[] = {
    {"max_attempts", "N", OptionKind::kCount, kStoreS3 | kStoreHttp, false, 1, 100,
     "tries of one request, the first included",
     detail::get_store_field<&StoreOptions::max_attempts>,
     detail::set_store_field<&StoreOptions::max_attempts>},
    {"backoff_ms", "MS", OptionKind::kCount, kStoreS3 | kStoreHttp, false, 0, 60000,
     "the first retry's delay, doubled for each further one",
     detail::get_store_field<&StoreOptions::backoff_ms>,
     detail::set_store_field<&StoreOptions::backoff_ms>},
    {"max_backoff_ms", "MS", OptionKind::kCount, kStoreS3 | kStoreHttp, false, 0, 600000,
     "the longest single delay between tries",
     detail::get_store_field<&StoreOptions::max_backoff_ms>,
     detail::set_store_field<&StoreOptions::max_backoff_ms>},
    {"connect_timeout", "S", OptionKind::kNumber, kStoreS3 | kStoreHttp, false, 0, 86400,
     "seconds to set up a connection", detail::get_store_field<&StoreOptions::connect_timeout>,
     detail::set_store_field<&StoreOptions::connect_timeout>},
    {"request_timeout", "S", OptionKind::kNumber, kStoreS3 | kStoreHttp, false, 0, 86400,
     "seconds a request may go without data",
     detail::get_store_field<&StoreOptions::request_timeout>,
     detail::set_store_field<&StoreOptions::request_timeout>},
    {"request_bytes", "N", OptionKind::kCount, kStoreS3 | kStoreHttp, false, 4096,
     std::int64_t{1} << 34, "a larger read is ranged GETs of this size",
     detail::get_store_field<&StoreOptions::request_bytes>,
     detail::set_store_field<&StoreOptions::request_bytes>},
    {"requests_in_flight", "N", OptionKind::kCount, kStoreS3 | kStoreHttp, false, 1, 64,
     "those GETs one read has in flight at once",
     detail::get_store_field<&StoreOptions::requests_in_flight>,
     detail::set_store_field<&StoreOptions::requests_in_flight>},
    {"max_requests", "N", OptionKind::kCount, kStoreS3 | kStoreHttp, false, 1, 1024,
     "requests one store has in flight at once, all readers together",
     detail::get_store_field<&StoreOptions::max_requests>,
     detail::set_store_field<&StoreOptions::max_requests>},
    {"chunks_in_flight", "N", OptionKind::kCount, kStoreS3 | kStoreHttp, false, 1, 64,
     "Zarr chunks (IPC batches) one read fetches at once",
     detail::get_store_field<&StoreOptions::chunks_in_flight>,
     detail::set_store_field<&StoreOptions::chunks_in_flight>},
    {"multipart_threshold", "N", OptionKind::kCount, kStoreS3, false, 0, kMaxSinglePut,
     "writes: the largest object sent in one PUT",
     detail::get_store_field<&StoreOptions::multipart_threshold>,
     detail::set_store_field<&StoreOptions::multipart_threshold>},
    {"access_key", "KEY", OptionKind::kText, kStoreS3, false, 0, 0,
     "the access key id (with secret_key; else the environment's credentials)",
     detail::get_store_field<&StoreOptions::access_key>,
     detail::set_store_field<&StoreOptions::access_key>},
    {"secret_key", "SECRET", OptionKind::kText, kStoreS3, true, 0, 0,
     "the secret access key (with access_key)", detail::get_store_field<&StoreOptions::secret_key>,
     detail::set_store_field<&StoreOptions::secret_key>},
    {"session_token", "TOKEN", OptionKind::kText, kStoreS3, true, 0, 0,
     "the session token of temporary credentials (with both keys)",
     detail::get_store_field<&StoreOptions::session_token>,
     detail::set_store_field<&StoreOptions::session_token>},
    {"anonymous", "BOOL", OptionKind::kFlag, kStoreS3, false, 0, 0,
     "true: unsigned requests (public objects), no credentials looked for",
     detail::get_store_field<&StoreOptions::anonymous>,
     detail::set_store_field<&StoreOptions::anonymous>},
    {"region", "REGION", OptionKind::kText, kStoreS3, false, 0, 0,
     "the bucket's region (default: AWS_REGION, ..., the bucket's own)", nullptr, nullptr},
    {"endpoint_override", "HOST[:PORT]", OptionKind::kText, kStoreS3, false, 0, 0,
     "an S3-compatible server instead of AWS (path-style URLs)", nullptr, nullptr},
    {"scheme", "http|https", OptionKind::kText, kStoreS3, false, 0, 0,
     "the scheme of endpoint_override's requests (default https)", nullptr, nullptr},
    {"allow_bucket_creation", "BOOL", OptionKind::kFlag, kStoreS3, false, 0, 0,
     "Arrow's client: writes may create the bucket", nullptr, nullptr},
    {"allow_bucket_deletion", "BOOL", OptionKind::kFlag, kStoreS3, false, 0, 0,
     "Arrow's client: deletes may remove the bucket", nullptr, nullptr},
    {"tls_ca_file_path", "FILE", OptionKind::kText, kStoreS3, false, 0, 0,
     "Arrow's client: the CA certificates to trust", nullptr, nullptr},
    {"tls_verify_certificates", "BOOL", OptionKind::kFlag, kStoreS3, false, 0, 0,
     "Arrow's client: false skips the server certificate's check", nullptr, nullptr},
};

inline constexpr std::span<const StoreOptionSpec> store_option_table() { return kStoreOptionTable; }

// The row named `name`, or nullptr.
const StoreOptionSpec* find_store_option(std::string_view name);

// Secrets given in a URL are taken out of it where a source is made (Source's constructors,
// split_options, the front ends' joins of storage options) and kept in a table of the process
// under a handle: the URL holds "credentials=HANDLE" instead, and every path made from it (a
// shard's, a layout's) holds no secret to print.
//   s3://: secret_key and session_token (the table's secret rows, in the URL's query however
//     they came there: the URL as typed, storage_options=, --storage-option); access_key, which
//     names the key pair, stays.
//   http(s)://: the user part ("user:password@", which leaves the host) and the query's secret
//     items, those the redaction hides (redact_secrets: Signature=, X-Amz-Signature=,
//     X-Amz-Security-Token=, token=, sig=, ...): the span from the first to the last, the items
//     between with them, so that the request sends the query in the order it was typed. They
//     are put back only into the URL a request is sent to (http_io).
// One handle per distinct set of credentials (32 hex digits, the same in every process, so ranks
// that discover alike make equal paths; nothing of the secret to print, nor a fast test of a
// guess of it: below); two sets for one bucket or host are two handles and so two stores. A
// layout's encoding (its pickle, a Legate tile) carries the entries its paths name, and decoding it
// adopts them, so another process reads what this one resolved. A handle this process does
// not hold is refused naming the URL.
//
// How a handle is made. A handle shows wherever a path does (printed, logged, pickled, sent in a
// bug report), and all that is not secret in what it stands for can be guessed, so checking a
// guess of the secret against it must be costly: HANDLE = the first 16 bytes, in hex, of
// HMAC-SHA256(K, ITEMS), K = scrypt(P, S, N=2^14, r=8, p=1, 32 bytes) (RFC 7914: 16 MiB and
// about 50 ms of a core each; OpenSSL's, else a portable one of the same bytes).
//   ITEMS, the entry the table keeps: an s3:// URL's "store=B&" and its secret items as its
//     query held them (B: 32 hex digits of SHA-256 of "shardload credentials handle\nstore\n"
//     and the endpoint_override, scheme and access_key, percent-decoded, "" where absent,
//     joined by "\n"); an http(s) URL's '@', then as its length, ':' and its text each of its
//     origin ("scheme://host[:port]", lower case), user part, path before a path token and
//     that token ("" and "" where none), then the query's items from its first secret one to
//     its last.
//   S = "shardload credentials handle\n" and the store binding ("store=B") or the origin: a
//     table of guesses made once serves one store, not every one.
//   P = each secret part as its length, ':' and its text: an s3:// entry's items after the
//     binding; an http(s) entry's user part, path token and the span's secret items but its
//     signatures (a key ending in "signature", or sig, sign, md5, hmac, hdnea, hdntl, auth_key,
//     _upt, policy: a MAC a signer computed over the URL, one per object); each with its runs of
//     40 or more letters, digits, '-' and '_' left out. Such a run is a key, a signature or a
//     token a program made, beyond guessing; left out, presigned and signed URLs that differ in
//     their signatures alone share one K (one scrypt per user part, short token and store, not
//     one per object).
// K is kept per process for the last kRecentlySealed (S, P) (kRecentlySealedBytes at most), so
// the same credentials sealed again cost a look-up and an HMAC. What is left: a secret is as
// strong as it was chosen (a password among the common ones is still found, at some 20 guesses
// a second a core, more on many cores); a run of 40 or more letters and digits a person chose is
// checked at SHA-256's speed, as is a signature (whose guess is a forgery); URLs each with its
// own short token under another key (under 40 characters: a per-object token=) cost scrypt
// once each.
//
// The table holds an entry while something holds a pin of it (CredentialPins: a Source, a
// Layout, the Python front end's sealed source until its discovery is made, an entry sealed
// over another's handle) and, besides, the kRecentlySealed entries sealed or adopted last
// (those of at most kRecentlySealedBytes of items, the last one always), for a handle that
// lives only in a string (a path copied out of a layout, a URL typed again); then it is
// forgotten, its handle refused as one never given. Threads seal, pin and drop at once; the
// table is held across fork() (a child holds what the parent held).
inline constexpr std::size_t kRecentlySealed = 1024;
inline constexpr std::size_t kRecentlySealedBytes = std::size_t{4} << 20;

// Pins of entries of the table: each keeps its entry while it lives (shared_ptr's count).
using CredentialPins = std::vector<std::shared_ptr<const void>>;

// `url` with its secrets moved into the table; `url` as it is where it is no s3:// or http(s)
// URL or holds none (a URL sealed already among them: a handle is not sealed again). With
// `pins`, the entry made and those of the handles `url` names already are pinned into it.
std::string seal_credentials(std::string_view url, CredentialPins* pins = nullptr);
// Pins into *pins the entries of the handles `url`'s query names that the table holds.
void pin_credentials(std::string_view url, CredentialPins* pins);
// Appends to *out the handles `url`'s query names.
void credential_handles(std::string_view url, std::vector<std::string>* out);
// Appends to *out the handles an entry's `items` name (an http(s) URL's secret items sealed
// around another handle: its span holds "credentials=HANDLE").
void credential_handles_in_items(std::string_view items, std::vector<std::string>* out);
// What `handle` stands for in this process (an s3:// URL's query items, KEY=VALUE&... as the
// URL spelled them; an http(s) URL's, "@N:USERINFO" then its query span), or "" where none.
std::string credential_items(std::string_view handle);
// Takes `handle` for `items` from another process (a decoded layout), pinned into `pins` when
// given. kInvalidArgument where the handle is malformed, the items are not credential items,
// or the handle stands for other items here.
Status adopt_credentials(std::string_view handle, std::string_view items,
                         CredentialPins* pins = nullptr);
// The number of entries the table holds now (for tests).
std::size_t credential_entries();

}  // namespace shardload
