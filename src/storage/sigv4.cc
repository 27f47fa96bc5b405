#include "storage/detail/sigv4.hpp"

#include <algorithm>
#include <cctype>

#include "shardload/location.hpp"
#include "storage/detail/credentials_kdf.hpp"

namespace shardload::detail {

namespace {

std::string hex(const unsigned char* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

// Raw HMAC-SHA256 (32 bytes): the credentials handle's, OpenSSL's one-shot call.
std::string hmac(std::string_view key, std::string_view data) { return kdf_hmac_sha256(key, data); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A header value as signed: trimmed, inner runs of spaces one space.
std::string canonical_value(std::string_view v) {
  std::string out;
  bool space = false;
  for (const char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

struct Canonical {
  std::string request;
  std::string signed_headers;
};

Canonical canonical(const SigV4Request& r) {
  std::vector<std::pair<std::string, std::string>> h;
  h.reserve(r.headers.size());
  for (const auto& [name, value] : r.headers) h.emplace_back(lower(name), canonical_value(value));
  std::sort(h.begin(), h.end());
  Canonical c;
  c.request = r.method + "\n" + r.canonical_uri + "\n" + r.canonical_query + "\n";
  for (const auto& [name, value] : h) {
    c.request += name + ":" + value + "\n";
    c.signed_headers += (c.signed_headers.empty() ? "" : ";") + name;
  }
  c.request += "\n" + c.signed_headers + "\n" + r.payload_hash;
  return c;
}

// SigV4's unreserved characters (RFC 3986), and with them the '/' between a key's segments.
bool unreserved(unsigned char c) {
  return std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~';
}
bool unreserved_or_slash(unsigned char c) { return c == '/' || unreserved(c); }

}  // namespace

std::string sha256_hex(std::string_view data) {
  const std::string digest = kdf_sha256(data);
  return hex(reinterpret_cast<const unsigned char*>(digest.data()), digest.size());
}

std::string s3_uri_encode(std::string_view s, bool keep_slash) {
  return percent_encode(s, keep_slash ? unreserved_or_slash : unreserved);
}

std::string sigv4_canonical_request(const SigV4Request& r) { return canonical(r).request; }

std::string sigv4_authorization(const SigV4Request& r, const AwsCredentials& creds,
                                std::string_view region, std::string_view service,
                                std::string_view amz_date) {
  const Canonical c = canonical(r);
  const std::string_view day = amz_date.substr(0, 8);
  const std::string scope =
      std::string(day) + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  const std::string to_sign =
      "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + scope + "\n" + sha256_hex(c.request);
  std::string key = hmac("AWS4" + creds.secret_key, day);
  key = hmac(key, region);
  key = hmac(key, service);
  key = hmac(key, "aws4_request");
  const std::string sig = hmac(key, to_sign);
  return "AWS4-HMAC-SHA256 Credential=" + creds.access_key + "/" + scope +
         ",SignedHeaders=" + c.signed_headers +
         ",Signature=" + hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
}

}  // namespace shardload::detail
