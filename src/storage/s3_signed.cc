#include "storage/detail/s3_signed.hpp"

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "base/detail/fork_lock.hpp"
#include "storage/detail/curl_get.hpp"

namespace shardload::detail {

namespace {

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return {};
  const auto b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// The keys of section `section` of the AWS INI file at `path`, or nullopt where the file or
// the section is missing.
std::optional<std::map<std::string, std::string>> ini_section(const std::string& path,
                                                              const std::string& section) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::map<std::string, std::string> keys;
  bool found = false;
  bool inside = false;
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      inside = trim(line.substr(1, line.size() - 2)) == section;
      found = found || inside;
      continue;
    }
    if (!inside) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    keys[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  if (!found) return std::nullopt;
  return keys;
}

std::string aws_profile() {
  const std::string profile = aws_env("AWS_PROFILE");
  return profile.empty() ? "default" : profile;
}

// The profile's key pair in the shared credentials file, or nullopt where the file or the
// profile is missing or the profile asks for more than a key pair (a role, a process, SSO:
// the AWS SDK's to resolve).
std::optional<AwsCredentials> shared_file_credentials() {
  const std::string path = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
  if (path.empty()) return std::nullopt;
  const auto keys = ini_section(path, aws_profile());
  if (!keys) return std::nullopt;
  AwsCredentials c;
  for (const auto& [k, v] : *keys) {
    if (k == "aws_access_key_id") {
      c.access_key = v;
    } else if (k == "aws_secret_access_key") {
      c.secret_key = v;
    } else if (k == "aws_session_token") {
      c.session_token = v;
    } else {
      return std::nullopt;
    }
  }
  if (c.access_key.empty() || c.secret_key.empty()) return std::nullopt;
  return c;
}

// The profile's section in the shared config file: "[default]", or "[profile NAME]" for
// another profile; nullopt where the file or the section is missing.
std::optional<std::map<std::string, std::string>> config_profile() {
  const std::string path = aws_file("AWS_CONFIG_FILE", "config");
  if (path.empty()) return std::nullopt;
  const std::string profile = aws_profile();
  return ini_section(path, profile == "default" ? profile : "profile " + profile);
}

// Whether the AWS SDK's chain takes a source before a container's or an instance's role
// where no key pair was found: a web identity token, a section of the profile in the shared
// credentials file (whatever it holds), or a profile in the config file that names a role, a
// process, SSO, a web identity or keys.
bool takes_another_source() {
  if (!aws_env("AWS_WEB_IDENTITY_TOKEN_FILE").empty()) return true;
  const std::string credentials = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
  if (!credentials.empty() && ini_section(credentials, aws_profile())) return true;
  const auto keys = config_profile();
  if (!keys) return false;
  for (const char* own : {"role_arn", "credential_process", "credential_source", "sso_session",
                          "sso_start_url", "web_identity_token_file", "aws_access_key_id"}) {
    if (keys->count(own) != 0) return true;
  }
  return false;
}

// The profile's credential_process in the shared config file, where the AWS SDK's chain would
// run it: the credentials file has no section for the profile and the config file's profile
// names no keys and no role (the SDK's profile provider, before the process's, takes those).
// The SDK for C++ reads it from the config file only.
std::optional<std::string> own_credential_process() {
  const std::string credentials = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
  if (!credentials.empty() && ini_section(credentials, aws_profile())) return std::nullopt;
  const auto keys = config_profile();
  if (!keys || keys->count("aws_access_key_id") != 0 || keys->count("role_arn") != 0) {
    return std::nullopt;
  }
  const auto it = keys->find("credential_process");
  if (it == keys->end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// The profile's region in the shared config file (where `aws configure` writes it), or "".
std::string config_file_region() {
  const auto keys = config_profile();
  if (!keys) return {};
  const auto it = keys->find("region");
  return it == keys->end() ? std::string() : it->second;
}

std::string amz_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string xml_field(const std::string& body, const std::string& name) {
  const std::string open = "<" + name + ">";
  const auto a = body.find(open);
  if (a == std::string::npos) return {};
  const auto b = body.find("</" + name + ">", a);
  if (b == std::string::npos) return {};
  return body.substr(a + open.size(), b - a - open.size());
}

// The store's words for a failed answer: "HTTP 404 NoSuchKey: The specified key does not
// exist." from S3's XML error, else libcurl's words or the status and the body's start.
std::string describe(const CurlOutcome& o, const std::string& body) {
  if (o.curl == CURLE_OK) {
    const std::string code = xml_field(body, "Code");
    if (!code.empty()) {
      const std::string message = xml_field(body, "Message");
      return "HTTP " + std::to_string(o.http) + " " + code +
             (message.empty() ? std::string() : ": " + message);
    }
    if (o.http == 404 && body.empty()) return "HTTP 404 (no such object)";
  }
  return curl_describe(o, body);
}

// describe() and, where the store says the bucket lives in another region (a 301 whose
// x-amz-bucket-region names it, a HEAD's only word; a 400 AuthorizationHeaderMalformed whose
// XML names it), what to do about it: the request went to, or was signed for, the region the
// URL, the environment or the config file gave.
std::string describe(const CurlAnswer& a) {
  std::string text = describe(a.outcome, a.error_body);
  if (a.outcome.curl != CURLE_OK || a.outcome.http < 300 || a.outcome.http >= 500) return text;
  std::string region = a.headers.bucket_region;
  if (region.empty()) region = xml_field(a.error_body, "Region");
  // A name no region has (a lying server's text) is not offered as the region= to add.
  if (!is_region_name(region, kAwsRegionChars)) return text;
  return text + " (the bucket is in region " + region + ": add region=" + region +
         " to the URL's query or storage_options)";
}

// A failed request's error naming `url`: "cannot WHAT: " the store's words, and the attempts
// where it was retried.
Status answer_error(const std::string& url, const std::string& what, const CurlAnswer& a) {
  std::string msg = "cannot " + what + ": " + describe(a);
  if (a.tries > 1) msg += " (gave up after " + std::to_string(a.tries) + " attempts)";
  return file_error(ErrorCode::kIo, url, msg, curl_errno(a.outcome));
}

// The payload hash of a request without a body, made once (every GET, HEAD and DELETE signs it).
const std::string& empty_payload_hash() {
  static const std::string hash = sha256_hex("");
  return hash;
}

// A request for `key`: its URL and the headers for each attempt (signed, and dated then).
CurlRequest request_for(const S3Endpoint& ep, const std::string& key, const char* method,
                        std::vector<std::pair<std::string, std::string>> own,
                        const std::string& payload_hash = empty_payload_hash()) {
  const std::string path = ep.path_prefix + "/" + s3_uri_encode(key, true);
  CurlRequest req;
  req.url = ep.origin + path;
  req.options = &ep.options;
  req.slots = ep.store != nullptr ? &ep.store->requests : nullptr;
  req.follow_redirects = false;
  req.error_body_cap = 2048;
  req.head = std::string_view(method) == "HEAD";
  if (std::string_view(method) == "DELETE") req.method = "DELETE";
  req.headers = [&ep, path, method, own = std::move(own), payload_hash] {
    std::vector<std::string> lines;
    lines.push_back("Host: " + ep.host);
    for (const auto& [k, v] : own) lines.push_back(k + ": " + v);
    if (ep.anonymous) return lines;
    SigV4Request r;
    r.method = method;
    r.canonical_uri = path;
    r.payload_hash = payload_hash;
    const std::string date = amz_now();
    r.headers = own;
    r.headers.emplace_back("host", ep.host);
    r.headers.emplace_back("x-amz-content-sha256", payload_hash);
    r.headers.emplace_back("x-amz-date", date);
    const AwsCredentials creds = ep.role ? ep.role->current() : ep.creds;
    if (!creds.session_token.empty()) {
      r.headers.emplace_back("x-amz-security-token", creds.session_token);
    }
    lines.push_back("x-amz-content-sha256: " + payload_hash);
    lines.push_back("x-amz-date: " + date);
    if (!creds.session_token.empty()) {
      lines.push_back("x-amz-security-token: " + creds.session_token);
    }
    const std::string authorization = sigv4_authorization(r, creds, ep.region, "s3", date);
    // A server's error page may echo the request's headers: never shown in a message.
    hide_in_messages(creds.session_token);
    if (const auto sig = authorization.rfind("Signature="); sig != std::string::npos) {
      hide_in_messages(authorization.substr(sig + 10));
    }
    lines.push_back("Authorization: " + authorization);
    return lines;
  };
  return req;
}

// The bucket's region as the store says it, where neither the options, the environment nor
// the config file give one: the x-amz-bucket-region of an unsigned HEAD of the bucket (as
// Arrow's client asks, and as S3 answers it with a 200, a 301 and a 403 alike). On AWS (no
// `endpoint`) the HEAD goes to the global endpoint, which answers for a bucket of any region;
// nullopt where AWS does not say (no such bucket, no answer): the caller leaves the URL to
// Arrow's client, as before. A server named by an endpoint that does not say is in us-east-1,
// the region Arrow's client signs for there. Asked once per endpoint and bucket in a process:
// an answer is kept, a failed request is not (its next resolve asks again).
std::optional<std::string> bucket_region(const std::string& scheme, const std::string& endpoint,
                                         const std::string& endpoint_path,
                                         const std::string& bucket, const StoreOptions& options) {
  static std::mutex& mu = *[] {
    auto* m = new std::mutex();  // never destroyed: held across a fork
    hold_across_fork(m);
    return m;
  }();
  static std::map<std::string, std::string> known;
  CurlRequest req;
  std::string host;
  if (!endpoint.empty()) {
    host = endpoint;
    req.url = scheme + "://" + host + endpoint_path + "/" + s3_uri_encode(bucket, false);
  } else if (bucket.find('.') != std::string::npos) {
    host = "s3.amazonaws.com";
    req.url = scheme + "://" + host + "/" + s3_uri_encode(bucket, false);
  } else {
    host = bucket + ".s3.amazonaws.com";
    req.url = scheme + "://" + host + "/";
  }
  {
    std::lock_guard lock(mu);
    if (const auto it = known.find(req.url); it != known.end()) return it->second;
  }
  const std::string fallback = endpoint.empty() ? std::string() : std::string("us-east-1");
  if (!curl_init(req.url).is_ok()) return fallback.empty() ? std::nullopt : std::optional(fallback);
  req.options = &options;
  req.head = true;
  req.follow_redirects = false;
  req.headers = [host] { return std::vector<std::string>{"Host: " + host}; };
  const CurlAnswer a = curl_perform(req, nullptr, 0, 0, nullptr);
  std::string region;
  if (a.outcome.curl == CURLE_OK && a.outcome.http != 0) {
    region = is_region_name(a.headers.bucket_region, kAwsRegionChars) ? a.headers.bucket_region
                                                                      : fallback;
    if (!region.empty()) {
      std::lock_guard lock(mu);
      known.emplace(req.url, region);
    }
  } else {
    region = fallback;
  }
  if (region.empty()) return std::nullopt;
  return region;
}

}  // namespace

Result<S3Credentials> s3_credentials(const std::string& url, const StoreOptions& options) {
  S3Credentials c;
  if (options.anonymous) return c;
  const auto refused = [&](const std::string& why) {
    return file_error(ErrorCode::kInvalidArgument, url, "bad object-storage credentials: " + why,
                      EINVAL);
  };
  if (!options.access_key.empty()) {
    c.creds = {options.access_key, options.secret_key, options.session_token};
    c.where = "the options";
  } else if (!aws_env("AWS_ACCESS_KEY_ID").empty() && !aws_env("AWS_SECRET_ACCESS_KEY").empty()) {
    c.creds = {aws_env("AWS_ACCESS_KEY_ID"), aws_env("AWS_SECRET_ACCESS_KEY"),
               aws_env("AWS_SESSION_TOKEN")};
    c.where = "the environment";
  } else if (auto file = shared_file_credentials()) {
    c.creds = *std::move(file);
    c.where = "the shared credentials file (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials)";
  } else if (const auto command = own_credential_process()) {
    RoleLookup got = process_credentials(*command, aws_profile());
    if (!got.found) return refused(got.refused);
    c.role = std::move(got.found);
  } else if (takes_another_source()) {
    c.sdk_only = true;  // SSO, role_arn, a web identity: the AWS SDK's to resolve
  } else {
    RoleLookup got = role_credentials();
    if (!got.refused.empty()) return refused(got.refused);
    c.role = std::move(got.found);
    c.sdk_only = c.role == nullptr;  // none found: Arrow's client and its chain, as before
  }
  return c;
}

std::optional<S3Endpoint> s3_signed_endpoint(const std::string& bucket,
                                             const std::string& store_query,
                                             const StoreOptions& options,
                                             const S3Credentials& credentials) {
  std::map<std::string, std::string> q;
  std::size_t pos = store_query.empty() ? 0 : 1;
  while (pos < store_query.size()) {
    std::size_t amp = store_query.find('&', pos);
    if (amp == std::string::npos) amp = store_query.size();
    const std::string item = store_query.substr(pos, amp - pos);
    pos = amp + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string k = item.substr(0, eq);
    if (k != "endpoint_override" && k != "scheme" && k != "region") return std::nullopt;
    q[k] = eq == std::string::npos ? std::string() : percent_decoded(item.substr(eq + 1));
  }
  S3Endpoint ep;
  ep.options = options;
  ep.anonymous = options.anonymous;
  if (!ep.anonymous) {
    if (credentials.sdk_only) return std::nullopt;  // the AWS SDK's to resolve, or none
    ep.creds = credentials.creds;
    ep.role = credentials.role;
  }
  std::string scheme = q.count("scheme") != 0 ? q["scheme"] : "https";
  if (scheme != "http" && scheme != "https") return std::nullopt;
  // Where the URL names no endpoint, the one the AWS SDK takes from the environment
  // (AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL), as Arrow's path does: never AWS itself
  // instead of the store the user named.
  std::string endpoint;
  if (const auto it = q.find("endpoint_override"); it != q.end()) {
    endpoint = it->second;
  } else {
    endpoint = aws_env("AWS_ENDPOINT_URL_S3");
    if (endpoint.empty()) endpoint = aws_env("AWS_ENDPOINT_URL");
  }
  endpoint = lowercase_scheme(std::move(endpoint));
  if (const auto sep = endpoint.find("://"); sep != std::string::npos) {
    scheme = endpoint.substr(0, sep);
    endpoint = endpoint.substr(sep + 3);
    if (scheme != "http" && scheme != "https") return std::nullopt;
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  // An endpoint's path (checked as plain segments by the caller) is a prefix of every
  // request's, before /BUCKET/KEY, as Arrow's client (the AWS SDK) sends it.
  std::string endpoint_path;
  if (const auto slash = endpoint.find('/'); slash != std::string::npos) {
    endpoint_path = endpoint.substr(slash);
    endpoint.resize(slash);
  }
  ep.region = q["region"];
  ep.region_in_options = !ep.region.empty();
  if (ep.region.empty()) ep.region = aws_env("AWS_REGION");
  if (ep.region.empty()) ep.region = aws_env("AWS_DEFAULT_REGION");
  if (ep.region.empty()) ep.region = config_file_region();
  if (ep.region.empty()) {
    auto found = bucket_region(scheme, endpoint, endpoint_path, bucket, options);
    if (!found) return std::nullopt;  // AWS did not say: Arrow's client, as before
    ep.region = *std::move(found);
  }
  if (!endpoint.empty()) {
    ep.host = endpoint;
    ep.path_prefix = endpoint_path + "/" + bucket;
  } else if (bucket.find('.') != std::string::npos) {
    // A dotted name does not match the wildcard certificate of virtual-hosted names.
    ep.host = "s3." + ep.region + ".amazonaws.com";
    ep.path_prefix = "/" + bucket;
  } else {
    ep.host = bucket + ".s3." + ep.region + ".amazonaws.com";
  }
  ep.origin = scheme + "://" + ep.host;
  return ep;
}

namespace {

// A ranged GET of `n` bytes at `*offset`, or of the object's last `n` bytes where `offset` is
// null (a suffix range, "bytes=-N", which S3 answers with the range it sends).
S3Get get_range(const S3Endpoint& ep, const std::string& key, void* dst, std::size_t n,
                const std::uint64_t* offset, bool expect, std::uint64_t expect_inode,
                std::atomic<std::uint64_t>* retries) {
  S3Get g;
  const std::string range = offset == nullptr
                                ? "-" + std::to_string(n)
                                : std::to_string(*offset) + "-" + std::to_string(*offset + n - 1);
  CurlRequest req = request_for(ep, key, "GET", {{"Range", "bytes=" + range}});
  req.accept = [&](const CurlHeaders& h) {
    return !expect || h.etag.empty() || etag_hash(h.etag) == expect_inode;
  };
  // A 200 is the whole object, taken as the range only from offset 0 (for a suffix: an
  // object within the n bytes, all of it fitting the buffer).
  const CurlAnswer a = curl_perform(req, dst, n, offset == nullptr ? 0 : *offset, retries);
  const CurlOutcome& o = a.outcome;
  g.status = o.curl == CURLE_OK ? o.http : 0;
  if (!a.headers.etag.empty()) {
    g.state.has_etag = true;
    g.state.inode = etag_hash(a.headers.etag);
  }
  g.state.modified_s = http_date_seconds(a.headers.last_modified);
  g.state.answered_s = http_date_seconds(a.headers.date);
  std::uint64_t first = 0;
  std::int64_t total = -1;
  const bool ranged = parse_content_range(a.headers.content_range, &first, &total);
  if (ranged && total >= 0) {
    g.state.size = static_cast<std::uint64_t>(total);
    g.state.has_size = true;
  }
  const auto fail = [&](const std::string& what, int err) {
    g.why = what;
    if (a.tries > 1) g.why += " (gave up after " + std::to_string(a.tries) + " attempts)";
    g.got = -err;
    return g;
  };
  if (a.refused) {
    g.changed = true;
    return fail("the object changed since discovery (the GET's ETag differs from the snapshot's)",
                EIO);
  }
  if (!a.encoded.empty()) {
    return fail("the store's answer (HTTP " + std::to_string(o.http) + ") has Content-Encoding '" +
                    a.encoded +
                    "': an encoding of the bytes asked for, not the bytes; nothing of it was read",
                EIO);
  }
  // A multipart answer is longer than the range: said as what it is, not as an ignored Range.
  if (o.http == 206 && a.headers.multipart) {
    return fail(not_the_range_asked(a.headers, "the store", range), EIO);
  }
  if (a.overflow) {
    return fail("the store ignored the Range request (HTTP " + std::to_string(o.http) +
                    " with more than the " + std::to_string(n) + " bytes asked for" +
                    (offset == nullptr ? std::string(" at the end")
                                       : " at offset " + std::to_string(*offset)) +
                    "): not read as the range",
                EIO);
  }
  if (o.curl != CURLE_OK) return fail(describe(o, {}), curl_errno(o));
  if (o.http == 200) {
    // The whole object from offset 0, all of it within the buffer: its size is what came.
    g.state.size = a.got;
    g.state.has_size = true;
    g.got = static_cast<std::int64_t>(a.got);
    return g;
  }
  if (o.http != 206) return fail(describe(a), curl_errno(o));
  // A suffix's answer ends at the object's end; a range's starts where it was asked.
  const bool as_asked = offset == nullptr
                            ? total >= 0 && first + a.got == static_cast<std::uint64_t>(total)
                            : first == *offset;
  if (!ranged || !as_asked) {
    return fail(not_the_range_asked(a.headers, "the store", range), EIO);
  }
  g.first = first;
  g.got = static_cast<std::int64_t>(a.got);
  return g;
}

}  // namespace

S3Get s3_get_range(const S3Endpoint& ep, const std::string& key, void* dst, std::size_t n,
                   std::uint64_t offset, bool expect, std::uint64_t expect_inode,
                   std::atomic<std::uint64_t>* retries) {
  return get_range(ep, key, dst, n, &offset, expect, expect_inode, retries);
}

S3Get s3_get_tail(const S3Endpoint& ep, const std::string& key, void* dst, std::size_t n,
                  std::atomic<std::uint64_t>* retries) {
  return get_range(ep, key, dst, n, nullptr, false, 0, retries);
}

Result<FileInfo> s3_head(const S3Endpoint& ep, const std::string& url, const std::string& key,
                         std::atomic<std::uint64_t>* retries, std::string* etag) {
  SHARDLOAD_RETURN_IF_ERROR(curl_init(url));
  const CurlRequest req = request_for(ep, key, "HEAD", {});
  const CurlAnswer a = curl_perform(req, nullptr, 0, 0, retries);
  const CurlOutcome& o = a.outcome;
  if (o.curl != CURLE_OK || o.http != 200) return answer_error(url, "open", a);  // no body
  if (!a.bad_content_length.empty()) {
    return file_error(ErrorCode::kIo, url,
                      "cannot open: the HEAD answer's Content-Length '" + a.bad_content_length +
                          "' is not a number of bytes (expected decimal digits only)");
  }
  if (a.content_length < 0) {
    return file_error(ErrorCode::kIo, url, "cannot open: the HEAD answer has no Content-Length");
  }
  FileInfo info;
  info.size = static_cast<std::uint64_t>(a.content_length);
  info.regular = true;
  info.inode = etag_hash(a.headers.etag);
  info.modified_s = http_date_seconds(a.headers.last_modified);
  info.answered_s = http_date_seconds(a.headers.date);
  if (etag != nullptr) *etag = a.headers.etag;
  return info;
}

Status s3_delete(const S3Endpoint& ep, const std::string& url, const std::string& key,
                 std::atomic<std::uint64_t>* retries) {
  SHARDLOAD_RETURN_IF_ERROR(curl_init(url));
  const CurlRequest req = request_for(ep, key, "DELETE", {});
  const CurlAnswer a = curl_perform(req, nullptr, 0, 0, retries);
  const CurlOutcome& o = a.outcome;
  if (o.curl == CURLE_OK && (o.http == 204 || o.http == 200 || o.http == 404)) {
    return Status::ok();
  }
  return answer_error(url, "delete", a);
}

Status s3_put(const S3Endpoint& ep, const std::string& url, const std::string& key,
              const void* data, std::size_t n, std::atomic<std::uint64_t>* retries,
              std::string* etag) {
  SHARDLOAD_RETURN_IF_ERROR(curl_init(url));
  // As the AWS SDKs do: over https the body is not hashed into the signature (TLS keeps it
  // whole), over http its SHA-256 is signed, so a body changed on the way is refused.
  const bool tls = ep.origin.starts_with("https://");
  const std::string hash = tls || ep.anonymous
                               ? std::string("UNSIGNED-PAYLOAD")
                               : sha256_hex(std::string_view(static_cast<const char*>(data), n));
  CurlRequest req = request_for(ep, key, "PUT", {}, hash);
  req.body = data == nullptr ? "" : data;
  req.body_size = n;
  const CurlAnswer a = curl_perform(req, nullptr, 0, 0, retries);
  const CurlOutcome& o = a.outcome;
  if (o.curl == CURLE_OK && o.http >= 200 && o.http < 300) {
    if (etag != nullptr) *etag = a.headers.etag;
    return Status::ok();
  }
  return answer_error(url, "write", a);
}

}  // namespace shardload::detail
