#include "shardload/status.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/detail/environment.hpp"
#include "base/detail/fork_lock.hpp"
#include "base/detail/secrets.hpp"
#include "shardload/io.hpp"

namespace shardload {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kLayout:
      return "layout error";
    case ErrorCode::kFormat:
      return "format error";
    case ErrorCode::kIo:
      return "I/O error";
    case ErrorCode::kChanged:
      return "file changed";
    case ErrorCode::kNoMemory:
      return "out of memory";
  }
  return "unknown";
}

namespace {

// The work a redaction did on this thread (bytes looked at by its scans, one per lookup in a
// table): read by the tests, which check that it grows in proportion to the text.
thread_local std::uint64_t t_redaction_work = 0;

// The query keys whose values are secrets, compared without case (and after percent-decoding:
// a server decodes "%73ig" to "sig"): whoever holds one of these values can read the data.
//   secret_key, session_token  shardload's own store options (a SigV4 key pair's secret half
//                              and an STS session's token)
//   x-amz-signature,           AWS SigV4 presigned URLs (the signature, and the session token
//   x-amz-security-token       of temporary credentials)
//   signature                  AWS SigV2 presigned URLs and CloudFront signed URLs
//   x-goog-signature           Google Cloud Storage V4 signed URLs
//   sig                        an Azure shared access signature (SAS)
//   token, access_token,       bearer tokens in a query: a CDN's or a gateway's token=, OAuth 2's
//   id_token, refresh_token    access_token= (RFC 6750) and its siblings
//   key, api_key, apikey       API keys (Google's key=)
//   password, client_secret    passwords and OAuth client secrets
//   private_token              GitLab's API token
//   auth                       Firebase's REST API token (an ID token or a database secret)
//   secret, aws_secret_access_key,  the secret half and the token as s3fs and boto3 spell
//   secret_access_key,              them: options of another library, refused with the URL
//   aws_session_token               they were passed in
//   security-token, x-oss-signature,  signed URLs of other object stores: Alibaba OSS (V1's
//   x-oss-security-token,             STS token, V4), Tencent COS, Huawei OBS, and a
//   q-signature, x-cos-security-token,  Backblaze B2 download authorization (its query's
//   x-obs-security-token, authorization  Authorization=)
//   temp_url_sig               an OpenStack Swift temporary URL's signature
//   __token__, hdnts, hdnea    Akamai's signed URLs (Token Auth: "exp=...~acl=...~hmac=...")
//   sign                       Tencent Cloud CDN's key authentication (types A and D)
//   rlkey                      a Dropbox shared link's key ("?rlkey=...&dl=1")
//   _upt                       Upyun's token anti-leech
//   md5, verify                nginx's secure_link download link ("md5=HASH&expires=T") and
//                              Cloudflare's token authentication ("verify=T-HMAC")
//   auth_token, x-auth-token,  more spellings of a token, an OAuth 1 request's signature, a
//   oauth_signature, jwt,      JSON Web Token, a password and an API key
//   passwd, pwd, api-key, x-api-key, api_token, apitoken, authtoken, auth-token,
//   accesstoken, access-token
//   tempauth                   a SharePoint/OneDrive download link's bearer JWT (what Microsoft
//                              Graph's @microsoft.graph.downloadUrl returns)
//   code                       an Azure Functions function key ("?code=KEY"), and OAuth's
//                              authorization code: both grant access. Only the key "code"
//                              itself, not the words of "country_code", "status_code": a code
//                              that is no credential costs only its value shown as ***, as the
//                              request still carries it; a function key shown gives the function
//   ticket, otp, _wpnonce      a CAS service ticket, a one-time password, a WordPress nonce
//   resourcekey                a Google Drive link's resource key (needed with its file id)
//   accesscode, access_code    a shared link's access code
// Not secrets, and shown: identifiers that grant nothing alone (access_key, X-Amz-Credential,
// X-Goog-Credential, AWSAccessKeyId, Key-Pair-Id: the store's own errors name them too, and
// they tell which credential was refused), a CloudFront Policy (it is what the signature
// signs), Expires and X-Amz-Date, and every store and request option.
constexpr std::array<std::string_view, 61> kSecretKeys = {"secret_key",
                                                          "session_token",
                                                          "x-amz-signature",
                                                          "x-amz-security-token",
                                                          "signature",
                                                          "x-goog-signature",
                                                          "sig",
                                                          "token",
                                                          "access_token",
                                                          "id_token",
                                                          "refresh_token",
                                                          "key",
                                                          "api_key",
                                                          "apikey",
                                                          "password",
                                                          "client_secret",
                                                          "x-goog-security-token",
                                                          "private_token",
                                                          "auth",
                                                          "secret",
                                                          "aws_secret_access_key",
                                                          "secret_access_key",
                                                          "aws_session_token",
                                                          "security-token",
                                                          "x-oss-signature",
                                                          "x-oss-security-token",
                                                          "q-signature",
                                                          "x-cos-security-token",
                                                          "x-obs-security-token",
                                                          "authorization",
                                                          "temp_url_sig",
                                                          "__token__",
                                                          "hdnts",
                                                          "auth_token",
                                                          "x-auth-token",
                                                          "oauth_signature",
                                                          "jwt",
                                                          "passwd",
                                                          "pwd",
                                                          "api-key",
                                                          "x-api-key",
                                                          "api_token",
                                                          "apitoken",
                                                          "authtoken",
                                                          "auth-token",
                                                          "accesstoken",
                                                          "access-token",
                                                          "md5",
                                                          "verify",
                                                          "hdnea",
                                                          "sign",
                                                          "rlkey",
                                                          "_upt",
                                                          "tempauth",
                                                          "code",
                                                          "ticket",
                                                          "otp",
                                                          "_wpnonce",
                                                          "resourcekey",
                                                          "accesscode",
                                                          "access_code"};

// What a message may put right after a URL, and a URL cannot end with without being
// unusual: ':' in "URL: what", quotes in "'URL'" or a JSON string, ')' in "(URL)", a
// sentence's '.'. Taken off the end of a value before it is hidden, so the message around
// the stars reads the same. Inside a value they are part of the secret.
bool trails_url(char c) {
  return c == ':' || c == ',' || c == ';' || c == '.' || c == ')' || c == ']' || c == '}' ||
         c == '!' || c == '\'' || c == '"' || c == '>' || c == '`';
}

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l >= 'a' && l <= 'f' ? l - 'a' + 10 : -1;
}

// A query key as the server reads it: percent-decoded, and lower case for the comparison.
std::string decoded_key(std::string_view key) {
  std::string out = percent_decoded(key);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The words of a query key, lower case: percent-decoded, split at each character that is no
// letter or digit and where camel case begins a word ("X-Amz-Security-Token", "sas_token",
// "AWSAccessKeyId" -> aws access key id, "apiToken" -> api token).
std::vector<std::string> key_words(std::string_view key) {
  const std::string k = percent_decoded(key);  // case kept
  const auto upper = [](char c) { return c >= 'A' && c <= 'Z'; };
  const auto lower = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  std::vector<std::string> words;
  std::string w;
  for (std::size_t i = 0; i < k.size(); ++i) {
    const char c = k[i];
    if (!upper(c) && !lower(c)) {
      if (!w.empty()) words.push_back(std::move(w));
      w.clear();
      continue;
    }
    // "aB" and the last capital of "ABc" begin a word.
    const bool begins =
        upper(c) && !w.empty() &&
        (lower(k[i - 1]) || (i + 1 < k.size() && k[i + 1] >= 'a' && k[i + 1] <= 'z'));
    if (begins) {
      words.push_back(std::move(w));
      w.clear();
    }
    w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (!w.empty()) words.push_back(std::move(w));
  return words;
}

// Beyond the list: a key with a word that names a secret is one, whatever else it is spelled
// with ("sas_token", "jsessionid", "X-Amz-Security-Token2", "client_secret_v2", "dbPassword"):
//   a word holding token, secret, signature, passw, passphrase, passcode, session, sessid,
//   credentials, apikey, privatekey or assertion (OAuth's client_assertion: a signed JWT that
//   stands for the client's secret, RFC 7523), tempauth or wpnonce; a word that is sig, auth,
//   authorization, pwd, pass, pw, creds, jwt, hmac, cookie, sid, ticket, otp, totp, hotp,
//   csrf or xsrf, or a password's name in another language (passe of mot_de_passe,
//   motdepasse, contrasena, contrasenya, contrase: the word before the n with a tilde of
//   "contrase%C3%B1a", which is no ASCII letter, senha, kennwort, wachtwoord, passord,
//   salasana, heslo). Not "auth" inside a word ("author", "oauth") nor "nonce" alone (OAuth 1's
//   nonce is sent in clear and signed), nor "code" as a word (country_code, status_code); the word
//   key (Google's key=, api_key, private_key, sas_key), unless the key is an identifier's: with
//   access, consumer, pair or id beside it (access_key, AWSAccessKeyId, Key-Pair-Id,
//   oauth_consumer_key), which grant nothing alone and are shown.
// Keys whose last word says what kind of value they hold, not the value (token_type,
// oauth_signature_method, X-Amz-Signature-Version, a session's expires, BunnyCDN's
// token_path) are shown.
// What the words of a key hold, as the rule above reads them; `add` takes the words of a key's
// pieces in order, last first or first last alike, and `last` is the key's last word.
struct SecretsWords {
  bool any = false;
  bool secret = false;  // a word that holds or is a secret's
  bool key = false;
  bool identifier = false;
  std::string last;

  void add(const std::vector<std::string>& words) {
    static constexpr std::array<std::string_view, 14> kHolding = {
        "token",  "secret",      "signature", "passw",      "passphrase", "passcode", "session",
        "sessid", "credentials", "apikey",    "privatekey", "assertion",  "tempauth", "wpnonce"};
    static constexpr std::array<std::string_view, 28> kWord = {
        "sig",        "auth",       "authorization", "pwd",      "pass",  "pw",
        "creds",      "jwt",        "hmac",          "cookie",   "sid",   "ticket",
        "otp",        "totp",       "hotp",          "csrf",     "xsrf",  "passe",
        "motdepasse", "contrasena", "contrasenya",   "contrase", "senha", "kennwort",
        "wachtwoord", "passord",    "salasana",      "heslo"};
    for (const std::string& w : words) {
      any = true;
      for (const std::string_view h : kHolding) secret = secret || w.find(h) != std::string::npos;
      for (const std::string_view x : kWord) secret = secret || w == x;
      key = key || w == "key";
      identifier = identifier || w == "access" || w == "consumer" || w == "pair" || w == "id";
    }
  }
  bool names_a_secret() const {
    if (!any) return false;
    static constexpr std::array<std::string_view, 10> kDescribes = {
        "type",    "method", "version",    "algorithm", "alg",
        "expires", "expiry", "expiration", "ttl",       "path"};
    for (const std::string_view d : kDescribes) {
      if (last == d) return false;
    }
    return secret || (key && !identifier);
  }
};

bool has_a_secrets_word(std::string_view key) {
  SecretsWords words;
  std::vector<std::string> all = key_words(key);
  words.add(all);
  if (!all.empty()) words.last = all.back();
  return words.names_a_secret();
}

// Whether each key that starts after a ';' inside the word text[begin, end) names a secret (as
// detail::is_secret_query_key of the rest of the word): found for all of them in one pass from
// the word's end. A ';' ends no key, so each would otherwise read the rest of the word again.
// The words of such a key are those of its ';'-separated pieces (a ';' is no letter or digit,
// and no percent escape holds one); a list key is at most 21 characters, 63 escaped, so a longer
// key is one only by its words. Each start, ascending, with its verdict.
std::vector<std::pair<std::size_t, bool>> secret_keys_after_semicolons(std::string_view text,
                                                                       std::size_t begin,
                                                                       std::size_t end) {
  std::vector<std::pair<std::size_t, bool>> out;
  SecretsWords words;
  std::size_t piece_end = end;
  for (std::size_t k = end; k-- > begin;) {
    ++t_redaction_work;
    if (text[k] != ';') continue;
    const std::vector<std::string> piece = key_words(text.substr(k + 1, piece_end - k - 1));
    t_redaction_work += piece_end - k;
    if (words.last.empty() && !piece.empty()) words.last = piece.back();
    words.add(piece);
    piece_end = k;
    if (k + 1 >= end) continue;
    out.emplace_back(k + 1, end - k - 1 <= 64
                                ? detail::is_secret_query_key(text.substr(k + 1, end - k - 1))
                                : words.names_a_secret());
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// The end of the value that starts at text[i]: the next '&', or the end of the URL (a URL
// holds no white space), less what the message put after it. A '#' does not end it: an s3://
// URL's option value keeps its '#' (a secret key chosen on MinIO or Ceph may hold one), and
// where a '#' begins a fragment, hiding the fragment with the value only hides more.
std::size_t value_end(std::string_view text, std::size_t i) {
  const auto run_end = [&](std::size_t from) {
    const std::size_t begin = from;
    while (from < text.size() && text[from] != '&' && !is_space(text[from])) ++from;
    t_redaction_work += from - begin + 1;
    return from;
  };
  const auto blanks_end = [&](std::size_t from) {
    const std::size_t begin = from;
    while (from < text.size() && (text[from] == ' ' || text[from] == '\t')) ++from;
    t_redaction_work += from - begin + 1;
    return from;
  };
  std::size_t end = run_end(i);
  // White space the value holds after all, which the option parser keeps (it ends a value at
  // '&' only): a value that starts with it ("secret_key= V", as a command line's option may be
  // typed) runs to the word after it, and white space after which the URL goes on to its next
  // option ("ab cd&k=v") is the value's.
  if (end == i && end < text.size() && text[end] != '&') end = run_end(blanks_end(end));
  // Not where the words before the white space end as a message's do ("...=V: s3://...&"),
  // nor over another URL.
  for (std::size_t next = run_end(blanks_end(end));
       end > i && end < text.size() && is_space(text[end]) && !trails_url(text[end - 1]) &&
       next < text.size() && text[next] == '&' &&
       text.substr(end, next - end).find("://") == std::string_view::npos;
       next = run_end(blanks_end(end))) {
    end = next;
  }
  while (end > i && trails_url(text[end - 1])) --end;
  return end;
}

// A key without the blanks typed around it.
std::string_view trim_blanks(std::string_view key) {
  while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) key.remove_prefix(1);
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.remove_suffix(1);
  return key;
}

// A query's marks as a URL spells them inside another URL's query value ("?url=https%3A%2F%2Fb
// %2Fk%3FX-Amz-Signature%3DSIG", a presigned URL passed to a fetching proxy), percent-encoded
// once or twice ("%253F": encoded again), hex digits in any case, and JSON's "\u0026" for '&'
// (Go's json.Marshal writes a URL's '&' so). A key starts after one of kEncodedKeyStarts as
// after a '?', '&', ';' or '#', and ends at an '=' in any spelling of kEncodedEquals. Deeper
// encodings are not read (each level is one more spelling to look for at every mark).
constexpr std::array<std::string_view, 9> kEncodedKeyStarts = {
    "%3F", "%26", "%3B", "%23", "%253F", "%2526", "%253B", "%2523", "\\u0026"};
constexpr std::array<std::string_view, 2> kEncodedEquals = {"%3D", "%253D"};

bool spelled_at(std::string_view text, std::size_t at, std::string_view spelling);

// The length of the spelling of `spellings` that begins at text[k], or 0.
template <std::size_t N>
std::size_t spelling_at(std::string_view text, std::size_t k,
                        const std::array<std::string_view, N>& spellings) {
  for (const std::string_view s : spellings) {
    if (spelled_at(text, k, s)) return s.size();
  }
  return 0;
}

// Whether text[0, i) ends with one of kEncodedKeyStarts: how many times the key after it is
// encoded beyond what its server decodes (1 after "%26", 2 after "%2526", 0 after "\u0026": a
// key "%74oken" in a URL encoded once into another's query is spelled "%2574oken"), else -1.
int encoded_key_start_ends_at(std::string_view text, std::size_t i) {
  if (i < 3 ||
      (text[i - 3] != '%' && (i < 5 || text[i - 5] != '%') && (i < 6 || text[i - 6] != '\\'))) {
    return -1;
  }
  for (const std::string_view s : kEncodedKeyStarts) {
    if (i >= s.size() && spelled_at(text, i - s.size(), s)) {
      return s[0] == '\\' ? 0 : s.size() == 3 ? 1 : 2;
    }
  }
  return -1;
}

// Whether `text` holds one of `spellings` anywhere: looked for only where a spelling's first
// byte stands ('%', '\\' or a look-alike's lead byte, none of them a letter), one pass.
template <std::size_t N>
bool holds_spelling(std::string_view text, const std::array<std::string_view, N>& spellings) {
  for (std::size_t k = 0; k < text.size(); ++k) {
    const bool may_start = std::any_of(spellings.begin(), spellings.end(),
                                       [&](std::string_view s) { return s[0] == text[k]; });
    if (may_start && spelling_at(text, k, spellings) != 0) return true;
  }
  return false;
}

// The '=' that ends the key starting at text[i] after one of kEncodedKeyStarts: its position
// and length, or npos where a '&', '#', '?', white space or another such start comes first.
// So the scans from the starts of a text never cross one another: together they cost its length.
std::pair<std::size_t, std::size_t> encoded_key_equals(std::string_view text, std::size_t i) {
  for (std::size_t k = i; k < text.size(); ++k) {
    ++t_redaction_work;
    const char c = text[k];
    if (c == '&' || c == '#' || c == '?' || is_space(c)) break;
    if (c == '=') return {k, 1};
    if (c != '%' && c != '\\') continue;
    if (const std::size_t n = spelling_at(text, k, kEncodedEquals); n != 0) return {k, n};
    if (spelling_at(text, k, kEncodedKeyStarts) != 0) break;
  }
  return {std::string_view::npos, 0};
}

// The encoded '=' (kEncodedEquals) that ends the key starting at text[i] where no plain '='
// does: its position and length, or npos where a '=', '&', '#', '?', ';' or white space comes
// first. A query percent-encoded into a value as RFC 3986 allows ('=' and '&' escaped, '?' and
// ';' left: "?url=https://b/k?token%3DT%26a%3D1", as Spring's UriComponentsBuilder writes a
// presigned URL given to a proxy) has its first key after a plain '?'. The scan stops at the
// next mark that starts a key, so the scans from the starts of a text cost its length.
std::pair<std::size_t, std::size_t> encoded_equals_of_plain_key(std::string_view text,
                                                                std::size_t i) {
  for (std::size_t k = i; k < text.size(); ++k) {
    ++t_redaction_work;
    const char c = text[k];
    if (c == '=' || c == '&' || c == '#' || c == '?' || c == ';' || is_space(c)) break;
    if (c != '%') continue;
    if (const std::size_t n = spelling_at(text, k, kEncodedEquals); n != 0) return {k, n};
  }
  return {std::string_view::npos, 0};
}

// Where the value of a parameter after a ';' in a URL's path (a path segment's parameter:
// "https://h/d;sig=S/x.npy", Java's ";jsessionid=...") ends at the latest: at the end of its
// segment or the next parameter ('/', ';', '?' or '#'), before `end`, so that the rest of the
// path, the object's name, is not hidden with it.
std::size_t path_parameter_end(std::string_view text, std::size_t from, std::size_t end) {
  for (std::size_t k = from; k < end; ++k) {
    ++t_redaction_work;
    const char c = text[k];
    if (c == '/' || c == ';' || c == '?' || c == '#') return k;
  }
  return end;
}

// Whether `key` names an AWS secret access key or session token (shardload's option, AWS's
// and boto3's spellings): their values hold '/' as they are (a secret key is 40 base64
// characters), so a '/' does not end them, even where the text is a local path.
bool holds_slashes(std::string_view key) {
  if (key.size() > 3 * 21) return false;  // longer, even escaped, than the longest below
  const std::string k = decoded_key(key);
  for (const std::string_view name :
       {"secret_key", "session_token", "aws_secret_access_key", "secret_access_key",
        "aws_session_token", "x-amz-security-token", "security-token"}) {
    if (k == name) return true;
  }
  return false;
}

// Each query parameter (after '?', '&', ';', which some servers take as '&', or '#' for a
// fragment, where OAuth puts its tokens) whose key is a secret, with its value replaced by
// "***". A ';' inside a query's value does not end it: the rest is hidden with it. In a path
// (no '?' or '#' since the URL's start: since the last white space), a ';' parameter's value
// ends with its segment (path_parameter_end). A key ending at an encoded '=' after a plain mark
// is read too (encoded_equals_of_plain_key). So too each
// parameter of a query encoded into a value (kEncodedKeyStarts): its secret's value is hidden
// to where the outer value ends (the next '&'), the rest of the inner URL with it. And
// BunnyCDN's token in a URL's path ("https://h/bcdn_token=T&expires=E&token_path=/v/"),
// a key after a '/'.
std::string redact_query(std::string_view text, std::vector<std::string>& hidden) {
  std::string out;
  out.reserve(text.size());
  // The word of the last key looked at, and the '=' (or what else) after it: a key that starts
  // after a ';' inside that word ends where it does, and whether it is a secret's is looked up
  // (secret_keys_after_semicolons), not read again.
  std::size_t word_begin = 0;
  std::size_t word_end = 0;
  std::size_t word_eq = 0;
  std::vector<std::pair<std::size_t, bool>> inner_keys;
  bool inner_keys_known = false;
  // Whether text[i] lies in a path: no '?' or '#' since the last white space.
  bool in_path = true;
  // Whether a URL's "://" stands since the last white space. Where none does, the text is a
  // local path (or a URL typed without its scheme, which is read as one): it has no query, and
  // a "?key=" or "#key=" in it is part of a file's or a directory's name, which holds no '/'.
  // A secret key's value is hidden there to the next '/' only, so that the names after it
  // (the shard's own) are shown; the value itself stays hidden, as a scheme-less URL's token
  // would be secret. An AWS secret access key or session token (holds_slashes) is hidden to
  // its end all the same: it holds '/' as it is, and no name of a file is spelled with one.
  bool in_url = false;
  // The first '/' at or after `from` (the value's end in a local path): kept from one key to
  // the next, so that the scans over a text cost its length.
  std::size_t next_slash = 0;
  bool slash_known = false;
  const auto local_limit = [&](std::size_t from, std::string_view key) {
    if (in_url || holds_slashes(key)) return text.size();
    if (!slash_known || next_slash < from) {
      slash_known = true;
      const std::size_t found = text.find('/', from);
      t_redaction_work += (found == std::string_view::npos ? text.size() : found) - from + 1;
      next_slash = found == std::string_view::npos ? text.size() : found;
    }
    return next_slash;
  };
  for (std::size_t i = 0; i < text.size();) {
    ++t_redaction_work;
    if (i > 0 && (text[i - 1] == '?' || text[i - 1] == '#')) in_path = false;
    if (i > 0 && is_space(text[i - 1])) in_path = true;
    if (i > 0 && is_space(text[i - 1])) in_url = false;
    if (i >= 3 && text[i - 1] == '/' && text[i - 2] == '/' && text[i - 3] == ':') in_url = true;
    const bool starts_key =
        i > 0 &&
        (text[i - 1] == '?' || text[i - 1] == '&' || text[i - 1] == ';' || text[i - 1] == '#' ||
         (text[i - 1] == '/' && spelled_at(text, i, detail::kPathTokenKey)));
    // The secret key text[i, eq) and its '=' (eq_size bytes, encoded or not) kept, its value
    // hidden; i moves past the value.
    const auto hide_value = [&](std::size_t eq, std::size_t eq_size, std::string_view key) {
      out.append(text.substr(i, eq + eq_size - i));
      const std::size_t end =
          value_end(text.substr(0, local_limit(eq + eq_size, key)), eq + eq_size);
      if (end > eq + eq_size) {
        out += "***";
        hidden.emplace_back(text.substr(eq + eq_size, end - eq - eq_size));
      }
      i = end;
    };
    if (const int encodings = starts_key ? -1 : encoded_key_start_ends_at(text, i);
        encodings >= 0) {
      const auto [eq, eq_size] = encoded_key_equals(text, i);
      std::string key(trim_blanks(text.substr(i, eq == std::string_view::npos ? 0 : eq - i)));
      for (int k = 0; k < encodings; ++k) key = percent_decoded(key);
      if (eq != std::string_view::npos && eq > i && detail::is_secret_query_key(key)) {
        hide_value(eq, eq_size, key);
        continue;
      }
    }
    if (starts_key) {
      const auto [eq, eq_size] = encoded_equals_of_plain_key(text, i);
      if (eq != std::string_view::npos && eq > i) {
        std::string key(trim_blanks(text.substr(i, eq - i)));
        for (std::size_t k = 0; k < (eq_size == 3 ? 1U : 2U); ++k) key = percent_decoded(key);
        if (detail::is_secret_query_key(key)) {
          hide_value(eq, eq_size, key);
          continue;
        }
      }
    }
    const bool inner = starts_key && i > word_begin && i < word_end;
    std::size_t eq = i;
    if (inner) {
      eq = word_eq;
    } else if (starts_key) {
      // Blanks around the key's one word belong to it here ("secret_key =V", "& secret_key=V":
      // an option typed with a space around its key); the key is compared without them.
      const auto blank = [&](std::size_t k) { return text[k] == ' ' || text[k] == '\t'; };
      const auto word = [&](std::size_t k) {
        return text[k] != '=' && text[k] != '&' && text[k] != '#' && text[k] != '?' &&
               !is_space(text[k]);
      };
      while (eq < text.size() && blank(eq)) ++eq;
      word_begin = eq;
      while (eq < text.size() && word(eq)) ++eq;
      word_end = eq;
      while (eq < text.size() && blank(eq)) ++eq;
      word_eq = eq;
      inner_keys_known = false;
      t_redaction_work += eq - i;
    }
    // Whether the key text[i, eq) names a secret.
    const auto secret_key = [&]() {
      if (!inner) return detail::is_secret_query_key(trim_blanks(text.substr(i, eq - i)));
      if (!inner_keys_known) {
        inner_keys = secret_keys_after_semicolons(text, word_begin, word_end);
        inner_keys_known = true;
      }
      const auto k =
          std::lower_bound(inner_keys.begin(), inner_keys.end(), std::make_pair(i, false));
      return k->second;
    };
    // (An escaped key of more than 51 characters decodes to more than endpoint_override's 17.)
    if (starts_key && eq > i && eq < text.size() && text[eq] == '=' && eq - i <= 51 &&
        decoded_key(text.substr(i, eq - i)) == "endpoint_override") {
      // shardload's endpoint, percent-encoded in the query: a user part in it ("http://
      // user:password@host", "user:password@host") is hidden to its last '@', where the
      // user-part rule, which looks for a plain "://", does not see it. The rest of the value
      // is read on by the query's rules: a query of the endpoint's own ("...:9/?token=S", or
      // "%3Ftoken%3DS") has its secrets hidden as any other.
      const std::size_t end = value_end(text, eq + 1);
      const std::string_view value = text.substr(eq + 1, end - eq - 1);
      std::size_t at = value.rfind('@');
      for (std::size_t k = value.size(); k >= 3 && (at == std::string_view::npos || k > at + 3);
           --k) {
        if (value[k - 3] == '%' && value[k - 2] == '4' && value[k - 1] == '0') {
          at = k - 3;
          break;
        }
      }
      out.append(text.substr(i, eq + 1 - i));
      i = eq + 1;
      if (at != std::string_view::npos && at > 0) {
        out += "***";
        i += at;
      }
      continue;
    }
    if (!starts_key || eq == i || eq >= text.size() || text[eq] != '=' || !secret_key()) {
      out += text[i++];
      continue;
    }
    out.append(text.substr(i, eq + 1 - i));  // the key and its '='
    // A path parameter's value is looked for within its segment only: value_end's run to the
    // next '&' would cross every later parameter again.
    const bool path_parameter = in_path && text[i - 1] == ';';
    // BunnyCDN's token in a path ends at its segment's '/' too, as sealing takes it: a value
    // run on to the next '&' would be hidden with the object's name, and the token alone, as a
    // server's answer quotes it, would not be known to hide.
    const bool path_token = in_path && text[i - 1] == '/';
    std::size_t limit = local_limit(eq + 1, trim_blanks(text.substr(i, eq - i)));
    if (path_parameter) {
      limit = path_parameter_end(text, eq + 1, limit);
    } else if (path_token) {
      limit = std::min(text.find_first_of("/?#", eq + 1), text.size());
      t_redaction_work += limit - eq;
    }
    const std::size_t end = value_end(text.substr(0, limit), eq + 1);
    if (end > eq + 1) {
      out += "***";
      hidden.emplace_back(text.substr(eq + 1, end - eq - 1));
    }
    i = end;
  }
  return out;
}

// Each Oracle Cloud pre-authenticated request's token in `text` (par_token_span) replaced by
// "***". The shape of the path is looked for rather than the host: a PAR is served on
// objectstorage.REGION.oraclecloud.com and on a namespace's own host name
// (NS.objectstorage.REGION.oci.customer-oci.com), and a message may quote it without its host.
std::string redact_path_tokens(std::string_view text, std::vector<std::string>& hidden) {
  std::string out;
  std::size_t done = 0;
  for (auto [begin, end] = detail::par_token_span(text, 0); begin != std::string_view::npos;
       std::tie(begin, end) = detail::par_token_span(text, end)) {
    if (done == 0) out.reserve(text.size());
    out.append(text.substr(done, begin - done));
    out += "***";
    hidden.emplace_back(text.substr(begin, end - begin));
    done = end;
  }
  if (done == 0) return std::string(text);
  out.append(text.substr(done));
  return out;
}

// The names of the schemes registered with the storage layer (add_redacted_scheme), beyond
// the built-in http, https and s3: a list that is never changed, replaced whole by each
// addition, the replaced ones never freed (additions are few), so that a redaction reads it
// without a lock (in a forked child too).
struct SchemeNames {
  std::vector<std::string> names;
};
std::mutex g_scheme_names_mu;  // taken only by additions, for a moment
std::atomic<const SchemeNames*> g_scheme_names{nullptr};
const bool g_scheme_names_mu_forks = (detail::hold_across_fork(&g_scheme_names_mu), true);

// Whether text[0, i) ends with `name` (lower case) in any case, not inside a longer word.
bool scheme_name_ends_at(std::string_view text, std::size_t i, std::string_view name) {
  if (i < name.size()) return false;
  const std::size_t begin = i - name.size();
  for (std::size_t k = 0; k < name.size(); ++k) {
    if (std::tolower(static_cast<unsigned char>(text[begin + k])) != name[k]) return false;
  }
  const char before = begin == 0 ? ' ' : text[begin - 1];
  return std::isalnum(static_cast<unsigned char>(before)) == 0 && before != '+' && before != '-' &&
         before != '.';
}

// Whether text[0, i) ends with a served scheme's name (http, https, s3 or a registered
// scheme's, in any case, not inside a longer word).
bool served_scheme_ends_at(std::string_view text, std::size_t i) {
  if (const SchemeNames* const more = g_scheme_names.load(std::memory_order_acquire)) {
    for (const std::string& name : more->names) {
      if (scheme_name_ends_at(text, i, name)) return true;
    }
  }
  for (const std::string_view name : {"http", "https", "s3"}) {
    if (i < name.size()) continue;
    const std::size_t begin = i - name.size();
    bool same = true;
    for (std::size_t k = 0; k < name.size(); ++k) {
      same = same && std::tolower(static_cast<unsigned char>(text[begin + k])) == name[k];
    }
    const char before = begin == 0 ? ' ' : text[begin - 1];
    if (same && std::isalnum(static_cast<unsigned char>(before)) == 0 && before != '+' &&
        before != '-' && before != '.') {
      return true;
    }
  }
  return false;
}

// The spellings of a URL's slashes the redaction takes for them: '/' and '\\', percent-encoded
// ("%2F", "%5C", as a URL copied out of an encoded query spells them), and the characters
// that look like them: U+1735 PHILIPPINE SINGLE PUNCTUATION, U+2044 FRACTION SLASH, U+2215
// DIVISION SLASH, U+2216 SET MINUS, U+2571 and U+2572 (box drawings' diagonals), U+27CB and
// U+27CD (mathematical diagonals), U+29F5 REVERSE SOLIDUS OPERATOR, U+29F8 BIG SOLIDUS, U+29F9
// BIG REVERSE SOLIDUS, U+2F03 KANGXI RADICAL SLASH, U+FE68 SMALL REVERSE SOLIDUS and the
// full-width solidus and reverse solidus (U+FF0F, U+FF3C). Its length in bytes, or 0.
constexpr std::array<unsigned, 15> kSlashLookAlikes = {0x1735, 0x2044, 0x2215, 0x2216, 0x2571,
                                                       0x2572, 0x27cb, 0x27cd, 0x29f5, 0x29f8,
                                                       0x29f9, 0x2f03, 0xfe68, 0xff0f, 0xff3c};
std::size_t slash_at(std::string_view text, std::size_t i) {
  const char c = text[i];
  if (c == '/' || c == '\\') return 1;
  if (c == '%') {
    if (i + 2 < text.size() && (text[i + 1] == '2' || text[i + 1] == '5') &&
        std::tolower(static_cast<unsigned char>(text[i + 2])) == (text[i + 1] == '2' ? 'f' : 'c')) {
      return 3;
    }
    return 0;
  }
  if (static_cast<unsigned char>(c) < 0xe1) return 0;
  const Utf8Sequence seq = utf8_sequence_at(text, i);
  return std::find(kSlashLookAlikes.begin(), kSlashLookAlikes.end(), seq.code_point) !=
                 kSlashLookAlikes.end()
             ? seq.length
             : 0;
}

// The white space and format characters of Unicode (categories Zs and Cf, as of Unicode 15):
// a no-break or zero-width space, a direction mark, a soft hyphen, a byte order mark.
constexpr std::array<std::pair<unsigned, unsigned>, 25> kBlankRanges = {{
    {0x20, 0x20},       {0xa0, 0xa0},       {0xad, 0xad},       {0x600, 0x605},
    {0x61c, 0x61c},     {0x6dd, 0x6dd},     {0x70f, 0x70f},     {0x890, 0x891},
    {0x8e2, 0x8e2},     {0x1680, 0x1680},   {0x180e, 0x180e},   {0x2000, 0x200f},
    {0x202a, 0x202f},   {0x205f, 0x2064},   {0x2066, 0x206f},   {0x3000, 0x3000},
    {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd}, {0x110cd, 0x110cd},
    {0x13430, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a}, {0xe0001, 0xe0001},
    {0xe0020, 0xe007f},
}};
bool is_blank_code_point(unsigned cp) {
  if (cp < 0x80) return cp == ' ' || cp == '\t';
  for (const auto& [lo, hi] : kBlankRanges) {
    if (cp >= lo && cp <= hi) return true;
  }
  return false;
}

// The length of a blank at text[i] ("http:/\u200B/", "http:\u00A0//"): a ' ' or a tab, a Zs
// or Cf character, or how printable() escapes one or a control ("\t", "\xHH", "\uHHHH"); 0
// where there is none.
std::size_t blank_at(std::string_view text, std::size_t i) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  if (c == '\\' && i + 1 < text.size()) {
    const char e = text[i + 1];
    if (e == 't' || e == 'n' || e == 'r' || e == '0') return 2;
    const auto hex_digits = [&](std::size_t n) {
      unsigned v = 0;
      if (i + 2 + n > text.size()) return -1;
      for (std::size_t k = 0; k < n; ++k) {
        const int h = hex_value(text[i + 2 + k]);
        if (h < 0) return -1;
        v = v * 16 + static_cast<unsigned>(h);
      }
      return static_cast<int>(v);
    };
    if (e == 'x' && hex_digits(2) >= 0) return 4;
    if (const int cp = e == 'u' ? hex_digits(4) : -1;
        cp >= 0 && (is_blank_code_point(static_cast<unsigned>(cp)) ||
                    acts_on_a_terminal(static_cast<unsigned>(cp)))) {
      return 6;
    }
    return 0;
  }
  if (c < 0x80) return c == ' ' || c == '\t' ? 1 : 0;
  const Utf8Sequence seq = utf8_sequence_at(text, i);
  return seq.length != 0 && is_blank_code_point(seq.code_point) ? seq.length : 0;
}

// How many bytes of text before i are one mark typed between a scheme's name and its slashes:
// a code point that is no ASCII letter, digit, white space or slash ("http;//", "hxxps[:]//",
// "http\u2236//", "http:\u00A0//"), a "%3A" ("http%3A//") or printable()'s escape of a blank;
// 0 where there is none.
std::size_t mark_before(std::string_view text, std::size_t i) {
  if (i == 0) return 0;
  if (i >= 3 && text[i - 3] == '%' && text[i - 2] == '3' &&
      std::tolower(static_cast<unsigned char>(text[i - 1])) == 'a') {
    return 3;
  }
  for (const std::size_t n : {std::size_t{6}, std::size_t{4}, std::size_t{2}}) {
    if (i >= n && text[i - n] == '\\' && blank_at(text, i - n) == n) return n;
  }
  // A "\uHHHH" escape (JSON's, printable()'s) of a code point that is a mark itself: JSON
  // writes "http", U+2236 RATIO, "//" as "http\u2236//".
  if (i >= 6 && text[i - 6] == '\\' && text[i - 5] == 'u') {
    unsigned cp = 0;
    bool hex = true;
    for (std::size_t k = i - 4; k < i && hex; ++k) {
      const int h = hex_value(text[k]);
      hex = h >= 0;
      cp = cp * 16 + static_cast<unsigned>(h < 0 ? 0 : h);
    }
    if (hex && cp != 0) {
      const bool mark = cp < 0x80 ? std::isalnum(static_cast<int>(cp)) == 0 &&
                                        !is_space(static_cast<char>(cp)) && cp != '/' && cp != '\\'
                                  : std::find(kSlashLookAlikes.begin(), kSlashLookAlikes.end(),
                                              cp) == kSlashLookAlikes.end();
      if (mark) return 6;
    }
  }
  const unsigned char c = static_cast<unsigned char>(text[i - 1]);
  if (c < 0x80) {
    return std::isalnum(c) != 0 || is_space(static_cast<char>(c)) || c == '/' || c == '\\' ? 0 : 1;
  }
  std::size_t k = i - 1;  // back to the sequence's first byte
  while (k > 0 && i - k < 4 && (static_cast<unsigned char>(text[k]) & 0xc0) == 0x80) --k;
  const Utf8Sequence seq = utf8_sequence_at(text, k);
  if (seq.length != i - k || slash_at(text, k) != 0) return 0;
  return seq.length;
}

// Whether text[0, i) ends with a word a scheme could be ("hxxps", "s3", "my.store+x-9": a
// letter, then letters, digits, '+', '-' and '.'), that starts the text or follows none of
// those characters nor a '/', '\\', '%' or '@' (not a path's part, an escape or an address).
bool scheme_like_word_ends_at(std::string_view text, std::size_t i) {
  const auto word = [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '+' || c == '-' || c == '.';
  };
  std::size_t begin = i;
  while (begin > 0 && word(static_cast<unsigned char>(text[begin - 1]))) --begin;
  while (begin < i && std::isalpha(static_cast<unsigned char>(text[begin])) == 0) ++begin;
  if (begin == i || std::isalnum(static_cast<unsigned char>(text[i - 1])) == 0) return false;
  if (begin == 0) return true;
  const char before = text[begin - 1];
  return word(static_cast<unsigned char>(before)) == false && before != '/' && before != '\\' &&
         before != '%' && before != '@';
}

// Where a URL's user part may start, as next_scheme_mark finds it.
struct SchemeMark {
  std::size_t at = std::string_view::npos;     // the scheme's ':' or its slashes' first
  std::size_t start = std::string_view::npos;  // the authority's start, where already known
  bool needs_password = false;                 // a "user:password@" only, not a token alone
};

// A served scheme's ':' (or any "://") at or after `from`, remembered: a text is looked
// through for them once, however many slashes redact_user_info is shown first.
struct ColonMarks {
  std::size_t from = 0;
  std::size_t found = std::string_view::npos;
  bool known = false;
};

// Where the next URL at or after `from` has its scheme's ':' or its slashes: a "://", or a
// served scheme's ':' with any other run of slashes after it ("http:/user:password@host/",
// "http:\\user:password@host/", none: "http:user:password@host/"): sources refuse those
// spellings, showing them as written. Or, by one rule rather than a list of typos, two
// slashes in any spelling (slash_at), blanks between them allowed ("http:/\u200B/"), and a
// served scheme's name followed by at most 8 marks (mark_before) and one slash: the user part
// after them is a URL's ("http//user:password@host/x.npy", "http\u2236//", "http%3A%2F%2F",
// "//user:password@host/x.npy", a local path whose "not found" shows it as written). After
// two slashes with no scheme-like word and marks before them, only a "user:password@" is
// taken for a user part ("/data//v@2/x.npy" stays a path).
SchemeMark next_scheme_mark(std::string_view text, std::size_t from, ColonMarks& colons) {
  if (!colons.known || colons.from > from ||
      (colons.found != std::string_view::npos && colons.found < from)) {
    colons.known = true;
    colons.from = from;
    colons.found = std::string_view::npos;
    for (std::size_t i = text.find(':', from); i != std::string_view::npos;
         i = text.find(':', i + 1)) {
      ++t_redaction_work;
      if (text.substr(i).starts_with("://") || served_scheme_ends_at(text, i)) {
        colons.found = i;
        break;
      }
    }
  }
  const std::size_t limit = std::min(colons.found, text.size());
  // Looked for before the limit only: a search to the text's end from each of many marks would
  // cost the text's length squared ("@" and then "http:" many times, no slash after them).
  const std::string_view head = text.substr(0, limit);
  for (std::size_t i = head.find_first_of("/\\%\xe1\xe2\xef", from); i < limit;
       i = head.find_first_of("/\\%\xe1\xe2\xef", i + 1)) {
    ++t_redaction_work;
    const std::size_t first = slash_at(text, i);
    if (first == 0 || blank_at(text, i) != 0) continue;
    // The run of slashes from here, blanks among them (at most 3).
    std::size_t k = i + first;
    std::size_t end = k;
    int slashes = 1;
    for (int blanks = 0; k < text.size();) {
      if (const std::size_t b = blank_at(text, k); b != 0 && blanks < 3) {
        ++blanks;
        k += b;
      } else if (const std::size_t s = slash_at(text, k); s != 0) {
        ++slashes;
        k += s;
        end = k;
      } else {
        break;
      }
    }
    // What is before it: a served scheme's name, or a scheme-like word, and marks between.
    bool served = false;
    bool scheme_like = false;
    for (std::size_t m = i, marks = 0; marks <= 8; ++marks) {
      served = served || served_scheme_ends_at(text, m);
      scheme_like = scheme_like || (marks > 0 && scheme_like_word_ends_at(text, m));
      const std::size_t n = mark_before(text, m);
      if (n == 0 || served) break;
      m -= n;
    }
    if (slashes >= 2) {
      // The next search goes on after the run (a long run is looked at once).
      return {std::max(i, end - 2), end, !served && !scheme_like};
    }
    if (served) return {i, end, false};
  }
  if (colons.found == std::string_view::npos) return {};
  return {colons.found, std::string_view::npos, false};
}

// An '@' spelled otherwise: percent-encoded, once or twice ("%40", "%2540": a URL encoded
// into another's query, then again), the full-width and the small look-alike (U+FF20, U+FE6B),
// those percent-encoded as a browser or quote() sends what was typed, and encoded twice, as
// "%2540" is the '@' itself. A percent-escape's hex digits are read in any case, each digit on
// its own ("%eF%Bc%A0" is what a server decodes), so the spellings are compared that way
// (spelled_at): only ASCII letters differ in case, never the look-alikes' own bytes.
constexpr std::array<std::string_view, 8> kAtSpellings = {
    "%40",       "%2540",     "\xEF\xBC\xA0",    "\xEF\xB9\xAB",
    "%EF%BC%A0", "%EF%B9%AB", "%25EF%25BC%25A0", "%25EF%25B9%25AB"};

// Whether text[at, at + spelling.size()) is `spelling` with its ASCII letters in any case.
bool spelled_at(std::string_view text, std::size_t at, std::string_view spelling) {
  if (at > text.size() || text.size() - at < spelling.size()) return false;
  for (std::size_t k = 0; k < spelling.size(); ++k) {
    const auto a = static_cast<unsigned char>(text[at + k]);
    const auto b = static_cast<unsigned char>(spelling[k]);
    if (a != b && (a >= 0x80 || std::tolower(a) != std::tolower(b))) return false;
  }
  return true;
}

// The start of an '@' spelled otherwise that ends at `q` (the latest start where two do), or npos.
std::size_t spelled_at_ending(std::string_view text, std::size_t q) {
  std::size_t found = std::string_view::npos;
  const auto consider = [&](std::string_view s) {
    if (q >= s.size() && spelled_at(text, q - s.size(), s) &&
        (found == std::string_view::npos || q - s.size() > found)) {
      found = q - s.size();
    }
  };
  for (const std::string_view s : kAtSpellings) consider(s);
  return found;
}

// The answers to the scans redact_user_info makes for each URL mark, from tables built on first
// use in one pass over the text: a scan from each of many marks over the same long rest of the
// text ("@" and then "http:" many times, no '/' after them) costs the text's length squared
// otherwise. A text too long for 32-bit positions is scanned each time.
class TextScans {
 public:
  explicit TextScans(std::string_view text) : text_(text) {}

  // The first position at or after `from` that ends an authority: a '/', '?', '#' or white space.
  std::size_t authority_end(std::size_t from) {
    return first_from(authority_end_, from,
                      [](char c) { return c == '/' || c == '?' || c == '#' || is_space(c); });
  }
  // The first '/', '?', '#' or line feed at or after `from`.
  std::size_t line_stop(std::size_t from) {
    return first_from(line_stop_, from,
                      [](char c) { return c == '/' || c == '?' || c == '#' || c == '\n'; });
  }
  // The first '/', '=' or white space at or after `from`.
  std::size_t key_stop(std::size_t from) {
    return first_from(key_stop_, from, [](char c) { return c == '/' || c == '=' || is_space(c); });
  }
  // The first '/' or white space at or after `from`.
  std::size_t path_stop(std::size_t from) {
    return first_from(path_stop_, from, [](char c) { return c == '/' || is_space(c); });
  }
  std::size_t colon(std::size_t from) {
    return first_from(colon_, from, [](char c) { return c == ':'; });
  }
  std::size_t non_digit(std::size_t from) {
    return first_from(non_digit_, from, [](char c) { return c < '0' || c > '9'; });
  }
  // The first '@', line end or "://" at or after `from`.
  std::size_t at_or_line_end(std::size_t from) {
    if (!fits()) {
      t_redaction_work += text_.size() - std::min(from, text_.size());
      while (from < text_.size() && !at_or_line_end_at(from)) ++from;
      return std::min(from, text_.size());
    }
    if (at_or_line_end_.empty()) {
      build_next(at_or_line_end_, [&](std::size_t k) { return at_or_line_end_at(k); });
    }
    ++t_redaction_work;
    return at_or_line_end_[std::min(from, text_.size())];
  }
  // The last '@' before `to`, or npos.
  std::size_t last_at(std::size_t to) {
    return last_before(last_at_, to, [&](std::size_t q) -> std::size_t {
      return text_[q - 1] == '@' ? q - 1 : std::string_view::npos;
    });
  }
  // The start of the last '@' spelled otherwise (kAtSpellings) that ends at or before `to`, or
  // npos.
  std::size_t last_at_spelling(std::size_t to) {
    return last_before(last_spelled_at_, to,
                       [&](std::size_t q) { return spelled_at_ending(text_, q); });
  }

 private:
  using Table = std::vector<std::uint32_t>;
  static constexpr std::uint32_t kNone = UINT32_MAX;

  bool fits() const { return text_.size() < kNone; }
  bool at_or_line_end_at(std::size_t k) const {
    return text_[k] == '@' || text_[k] == '\n' || text_[k] == '\r' ||
           text_.compare(k, 3, "://") == 0;
  }
  // next[k]: the first position at or after k where `holds` (a position) is true, else size.
  template <typename Holds>
  void build_next(Table& next, Holds holds) {
    next.resize(text_.size() + 1);
    next[text_.size()] = static_cast<std::uint32_t>(text_.size());
    for (std::size_t k = text_.size(); k-- > 0;) {
      next[k] = holds(k) ? static_cast<std::uint32_t>(k) : next[k + 1];
    }
    t_redaction_work += text_.size() + 1;
  }
  template <typename Stop>
  std::size_t first_from(Table& next, std::size_t from, Stop stop) {
    from = std::min(from, text_.size());
    if (!fits()) {
      const std::size_t begin = from;
      while (from < text_.size() && !stop(text_[from])) ++from;
      t_redaction_work += from - begin + 1;
      return from;
    }
    if (next.empty()) build_next(next, [&](std::size_t k) { return stop(text_[k]); });
    ++t_redaction_work;
    return next[from];
  }
  // last[q]: the greatest found(q') for q' <= q (found(q'): a start that ends by q', or npos).
  template <typename Found>
  std::size_t last_before(Table& last, std::size_t to, Found found) {
    to = std::min(to, text_.size());
    if (!fits()) {
      std::size_t best = std::string_view::npos;
      for (std::size_t q = 1; q <= to; ++q) {
        if (const std::size_t f = found(q);
            f != std::string_view::npos && (best == std::string_view::npos || f > best)) {
          best = f;
        }
      }
      t_redaction_work += to + 1;
      return best;
    }
    if (last.empty()) {
      last.resize(text_.size() + 1);
      last[0] = kNone;
      for (std::size_t q = 1; q <= text_.size(); ++q) {
        const std::size_t f = found(q);
        last[q] = f != std::string_view::npos && (last[q - 1] == kNone || f > last[q - 1])
                      ? static_cast<std::uint32_t>(f)
                      : last[q - 1];
      }
      t_redaction_work += text_.size() + 1;
    }
    ++t_redaction_work;
    return last[to] == kNone ? std::string_view::npos : last[to];
  }

  std::string_view text_;
  Table authority_end_, line_stop_, key_stop_, path_stop_, colon_, non_digit_, at_or_line_end_;
  Table last_at_, last_spelled_at_;
};

// The password of each URL's user part ("scheme://user:password@host"), and a user part
// without a password whole (it is then a token: "https://TOKEN@host" is how some servers
// take one), replaced by "***". The authority ends at the first '/', '?' or '#' (RFC 3986)
// or white space, and the user part at its last '@': a quote or a bracket in the password
// is still the password. The authority starts after the "://" and any '/' that follows it.
std::string redact_user_info(std::string_view text, std::vector<std::string>& hidden) {
  std::string out;
  out.reserve(text.size());
  std::size_t done = 0;
  std::size_t run_end = 0;                      // where the run of text last looked at ends
  std::size_t run_at = std::string_view::npos;  // and its last '@' after the authority
  const auto stops = [&](std::size_t from, std::string_view at) {
    while (from < text.size() && at.find(text[from]) == std::string_view::npos &&
           !is_space(text[from])) {
      ++from;
    }
    return from;
  };
  ColonMarks colons;
  TextScans scans(text);
  for (SchemeMark mark = next_scheme_mark(text, 0, colons); mark.at != std::string_view::npos;
       mark = next_scheme_mark(text, std::max(mark.at + 2, done), colons)) {
    ++t_redaction_work;
    std::size_t start = mark.start;
    if (start == std::string_view::npos) {
      // Past any further slashes: libcurl takes "http:///user:password@host/" as
      // "http://user:password@host/" and sends the password, so it is the user part there too.
      start = mark.at + 1;
      // A served scheme's ':' followed by a short run of other marks among its slashes
      // ("http: //", "http:/ /", "https:.//", "http:://", "http:\t//", "http:\u00A0//"):
      // sources refuse these as mistyped URLs and quote them; the user part after the run is
      // the URL's.
      if (!text.substr(mark.at).starts_with("://")) {
        std::size_t run = start;
        bool slash = false;
        for (int marks = 0; run < text.size() && marks < 6; ++marks) {
          if (const std::size_t s = slash_at(text, run); s != 0 && blank_at(text, run) == 0) {
            slash = true;
            run += s;
          } else if (const std::size_t b = blank_at(text, run); b != 0) {
            run += b;
          } else if (std::string_view(".:|;,").find(text[run]) != std::string_view::npos) {
            ++run;
          } else {
            break;
          }
        }
        if (slash) start = run;
      }
      while (start < text.size()) {
        const std::size_t s = slash_at(text, start);
        if (s == 0 || blank_at(text, start) != 0) break;
        start += s;
      }
    }
    const std::size_t end = scans.authority_end(start);
    const std::string_view authority = text.substr(start, end - start);
    // The authority's last '@' (the scans below are table look-ups: see TextScans).
    const auto last_at_in = [&](std::size_t from, std::size_t to) {
      const std::size_t k = scans.last_at(to);
      return k != std::string_view::npos && k >= from ? k : std::string_view::npos;
    };
    std::size_t at = last_at_in(start, end);
    if (at != std::string_view::npos) at -= start;
    // After two slashes with no scheme before them, the authority as RFC 3986 ends it, none
    // of the rules below that look further for a password holding a stop: "see //wiki: ask
    // ops@example.com" is no URL.
    if (at == std::string_view::npos && mark.needs_password) continue;
    if (at == std::string_view::npos) {
      // "user:pa ss@host": a space in the password ends the authority early (the URL does not
      // work), yet the text up to its '/', '?' or '#' holds "user:...@": the password goes.
      const std::size_t wide = scans.line_stop(start);
      const std::size_t last = last_at_in(start, wide);
      const std::size_t colon = scans.colon(start);
      if (last != std::string_view::npos && colon < last && colon < end) at = last - start;
    }
    if (at == std::string_view::npos && end < text.size() &&
        (text[end] == '#' || text[end] == '?')) {
      // "user:pa#ss@host", "TOK?EN@host": a '#' or '?' in the password ends the authority by
      // RFC 3986 (the URL does not work), yet the text to the next '/' holds an '@' with no
      // '=' or white space before it (no query's key, no message's words): it is the user
      // part's, to its last such '@'.
      const std::size_t last = last_at_in(end, scans.key_stop(end));
      if (last != std::string_view::npos) at = last - start;
    }
    if (at == std::string_view::npos && !authority.empty() && authority[0] != '[') {
      // "user:pa/ss@host": a '/' in the password ends the authority early (the URL does not
      // work), yet what follows the ':' is no port: the password still goes, to its '@'.
      const std::size_t colon = scans.colon(start);
      if (colon + 1 < end && scans.non_digit(colon + 1) < end) {
        // The URL's last '@' (before its query), found once per run of text: a message of
        // many such URLs costs its length, not its length squared.
        if (end >= run_end) {
          run_end = stops(end, "?#");
          run_at = text.substr(end, run_end - end).rfind('@');
          if (run_at != std::string_view::npos) run_at += end;
        }
        if (run_at != std::string_view::npos && run_at > end) at = run_at - start;
      }
    }
    if (at == std::string_view::npos && !authority.empty() && authority[0] != '[') {
      // "user:Pa#ss=word@host", "user:Pa/SE#CRET@host", "user:Pa?ss word@host": a password
      // holding both kinds of stop, or a '=' or a space after its '#' or '?', which the rules
      // above do not follow. Where the authority is "user:" and a password (what follows the
      // ':' is no port), the user part runs, whatever it holds, to the first '@' on the line
      // before another URL, and then to the last '@' before the '/' or space after that.
      const std::size_t colon = scans.colon(start);
      const bool user_form =
          colon < end &&
          (colon + 1 == end ? end < text.size() && (text[end] == '#' || text[end] == '?')
                            : scans.non_digit(colon + 1) < end);
      if (const std::size_t first = user_form ? scans.at_or_line_end(end) : text.size();
          first < text.size() && text[first] == '@') {
        at = scans.last_at(scans.path_stop(first)) - start;
      }
    }
    if (at == std::string_view::npos && !authority.empty() && authority[0] != '[') {
      // "user:pass%40host", "TOKEN%40host", "TOKEN\uFF20host:443", "user:pass%2540host": the
      // '@' spelled as the slashes and colons above may be (percent-encoded, once or twice, a
      // full-width or small look-alike; the URL does not work). No host name holds one, so the
      // authority's last such '@' ends a user part: a password after a ':', else a token
      // (after bare slashes, which may be a path's, only a password; as for a real '@').
      const std::size_t last = scans.last_at_spelling(end);
      if (last != std::string_view::npos && last > start) at = last - start;
    }
    if (at == std::string_view::npos || at == 0) continue;
    const std::size_t colon =
        scans.colon(start) < start + at ? scans.colon(start) - start : std::string_view::npos;
    if (colon == std::string_view::npos && mark.needs_password) continue;
    std::size_t hide = colon == std::string_view::npos ? start : start + colon + 1;
    // "TOKEN:@host" and GitHub's "TOKEN:x-oauth-basic@host": the token is the user name, and the
    // password empty or a constant; the user part goes whole, as "TOKEN@host"'s does.
    if (const std::string_view password = text.substr(hide, start + at - hide);
        hide != start &&
        (password.empty() || password == "x-oauth-basic" || password == "x-oauth-bearer")) {
      hide = start;
    }
    out.append(text.substr(done, hide - done));
    if (start + at > hide) {
      out += "***";
      hidden.emplace_back(text.substr(hide, start + at - hide));
    }
    done = start + at;
  }
  out.append(text.substr(done));
  return out;
}

// Each echo elsewhere in the text of a user part's secret that redact_user_info hid: a
// store's message quotes the path it was given, user part and all but without the scheme
// ("got a URI: 'AK:secret@bucket/key'", "in bucket 'TOKEN@bucket'"), where no "://" shows
// it is one. An echo ends at an '@' (the authority's end); the word before it is looked at
// once, back to the previous '@', quote or space, so a text costs its length.
std::string hide_echoes(std::string text, const std::vector<std::string>& hidden) {
  // Each as given and percent-decoded (the password as the store may quote it), in lower case:
  // libcurl quotes a host name it could not resolve folded to lower case, user part and all
  // where the '@' was a look-alike ("Could not resolve host: token@h").
  const auto lower = [](std::string v) {
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v;
  };
  std::unordered_set<std::string> secrets;
  for (const std::string& h : hidden) {
    secrets.insert(lower(h));
    secrets.insert(lower(percent_decoded(h)));
  }
  const auto is_secret = [&](std::string_view word) {
    return secrets.count(lower(std::string(word))) != 0;
  };
  std::string out;
  out.reserve(text.size());
  std::size_t done = 0;
  for (std::size_t at = text.find('@'); at != std::string::npos; at = text.find('@', at + 1)) {
    std::size_t begin = at;
    while (begin > done && text[begin - 1] != '@' && text[begin - 1] != '\'' &&
           text[begin - 1] != '"' && text[begin - 1] != '`' && !is_space(text[begin - 1])) {
      --begin;
    }
    const std::string_view word(text.data() + begin, at - begin);
    // "user:password" (the password after the first ':') or a token as the whole user part.
    std::size_t from = begin;
    if (!is_secret(word)) {
      const std::size_t colon = word.find(':');
      if (colon == std::string_view::npos || !is_secret(word.substr(colon + 1))) continue;
      from = begin + colon + 1;
    }
    out.append(text, done, from - done);
    out += "***";
    done = at;
  }
  out.append(text, done);
  return out;
}

}  // namespace

namespace detail {

std::uint64_t redaction_work() { return t_redaction_work; }

bool is_secret_query_key(std::string_view key) {
  const std::string k = decoded_key(key);
  for (const std::string_view secret : kSecretKeys) {
    if (k == secret) return true;
  }
  return has_a_secrets_word(key);
}

bool query_item_holds_secret(std::string_view item) {
  std::vector<std::string> hidden;
  (void)redact_query("?" + std::string(item), hidden);
  if (hidden.empty()) (void)redact_path_tokens(item, hidden);
  return !hidden.empty();
}

std::pair<std::size_t, std::size_t> par_token_span(std::string_view text, std::size_t from) {
  constexpr std::size_t npos = std::string_view::npos;
  // The end of the path segment starting at text[k]: where a '/', '?', '#', white space or a
  // quote stands.
  const auto segment_end = [&](std::size_t k) {
    const std::size_t begin = k;
    while (k < text.size() && text[k] != '/' && text[k] != '?' && text[k] != '#' &&
           text[k] != '\'' && text[k] != '"' && !is_space(text[k])) {
      ++k;
    }
    t_redaction_work += k - begin + 1;
    return k;
  };
  for (std::size_t p = text.find("/p/", from); p != npos; p = text.find("/p/", p + 1)) {
    const std::size_t begin = p + 3;
    const std::size_t end = segment_end(begin);
    if (end == begin || text.substr(end, 3) != "/n/") continue;
    const std::size_t ns_end = segment_end(end + 3);
    if (ns_end == end + 3 || text.substr(ns_end, 3) != "/b/") continue;
    return {begin, end};
  }
  return {npos, npos};
}

}  // namespace detail

namespace {

// Calls found(end) for each place that holds `secret` in `text` (the leftmost first, none
// overlapping another; `end` one past its last byte), found in one pass over the text: a search
// begun again at each place costs the product of the two lengths where the text repeats the
// start of a long secret (a secret "aa...ab" in a run of a's).
template <typename Found>
void find_each(std::string_view text, std::string_view secret, Found&& found) {
  if (secret.empty() || secret.size() > text.size()) return;
  // border[i]: the length of the longest proper prefix of secret[0, i] that also ends it.
  std::vector<std::size_t> border(secret.size(), 0);
  for (std::size_t i = 1, k = 0; i < secret.size(); ++i) {
    while (k > 0 && secret[i] != secret[k]) k = border[k - 1];
    if (secret[i] == secret[k]) ++k;
    border[i] = k;
  }
  t_redaction_work += text.size() + secret.size();
  for (std::size_t i = 0, k = 0; i < text.size(); ++i) {
    while (k > 0 && text[i] != secret[k]) k = border[k - 1];
    if (text[i] == secret[k]) ++k;
    if (k == secret.size()) {
      found(i + 1);
      k = 0;
    }
  }
}

// `text` with each place that holds `secret` (as find_each finds them) replaced by "***".
std::string replace_each(std::string text, std::string_view secret) {
  std::string out;
  std::size_t done = 0;
  find_each(text, secret, [&](std::size_t end) {
    if (done == 0) out.reserve(text.size());
    out.append(text, done, end - secret.size() - done);
    out += "***";
    done = end;
  });
  if (done == 0) return text;
  out.append(text, done);
  return out;
}

// UTF-8 of code point `cp` appended to `out`.
void put_utf8(std::uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A page's text with the escapes it may write a character in decoded, each decoded byte
// keeping where its spelling starts and ends in the text (from[i], to[i]): so that a secret is
// found however each of its characters is spelt, one escaped and the next not (.NET's JSON
// writer escapes '+' as "\u002B" and leaves '/', an XML writer "&#43;"), or with a line break
// inside it, and the whole spelling is hidden. quoted_printable: the text holds an '=' that
// quoted-printable would read otherwise (decoded_text's second reading).
struct DecodedText {
  std::string bytes;
  std::vector<std::size_t> from;
  std::vector<std::size_t> to;
  bool quoted_printable = false;
};

void append_byte(char byte, std::size_t at, std::size_t end, DecodedText* out) {
  out->bytes += byte;
  out->from.push_back(at);
  out->to.push_back(end);
}

void append_utf8(std::uint32_t cp, std::size_t at, std::size_t end, DecodedText* out) {
  std::string bytes;
  put_utf8(cp, &bytes);
  for (const char b : bytes) append_byte(b, at, end, out);
}

// The value of `digits` hex (base 16) or decimal digits at text[i, i + n), or -1.
long digits_value(std::string_view text, std::size_t i, std::size_t n, int base) {
  if (n == 0 || n > 8 || i + n > text.size()) return -1;
  long v = 0;
  for (std::size_t k = i; k < i + n; ++k) {
    const int d =
        base == 16 ? hex_value(text[k]) : (text[k] >= '0' && text[k] <= '9' ? text[k] - '0' : -1);
    if (d < 0) return -1;
    v = v * base + d;
  }
  return v;
}

// Where a line break at text[i] ends, with the blanks that begin the next line ("\n",
// "\r\n", "\r", then spaces and tabs: a header folded, a PEM-style block of 64 or 76
// columns), or i where none begins there.
std::size_t line_break_end(std::string_view text, std::size_t i) {
  std::size_t j = i;
  if (j < text.size() && text[j] == '\r') ++j;
  if (j < text.size() && text[j] == '\n') ++j;
  if (j == i) return i;
  while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
  return j;
}

// Decoded: "%XX" (hex in either case) and "%25XX" (encoded twice) to the byte; JSON's
// "\uXXXX", "\/", "\\" and "\""; "\xHH" (a byte string's repr, JavaScript); HTML's and XML's
// "&#DDD;", "&#xHH;", the five named references of XML and HTML5's names of marks ("&plus;"). A
// code point past Unicode or a surrogate is left as written. A line break, with the blanks
// after it, is read as nothing: a token wrapped across lines is one word to its reader. With
// quoted_printable, quoted-printable's "=XX" is read as its byte and its soft line break
// ("=" at a line's end) as nothing too; without, as written, since "t=2Bx" is as likely a
// query's value "2Bx" (hide_decoded reads the text both ways where it holds such an '=').
DecodedText decoded_text(std::string_view text, bool quoted_printable) {
  t_redaction_work += text.size();
  DecodedText out;
  out.bytes.reserve(text.size());
  out.from.reserve(text.size());
  out.to.reserve(text.size());
  const auto valid = [](long cp) {
    return cp >= 0 && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
  };
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (const std::size_t next = line_break_end(text, i); next > i) {
      i = next;
      continue;
    }
    if (c == '=') {
      const std::size_t soft = line_break_end(text, i + 1);
      const long byte = digits_value(text, i + 1, 2, 16);
      if (soft > i + 1 || byte >= 0) {
        out.quoted_printable = true;
        if (quoted_printable) {
          if (soft > i + 1) {
            i = soft;
          } else {
            append_byte(static_cast<char>(byte), i, i + 3, &out);
            i += 3;
          }
          continue;
        }
      }
    } else if (c == '%') {
      const long twice = text.compare(i + 1, 2, "25") == 0 ? digits_value(text, i + 3, 2, 16) : -1;
      const long once = digits_value(text, i + 1, 2, 16);
      if (twice >= 0 || once >= 0) {
        const std::size_t n = twice >= 0 ? 5 : 3;
        append_byte(static_cast<char>(twice >= 0 ? twice : once), i, i + n, &out);
        i += n;
        continue;
      }
    } else if (c == '\\' && i + 1 < text.size()) {
      const char e = text[i + 1];
      if (e == 'u') {
        if (const long cp = digits_value(text, i + 2, 4, 16); valid(cp)) {
          append_utf8(static_cast<std::uint32_t>(cp), i, i + 6, &out);
          i += 6;
          continue;
        }
      } else if (e == 'x') {
        // A byte string's repr (Python's b'...\xc3\xa9'), a C or shell escape.
        if (const long byte = digits_value(text, i + 2, 2, 16); byte >= 0) {
          append_byte(static_cast<char>(byte), i, i + 4, &out);
          i += 4;
          continue;
        }
      } else if (e == '/' || e == '\\' || e == '"') {
        append_utf8(static_cast<unsigned char>(e), i, i + 2, &out);
        i += 2;
        continue;
      }
    } else if (c == '&') {
      const std::size_t semi = text.find(';', i);
      if (semi != std::string_view::npos && semi - i <= 12) {
        const std::string_view ref = text.substr(i + 1, semi - i - 1);
        long cp = -1;
        if (ref.size() > 2 && ref[0] == '#' && (ref[1] == 'x' || ref[1] == 'X')) {
          cp = digits_value(text, i + 3, ref.size() - 2, 16);
        } else if (ref.size() > 1 && ref[0] == '#') {
          cp = digits_value(text, i + 2, ref.size() - 1, 10);
        } else if (ref == "amp") {
          cp = '&';
        } else if (ref == "lt") {
          cp = '<';
        } else if (ref == "gt") {
          cp = '>';
        } else if (ref == "quot") {
          cp = '"';
        } else if (ref == "apos") {
          cp = '\'';
        } else {
          // HTML5's names of the marks a token holds.
          static constexpr std::pair<std::string_view, char> kMarks[] = {
              {"plus", '+'},   {"sol", '/'},    {"equals", '='}, {"percnt", '%'},
              {"colon", ':'},  {"quest", '?'},  {"num", '#'},    {"lowbar", '_'},
              {"period", '.'}, {"commat", '@'}, {"excl", '!'},   {"dollar", '$'}};
          for (const auto& [name, mark] : kMarks) {
            if (ref == name) cp = mark;
          }
        }
        if (valid(cp)) {
          append_utf8(static_cast<std::uint32_t>(cp), i, semi + 1, &out);
          i = semi + 1;
          continue;
        }
      }
    }
    append_byte(c, i, i + 1, &out);
    ++i;
  }
  return out;
}

// `text` with each place whose decoded_text holds one of `secrets` replaced by "***" (whole
// spellings: an escape a place begins or ends inside of is hidden whole). The text is read
// once as written and, where it holds an '=' quoted-printable would read otherwise, once more
// as quoted-printable: two readings, so the search stays linear in the text.
std::string hide_decoded(std::string text, const std::vector<std::string>& secrets) {
  std::vector<std::pair<std::size_t, std::size_t>> places;
  DecodedText decoded = decoded_text(text, /*quoted_printable=*/false);
  for (const bool quoted_printable : {false, true}) {
    if (quoted_printable) {
      if (!decoded.quoted_printable) break;
      decoded = decoded_text(text, /*quoted_printable=*/true);
    }
    // No escape and no line break: the plain search found all.
    if (decoded.bytes.size() == text.size()) continue;
    for (const std::string& secret : secrets) {
      find_each(decoded.bytes, secret, [&](std::size_t end) {
        places.emplace_back(decoded.from[end - secret.size()], decoded.to[end - 1]);
      });
    }
  }
  if (places.empty()) return text;
  std::sort(places.begin(), places.end());
  std::string out;
  std::size_t done = 0;
  for (const auto& [begin, end] : places) {
    if (end <= done) continue;
    if (begin >= done) {
      out.append(text, done, begin - done);
      out += "***";
    }
    done = end;
  }
  out.append(text, done);
  return out;
}

}  // namespace

// `v` with each of `from` written as `to`.
std::string each_written_as(std::string_view v, char from, std::string_view to) {
  std::string out;
  for (const char c : v) {
    if (c == from) {
      out += to;
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// `v` as a page that quotes it in a URL's query or a form writes it: every byte but RFC 3986's
// unreserved ones percent-encoded, in upper-case hex (Python's quote, JavaScript's
// encodeURIComponent but for its few marks), in lower-case hex, and with a space as '+'
// (a form's encoding). None where nothing needs encoding (then it is written as it is).
std::vector<std::string> percent_spellings(std::string_view v) {
  const auto unreserved = [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~';
  };
  if (std::all_of(v.begin(), v.end(), [&](char c) { return unreserved(c); })) return {};
  std::string upper;
  std::string lower;
  std::string form;
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (unreserved(c)) {
      upper += ch;
      lower += ch;
      form += ch;
      continue;
    }
    static constexpr char kUpper[] = "0123456789ABCDEF";
    static constexpr char kLower[] = "0123456789abcdef";
    const std::string u = {'%', kUpper[c >> 4], kUpper[c & 15]};
    upper += u;
    lower += {'%', kLower[c >> 4], kLower[c & 15]};
    form += c == ' ' ? std::string("+") : u;
  }
  std::vector<std::string> out = {upper};
  if (lower != upper) out.push_back(std::move(lower));
  if (form != upper) out.push_back(std::move(form));
  return out;
}

// How a server that decodes a query or a Basic credential in a single-byte charset quotes a
// secret typed past ASCII (sent as UTF-8): each byte read as one character and written in
// UTF-8. ISO-8859-1 (a servlet container's default); Windows-1252, which gives 0x80-0x9F
// other characters (WHATWG's reading of the label "latin-1" too: a browser's, many servers'),
// its five unassigned bytes as the C1 controls WHATWG maps them to or as U+FFFD (Python's
// "replace"); and latin-1 twice (a page decoding the echo again). None where `v` is ASCII.
std::vector<std::string> single_byte_readings(std::string_view v) {
  if (std::all_of(v.begin(), v.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return {};
  static constexpr std::uint16_t kCp1252[32] = {
      0x20AC, 0,      0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0,      0x017D, 0,      0,      0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0,      0x017E, 0x0178};
  const auto reading = [&](std::string_view in, int charset) {
    std::string out;
    for (const char ch : in) {
      const auto c = static_cast<unsigned char>(ch);
      std::uint32_t cp = c;
      if (charset != 0 && c >= 0x80 && c < 0xA0) {
        cp = kCp1252[c - 0x80] != 0 ? kCp1252[c - 0x80] : (charset == 1 ? c : 0xFFFD);
      }
      put_utf8(cp, &out);
    }
    return out;
  };
  std::vector<std::string> out = {reading(v, 0)};
  out.push_back(reading(out[0], 0));
  for (const int charset : {1, 2}) {
    std::string r = reading(v, charset);
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

// Each other place where the text quotes a secret hidden in it (a server's error page quoting
// the signature it refused, the token, the password), replaced by "***": as it was given,
// percent-decoded, or form-decoded ('+' read as a space, as most servers read a query), its
// bytes past ASCII read in a single-byte charset (single_byte_readings), without a base64 padding,
// and percent-encoded again (percent_spellings: a page quoting a header or the URL in a "?next=" or
// a log line, "Basic%20BASE64%3D"); then each decoded value in the text with its escapes decoded
// (decoded_text: percent-encoding once or twice, JSON's, HTML's, XML's and quoted-printable's)
// and its line breaks read as nothing, so that any character of it may be escaped and the next
// not, and a token may be wrapped across lines. Values shorter than 6 bytes are left (they
// would hide ordinary words); at most 64 values are looked for in each pass, so that the time
// stays in proportion to the text.
std::string hide_quoted(std::string text, const std::vector<std::string>& hidden) {
  constexpr std::size_t kShortest = 6;
  constexpr std::size_t kMost = 64;
  // Adds v to `to` once, where it is long enough and `to` not full.
  const auto add_to = [&](std::vector<std::string>& to, std::string v) {
    if (v.size() < kShortest || to.size() >= kMost) return;
    if (std::find(to.begin(), to.end(), v) == to.end()) to.push_back(std::move(v));
  };
  std::vector<std::string> secrets;
  const auto add_one = [&](std::string v) { add_to(secrets, std::move(v)); };
  for (const std::string& h : hidden) {
    add_one(h);
    add_one(percent_decoded(h));
    if (h.find('+') != std::string::npos) add_one(percent_decoded(each_written_as(h, '+', " ")));
    for (std::string& r : single_byte_readings(percent_decoded(h))) add_one(std::move(r));
    // A base64 token quoted without its padding (a page trimming '=' as a URL's value).
    if (const std::string value = percent_decoded(h); value.ends_with('=')) {
      add_one(value.substr(0, value.find_last_not_of('=') + 1));
    }
    // A '?' or '#' in a user part's secret: a parser that ends the URL's path there quotes
    // the pieces apart ("'TAIL@bucket/key' after the URL's first '?' is not ...").
    for (std::size_t from = 0; from < h.size();) {
      const std::size_t cut = h.find_first_of("?#", from);
      if (cut == std::string::npos) {
        if (from > 0) add_one(h.substr(from));
        break;
      }
      add_one(h.substr(from, cut - from));
      from = cut + 1;
    }
  }
  // Percent-encoded again after every other spelling: where the limit is met, these go first.
  for (const std::string& h : hidden) {
    for (std::string& spelled : percent_spellings(percent_decoded(h))) add_one(std::move(spelled));
  }
  // Longest first: a value that holds another is hidden whole.
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& secret : secrets) text = replace_each(std::move(text), secret);
  // Then the values as the server decoded them, in the text with its escapes decoded: a
  // character escaped and the next not, as real encoders write them.
  std::vector<std::string> decoded;
  const auto add_decoded = [&](std::string v) { add_to(decoded, std::move(v)); };
  for (const std::string& h : hidden) {
    const std::string value = percent_decoded(h);
    add_decoded(value);
    for (std::string& r : single_byte_readings(value)) add_decoded(std::move(r));
    if (value.ends_with('=')) add_decoded(value.substr(0, value.find_last_not_of('=') + 1));
    if (h.find('+') != std::string::npos)
      add_decoded(percent_decoded(each_written_as(h, '+', " ")));
  }
  return hide_decoded(std::move(text), decoded);
}

namespace {

// RFC 4648 base64 with padding: how an Authorization header carries "user:password".
std::string base64(std::string_view in) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < in.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, in.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      v = (v << 8) | (k < n ? static_cast<unsigned char>(in[i + k]) : 0U);
    }
    for (std::size_t k = 0; k < 4; ++k) {
      out += k <= n ? kDigits[(v >> (18 - 6 * k)) & 0x3F] : '=';
    }
  }
  return out;
}

// The credentials libcurl sends for a URL's user part (in "Authorization: Basic ..." for the
// URL asked, "Proxy-Authorization: Basic ..." for a proxy's URL), as a page may quote them:
// base64 of "user:password", its user and password cut at the raw part's first ':' and each
// percent-decoded then, as libcurl does ("a%3Ab@h" is the user "a:b" with no password, sent
// as "a:b:"); that base64 without its padding and in base64url (a page's own re-encoding).
// None where the URL has no user part.
std::vector<std::string> basic_credentials(std::string_view url) {
  std::size_t start = url.find("://");
  start = start == std::string_view::npos ? 0 : start + 3;
  const std::size_t end = std::min(url.find_first_of("/?#", start), url.size());
  const std::size_t at = end == 0 ? std::string_view::npos : url.rfind('@', end - 1);
  if (at == std::string_view::npos || at < start) return {};
  const std::string_view raw = url.substr(start, at - start);
  const std::size_t colon = raw.find(':');
  const std::string user = percent_decoded(raw.substr(0, colon));
  const std::string password =
      colon == std::string_view::npos ? std::string() : percent_decoded(raw.substr(colon + 1));
  std::vector<std::string> out = {base64(user + ":" + password)};
  std::string bare = out[0];
  while (!bare.empty() && bare.back() == '=') bare.pop_back();
  if (bare != out[0]) out.push_back(bare);
  const std::string url_safe = each_written_as(each_written_as(bare, '+', "-"), '/', "_");
  if (url_safe != bare) out.push_back(url_safe);
  return out;
}

// The proxies the environment names for a request (http_proxy for http://, https_proxy or
// HTTPS_PROXY for https://, all_proxy or ALL_PROXY for any), each a URL whose user part libcurl
// sends to the proxy. Read each time, as the requests read them (through environment_value:
// an engine thread reads the copy its call took, never the environment itself, which Python
// may be moving). HTTP_PROXY, which libcurl leaves alone (a CGI program's Proxy header would
// set it), is taken too: it is a secret of the environment all the same.
std::vector<std::string> environment_proxies() {
  std::vector<std::string> out;
  for (const char* name :
       {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
    std::optional<std::string> v = detail::environment_value(name);
    if (!v || v->empty()) continue;
    std::string url = *std::move(v);
    // libcurl takes a proxy without a scheme for an http:// one.
    if (url.find("://") == std::string::npos) url = "http://" + url;
    if (std::find(out.begin(), out.end(), url) == out.end()) out.push_back(std::move(url));
  }
  return out;
}

}  // namespace

namespace detail {

std::string hide_request_secrets(std::string body, const std::vector<std::string>& urls,
                                 const std::vector<std::string>& header_lines) {
  if (body.empty()) return body;
  std::vector<std::string> secrets;
  std::vector<std::string> all = urls;
  for (std::string& proxy : environment_proxies()) all.push_back(std::move(proxy));
  for (const std::string& url : all) {
    const std::string shown = redact_user_info(url, secrets);
    (void)redact_path_tokens(redact_query(shown, secrets), secrets);
    // libcurl sends a URL's user part as "Authorization: Basic BASE64(user:password)", a
    // proxy's as "Proxy-Authorization: Basic ..." (headers no line here holds): a server or
    // proxy that echoes it would give the password back.
    for (std::string& basic : basic_credentials(url)) secrets.push_back(std::move(basic));
  }
  const auto trimmed = [](std::string_view v) {
    while (!v.empty() && is_space(v.front())) v.remove_prefix(1);
    while (!v.empty() && is_space(v.back())) v.remove_suffix(1);
    return v;
  };
  for (const std::string& line : header_lines) {
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string_view name = trimmed(std::string_view(line).substr(0, colon));
    const std::string_view value = trimmed(std::string_view(line).substr(colon + 1));
    if (value.empty() || !is_secret_query_key(name)) continue;
    secrets.emplace_back(value);
    // "Bearer TOKEN", "Basic BASE64": the credential after the scheme's word.
    if (const std::size_t space = value.find(' '); space != std::string_view::npos) {
      secrets.emplace_back(trimmed(value.substr(space + 1)));
    }
    // SigV4's "..., Signature=HEX" (and SigV2's "AWS KEY:SIGNATURE" after its ':').
    if (const std::size_t sig = value.rfind("Signature="); sig != std::string_view::npos) {
      const std::string_view rest = value.substr(sig + 10);
      secrets.emplace_back(trimmed(rest.substr(0, rest.find(','))));
    }
  }
  // Longest first, so that hide_quoted's limit on how many it looks for keeps the largest.
  std::sort(secrets.begin(), secrets.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a < b;
  });
  secrets.erase(std::unique(secrets.begin(), secrets.end()), secrets.end());
  body = hide_quoted(std::move(body), secrets);
  // A secret the kept part of the answer ends inside of: its start is hidden, percent-encoded
  // too (a page quoting it so, cut there).
  constexpr std::size_t kShortest = 6;
  for (std::size_t i = 0, n = secrets.size(); i < n; ++i) {
    for (std::string& spelled : percent_spellings(percent_decoded(secrets[i]))) {
      secrets.push_back(std::move(spelled));
    }
  }
  for (const std::string& secret : secrets) {
    for (std::size_t k = std::min(secret.size() - 1, body.size()); k >= kShortest; --k) {
      if (body.compare(body.size() - k, k, secret, 0, k) == 0) {
        body.replace(body.size() - k, k, "***");
        break;
      }
    }
  }
  return body;
}

void add_redacted_scheme(std::string_view name) {
  if (name.empty()) return;
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "http" || lower == "https" || lower == "s3") return;
  std::lock_guard lock(g_scheme_names_mu);
  const SchemeNames* const old = g_scheme_names.load(std::memory_order_acquire);
  if (old != nullptr &&
      std::find(old->names.begin(), old->names.end(), lower) != old->names.end()) {
    return;
  }
  auto* const next = new SchemeNames(old == nullptr ? SchemeNames{} : *old);
  next->names.push_back(std::move(lower));
  // A redaction may still be reading the list replaced: it is kept, reachable, never freed.
  static auto* const replaced = new std::vector<const SchemeNames*>();
  if (old != nullptr) replaced->push_back(old);
  g_scheme_names.store(next, std::memory_order_release);
}

}  // namespace detail

namespace {

// What hide_in_messages was given, the most recent last (at most kKnownMost values).
constexpr std::size_t kKnownMost = 64;
std::mutex g_known_mu;
std::deque<std::string> g_known;
std::atomic<bool> g_any_known{false};
// Taken by every signed request: a child forked while a parent thread held it would wait on it.
const bool g_known_mu_forks = (detail::hold_across_fork(&g_known_mu), true);

}  // namespace

void hide_in_messages(std::string value) {
  if (value.size() < 6) return;  // as hide_quoted: shorter values would hide ordinary words
  std::lock_guard lock(g_known_mu);
  if (std::find(g_known.begin(), g_known.end(), value) != g_known.end()) return;
  g_known.push_back(std::move(value));
  if (g_known.size() > kKnownMost) g_known.pop_front();
  g_any_known.store(true, std::memory_order_release);
}

std::string redact_secrets(std::string text) {
  if (g_any_known.load(std::memory_order_acquire)) {
    // Credentials that are in no URL (a session token from the environment, a request's
    // signature), where a server's answer quotes them back.
    std::vector<std::string> known;
    {
      std::lock_guard lock(g_known_mu);
      known.assign(g_known.rbegin(), g_known.rend());
    }
    std::sort(known.begin(), known.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    for (const std::string& k : known) text = replace_each(std::move(text), k);
  }
  std::vector<std::string> hidden;
  // An '@' as it may be spelled: itself, percent-encoded, a full-width or small look-alike.
  if (text.find('@') != std::string::npos || holds_spelling(text, kAtSpellings)) {
    text = redact_user_info(text, hidden);
    if (!hidden.empty()) text = hide_echoes(std::move(text), hidden);
  }
  if (text.find('=') != std::string::npos || holds_spelling(text, kEncodedEquals)) {
    text = redact_query(text, hidden);
  }
  if (text.find("/p/") != std::string::npos) text = redact_path_tokens(text, hidden);
  if (!hidden.empty()) text = hide_quoted(std::move(text), hidden);
  return text;
}

std::string percent_decoded(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
        hex_value(text[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

Utf8Sequence utf8_sequence_at(std::string_view text, std::size_t i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  if (i >= n) return {};
  const unsigned c = s[i];
  if (c < 0x80) return {1, c};
  std::size_t len = 0;
  unsigned lo = 0x80;  // the second byte's range, narrower after E0, ED, F0 and F4
  unsigned hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  }
  if (len == 0 || i + len > n) return {};
  unsigned cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
  for (std::size_t k = 1; k < len; ++k) {
    const unsigned b = s[i + k];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return {};
    cp = (cp << 6) | (b & 0x3f);
  }
  return {len, cp};
}

std::string printable_redacted(std::string text, bool keep_option_marks) {
  // Escaped first: a control character inside a secret (a tab or a newline in a password
  // typed into a URL) would end the secret where redact_secrets looks for its end, and leave
  // the rest in clear; escaped, it is part of the word that is hidden.
  return redact_secrets(printable(text, keep_option_marks));
}

std::string printable(std::string_view text, bool keep_option_marks) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  const auto plain = [&](unsigned c) {
    return (c >= 0x20 && c < 0x7f) || (keep_option_marks && c == 0x1f);
  };
  std::size_t i = 0;
  while (i < n && plain(s[i])) ++i;
  if (i == n) return std::string(text);  // the common case: printable ASCII
  std::string out(text.substr(0, i));
  const auto escape = [&](const char* form, unsigned v) {
    char buf[12];
    std::snprintf(buf, sizeof buf, form, v);
    out += buf;
  };
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80) {
      switch (c) {
        case '\0':
          out += "\\0";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (!plain(c)) {
            escape("\\x%02x", c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    const Utf8Sequence seq = utf8_sequence_at(text, i);
    if (seq.length == 0) {
      escape("\\x%02x", c);  // as Python's backslashreplace shows it
      ++i;
      continue;
    }
    if (acts_on_a_terminal(seq.code_point)) {
      escape("\\u%04x", seq.code_point);
    } else {
      out.append(text.substr(i, seq.length));
    }
    i += seq.length;
  }
  return out;
}

std::string message_after_path(const Status& status, const std::string& path) {
  const std::string& m = status.message();
  for (const std::string& p : {redact_secrets(path), redact_secrets(path_for_message(path))}) {
    if (m.size() >= p.size() + 2 && m.compare(0, p.size(), p) == 0 &&
        m.compare(p.size(), 2, ": ") == 0) {
      return m.substr(p.size() + 2);
    }
  }
  return m;
}

}  // namespace shardload
