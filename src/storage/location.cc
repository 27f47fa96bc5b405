// What the store behind a path is like: the traits of its scheme's row (the registry of schemes,
// store_schemes.cc), and the questions answered from them.
#include "shardload/location.hpp"
#include "shardload/store_options.hpp"

#include <array>
#include <string>
#include <vector>

#include "storage/detail/store_schemes.hpp"
#include "storage/detail/stores.hpp"

namespace shardload {

namespace {

using detail::SchemeRow;

// Every scheme is a registered one: the built-in drivers' (s3://, http(s)://: register.cc) and
// the store drivers' (shardload/store_schemes.hpp).
const SchemeRow* row_of(std::string_view path) { return detail::registered_row(path); }

}  // namespace

PathTraits path_traits(std::string_view path) {
  const SchemeRow* row = row_of(path);
  return row == nullptr ? PathTraits{} : row->traits;
}

bool is_remote_url(std::string_view path) { return row_of(path) != nullptr; }

std::string unsupported_scheme(std::string_view path) {
  const auto colon = path.find("://");
  if (colon == std::string_view::npos || colon == 0 || is_remote_url(path)) return {};
  const std::string_view scheme = path.substr(0, colon);
  const auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(scheme[0])) return {};
  for (const char c : scheme) {
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.') return {};
  }
  return std::string(scheme);
}

std::string lower_case_scheme(std::string_view path) {
  const std::string scheme = unsupported_scheme(path);
  if (scheme.empty()) return {};
  std::string lower = scheme;
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  std::string spelled = lower + std::string(path.substr(scheme.size()));
  return is_remote_url(spelled) ? spelled : std::string();
}

std::string mistyped_url(std::string_view path) {
  const std::size_t colon = path.find(':');
  if (colon == std::string_view::npos || is_remote_url(path)) return {};
  std::size_t rest = colon + 1;
  while (rest < path.size() && (path[rest] == '/' || path[rest] == '\\')) ++rest;
  const std::string_view run = path.substr(colon + 1, rest - colon - 1);
  if (run == "//") return {};  // a URL, or a scheme no backend serves (unsupported_scheme)
  std::string lower(path.substr(0, colon));
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  std::string spelled = lower + "://" + std::string(path.substr(rest));
  return is_remote_url(spelled) ? spelled : std::string();
}

std::pair<std::string, std::string> mistyped_url_shown(std::string_view text,
                                                       const std::string& url) {
  const std::size_t colon = text.find(':');
  std::size_t rest = colon + 1;
  while (rest < text.size() && (text[rest] == '/' || text[rest] == '\\')) ++rest;
  const auto authority_start = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '[' ||
           c == '%' || c == '_' || c == '-';
  };
  const std::size_t at = text.rfind('@');
  if (colon == std::string_view::npos || at == std::string_view::npos || at < rest ||
      (rest < text.size() && authority_start(text[rest]))) {
    return {std::string(text), url};
  }
  const std::string tail(text.substr(at));
  return {std::string(text.substr(0, colon + 1)) + "***" + tail,
          url.substr(0, url.find("://") + 3) + "***" + tail};
}

bool is_http_url(std::string_view path) {
  return path.starts_with("http://") || path.starts_with("https://");
}

RemoteIo* remote_io_for(std::string_view url) {
  const SchemeRow* row = row_of(url);
  return row == nullptr ? nullptr : row->backend();
}

namespace detail {

Result<RemoteIo*> route_path(std::string_view path) {
  const SchemeRow* row = row_of(path);
  if (row == nullptr) return static_cast<RemoteIo*>(nullptr);
  RemoteIo* const r = row->backend();
  if (r == nullptr) return file_error(ErrorCode::kIo, std::string(path), row->missing);
  return r;
}

}  // namespace detail

std::pair<std::string, std::string> split_options(std::string_view path) {
  if (!path_traits(path).options_in_query) return {std::string(path), {}};
  // The name and options as every path made from a source holds them: its secrets by their
  // handle (seal_credentials; an http(s) URL's user part too, which leaves the name), so that
  // a URL given as typed and the paths resolved from it compare equal, and a path joined from
  // it holds no secret either.
  std::string sealed = seal_credentials(path);
  const std::size_t q = sealed.find('?');
  if (q == std::string::npos) return {std::move(sealed), {}};
  return {sealed.substr(0, q), sealed.substr(q)};
}

std::string directory_key(std::string_view path) {
  const auto [name, options] = split_options(path);
  const std::size_t slash = name.rfind('/');
  const std::string key = slash == std::string::npos ? std::string(".")
                          : slash == 0               ? std::string("/")
                                                     : name.substr(0, slash);
  return key + options;
}

std::string join_key(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  auto [key, options] = split_options(dir);
  if (key.empty() || key.back() != '/') key += '/';
  key += name;
  return key + options;
}

std::string unnameable_key(std::string_view location, std::string_view key) {
  const PathTraits traits = path_traits(location);
  if (key.find_first_of(traits.key_delimiters) == std::string_view::npos) return {};
  // What each delimiter does to a URL that holds it ('%', '#' and '?' of an http(s) key are
  // percent-encoded instead: url_key).
  struct Why {
    char c;
    const char* does;
  };
  constexpr std::array kWhy{Why{'?', "its query begins at the first '?'"},
                            Why{'#', "its fragment, never sent, at the first '#'"}};
  std::string chars;
  std::string does;
  for (const Why& w : kWhy) {
    if (traits.key_delimiters.find(w.c) == std::string_view::npos) continue;
    chars += std::string(chars.empty() ? "" : " or ") + "'" + w.c + "'";
    does += std::string(does.empty() ? "" : ", and ") + w.does;
  }
  return "an object whose key holds " + chars + " cannot be named by an " +
         std::string(traits.scheme_label) + " URL (" + does + ")";
}

std::string unsendable_url(std::string_view path) {
  const PathTraits traits = path_traits(path);
  if (!traits.fragment_cut) return {};
  const std::size_t scheme = path.find("://");
  if (path.substr(scheme + 3).starts_with('/')) {
    return "an " + std::string(traits.scheme_label) +
           " URL with no host after its '//' is refused: a third '/' leaves it empty, and "
           "libcurl would take the text after it as the host (and any user part there as "
           "credentials to send); write " +
           std::string(path.substr(0, scheme)) + "://HOST/...";
  }
  const std::size_t hash = path.find('#');
  if (hash == std::string_view::npos) return {};
  return "an " + std::string(traits.scheme_label) +
         " URL holding '#' is refused: its fragment, from the '#' on, is never sent to the "
         "server, so the request would name the object '" +
         std::string(split_options(path.substr(0, hash)).first) +
         "' instead (write a '#' that is part of the object's name as %23, and leave out a "
         "fragment)";
}

std::string url_key(std::string_view location, std::string_view key) {
  if (!path_traits(location).encoded_keys) return std::string(key);
  // Only what a URL's path may hold as it is (RFC 3986's unreserved and sub-delims, ':', '@'
  // and the '/' between segments) goes in unencoded: '%', '#' and '?' would be decoded or cut,
  // a space or a control is no URL at all (libcurl refuses it), and a byte past ASCII is sent
  // as whatever the client makes of it.
  return percent_encode(key, [](unsigned char b) {
    constexpr std::string_view kAsIs = "-._~!$&'()*+,;=:@/";
    return (b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') ||
           kAsIs.find(static_cast<char>(b)) != std::string_view::npos;
  });
}

std::string percent_encode(std::string_view text, bool (*keep)(unsigned char)) {
  constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (keep(b)) {
      out += c;
    } else {
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 0xF];
    }
  }
  return out;
}

std::string snapshot_difference(const FileInfo& then, const FileInfo& now) {
  if (then == now) return {};
  // Size and mtime always, so that every message reads alike; the rest when
  // they are what differs.
  std::string d = "size " + std::to_string(then.size) + " -> " + std::to_string(now.size) +
                  " bytes, mtime " + std::to_string(then.mtime_ns) + " -> " +
                  std::to_string(now.mtime_ns) + " ns";
  if (then.ctime_ns != now.ctime_ns) {
    d += ", ctime " + std::to_string(then.ctime_ns) + " -> " + std::to_string(now.ctime_ns) + " ns";
  }
  if (then.inode != now.inode) {
    d += ", replaced by another file (inode " + std::to_string(then.inode) + " -> " +
         std::to_string(now.inode) + ")";
  }
  if (then.regular != now.regular)
    d += now.regular ? ", now a regular file" : ", no longer a regular file";
  return d;
}

std::string snapshot_difference(std::string_view path, const FileInfo& then, const FileInfo& now) {
  if (path_traits(path).inode_is_identity) return snapshot_difference(then, now);
  std::string d =
      "size " + std::to_string(then.size) + " -> " + std::to_string(now.size) + " bytes";
  if (then.inode != now.inode) {
    // An http(s) snapshot's identity is its ETag, or its Last-Modified where the server sends
    // no ETag; which one it was is not kept. An answer without a Last-Modified (modified_s 0)
    // had an ETag.
    if (detail::is_store_scheme(path)) {
      d += ", overwritten (its generation differs)";
    } else if (is_http_url(path) && now.modified_s != 0) {
      d += ", overwritten (its ETag differs, or its Last-Modified where the server sends no ETag)";
    } else {
      d += ", overwritten (its ETag differs)";
    }
  }
  return d;
}

}  // namespace shardload
