// Whether a query key names a secret, for a message that shows a key and its value apart from
// any URL (a `--storage-option KEY=VALUE` the command line refuses). Internal: everything
// else shows URLs through redact_secrets (shardload/status.hpp), which uses the same list.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardload::detail {

// `key` (as given: percent-encoded or not, any case) is one of the secret query keys whose
// values redact_secrets hides (the list and why: status.cc).
bool is_secret_query_key(std::string_view key);

// Whether redact_secrets hides any part of `item`, one item of a URL's query ("KEY=VALUE", its
// '?' or '&' left off): a secret key's value, one of a query percent-encoded into the value
// ("url=https%3A%2F%2Fb%2Fk%3Fsig%3DS"), or a pre-authenticated request's path token in a URL
// the value holds (par_token_span). The storage layer seals such an item whole.
bool query_item_holds_secret(std::string_view item);

// BunnyCDN's token in a URL's path ("https://h/bcdn_token=T&expires=E&token_path=/v/x.npy"): a
// key after a '/' (compared without case), its value running to the next '&', which
// redact_secrets hides and the storage layer seals with the query's secrets.
inline constexpr std::string_view kPathTokenKey = "bcdn_token=";

// An Oracle Cloud (OCI) Object Storage pre-authenticated request keeps its secret in the path:
// "https://objectstorage.R.oraclecloud.com/p/TOKEN/n/NAMESPACE/b/BUCKET/o/OBJECT". The first
// such TOKEN in text[from, end) (a path segment after "/p/" that "/n/", a segment and "/b/"
// follow, whatever the host), as [begin, end) positions, or {npos, npos}. redact_secrets hides
// it; the storage layer seals it with its '/' (as BunnyCDN's path token).
std::pair<std::size_t, std::size_t> par_token_span(std::string_view text, std::size_t from);

// Makes redact_secrets take `name` (a URL scheme, compared in any case) as it takes http,
// https and s3: the user part of "NAME://user:password@host" and of its mistyped spellings
// ("NAME: //", "NAME:/ /", "NAME//", "NAME;//", ...) is hidden. The storage layer calls it for
// each scheme it registers; a name stays known after its scheme is removed. Thread-safe; a
// redaction reads the names without a lock.
void add_redacted_scheme(std::string_view name);

// `body` (a server's answer to a request, which may quote what the request carried) with each
// secret of that request replaced by "***": what redact_secrets hides in `urls` (the URL
// asked and the one a redirect led to: a user part's password, a token in the query), and the
// values of `header_lines` ("Name: value") whose name names a secret (Authorization whole, the
// credential after its scheme's word and its Signature=; x-amz-security-token, x-api-key, ...).
// Values shorter than 6 bytes are left, as hide_quoted leaves them. Where the body ends inside
// one (the answer was longer than what was kept of it), that start of it goes too. Applied to
// the answer before any part of it is cut for a message, so that the cut never leaves a piece
// of a secret to show; each request with its own credentials, whatever others were made since.
std::string hide_request_secrets(std::string body, const std::vector<std::string>& urls,
                                 const std::vector<std::string>& header_lines);

// The work redact_secrets has done on the calling thread so far: the bytes its scans looked at
// and the look-ups in the tables that spare it rescanning. For tests, which check that a
// redaction's work grows as its text does, not as its square.
std::uint64_t redaction_work();

}  // namespace shardload::detail
