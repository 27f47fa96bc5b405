#include "storage/detail/store_options.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cmath>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "base/detail/fork_lock.hpp"
#include "base/detail/secrets.hpp"
#include "storage/detail/context.hpp"
#include "storage/detail/credentials_kdf.hpp"

namespace shardload::detail {

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::string normalized_etag(std::string_view etag) {
  while (!etag.empty() && (etag.front() == ' ' || etag.front() == '\t')) etag.remove_prefix(1);
  while (!etag.empty() && (etag.back() == ' ' || etag.back() == '\t')) etag.remove_suffix(1);
  if (etag.empty()) return {};
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  std::string tag(etag);
  const std::size_t dash = tag.find('-');
  const std::string_view hex = std::string_view(tag).substr(0, dash);
  const bool md5_like =
      !hex.empty() &&
      std::all_of(hex.begin(), hex.end(),
                  [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }) &&
      (dash == std::string::npos ||
       (dash + 1 < tag.size() &&
        std::all_of(tag.begin() + static_cast<std::ptrdiff_t>(dash) + 1, tag.end(),
                    [](char c) { return c >= '0' && c <= '9'; })));
  if (md5_like) {
    for (char& c : tag) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return '"' + tag + '"';
}

bool same_etag(std::string_view a, std::string_view b) {
  return normalized_etag(a) == normalized_etag(b);
}

std::uint64_t etag_hash(std::string_view etag) { return fnv1a(normalized_etag(etag)); }

namespace {
constexpr std::uint64_t kNoEtagMark = 0x53484c44'00000000ull;  // "SHLD"
}  // namespace

std::uint64_t no_etag_hash(std::string_view validator) {
  return kNoEtagMark | (fnv1a(validator) & 0xffffffffull);
}

bool etag_snapshot(const FileInfo& snapshot) {
  return (snapshot.inode & ~0xffffffffull) != kNoEtagMark;
}

std::string lowercase_scheme(std::string endpoint) {
  const std::size_t end = endpoint.find_first_of(":%");  // "%3A" where percent-encoded
  if (end == std::string::npos) return endpoint;
  std::string scheme = endpoint.substr(0, end);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme == "http" || scheme == "https") endpoint.replace(0, end, scheme);
  return endpoint;
}

namespace {

Result<std::int64_t> int_option(const std::string& url, const std::string& key,
                                const std::string& value, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  const auto* end = value.data() + value.size();
  const auto [p, ec] = std::from_chars(value.data(), end, v);
  if (ec != std::errc() || p != end || v < lo || v > hi) {
    return file_error(ErrorCode::kInvalidArgument, url,
                      "bad object-storage URL or options: " + key + " must be an integer from " +
                          std::to_string(lo) + " to " + std::to_string(hi) + ", found '" + value +
                          "'");
  }
  return v;
}

Result<double> seconds_option(const std::string& url, const std::string& key,
                              const std::string& value, std::int64_t hi) {
  double v = 0;
  const auto* end = value.data() + value.size();
  const auto [p, ec] = std::from_chars(value.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v) || v <= 0 || v > static_cast<double>(hi)) {
    return file_error(ErrorCode::kInvalidArgument, url,
                      "bad object-storage URL or options: " + key +
                          " must be a number of seconds above 0 (at most " + std::to_string(hi) +
                          "), found '" + value + "'");
  }
  return v;
}

// `value` as a value of `row`'s kind, checked against its range; the messages name the key
// as the query spells it.
Result<OptionValue> store_option_value(const std::string& url, const StoreOptionSpec& row,
                                       const std::string& value) {
  const std::string key = row.name;
  switch (row.kind) {
    case OptionKind::kCount: {
      SHARDLOAD_ASSIGN_OR_RETURN(const std::int64_t v, int_option(url, key, value, row.lo, row.hi));
      return OptionValue(static_cast<std::uint64_t>(v));
    }
    case OptionKind::kNumber: {
      SHARDLOAD_ASSIGN_OR_RETURN(const double v, seconds_option(url, key, value, row.hi));
      return OptionValue(v);
    }
    case OptionKind::kFlag:
      if (value == "true" || value == "1") return OptionValue(true);
      if (value == "false" || value == "0") return OptionValue(false);
      return file_error(ErrorCode::kInvalidArgument, url,
                        "bad object-storage URL or options: " + key +
                            " must be true or false, found '" + value + "'");
    default:
      // As the URL encodes it ("%2F" for '/'); '+' is kept (a secret key holds it more often
      // than a space).
      return OptionValue(percent_decoded(value));
  }
}

// An option's value goes into request lines and headers (the access key in the Authorization
// header, the region in its scope, a session token as a header of its own): a CR or LF there
// would add header lines, a NUL end the value. Refused, percent-encoded or not, naming the key
// only: the value may be secret.
Status no_control_characters(const std::string& url, const std::string& key,
                             const std::string& value) {
  const std::string code = control_character_code(percent_decoded(value));
  if (code.empty()) return Status::ok();
  return file_error(ErrorCode::kInvalidArgument, url,
                    "bad object-storage URL or options: " + key + " holds a control character (" +
                        code +
                        "; CR, LF, NUL, tab and the other control characters are refused in "
                        "an option's value, percent-encoded or not)");
}

// A credential option's value (access_key, secret_key, session_token) holding a character
// beyond ASCII, percent-encoded or not (a control one is refused for every option above):
// refused naming the key only.
Status ascii_credential(const std::string& url, const std::string& key, const std::string& value) {
  const CredentialCharacter bad = bad_credential_character(percent_decoded(value));
  if (bad.kind.empty()) return Status::ok();
  return file_error(ErrorCode::kInvalidArgument, url,
                    "bad object-storage URL or options: " + key + " holds " + bad.kind + " (" +
                        bad.code + "; " + bad.why() + ")");
}

// Where no endpoint_override names the server, the region goes into the host name of AWS's
// endpoint (BUCKET.s3.REGION.amazonaws.com): one holding '@', ':', '/' or '#' would name
// another host, which would get the request signed with the store's secret and its session
// token. A region's name is letters, digits, '-' and '_' (AWS's, and the custom names of
// S3-compatible servers).
Status region_name_only(const std::string& url, const std::string& value) {
  const std::string region = percent_decoded(value);
  if (region.empty() || is_region_name(region, kRegionChars)) return Status::ok();
  return file_error(ErrorCode::kInvalidArgument, url,
                    "bad object-storage URL or options: region must be a region's name (up to 63 "
                    "letters, digits, '-' and '_'): it goes into the host name of AWS's "
                    "endpoint, where another character could name another host");
}

}  // namespace

namespace {

constexpr std::string_view kCredentialsKey = "credentials";

// The rows seal_credentials moves out of a URL: the secret ones of the table (secret_key,
// session_token); access_key, which names the key pair, stays to be shown.
bool is_credential_key(std::string_view key) {
  const StoreOptionSpec* row = find_store_option(key);
  return row != nullptr && row->secret && row->set != nullptr;
}

constexpr std::size_t kHandleDigits = 32;

bool is_handle(std::string_view h) {
  return h.size() == kHandleDigits &&
         h.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// The handle of a set of credentials (defined below, after the entries' formats): the contract
// in shardload/store_options.hpp; "" where scrypt's memory could not be had.
std::string handle_of(std::string_view items);

// A handle's 32 hex digits: the first 16 bytes of a digest.
std::string handle_digits(std::string_view raw) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string h;
  for (std::size_t i = 0; i < kHandleDigits / 2 && i < raw.size(); ++i) {
    const auto byte = static_cast<unsigned char>(raw[i]);
    h += kHex[byte >> 4];
    h += kHex[byte & 0xF];
  }
  return h;
}

// SHA-256 of what is not secret (the store binding): nothing there to guess, so no cost to add.
std::string digest_handle(std::string_view text) {
  return handle_digits(kdf_sha256("shardload credentials handle\n" + std::string(text)));
}

// An entry of the credentials table: what a handle stands for, and the entries its items name
// (an http(s) URL sealed again after a user part or a secret was added: its span holds the
// first handle), kept while it is.
struct CredentialEntry {
  std::string handle;
  std::string items;
  std::vector<std::shared_ptr<const CredentialEntry>> named;
};

// The credential items of s3:// and http(s):// URLs, by handle (seal_credentials): an entry
// lives while a pin of it (CredentialPins) or the recently sealed ones hold it, and leaves the
// map when the last one is dropped (forget_entry).
struct CredentialTable {
  struct Slot {
    std::weak_ptr<const CredentialEntry> entry;
    const CredentialEntry* made = nullptr;  // which entry the slot is: the one forget_entry erases
  };
  std::mutex mu;
  std::unordered_map<std::string, Slot> slots;  // handle -> entry
  std::deque<std::shared_ptr<const CredentialEntry>>
      recent;                    // sealed or adopted last, oldest first
  std::size_t recent_bytes = 0;  // their items' sizes
};

CredentialTable& credential_table() { return fork_held<CredentialTable>(); }

// An entry's deleter: its slot leaves the map, unless a new entry took the slot meanwhile (the
// handle sealed again after the last pin went). The entry is freed outside the lock (the pins
// it holds may free others). Entries that name each other in a chain (each sealed around the
// handle of the one before) are freed one after another by the outermost call of the thread,
// not one deleter inside another, whose depth would be the chain's length.
void forget_entry(const CredentialEntry* entry) {
  {
    CredentialTable& table = credential_table();
    std::lock_guard lock(table.mu);
    const auto it = table.slots.find(entry->handle);
    if (it != table.slots.end() && it->second.made == entry) table.slots.erase(it);
  }
  thread_local std::vector<const CredentialEntry*>* pending = nullptr;
  if (pending != nullptr) {
    try {
      pending->push_back(entry);
      return;
    } catch (...) {  // no memory to queue it: freed here, one level deeper
    }
    delete entry;
    return;
  }
  std::vector<const CredentialEntry*> queue;
  pending = &queue;
  for (const CredentialEntry* next = entry; next != nullptr;) {
    delete next;  // the entries it names whose last pin this was join the queue
    next = nullptr;
    if (!queue.empty()) {
      next = queue.back();
      queue.pop_back();
    }
  }
  pending = nullptr;
}

// The entry `handle` stands for, or null. (Every shared_ptr of an entry is declared before a
// lock of the table is taken, so that the last one is never dropped while it is held.)
std::shared_ptr<const CredentialEntry> find_entry(std::string_view handle) {
  std::shared_ptr<const CredentialEntry> found;
  CredentialTable& table = credential_table();
  std::lock_guard lock(table.mu);
  const auto it = table.slots.find(std::string(handle));
  if (it != table.slots.end()) found = it->second.entry.lock();
  return found;
}

// The entry for `handle` and `items`: the table's where it holds one for the handle, else
// `fresh`, which takes the slot; null where the handle stands for other items. Either way
// among the recently sealed ones now.
std::shared_ptr<const CredentialEntry> enter(const std::string& handle, const std::string& items,
                                             std::shared_ptr<const CredentialEntry> fresh) {
  std::shared_ptr<const CredentialEntry> entry;
  std::vector<std::shared_ptr<const CredentialEntry>> dropped;  // freed after the lock
  CredentialTable& table = credential_table();
  std::lock_guard lock(table.mu);
  CredentialTable::Slot& slot = table.slots[handle];
  entry = slot.entry.lock();
  if (entry && entry->items != items) return nullptr;
  if (!entry) {
    entry = fresh;
    slot = {entry, entry.get()};
  }
  table.recent.push_back(entry);
  table.recent_bytes += entry->items.size();
  while (table.recent.size() > kRecentlySealed ||
         (table.recent_bytes > kRecentlySealedBytes && table.recent.size() > 1)) {
    table.recent_bytes -= table.recent.front()->items.size();
    dropped.push_back(std::move(table.recent.front()));
    table.recent.pop_front();
  }
  return entry;
}

// A new entry (not yet in the table), pinning the entries its items name that the table holds.
std::shared_ptr<const CredentialEntry> new_entry(std::string handle, std::string items);

// Calls f(item) for each '&'-separated item of `query` (its '?' left off).
template <typename F>
void for_each_item(std::string_view query, F&& f) {
  std::size_t pos = 0;
  while (pos < query.size()) {
    std::size_t amp = query.find('&', pos);
    if (amp == std::string_view::npos) amp = query.size();
    f(query.substr(pos, amp - pos));
    pos = amp + 1;
  }
}

// The refusal of a handle this process holds no credentials for: never given, or forgotten
// (CredentialTable: no object named it any more and newer ones were sealed).
Status unknown_handle(const std::string& url, std::string_view handle) {
  return file_error(ErrorCode::kInvalidArgument, url,
                    "bad object-storage URL or options: credentials=" + std::string(handle) +
                        " names no credentials given to this process (a path copied out of "
                        "another process's layout, or out of a layout this process no longer "
                        "keeps?); give the credentials again as storage options, or pass the "
                        "Layout itself, whose pickle carries them");
}

// An s3:// entry's first item binds it to the store it was sealed for: "store=" and a hash of
// the query's endpoint_override, scheme and access_key (each percent-decoded, "" where absent),
// so that a URL naming the handle toward another endpoint, over another scheme or with another
// key id is refused instead of being signed with the secret and sent the session token.
constexpr std::string_view kStoreBinding = "store=";

std::string store_binding(std::string_view query) {
  std::string endpoint;
  std::string scheme;
  std::string access_key;
  bool seen[3] = {false, false, false};
  for_each_item(query, [&](std::string_view item) {
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) return;
    const std::string_view key = item.substr(0, eq);
    const int i = key == "endpoint_override" ? 0
                  : key == "scheme"          ? 1
                  : key == "access_key"      ? 2
                                             : -1;
    if (i < 0 || seen[i]) return;
    seen[i] = true;
    (i == 0 ? endpoint : i == 1 ? scheme : access_key) = percent_decoded(item.substr(eq + 1));
  });
  return std::string(kStoreBinding) +
         digest_handle("store\n" + endpoint + "\n" + scheme + "\n" + access_key);
}

// The refusal of a handle sealed for another store than the URL's.
Status handle_of_another_store(const std::string& url, std::string_view handle) {
  return file_error(ErrorCode::kInvalidArgument, url,
                    "bad object-storage URL or options: credentials=" + std::string(handle) +
                        " stands for the credentials of another store (another endpoint_override, "
                        "scheme or access_key than the URL's they were given with): a handle is "
                        "used only with the store it was sealed for; give this store's "
                        "credentials as storage options");
}

// The handle sealing gives `items`, which the table then holds (pinned into `pins` when
// given); "" where the handle stands for other items already (a collision of 128 bits of a
// one-way hash) or no handle could be made (scrypt's 16 MiB not to be had): the URL then keeps
// its secrets, hidden where shown, rather than be read with the other ones.
std::string handle_for(const std::string& items, CredentialPins* pins) {
  std::string handle = handle_of(items);
  if (handle.empty()) return handle;
  const std::shared_ptr<const CredentialEntry> entry =
      enter(handle, items, new_entry(handle, items));
  if (!entry) return std::string();
  if (pins != nullptr) pins->push_back(entry);
  return handle;
}

// An http(s):// URL's entry in the table: '@', then four parts each as its length, ':' and its
// text: the origin it was sealed for (origin_key); the user part ("user:password" as the URL
// spelled it; none where it had none); where the path held BunnyCDN's token (kPathTokenKey),
// the path before it and the token's text ("bcdn_token=T&", with the '&' that ended it), put back
// at that place (none where it held none); then the span of the query from its first secret item
// to its last, the items between included, so that the request sends the query as it was typed,
// in its order (a server that checks a signature over the raw query). An s3:// entry never
// begins with '@' (it is store=...&secret_key=...).
constexpr char kHttpEntry = '@';

struct HttpEntry {
  std::string_view origin;
  std::string_view userinfo;
  std::string_view path_before;  // "" where the path held no token
  std::string_view path_token;
  std::string_view span;
};

// The part of `*rest` that is a length, ':' and that many bytes, taken off its front.
std::optional<std::string_view> take_counted(std::string_view* rest) {
  const std::size_t colon = rest->find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(rest->data(), rest->data() + colon, n);
  if (ec != std::errc() || end != rest->data() + colon || n > rest->size() - colon - 1) {
    return std::nullopt;
  }
  const std::string_view part = rest->substr(colon + 1, n);
  rest->remove_prefix(colon + 1 + n);
  return part;
}

std::optional<HttpEntry> http_entry(std::string_view items) {
  if (items.empty() || items[0] != kHttpEntry) return std::nullopt;
  std::string_view rest = items.substr(1);
  const auto origin = take_counted(&rest);
  if (!origin) return std::nullopt;
  const auto userinfo = take_counted(&rest);
  if (!userinfo) return std::nullopt;
  const auto path_before = take_counted(&rest);
  if (!path_before) return std::nullopt;
  const auto path_token = take_counted(&rest);
  if (!path_token) return std::nullopt;
  return HttpEntry{*origin, *userinfo, *path_before, *path_token, rest};
}

// Where BunnyCDN's token (else an OCI pre-authenticated request's, else a secret path
// parameter) lies in the path of `url` (an http(s) URL whose path begins at `path`): its start
// and the end of what sealing takes out (BunnyCDN's: its value to the next '&' or '/', whichever
// comes first, that one included, so that the path left is still a path; else to the query or
// the fragment), or {npos, npos}. The first one only: a path's others stay (hidden when shown).
std::pair<std::size_t, std::size_t> path_token_span(std::string_view url, std::size_t path) {
  const std::size_t path_end = std::min(url.find_first_of("?#", path), url.size());
  const std::string_view key = kPathTokenKey;
  const auto is_key_at = [&](std::size_t k) {
    if (path_end - k < key.size()) return false;
    for (std::size_t j = 0; j < key.size(); ++j) {
      if (std::tolower(static_cast<unsigned char>(url[k + j])) != key[j]) return false;
    }
    return true;
  };
  for (std::size_t k = path; k + 1 < path_end; ++k) {
    if (url[k] != '/' || !is_key_at(k + 1)) continue;
    const std::size_t stop = url.find_first_of("&/", k + 1 + key.size());
    const std::size_t end = stop < path_end ? stop + 1 : path_end;
    return {k + 1, end};
  }
  // Else an OCI pre-authenticated request's token (".../p/TOKEN/n/NS/b/..."), with its '/'.
  const auto [begin, end] = par_token_span(url.substr(0, path_end), path);
  if (begin != std::string_view::npos) return {begin, end + 1};
  // Else a directory segment's parameter whose key names a secret (";jsessionid=S", ";sig=S"),
  // from its ';' to its segment's end or the next ';'. Not the object's own (last) segment's:
  // the names looked up beside the object (a raw file's sidecar, a manifest) are made from the
  // directory, to which the token sealed after the object's name would not go back.
  const std::size_t last_segment = url.rfind('/', path_end - 1);
  for (std::size_t semi = url.find(';', path); semi < last_segment;
       semi = url.find(';', semi + 1)) {
    const std::size_t stop = std::min(url.find_first_of("/;", semi + 1), path_end);
    const std::string_view param = url.substr(semi + 1, stop - semi - 1);
    const std::size_t eq = param.find('=');
    if (eq != std::string_view::npos && is_secret_query_key(param.substr(0, eq))) {
      return {semi, stop};
    }
  }
  return {std::string_view::npos, std::string_view::npos};
}

// Whether `token` is a path parameter path_token_span takes out: ';', a secret key, '=', and a
// value holding none of "/;?#".
bool is_path_parameter(std::string_view token) {
  if (token.size() < 3 || token[0] != ';') return false;
  const std::size_t eq = token.find('=');
  return eq != std::string_view::npos && is_secret_query_key(token.substr(1, eq - 1)) &&
         token.find_first_of("/;?#", 1) == std::string_view::npos;
}

// Whether `token`, sealed after `path_before`, is what path_token_span takes out of a path as
// an OCI pre-authenticated request's token: a segment after "/p/" with its '/'.
bool is_par_token(std::string_view path_before, std::string_view token) {
  return path_before.ends_with("/p/") && token.size() >= 2 && token.back() == '/' &&
         token.find_first_of("/?#") == token.size() - 1;
}

// Whether `token` is what path_token_span takes out of a path: the key, a value, and at most
// the '&' or '/' that ended it.
bool is_path_token(std::string_view token) {
  const std::string_view key = kPathTokenKey;
  if (token.size() < key.size()) return false;
  for (std::size_t j = 0; j < key.size(); ++j) {
    if (std::tolower(static_cast<unsigned char>(token[j])) != key[j]) return false;
  }
  const std::string_view value = token.substr(key.size());
  const std::size_t stop = value.find_first_of("&/?#");
  return stop == std::string_view::npos ||
         ((value[stop] == '&' || value[stop] == '/') && stop + 1 == value.size());
}

std::string counted(std::string_view text) {
  return std::to_string(text.size()) + ":" + std::string(text);
}

// "scheme://host[:port]" of an http(s) URL, lower case, its user part left out: an entry is
// put back only into a request to the origin it was sealed for, so that a URL naming the handle
// toward another host never sends it the password or the signature.
std::string origin_key(std::string_view url) {
  const std::size_t start = url.find("://") + 3;
  const std::size_t end = std::min(url.find_first_of("/?#", start), url.size());
  const std::size_t at = url.substr(start, end - start).rfind('@');
  std::string out =
      std::string(url.substr(0, start)) +
      std::string(url.substr(at == std::string_view::npos ? start : start + at + 1,
                             end - (at == std::string_view::npos ? start : start + at + 1)));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The refusal of an http(s) handle named toward another origin than it was sealed for.
Status handle_of_another_origin(const std::string& url, std::string_view handle) {
  return file_error(ErrorCode::kInvalidArgument, url,
                    "bad URL: credentials=" + std::string(handle) +
                        " stands for the user part or signed query of a URL of another host "
                        "(another scheme, host or port): a handle is used only with the origin "
                        "it was sealed for; give this URL's credentials in it");
}

bool is_http(std::string_view url) {
  return url.starts_with("http://") || url.starts_with("https://");
}

// "credentials=HANDLE": the handle, else "".
std::string_view handle_item(std::string_view item) {
  const std::string_view key = kCredentialsKey;
  if (item.size() != key.size() + 1 + kHandleDigits || !item.starts_with(key) ||
      item[key.size()] != '=') {
    return {};
  }
  const std::string_view h = item.substr(key.size() + 1);
  return is_handle(h) ? h : std::string_view();
}

// An http(s) query item that holds what the redaction takes for a secret (a value of a key of
// base/detail/secrets.hpp's one list), a handle excepted (a URL sealed already). The redaction
// also takes ';' between parameters ("ref=main;token=..."), and a query percent-encoded into a
// value ("url=https%3A%2F%2Fb%2Fk%3Fsig%3DS"): such an item is one whole.
bool is_secret_item(std::string_view item) {
  if (!handle_item(item).empty()) return false;
  if (query_item_holds_secret(item)) return true;
  for (std::size_t from = 0; from < item.size();) {
    std::size_t end = item.find(';', from);
    if (end == std::string_view::npos) end = item.size();
    const std::string_view part = item.substr(from, end - from);
    const std::size_t eq = part.find('=');
    if (eq != std::string_view::npos && is_secret_query_key(part.substr(0, eq))) return true;
    from = end + 1;
  }
  return false;
}

// A handle is HMAC-SHA256 of the items, keyed by scrypt of what of them a person may have
// chosen (shardload/store_options.hpp): each guess of a password tested against a handle costs
// scrypt's time and memory, and handles stay the same in every process. What is left out of
// scrypt's input are runs of kMachineRun letters, digits, '-' and '_' (a signature, a key, a token
// a program made: too long to guess), and what is not secret: a presigned URL per object then costs
// scrypt once per user part and signer, not once per object.
constexpr std::size_t kMachineRun = 40;

bool is_run_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_';
}

// `piece` with its runs of kMachineRun or more run characters left out.
std::string guessable_part(std::string_view piece) {
  std::string out;
  for (std::size_t i = 0; i < piece.size();) {
    std::size_t j = i;
    while (j < piece.size() && is_run_char(piece[j])) ++j;
    if (j == i) {
      out += piece[i++];
      continue;
    }
    if (j - i < kMachineRun) out.append(piece.substr(i, j - i));
    i = j;
  }
  return out;
}

// Whether `item` ("KEY=VALUE") is a signature: its value a MAC or signature a signer computed
// over the URL (SigV2's and CloudFront's Signature=, SigV4's and Google's X-...-Signature=,
// Azure's sig=, nginx secure_link's md5=, Akamai's hdnea=/hdntl=, Alibaba's auth_key=, Tencent's
// sign=, Upyun's _upt=, CloudFront's Policy=). No person chooses one and each object has its
// own: in scrypt's input it would cost a scrypt per object (a signer's base64 is cut into short
// runs by '+', '/', '~', '%'), and guessing one is forging the signature.
bool is_signature_item(std::string_view item) {
  const std::size_t eq = item.find('=');
  if (eq == std::string_view::npos) return false;
  std::string key(item.substr(0, eq));
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (key.ends_with("signature")) return true;
  for (const std::string_view k :
       {"sig", "sign", "md5", "hmac", "hdnea", "hdntl", "auth_key", "_upt", "policy"}) {
    if (key == k) return true;
  }
  return false;
}

// scrypt's salt and password for `items`: the salt names what they are for (an s3:// entry's
// store binding, an http(s) entry's origin), so that no table of guesses made once serves every
// store; the password is the secret parts (an s3:// entry's items after the binding; an
// http(s) entry's user part, path token and the span's secret items but its signatures), each
// as guessable_part keeps it, counted. An entry of neither form (none is made) gives all of itself.
std::pair<std::string, std::string> kdf_input(std::string_view items) {
  std::string salt = "shardload credentials handle\n";
  std::string password;
  if (const auto http = http_entry(items)) {
    salt += http->origin;
    password += counted(guessable_part(http->userinfo));
    password += counted(guessable_part(http->path_token));
    for_each_item(http->span, [&](std::string_view item) {
      if (is_secret_item(item) && !is_signature_item(item)) {
        password += counted(guessable_part(item));
      }
    });
    return {salt, password};
  }
  const std::size_t amp = items.find('&');
  if (!items.starts_with(kStoreBinding) || amp == std::string_view::npos) {
    return {salt, std::string(items)};
  }
  salt += items.substr(0, amp);
  for_each_item(items.substr(amp + 1),
                [&](std::string_view item) { password += counted(guessable_part(item)); });
  return {salt, password};
}

// scrypt's keys by salt and password, so that sealing credentials again (each path of a
// dataset joined with the same storage options, a URL typed again) costs a look-up. Bounded
// as the recently sealed entries are; a key made twice by two threads at once is the same key.
struct HandleKeys {
  std::mutex mu;
  std::unordered_map<std::string, std::string> keys;
  std::deque<std::string> order;  // made first, first
  std::size_t bytes = 0;
};

std::string handle_key(const std::string& salt, const std::string& password) {
  const std::string memo = counted(salt) + password;
  HandleKeys& made = fork_held<HandleKeys>();
  {
    std::lock_guard lock(made.mu);
    if (const auto it = made.keys.find(memo); it != made.keys.end()) return it->second;
  }
  std::string key = kdf_scrypt(password, salt, kHandleScryptN, kHandleScryptR, kHandleScryptP, 32);
  if (key.empty()) return key;
  std::lock_guard lock(made.mu);
  if (made.keys.emplace(memo, key).second) {
    made.order.push_back(memo);
    made.bytes += memo.size();
    while (made.order.size() > kRecentlySealed ||
           (made.bytes > kRecentlySealedBytes && made.order.size() > 1)) {
      made.bytes -= made.order.front().size();
      made.keys.erase(made.order.front());
      made.order.pop_front();
    }
  }
  return key;
}

std::string handle_of(std::string_view items) {
  const auto [salt, password] = kdf_input(items);
  const std::string key = handle_key(salt, password);
  if (key.empty()) return key;
  return handle_digits(kdf_hmac_sha256(key, items));
}

std::shared_ptr<const CredentialEntry> new_entry(std::string handle, std::string items) {
  auto* entry = new CredentialEntry{std::move(handle), std::move(items), {}};
  if (const auto http = http_entry(entry->items)) {
    for_each_item(http->span, [&](std::string_view item) {
      const std::string_view named = handle_item(item);
      if (named.empty()) return;
      if (auto found = find_entry(named)) entry->named.push_back(std::move(found));
    });
  }
  return std::shared_ptr<const CredentialEntry>(entry, forget_entry);
}

std::string seal_http(std::string_view url, CredentialPins* pins) {
  const std::size_t start = url.find("://") + 3;
  const std::size_t end = std::min(url.find_first_of("/?#", start), url.size());
  const std::size_t at = url.substr(start, end - start).rfind('@');
  const std::size_t q = url.find('?', end);
  const auto [token, token_end] = path_token_span(url, end);
  std::vector<std::string_view> items;
  if (q != std::string_view::npos) {
    for_each_item(url.substr(q + 1), [&](std::string_view item) { items.push_back(item); });
  }
  std::size_t first = items.size();
  std::size_t last = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!is_secret_item(items[i])) continue;
    first = std::min(first, i);
    last = i;
  }
  const bool tokened = token != std::string_view::npos;
  if (at == std::string_view::npos && first == items.size() && !tokened) return std::string(url);
  const std::string_view userinfo =
      at == std::string_view::npos ? std::string_view() : url.substr(start, at);
  std::string entry = kHttpEntry + counted(origin_key(url)) + counted(userinfo);
  entry += tokened ? counted(url.substr(end, token - end)) +
                         counted(url.substr(token, token_end - token))
                   : counted("") + counted("");
  for (std::size_t i = first; i < items.size() && i <= last; ++i) {
    entry += (i > first ? "&" : "") + std::string(items[i]);
  }
  const std::string handle = handle_for(entry, pins);
  if (handle.empty()) return std::string(url);
  const std::string sealed_item = std::string(kCredentialsKey) + "=" + handle;
  const std::size_t from = at == std::string_view::npos ? start : start + at + 1;
  std::string out = std::string(url.substr(0, start));
  // The URL before its query, without the user part and the path's token.
  const auto before = [&](std::size_t to) {
    if (!tokened) return std::string(url.substr(from, to - from));
    return std::string(url.substr(from, token - from)) +
           std::string(url.substr(token_end, to - token_end));
  };
  if (q == std::string_view::npos) {
    // No query: one is made for the handle, before a fragment if there is one.
    const std::size_t hash = std::min(url.find('#', end), url.size());
    return out + before(hash) + "?" + sealed_item + std::string(url.substr(hash));
  }
  out += before(q) + "?";
  std::string query;
  bool placed = false;
  for (std::size_t i = 0; i < items.size(); ++i) {
    std::string_view item = items[i];
    if (i >= first && i <= last) {
      if (placed) continue;
      item = sealed_item;
      placed = true;
    }
    query += (query.empty() ? "" : "&") + std::string(item);
  }
  if (!placed) query += (query.empty() ? "" : "&") + sealed_item;
  return out + query;
}

// `query` with each "credentials=HANDLE" replaced by the items the handle stands for.
Result<std::string> expand_credentials(const std::string& url, const std::string& query) {
  if (query.find(kCredentialsKey) == std::string::npos) return query;
  std::string out;
  Status error;
  for_each_item(std::string_view(query).substr(1), [&](std::string_view item) {
    std::string_view put = item;
    std::string items;
    if (error.is_ok() && item.starts_with(kCredentialsKey) &&
        item.size() > kCredentialsKey.size() && item[kCredentialsKey.size()] == '=') {
      const std::string_view handle = item.substr(kCredentialsKey.size() + 1);
      items = credential_items(handle);
      // An http(s) URL's entry is no s3:// URL's credentials.
      if (items.empty() || items[0] == kHttpEntry) {
        error = unknown_handle(url, handle);
      } else {
        // The entry's binding against this query's store; the secret items follow it.
        const std::size_t amp = items.find('&');
        if (!items.starts_with(kStoreBinding) || amp == std::string::npos ||
            std::string_view(items).substr(0, amp) != store_binding(query.substr(1))) {
          error = handle_of_another_store(url, handle);
        } else {
          put = std::string_view(items).substr(amp + 1);
        }
      }
    }
    out += (out.empty() ? "?" : "&") + std::string(put);
  });
  if (!error.is_ok()) return error;
  return out;
}

}  // namespace

std::string control_character_code(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) return {'0', 'x', kHex[byte >> 4], kHex[byte & 15]};
  }
  return {};
}

CredentialCharacter bad_credential_character(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto hex = [](unsigned v, int digits) {
    std::string out;
    for (int k = digits - 1; k >= 0; --k) out += kHex[(v >> (4 * k)) & 15];
    return out;
  };
  for (std::size_t i = 0; i < value.size(); ++i) {
    const auto byte = static_cast<unsigned char>(value[i]);
    if (byte < 0x20 || byte == 0x7f) return {"a control character", "0x" + hex(byte, 2)};
    if (byte < 0x80) continue;
    const Utf8Sequence seq = utf8_sequence_at(value, i);
    if (seq.length == 0) return {"a non-ASCII character", "0x" + hex(byte, 2)};
    return {"a non-ASCII character", "U+" + hex(seq.code_point, seq.code_point > 0xFFFF ? 6 : 4)};
  }
  return {};
}

std::string CredentialCharacter::why() const {
  if (kind == "a control character") {
    return "CR, LF, NUL, tab and the other control characters are refused in a credential, a "
           "trailing newline too: it would go into request headers";
  }
  return "a credential is ASCII: a character beyond it (a C1 control, a look-alike copied from "
         "a document, text read in another encoding) would go into the signed request's "
         "headers as UTF-8, answered by a bare HTTP 403";
}

Result<std::string> take_store_options(const std::string& url, const std::string& given,
                                       StoreOptions* out, bool credentials) {
  std::string query = given;
  if (credentials) {
    SHARDLOAD_ASSIGN_OR_RETURN(query, expand_credentials(url, given));
  }
  std::string rest;
  std::vector<std::string> seen;  // the table's keys met so far
  std::size_t pos = query.empty() ? 0 : 1;
  while (pos < query.size()) {
    std::size_t amp = query.find('&', pos);
    if (amp == std::string::npos) amp = query.size();
    const std::string item = query.substr(pos, amp - pos);
    pos = amp + 1;
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? std::string() : item.substr(eq + 1);
    if (credentials && !item.empty() &&
        (eq == std::string::npos || key.empty() || key.find_first_of("?/") != std::string::npos)) {
      // Most often the rest of a key that holds '?' (listed by a store, or typed), which no
      // s3:// URL can name: said so, rather than as an option the store does not know.
      return file_error(ErrorCode::kInvalidArgument, url,
                        "bad object-storage URL or options: '" + item +
                            "' after the URL's first '?' is not a KEY=VALUE option; an object "
                            "whose key holds '?' cannot be named by an s3:// URL (its query "
                            "begins at the first '?')");
    }
    const StoreOptionSpec* row = find_store_option(key);
    if (row != nullptr && (row->stores & (credentials ? kStoreS3 : kStoreHttp)) != 0) {
      // Twice (in the URL and in storage_options= / --storage-option, or twice in the URL):
      // one value would win without a word.
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
        return file_error(ErrorCode::kInvalidArgument, url,
                          "bad object-storage URL or options: " + key +
                              " is given twice (in the URL and in the storage options, or twice "
                              "in the URL); give it once");
      }
      seen.push_back(key);
      SHARDLOAD_RETURN_IF_ERROR(no_control_characters(url, key, value));
      if (key == "access_key" || key == "secret_key" || key == "session_token") {
        SHARDLOAD_RETURN_IF_ERROR(ascii_credential(url, key, value));
      }
      if (key == "region") SHARDLOAD_RETURN_IF_ERROR(region_name_only(url, value));
    }
    if (row != nullptr && row->set != nullptr &&
        (row->stores & (credentials ? kStoreS3 : kStoreHttp)) != 0) {
      SHARDLOAD_ASSIGN_OR_RETURN(const OptionValue v, store_option_value(url, *row, value));
      row->set(v, out);
    } else if (credentials && key == "endpoint_override" && eq != std::string::npos) {
      rest += (rest.empty() ? "?" : "&") + key + "=" + lowercase_scheme(value);
    } else {
      rest += (rest.empty() ? "?" : "&") + item;
    }
  }
  return rest;
}

Result<std::string> unsealed_http_url(const std::string& url) {
  std::string out = url;
  // A URL sealed again after a user part or a secret was added to it names a handle inside a
  // handle's span: each round puts back one level.
  for (int round = 0; round < 4 && out.find(kCredentialsKey) != std::string::npos; ++round) {
    const std::size_t q = out.find('?');
    if (q == std::string::npos) break;
    std::string query;
    std::string userinfo;
    // (path before, token) of each handle that took a token out of the path, in the query's
    // order, which is the order they were sealed in (a path sealed again after a token was left
    // in it: a second handle after the first). Copies: the entry's items live only for the call
    // of the lambda below.
    std::vector<std::pair<std::string, std::string>> tokens;
    bool found = false;
    Status error;
    for_each_item(std::string_view(out).substr(q + 1), [&](std::string_view item) {
      std::string items;
      if (const std::string_view handle = handle_item(item); !handle.empty() && error.is_ok()) {
        found = true;
        items = credential_items(handle);
        const auto entry = http_entry(items);
        if (!entry) {
          error = unknown_handle(url, handle);
          return;
        }
        if (entry->origin != origin_key(out)) {
          error = handle_of_another_origin(url, handle);
          return;
        }
        if (!entry->userinfo.empty()) userinfo = entry->userinfo;
        if (!entry->path_token.empty()) {
          tokens.emplace_back(entry->path_before, entry->path_token);
        }
        item = entry->span;
        if (item.empty()) return;
      }
      query += (query.empty() ? "" : "&") + std::string(item);
    });
    if (!error.is_ok()) return error;
    if (!found) break;
    std::string base = out.substr(0, q);
    // The last sealed first: each was taken out of the path the ones before it had left.
    for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) {
      const auto& [path_before, path_token] = *it;
      // Where the path before the token is still the one sealed: a path made to name another
      // place with the handle (another directory) gets no token.
      const std::size_t start = base.find("://") + 3;
      const std::size_t path = std::min(base.find('/', start), base.size());
      if (std::string_view(base).substr(path, path_before.size()) != path_before) {
        return file_error(ErrorCode::kInvalidArgument, url,
                          "bad URL: the path token its credentials= handle stands for was sealed "
                          "after '" +
                              path_before +
                              "', which this URL's path does not begin with; give this URL's "
                              "token in it");
      }
      base.insert(path + path_before.size(), path_token);
    }
    if (!userinfo.empty()) {
      const std::size_t start = base.find("://") + 3;
      const std::size_t end = std::min(base.find_first_of("/?#", start), base.size());
      const std::size_t at = std::string_view(base).substr(start, end - start).rfind('@');
      base = base.substr(0, start) + userinfo + "@" +
             base.substr(at == std::string::npos ? start : start + at + 1);
    }
    out = query.empty() ? base : base + "?" + query;
  }
  return out;
}

namespace {

// The queries parsed so far: few (one per source's query), so kept for the process; past
// kMaxKept distinct ones or kMaxBytes of them (a program making queries on the fly, or given
// new credentials again and again: each parsed s3:// query holds its secrets) the memo starts
// over, so that it never holds more than that of credentials the table has forgotten.
struct QueryMemo {
  static constexpr std::size_t kMaxKept = 4096;
  static constexpr std::size_t kMaxBytes = 4 << 20;
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const ParsedStoreQuery>> kept;
  std::size_t bytes = 0;  // kept's keys, rests and the options' text (bytes_of)
};

std::size_t bytes_of(const std::string& key, const ParsedStoreQuery& parsed) {
  const StoreOptions& o = parsed.options;
  return key.size() + parsed.rest.size() + o.access_key.size() + o.secret_key.size() +
         o.session_token.size();
}

QueryMemo& query_memo() { return fork_held<QueryMemo>(); }

// Whether the table holds every handle `query` ("?..." or "") names.
bool names_held_handles(const std::string& query) {
  if (query.find(kCredentialsKey) == std::string::npos) return true;
  bool held = true;
  for_each_item(std::string_view(query).substr(1), [&](std::string_view item) {
    if (const std::string_view h = handle_item(item); !h.empty() && held) held = !!find_entry(h);
  });
  return held;
}

}  // namespace

Result<std::shared_ptr<const ParsedStoreQuery>> parsed_store_query(const std::string& url,
                                                                   const std::string& query,
                                                                   bool credentials) {
  QueryMemo& memo = query_memo();
  std::string key = (credentials ? "s" : "h") + query;
  std::shared_ptr<const ParsedStoreQuery> kept;
  {
    std::lock_guard lock(memo.mu);
    if (const auto it = memo.kept.find(key); it != memo.kept.end()) kept = it->second;
  }
  // A query whose handle the table no longer holds is parsed again, and so refused as a
  // handle never given, whatever this memo kept of it.
  if (kept && (!credentials || names_held_handles(query))) return kept;
  auto parsed = std::make_shared<ParsedStoreQuery>();
  SHARDLOAD_ASSIGN_OR_RETURN(parsed->rest,
                             take_store_options(url, query, &parsed->options, credentials));
  const std::size_t bytes = bytes_of(key, *parsed);
  // Dropped after the lock.
  std::unordered_map<std::string, std::shared_ptr<const ParsedStoreQuery>> dropped;
  std::lock_guard lock(memo.mu);
  if (const auto it = memo.kept.find(key); it != memo.kept.end()) return it->second;
  if (memo.kept.size() >= QueryMemo::kMaxKept || memo.bytes + bytes > QueryMemo::kMaxBytes) {
    dropped.swap(memo.kept);
    memo.bytes = 0;
  }
  memo.bytes += bytes;
  return memo.kept.emplace(std::move(key), std::move(parsed)).first->second;
}

std::size_t parsed_queries_bytes() {
  QueryMemo& memo = query_memo();
  std::lock_guard lock(memo.mu);
  return memo.bytes;
}

Result<StoreOptions> store_options_of(const std::string& url) {
  const auto q = url.find('?');
  SHARDLOAD_ASSIGN_OR_RETURN(
      const auto parsed,
      parsed_store_query(url, q == std::string::npos ? std::string() : url.substr(q)));
  return parsed->options;
}

Result<std::size_t> chunks_in_flight_of(const std::string& url) {
  SHARDLOAD_ASSIGN_OR_RETURN(const StoreOptions options, store_options_of(url));
  return static_cast<std::size_t>(options.chunks_in_flight);
}

std::int64_t backoff_delay_ms(const StoreOptions& o, std::int64_t attempted_retries) {
  const std::int64_t shift = std::min<std::int64_t>(attempted_retries, 20);
  const std::int64_t full = std::min(o.max_backoff_ms, o.backoff_ms << shift);
  if (full <= 1) return full;
  thread_local std::minstd_rand rng{std::random_device{}()};
  return full / 2 + std::uniform_int_distribution<std::int64_t>(0, full / 2)(rng);
}

std::int64_t read_in_parts(const RangeRead& read, void* buf, std::size_t n, std::uint64_t offset,
                           std::size_t part, std::size_t in_flight, std::string* why) {
  const std::size_t parts = part == 0 ? 1 : (n + part - 1) / part;
  if (parts <= 1 || in_flight <= 1) return read(buf, n, offset, why);

  // Parts are claimed in order from a shared counter by this thread and its helpers.
  struct Outcome {
    std::size_t first_bad = SIZE_MAX;  // the lowest part that did not come back whole
    std::int64_t got = 0;              // its result
    std::string why;
  };
  std::mutex m;
  Outcome out;
  std::atomic<std::size_t> next{0};
  auto* dst = static_cast<std::byte*>(buf);
  auto work = [&] {
    for (;;) {
      const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= parts) return;
      {
        std::lock_guard lock(m);
        if (i > out.first_bad) return;  // a lower part already ends the answer
      }
      const std::size_t lo = i * part;
      const std::size_t len = std::min(part, n - lo);
      std::string part_why;
      const std::int64_t got = read(dst + lo, len, offset + lo, &part_why);
      if (got != static_cast<std::int64_t>(len)) {
        std::lock_guard lock(m);
        if (i < out.first_bad) out = Outcome{i, got, std::move(part_why)};
      }
    }
  };
  // This thread and the context's pool; a helper no thread took runs here and finds no part.
  StorageContext::process().pool().run(std::min(in_flight, parts), [&](std::size_t) { work(); });
  if (out.first_bad == SIZE_MAX) return static_cast<std::int64_t>(n);
  const std::size_t lo = out.first_bad * part;
  if (out.got < 0) {
    if (lo > 0) return static_cast<std::int64_t>(lo);  // what came before it; asked again
    *why = std::move(out.why);
    return out.got;
  }
  return static_cast<std::int64_t>(lo) + out.got;
}

}  // namespace shardload::detail

namespace shardload {

const StoreOptionSpec* find_store_option(std::string_view name) {
  for (const auto& row : store_option_table()) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

namespace {
std::string seal_credentials_only(std::string_view url, CredentialPins* pins);
}  // namespace

std::string seal_credentials(std::string_view url, CredentialPins* pins) {
  std::string sealed = seal_credentials_only(url, pins);
  // The handles the URL named already (a URL sealed before, joined with more options).
  if (pins != nullptr) pin_credentials(sealed, pins);
  return sealed;
}

namespace {

std::string seal_credentials_only(std::string_view url, CredentialPins* pins) {
  if (detail::is_http(url)) return detail::seal_http(url, pins);
  const std::size_t q = url.find('?');
  if (!url.starts_with("s3://") || q == std::string_view::npos) return std::string(url);
  std::string kept;
  std::string moved;
  detail::for_each_item(url.substr(q + 1), [&](std::string_view item) {
    const std::size_t eq = item.find('=');
    std::string& to = eq != std::string_view::npos && detail::is_credential_key(item.substr(0, eq))
                          ? moved
                          : kept;
    to += (to.empty() ? "" : "&") + std::string(item);
  });
  if (moved.empty()) return std::string(url);
  moved = detail::store_binding(url.substr(q + 1)) + "&" + moved;
  const std::string handle = detail::handle_for(moved, pins);
  if (handle.empty()) return std::string(url);
  kept += (kept.empty() ? "" : "&") + std::string(detail::kCredentialsKey) + "=" + handle;
  return std::string(url.substr(0, q + 1)) + kept;
}

}  // namespace

void credential_handles(std::string_view url, std::vector<std::string>* out) {
  const std::size_t q = url.find('?');
  if (!(url.starts_with("s3://") || detail::is_http(url)) || q == std::string_view::npos) return;
  detail::for_each_item(url.substr(q + 1), [&](std::string_view item) {
    const std::string_view key = detail::kCredentialsKey;
    if (item.size() > key.size() && item.starts_with(key) && item[key.size()] == '=') {
      out->emplace_back(item.substr(key.size() + 1));
    }
  });
}

void credential_handles_in_items(std::string_view items, std::vector<std::string>* out) {
  const auto http = detail::http_entry(items);
  if (!http) return;
  detail::for_each_item(http->span, [&](std::string_view item) {
    if (const std::string_view h = detail::handle_item(item); !h.empty()) out->emplace_back(h);
  });
}

void pin_credentials(std::string_view url, CredentialPins* pins) {
  std::vector<std::string> handles;
  credential_handles(url, &handles);
  // And the entries an entry names (pinned by it too where it was made after them; one adopted
  // before them names none).
  for (std::size_t i = 0; i < handles.size(); ++i) {
    if (auto entry = detail::find_entry(handles[i])) {
      credential_handles_in_items(entry->items, &handles);
      pins->push_back(std::move(entry));
    }
  }
}

std::string credential_items(std::string_view handle) {
  const auto entry = detail::find_entry(handle);
  return entry ? entry->items : std::string();
}

std::size_t credential_entries() {
  detail::CredentialTable& table = detail::credential_table();
  std::lock_guard lock(table.mu);
  return table.slots.size();
}

Status adopt_credentials(std::string_view handle, std::string_view items, CredentialPins* pins) {
  bool credential_items_only = !items.empty();
  if (const auto http = detail::http_entry(items)) {
    // A user part, and a span of a query that begins and ends with a secret item.
    std::vector<std::string_view> span;
    detail::for_each_item(http->span, [&](std::string_view item) { span.push_back(item); });
    const auto secret = [](std::string_view item) {
      return detail::is_secret_item(item) || !detail::handle_item(item).empty();
    };
    const bool tokened = !http->path_token.empty();
    credential_items_only =
        detail::is_http(http->origin) && (!http->userinfo.empty() || !span.empty() || tokened) &&
        (span.empty() || (secret(span.front()) && secret(span.back()))) &&
        (tokened ? http->path_before.starts_with('/') &&
                       (detail::is_path_token(http->path_token) ||
                        detail::is_par_token(http->path_before, http->path_token) ||
                        detail::is_path_parameter(http->path_token))
                 : http->path_before.empty());
  } else {
    // The store binding first (seal_credentials), then the secret items.
    const std::size_t amp = items.find('&');
    const std::string_view binding = items.substr(0, amp);
    credential_items_only =
        amp != std::string_view::npos &&
        binding.size() == detail::kStoreBinding.size() + detail::kHandleDigits &&
        detail::is_handle(binding.substr(detail::kStoreBinding.size()));
    const std::string_view secrets = credential_items_only ? items.substr(amp + 1) : items;
    detail::for_each_item(secrets, [&](std::string_view item) {
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos || !detail::is_credential_key(item.substr(0, eq))) {
        credential_items_only = false;
      }
    });
  }
  if (!detail::is_handle(handle) || !credential_items_only) {
    return {ErrorCode::kInvalidArgument, "malformed credentials entry"};
  }
  const std::string h(handle);
  const std::string text(items);
  const auto entry = detail::enter(h, text, detail::new_entry(h, text));
  if (!entry) {
    return {ErrorCode::kInvalidArgument,
            "credentials handle " + h + " stands for other credentials in this process"};
  }
  if (pins != nullptr) pins->push_back(entry);
  return Status::ok();
}

}  // namespace shardload
