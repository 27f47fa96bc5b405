// AWS Signature Version 4 for S3 requests (s3_signed.cc): the canonical request, the string to
// sign and the Authorization header, as the AWS documentation specifies them, with HMAC-SHA256
// and SHA-256 from OpenSSL. Pure functions of their inputs (no clock, no environment), so the
// published examples test them.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardload::detail {

struct AwsCredentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // "" for long-term keys
};

// SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

// S3's URI encoding: every byte but A-Z a-z 0-9 - . _ ~ as %XX (uppercase hex), and '/' too
// unless `keep_slash` (an object key in a path keeps its slashes).
std::string s3_uri_encode(std::string_view s, bool keep_slash);

// What the signature covers. `canonical_uri` is the path as sent (already encoded: S3 signs it
// encoded once); `canonical_query` the sorted, encoded query ("" for none); `headers` the
// headers to sign, Host included, as sent (names in any case, values trimmed when signed);
// `payload_hash` the x-amz-content-sha256 value.
struct SigV4Request {
  std::string method;
  std::string canonical_uri;
  std::string canonical_query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;
};

// The canonical request's text (for tests and messages).
std::string sigv4_canonical_request(const SigV4Request& r);

// The value of the Authorization header for `r` signed at `amz_date` ("YYYYMMDDTHHMMSSZ", the
// request's x-amz-date) with `creds` in `region` for `service` ("s3").
std::string sigv4_authorization(const SigV4Request& r, const AwsCredentials& creds,
                                std::string_view region, std::string_view service,
                                std::string_view amz_date);

}  // namespace shardload::detail
