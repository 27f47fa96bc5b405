#include "shardload/source.hpp"

#include <dirent.h>
#include <fnmatch.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <system_error>
#include <utility>

#include "base/detail/links.hpp"
#include "base/detail/listing_memo.hpp"
#include "shardload/format.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/store_options.hpp"
#include "storage/detail/context.hpp"
#include "storage/detail/object_store.hpp"

namespace shardload {

namespace {

Status layout_error(const std::string& msg) { return {ErrorCode::kLayout, msg}; }

// "D: shard directory not found (No such file or directory)", with the errno (Python's
// SourceNotFoundError), whichever way the source names D (a directory, a pattern, a glob).
// Where D is, or lies under, a symbolic link whose target is gone, that is said: the link's
// target was moved, deleted or unmounted, which "not found" alone hides.
Status directory_not_found(const std::string& dir, int err) {
  std::string what = std::string("shard directory not found (") + std::strerror(err) + ")";
  if (std::string link; err == ENOENT && detail::is_dangling_link(dir, &link)) {
    const std::string bare =
        dir.size() > 1 && dir.back() == '/' ? dir.substr(0, dir.find_last_not_of('/') + 1) : dir;
    what += link == bare
                ? ": it is a symbolic link whose target does not exist"
                : ": it lies under " + link + ", a symbolic link whose target does not exist";
  }
  return file_error(ErrorCode::kLayout, dir, what, err);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// `name`, as a listing (or a pattern) gives it, in the remote "directory" `dir_url`. Refused
// where it holds '?': a URL's query begins at its first '?', so the rest of the name would be
// taken as store options (another endpoint or scheme, say) and the key before it read instead.
Result<std::string> listed_url(const std::string& dir_url, const std::string& name) {
  if (name.find('?') == std::string::npos) return join_key(dir_url, name);
  std::string base = split_options(dir_url).first;
  if (base.back() != '/') base += '/';
  return layout_error(
      path_for_message(base + name) + ": an object whose key holds '?' cannot " +
      (dir_url.starts_with("s3://") ? "be named by an s3:// URL" : "be named by a URL") +
      " (its query begins at the first '?', so the rest of the key would be read "
      "as the URL's options); rename the object");
}

RemoteIo* need_remote(const std::string& url, Status* error) {
  RemoteIo* r = remote_io_for(url);
  if (r == nullptr) {
    *error = layout_error(url + (is_http_url(url)
                                     ? ": http:// and https:// are not supported by this build "
                                       "(not built with http support: it needs libcurl)"
                                     : ": object storage is not supported by this build (it "
                                       "needs Arrow)"));
  }
  return r;
}

// The names in a remote directory, for the numbered and scanned directory sources.
Result<std::vector<std::string>> remote_names(const std::string& dir_url) {
  // "s3://B/D" and "s3://B/D/" list the same prefix: one memo entry.
  const std::string memo_key = join_key(dir_url, "");
  if (auto kept = detail::ListingMemo::find(memo_key)) return *std::move(kept);
  Status error;
  RemoteIo* r = need_remote(dir_url, &error);
  if (r == nullptr) return error;
  auto names = r->list(dir_url);
  if (names) detail::ListingMemo::keep(memo_key, *names);
  return names;
}

thread_local detail::ListingMemo* t_listing_memo = nullptr;

}  // namespace

namespace detail {

ListingMemo::ListingMemo() : outer_(t_listing_memo) { t_listing_memo = this; }
ListingMemo::~ListingMemo() {
  t_listing_memo = outer_;
  if (ahead_) {
    try {
      ahead_->wait();
    } catch (...) {  // none: the job keeps its failures as answers
    }
  }
}

std::optional<Result<std::vector<std::string>>> ListingMemo::find(const std::string& url) {
  if (t_listing_memo == nullptr) return std::nullopt;
  if (const auto it = t_listing_memo->kept_.find(url); it != t_listing_memo->kept_.end()) {
    return it->second;
  }
  const auto it = t_listing_memo->ahead_lists_.find(url);
  if (it == t_listing_memo->ahead_lists_.end()) return std::nullopt;
  t_listing_memo->ahead_->run_if_queued();  // no thread took it: asked here
  Listing listed = it->second.get();
  // Asked once: a failed LIST is asked again by the next caller, as without a look-ahead.
  t_listing_memo->ahead_lists_.erase(it);
  if (listed && *listed) t_listing_memo->kept_.insert_or_assign(url, **listed);
  return listed;
}

void ListingMemo::keep(const std::string& url, const std::vector<std::string>& names) {
  if (t_listing_memo != nullptr) t_listing_memo->kept_.insert_or_assign(url, names);
}

std::optional<Format> ListingMemo::store(const std::string& directory) {
  if (t_listing_memo == nullptr) return std::nullopt;
  const auto it = t_listing_memo->ahead_stores_.find(directory);
  if (it == t_listing_memo->ahead_stores_.end()) return std::nullopt;
  t_listing_memo->ahead_->run_if_queued();  // no thread took it: asked here
  return it->second.get();
}

void ListingMemo::look_ahead(const std::string& dir_url,
                             std::function<Format(const std::string&)> store_of) {
  if (ahead_ != nullptr || remote_io_for(dir_url) == nullptr) return;
  auto store = std::make_shared<std::promise<std::optional<Format>>>();
  auto listing = std::make_shared<std::promise<Listing>>();
  const bool ask_store = static_cast<bool>(store_of);
  auto work = [dir_url, store_of = std::move(store_of), store, listing] {
    // Run by the memo's own thread where no pool thread took it: as on a pool thread, it sees
    // no memo (whose answers it is making).
    ListingMemo* const memo = t_listing_memo;
    t_listing_memo = nullptr;
    struct Restore {
      ListingMemo* memo;
      ~Restore() { t_listing_memo = memo; }
    } restore{memo};
    try {
      if (store_of) {
        const Format f = store_of(dir_url);
        store->set_value(f);
        if (f != Format::kAuto) {
          listing->set_value(std::nullopt);
          return;
        }
      }
      listing->set_value(remote_io_for(dir_url)->list(dir_url));
    } catch (...) {  // an answer not had is asked again by its caller
      try {
        store->set_value(std::nullopt);
      } catch (const std::future_error&) {  // it was set
      }
      try {
        listing->set_value(std::nullopt);
      } catch (const std::future_error&) {
      }
    }
  };
  std::shared_future<std::optional<Format>> store_answer = store->get_future().share();
  std::shared_future<Listing> listing_answer = listing->get_future().share();
  ahead_ = StorageContext::process().pool().submit(std::move(work));
  if (ask_store) ahead_stores_.emplace(dir_url, std::move(store_answer));
  ahead_lists_.emplace(join_key(dir_url, ""), std::move(listing_answer));
}

}  // namespace detail

namespace {

// The entries `pins` holds, for a Source or Layout to keep; null where none.
std::shared_ptr<const void> kept_pins(CredentialPins pins) {
  if (pins.empty()) return nullptr;
  return std::make_shared<const CredentialPins>(std::move(pins));
}

}  // namespace

Source Source::directory(std::string directory, std::string pattern) {
  Source s;
  s.kind = Kind::kDirectory;
  CredentialPins pins;
  s.dir_path = seal_credentials(directory, &pins);
  s.pattern = std::move(pattern);
  s.credentials = kept_pins(std::move(pins));
  return s;
}

Source Source::glob(std::string glob) {
  Source s;
  s.kind = Kind::kGlob;
  CredentialPins pins;
  s.glob_expr = seal_credentials(glob, &pins);
  s.credentials = kept_pins(std::move(pins));
  return s;
}

Source Source::list(std::vector<std::string> paths) {
  Source s;
  s.kind = Kind::kList;
  s.paths = std::move(paths);
  CredentialPins pins;
  for (auto& p : s.paths) p = seal_credentials(p, &pins);
  s.credentials = kept_pins(std::move(pins));
  return s;
}

namespace {

// A C string ends at its first NUL, so a name holding one would silently be
// read as a shorter one; refuse it instead, naming the parameter.
Status check_no_nul(std::string_view what, const std::string& text) {
  if (text.find('\0') == std::string::npos) return Status::ok();
  return {ErrorCode::kInvalidArgument,
          std::string(what) + " '" + path_for_message(text) + "' holds a NUL character"};
}

// "gs://b/k" or "az://c/k" taken as a local path would end in "not found", which hides the
// cause: a URL whose scheme no backend serves is refused by name, unless a local path of
// that spelling exists (a directory "gs:" is legal, if odd).
Status check_scheme(std::string_view what, const std::string& text) {
  // "http:/user:pw@host/x.npy" (one '/') is a URL mistyped: refused saying what to write, unless
  // a directory of its first part's name ("http:") is here, which makes it the local path it
  // spells (as a directory "gs:" makes "gs://b/k" one, below).
  if (const std::string url = mistyped_url(text); !url.empty()) {
    struct ::stat st {};
    if (::stat(text.substr(0, text.find('/')).c_str(), &st) == 0) return Status::ok();
    const auto [shown, shown_url] = mistyped_url_shown(text, url);
    return {ErrorCode::kInvalidArgument,
            std::string(what) + " '" + path_for_message(shown) +
                "': a URL needs two slashes after the scheme: write '" +
                path_for_message(shown_url) + "' (a local path spelled so can be written './" +
                path_for_message(shown) + "')"};
  }
  const std::string scheme = unsupported_scheme(text);
  struct ::stat st {};
  if (scheme.empty() || ::stat(text.c_str(), &st) == 0) return Status::ok();
  const std::string lower = lower_case_scheme(text);
  return {ErrorCode::kInvalidArgument,
          std::string(what) + " '" + path_for_message(text) + "': the " + scheme +
              ":// scheme is not supported (s3://, http:// and https:// are; a local path "
              "spelled so can be written './" +
              path_for_message(text) + "')" +
              (lower.empty() ? std::string()
                             : "; a scheme is read in lower case only: write '" +
                                   path_for_message(lower) + "'")};
}

// An http(s) URL with a fragment or without a host names, in its request, another object
// than the one written (location.hpp: unsendable_url). An s3:// key with a '.', '..' or empty
// segment is refused naming the source as given, before its manifest is asked for: a
// directory's LIST of "a//" answers for "a/" while its objects would be read as "a//NAME".
Status check_url(const std::string& text) {
  SHARDLOAD_RETURN_IF_ERROR(detail::check_object_key(text));
  const std::string why = unsendable_url(text);
  if (why.empty()) return Status::ok();
  return file_error(ErrorCode::kInvalidArgument, text, why);
}

}  // namespace

namespace {

// Whether a source's last part `last`, named as no existing path, is a numbered pattern rather
// than a glob: it holds a brace and either no wildcard (then the pattern's parse says what is
// wrong with it) or one field and no escaped brace. A glob's braces are literal, as glob(3)'s
// and fnmatch(3)'s are, escaped or not: "run{1}/*.npy", "a{b}_*.npy" and "a\{\}_*.npy" are
// globs, "x[1]_{:04d}.npy" a pattern of names that hold '[' and ']'.
bool numbered_pattern(std::string_view last) {
  if (last.find('{') == std::string_view::npos) return false;
  if (last.find_first_of("*?[") == std::string_view::npos) return true;
  return last.find("\\{") == std::string_view::npos && last.find("\\}") == std::string_view::npos &&
         static_cast<bool>(NumberPattern::parse(last));
}

}  // namespace

namespace {

// Object storage has no directories of its own: a URL ending in '/' is one, a URL naming an
// object is that object, any other a prefix (asked of the store: one request). The query
// configures the store, so wildcards and numbering are looked for in the key only, and in its
// last part only: a store lists one prefix per request, so the parts before are a prefix
// taken as spelled ("s3://b/run[1]/", which save writes to, is that prefix, not a glob).
Result<Source> parse_remote(const std::string& text, const std::string& pattern) {
  const auto [key, query] = split_options(text);
  if (is_http_url(text)) {
    // A web server has no listing to ask: each object is named, by its URL or by the
    // directory's manifest (a URL ending in '/': its shardload.manifest names the objects,
    // discovery says so when there is none). The query stays part of the URL (a signed URL's),
    // so wildcards and numbering are refused in the path only (not in the authority, whose
    // brackets hold an IPv6 address: "http://[::1]:8000/d/x.npy").
    const std::size_t host = key.find("://") + 3;
    const std::size_t path = std::min(key.find('/', host), key.size());
    if (!pattern.empty() || key.find_first_of("*?[{", path) != std::string::npos) {
      return file_error(ErrorCode::kInvalidArgument, text,
                        "http:// and https:// sources name objects, one URL each (a URL or a "
                        "list of URLs), or a directory URL ending in '/' whose "
                        "shardload.manifest names them: HTTP has no directory listing, so a "
                        "glob, a numbered pattern or a pattern is not supported");
    }
    if (key.back() == '/') return Source::directory(text, "");
    return Source::list({text});
  }
  const auto slash = key.rfind('/');
  const std::string last = key.substr(slash + 1);
  if (numbered_pattern(last)) {
    if (!pattern.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "source '" + text + "' is already a pattern; do not also pass a pattern");
    }
    return Source::directory(key.substr(0, slash + 1) + query, last);
  }
  if (last.find_first_of("*?[") != std::string::npos) {
    if (!pattern.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "source '" + text + "' is a glob; a pattern applies only to a directory");
    }
    return Source::glob(text);
  }
  if (!last.empty()) {
    Status error;
    RemoteIo* r = need_remote(text, &error);
    if (r == nullptr) return error;
    auto object = r->is_object(text);
    if (!object.is_ok()) {
      // Neither an object nor a prefix: a source that does not exist, as a missing local path
      // or an empty "s3://B/d/" is (SourceNotFoundError), not a failed read.
      const Status& st = object.status();
      if (st.code() != ErrorCode::kIo || st.sys_errno() != ENOENT) return st;
      return Status(ErrorCode::kLayout, st.message()).with_path(text).with_errno(ENOENT);
    }
    if (*object) {
      if (!pattern.empty()) {
        return Status(ErrorCode::kInvalidArgument,
                      "source '" + text + "' is a file; a pattern applies only to a directory");
      }
      return Source::list({text});
    }
  }
  return Source::directory(text, pattern);
}

}  // namespace

Result<Source> Source::parse(const std::string& text, const std::string& pattern) {
  if (text.empty()) return Status(ErrorCode::kInvalidArgument, "the source is empty");
  SHARDLOAD_RETURN_IF_ERROR(check_no_nul("source", text));
  SHARDLOAD_RETURN_IF_ERROR(check_no_nul("pattern", pattern));
  if (is_remote_url(text)) return parse_remote(text, pattern);
  SHARDLOAD_RETURN_IF_ERROR(check_scheme("source", text));
  // What exists is taken as it is, before any reading of its characters: a
  // directory named "run[1]" or "a{b}" is that directory, not a glob or a
  // pattern that matches nothing.
  struct ::stat st {};
  if (::stat(text.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return directory(text, pattern);
    if (!pattern.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "source '" + text + "' is a file; a pattern applies only to a directory");
    }
    // A FIFO, socket or device too is a file source, refused as one ("not a regular file"
    // when it is opened), not taken for a directory.
    return list({text});
  }
  const auto last_slash = text.rfind('/');
  if (numbered_pattern(last_slash == std::string::npos
                           ? std::string_view(text)
                           : std::string_view(text).substr(last_slash + 1))) {
    if (!pattern.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "source '" + text + "' is already a pattern; do not also pass a pattern");
    }
    // The directory part is taken literally (patterns are not globbed), so
    // "run[1]/shard_{:04d}.npy" names files in the directory "run[1]".
    const auto slash = text.rfind('/');
    if (slash == std::string::npos) return directory(".", text);
    return directory(slash == 0 ? "/" : text.substr(0, slash), text.substr(slash + 1));
  }
  if (text.find_first_of("*?[") != std::string::npos) {
    if (!pattern.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "source '" + text + "' is a glob; a pattern applies only to a directory");
    }
    // Every part of a glob is a glob: a directory "run[1]" in it is spelled
    // "run\[1\]" (glob(3) escapes), or named with a pattern or a list. Braces are literal
    // (no GLOB_BRACE): "run{1}/*.npy", as "run\{1\}/*.npy".
    return glob(text);
  }
  return directory(text, pattern);
}

std::string Source::describe() const {
  switch (kind) {
    case Kind::kDirectory:
      return redact_secrets(pattern.empty() ? dir_path : join_path(dir_path, pattern));
    case Kind::kGlob:
      return redact_secrets(glob_expr);
    case Kind::kList:
      return paths.size() == 1 ? redact_secrets(paths[0])
                               : "a list of " + std::to_string(paths.size()) + " paths";
  }
  return {};
}

Result<NumberPattern> NumberPattern::parse(std::string_view pattern) {
  SHARDLOAD_RETURN_IF_ERROR(check_no_nul("pattern", std::string(pattern)));
  auto bad = [&](const std::string& why) {
    return Status(ErrorCode::kInvalidArgument, "pattern '" + std::string(pattern) + "': " + why +
                                                   " (expected one field such as {:04d} or {}; a "
                                                   "literal brace is written {{ or }})");
  };
  // Python's str.format spelling: "{{" and "}}" are literal braces, so that a name holding
  // braces ("a{b}_0000.npy") can be numbered at all ('a{{b}}_{:04d}.npy').
  NumberPattern p;
  std::string* text = &p.prefix;
  std::string_view spec;
  bool field = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if ((c == '{' || c == '}') && i + 1 < pattern.size() && pattern[i + 1] == c) {
      text->push_back(c);
      ++i;
    } else if (c == '{') {
      const auto close = pattern.find('}', i + 1);
      if (close == std::string_view::npos) return bad("no number field");
      if (field) return bad("more than one field, or a '/' in the file-name pattern");
      field = true;
      spec = pattern.substr(i + 1, close - i - 1);
      text = &p.suffix;
      i = close;
    } else if (c == '}') {
      return bad("a '}' that closes no field");
    } else if (c == '/') {
      return bad("more than one field, or a '/' in the file-name pattern");
    } else {
      text->push_back(c);
    }
  }
  if (!field) return bad("no number field");
  if (spec.empty() || spec == ":d") return p;
  // Accepted: ":0Nd" (zero-padded to N digits) and ":Nd" is rejected since
  // space padding cannot be part of a file name we match.
  if (spec.size() < 4 || spec.substr(0, 2) != ":0" || spec.back() != 'd') {
    return bad("unsupported field '{" + std::string(spec) + "}'");
  }
  int width = 0;
  const char* first = spec.data() + 2;
  const char* last = spec.data() + spec.size() - 1;
  auto [ptr, ec] = std::from_chars(first, last, width);
  if (ec != std::errc() || ptr != last || width < 1 || width > 18) {
    return bad("unsupported width in '{" + std::string(spec) + "}'");
  }
  p.width = width;
  return p;
}

std::string NumberPattern::escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    out.push_back(c);
    if (c == '{' || c == '}') out.push_back(c);
  }
  return out;
}

std::string NumberPattern::format(std::int64_t n) const {
  std::string digits = std::to_string(n);
  if (static_cast<int>(digits.size()) < width) {
    digits.insert(0, static_cast<std::size_t>(width) - digits.size(), '0');
  }
  return prefix + digits + suffix;
}

std::int64_t NumberPattern::match(std::string_view name) const {
  if (name.size() <= prefix.size() + suffix.size()) return -1;
  if (name.substr(0, prefix.size()) != prefix) return -1;
  if (name.substr(name.size() - suffix.size()) != suffix) return -1;
  std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18) return -1;
  for (const char c : digits) {
    if (!is_digit(c)) return -1;
  }
  std::int64_t n = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), n);
  // Only the canonical spelling counts: "shard_007.npy" is not shard 7 under
  // {:04d}, and "shard_00010.npy" is not shard 10.
  if (format(n) != std::string(name)) return -1;
  return n;
}

bool natural_less(std::string_view a, std::string_view b) {
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      std::size_t i0 = i;
      std::size_t j0 = j;
      while (i0 < a.size() && a[i0] == '0') ++i0;
      while (j0 < b.size() && b[j0] == '0') ++j0;
      std::size_t i1 = i0;
      std::size_t j1 = j0;
      while (i1 < a.size() && is_digit(a[i1])) ++i1;
      while (j1 < b.size() && is_digit(b[j1])) ++j1;
      if (i1 - i0 != j1 - j0) return i1 - i0 < j1 - j0;
      const int c = a.substr(i0, i1 - i0).compare(b.substr(j0, j1 - j0));
      if (c != 0) return c < 0;
      // Equal values: fewer leading zeros first, so the order is total.
      if (i1 - i != j1 - j) return i1 - i < j1 - j;
      i = i1;
      j = j1;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

namespace {

Result<std::vector<std::string>> resolve_directory(const Source& s, bool* nothing_matches) {
  const std::string pattern = s.pattern.empty() ? std::string(kDefaultPattern) : s.pattern;
  const bool remote = is_remote_url(s.dir_path);
  std::vector<std::string> listed;
  if (remote) {
    SHARDLOAD_ASSIGN_OR_RETURN(listed, remote_names(s.dir_path));
    // An object named as spelled is that object, as a file is (see Source::parse):
    // "a{b}.npy" or "x_{:04d}.npy" under the prefix is not a pattern.
    if (!s.pattern.empty() && std::find(listed.begin(), listed.end(), pattern) != listed.end()) {
      SHARDLOAD_ASSIGN_OR_RETURN(std::string url, listed_url(s.dir_path, pattern));
      return std::vector<std::string>{std::move(url)};
    }
  } else if (!s.pattern.empty()) {
    struct ::stat st {};
    const std::string spelled = join_path(s.dir_path, pattern);
    if (::stat(spelled.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return {{spelled}};
  }
  SHARDLOAD_ASSIGN_OR_RETURN(NumberPattern pat, NumberPattern::parse(pattern));
  std::vector<std::int64_t> numbers;
  if (remote) {
    for (const auto& name : listed) {
      const std::int64_t n = pat.match(name);
      if (n >= 0) numbers.push_back(n);
    }
  } else {
    struct ::stat st {};
    if (::stat(s.dir_path.c_str(), &st) != 0) {
      return directory_not_found(s.dir_path, errno);
    }
    if (!S_ISDIR(st.st_mode)) return layout_error(s.dir_path + ": not a directory");
    DIR* d = ::opendir(s.dir_path.c_str());
    if (d == nullptr) {
      const int err = errno;
      return layout_error(s.dir_path + ": cannot list the directory (" + std::strerror(err) + ")");
    }
    while (const dirent* e = ::readdir(d)) {
      const std::int64_t n = pat.match(e->d_name);
      if (n >= 0) numbers.push_back(n);
    }
    ::closedir(d);
  }
  const std::string where = remote ? join_key(s.dir_path, pattern) : join_path(s.dir_path, pattern);
  if (numbers.empty()) {
    *nothing_matches = true;
    return layout_error(where + ": no files match the pattern");
  }
  std::sort(numbers.begin(), numbers.end());
  // One directory cannot list a name twice, but stay correct if it does.
  numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
  // The numbering must run 0, 1, ..., max without gaps. The count and the
  // first missing numbers come from the numbers present, never from walking
  // 0..max: one stray "shard_99999999999999.npy" must not cost 1e14 steps.
  const std::int64_t max = numbers.back();
  const std::int64_t expected = max + 1;
  const auto present = static_cast<std::int64_t>(numbers.size());
  if (present != expected) {
    const std::int64_t missing_count = expected - present;
    std::vector<std::int64_t> missing;
    std::int64_t next = 0;  // the smallest number not yet accounted for
    for (const auto n : numbers) {
      for (; next < n && missing.size() < 5; ++next) missing.push_back(next);
      if (missing.size() >= 5) break;
      next = n + 1;
    }
    std::string list;
    for (const auto n : missing) list += (list.empty() ? "" : ", ") + pat.format(n);
    if (missing_count > 5) list += ", ...";
    return layout_error(where + ": gap in the numbering: " + std::to_string(missing_count) +
                        " of " + std::to_string(expected) + " files missing (" + list + ")");
  }
  std::vector<std::string> paths;
  paths.reserve(numbers.size());
  for (const auto n : numbers) {
    if (remote) {
      SHARDLOAD_ASSIGN_OR_RETURN(std::string url, listed_url(s.dir_path, pat.format(n)));
      paths.push_back(std::move(url));
    } else {
      paths.push_back(join_path(s.dir_path, pat.format(n)));
    }
  }
  return paths;
}

// A remote glob matches in the last part of the key only: object storage lists one prefix
// per request, and a wildcard in a "directory" would list the whole bucket. The prefix
// before it is taken as spelled (see parse_remote).
Result<std::vector<std::string>> resolve_remote_glob(const Source& s, bool* nothing_matches) {
  const auto [key, query] = split_options(s.glob_expr);
  const auto slash = key.rfind('/');
  const std::string dir = key.substr(0, slash + 1);
  const std::string last = key.substr(slash + 1);
  // What a user who meant wildcards in the prefix is told when it is not there as spelled.
  const std::string spelled =
      dir.find_first_of("*?[{") != std::string::npos
          ? " (wildcards match in its last part only; the prefix '" + dir + "' is taken as spelled)"
          : std::string();
  auto listed = remote_names(dir + query);
  if (!listed) {
    const Status& st = listed.status();
    if (spelled.empty()) return st;
    return Status(st.code(), st.message() + spelled)
        .with_path(st.path())
        .with_errno(st.sys_errno());
  }
  const auto& names = *listed;
  // An object named as spelled is that object, as a file is (see Source::parse): "run[1].npy"
  // is not a glob that matches "run1.npy".
  if (std::find(names.begin(), names.end(), last) != names.end()) return {{s.glob_expr}};
  std::vector<std::string> paths;
  for (const auto& name : names) {
    if (::fnmatch(last.c_str(), name.c_str(), FNM_PERIOD) == 0) {
      SHARDLOAD_ASSIGN_OR_RETURN(std::string url, listed_url(dir + query, name));
      paths.push_back(std::move(url));
    }
  }
  if (paths.empty()) {
    *nothing_matches = true;
    return layout_error(s.glob_expr + ": no files match the glob" + spelled);
  }
  std::sort(paths.begin(), paths.end(),
            [](const std::string& a, const std::string& b) { return natural_less(a, b); });
  return paths;
}

// The directory ::glob could not open, and why (its error callback takes no argument of ours).
thread_local std::string t_glob_failed;
thread_local int t_glob_errno = 0;
int glob_failed(const char* path, int err) {
  t_glob_failed = path;
  t_glob_errno = err;
  return 1;
}

Result<std::vector<std::string>> resolve_glob(const Source& s, bool* nothing_matches) {
  if (is_remote_url(s.glob_expr)) return resolve_remote_glob(s, nothing_matches);
  glob_t g{};
  t_glob_failed.clear();
  t_glob_errno = 0;
  const int rc = ::glob(s.glob_expr.c_str(), GLOB_ERR, glob_failed, &g);
  std::vector<std::string> paths;
  if (rc == 0) {
    paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  }
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) {
    *nothing_matches = true;
    return layout_error(s.glob_expr + ": no files match the glob");
  }
  if (rc == GLOB_ABORTED && !t_glob_failed.empty() &&
      (t_glob_errno == ENOENT || t_glob_errno == ENOTDIR)) {
    // A directory of the glob that is not there (a typo, a link whose target is gone): what
    // a directory or pattern source under it says, not a failed read.
    return directory_not_found(t_glob_failed, t_glob_errno);
  }
  if (rc == GLOB_ABORTED && !t_glob_failed.empty()) {
    return file_error(ErrorCode::kLayout, t_glob_failed,
                      "cannot list the directory (" + std::string(std::strerror(t_glob_errno)) +
                          "), expanding the glob " + s.glob_expr,
                      t_glob_errno);
  }
  if (rc != 0) return layout_error(s.glob_expr + ": the glob could not be expanded (read error)");
  std::sort(paths.begin(), paths.end(),
            [](const std::string& a, const std::string& b) { return natural_less(a, b); });
  return paths;
}

}  // namespace

namespace {

// Splits a name into prefix, digit run and extension: the digits are the last run before
// the extension ("shard_0007.h5" -> "shard_", "0007", ".h5"), or at the very end when the
// name has no extension, or none ends there ("part-00001").
bool split_numbered(const std::string& name, std::string* prefix, std::string* digits,
                    std::string* ext) {
  const auto try_at = [&](std::size_t end, std::string e) {
    std::size_t b = end;
    while (b > 0 && is_digit(name[b - 1])) --b;
    if (b == end || end - b > 18) return false;
    *prefix = name.substr(0, b);
    *digits = name.substr(b, end - b);
    *ext = std::move(e);
    return true;
  };
  const auto dot = name.rfind('.');
  if (dot != std::string::npos && dot > 0 && try_at(dot, name.substr(dot))) return true;
  return try_at(name.size(), "");
}

std::string extension_of(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? std::string() : name.substr(dot);
}

}  // namespace

Result<DirectoryScan> scan_directory(const std::string& directory) {
  // Both kinds of directory as (name, is a directory): object storage lists objects only.
  std::vector<std::pair<std::string, bool>> entries;
  if (is_remote_url(directory)) {
    SHARDLOAD_ASSIGN_OR_RETURN(const auto names, remote_names(directory));
    for (const auto& name : names) entries.emplace_back(name, false);
  } else {
    struct ::stat st {};
    if (::stat(directory.c_str(), &st) != 0) {
      return directory_not_found(directory, errno);
    }
    if (!S_ISDIR(st.st_mode)) return layout_error(directory + ": not a directory");
    DIR* d = ::opendir(directory.c_str());
    if (d == nullptr) {
      const int err = errno;
      return layout_error(directory + ": cannot list the directory (" + std::strerror(err) + ")");
    }
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
        struct ::stat es {};
        is_dir = ::stat(join_path(directory, name).c_str(), &es) == 0 && S_ISDIR(es.st_mode);
      }
      entries.emplace_back(name, is_dir);
    }
    ::closedir(d);
  }
  DirectoryScan scan;
  scan.directory = directory;
  // A name with a leading zero is spelled by one padding only, its width ("0007": {:04d});
  // any other is spelled by {} and by every padding no wider than its digits ("10000":
  // {:04d} too, a number past the padding).
  struct Names {
    std::string prefix, ext;
    std::vector<std::pair<std::string, int>> names;  // (name, digits; negative when padded)
  };
  std::vector<Names> groups;
  std::vector<std::pair<std::string, std::vector<std::string>>> exts;
  std::vector<std::string> dirs;
  for (const auto& [name, is_dir] : entries) {
    // A save's hidden staging directory (".NAME.shardload-tmp-HOST-PID-N", left by a killed
    // save) is never a dataset to load or to suggest: it may be half written.
    if (name[0] == '.' && name.find(".shardload-tmp-") != std::string::npos) continue;
    ++scan.entries;
    if (is_dir) {
      scan.any_directory = true;
      dirs.push_back(name);
    }
    const std::string ext = extension_of(name);
    auto xe = std::find_if(exts.begin(), exts.end(), [&](const auto& x) { return x.first == ext; });
    if (xe == exts.end()) {
      exts.push_back({ext, {}});
      xe = exts.end() - 1;
    }
    xe->second.push_back(name);
    std::string prefix, digits, suffix;
    if (!split_numbered(name, &prefix, &digits, &suffix)) continue;
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const Names& n) { return n.prefix == prefix && n.ext == suffix; });
    if (g == groups.end()) {
      groups.push_back({prefix, suffix, {}});
      g = groups.end() - 1;
    }
    const int n = static_cast<int>(digits.size());
    g->names.emplace_back(name, n > 1 && digits[0] == '0' ? -n : n);
  }
  const auto by_number = [](const std::string& a, const std::string& b) {
    return natural_less(a, b);
  };
  // Only the first and last names in natural order are kept: a linear pass, not a sort
  // (with a hundred thousand shards the sorts were a fifth of discovery).
  for (auto& g : groups) {
    // The paddings the names show. One (or none: {}) spells the whole group when every
    // unpadded name is at least as wide; otherwise each spelling is a group of its own, so
    // that a file is never read as a gap under another's padding, nor left out unsaid. An
    // unpadded name goes to the widest padding that spells it, else to {}.
    std::vector<int> widths;
    for (const auto& [name, n] : g.names) {
      if (n < 0 && std::find(widths.begin(), widths.end(), -n) == widths.end()) {
        widths.push_back(-n);
      }
    }
    std::sort(widths.begin(), widths.end());
    std::vector<std::pair<int, std::vector<std::string>>> spellings;  // (width, names)
    for (auto& [name, n] : g.names) {
      int width = n < 0 ? -n : 0;
      if (n > 0) {
        const auto w = std::upper_bound(widths.begin(), widths.end(), n);
        if (w != widths.begin()) width = *(w - 1);
      }
      auto sp = std::find_if(spellings.begin(), spellings.end(),
                             [&](const auto& x) { return x.first == width; });
      if (sp == spellings.end()) {
        spellings.push_back({width, {}});
        sp = spellings.end() - 1;
      }
      sp->second.push_back(std::move(name));
    }
    for (const auto& [width, names] : spellings) {
      const auto [lo, hi] = std::minmax_element(names.begin(), names.end(), by_number);
      NumberedGroup out;
      // The name's own braces are literal: "a{b}_0000.npy" is 'a{{b}}_{:04d}.npy'.
      out.pattern = NumberPattern::escape(g.prefix) +
                    (width > 0 ? "{:0" + std::to_string(width) + "d}" : "{}") +
                    NumberPattern::escape(g.ext);
      out.prefix = g.prefix;
      out.extension = g.ext;
      out.first = *lo;
      out.last = *hi;
      out.count = static_cast<std::int64_t>(names.size());
      out.directories = std::find(dirs.begin(), dirs.end(), out.first) != dirs.end();
      scan.groups.push_back(std::move(out));
    }
  }
  std::sort(scan.groups.begin(), scan.groups.end(),
            [](const NumberedGroup& a, const NumberedGroup& b) {
              return a.count != b.count ? a.count > b.count : a.pattern < b.pattern;
            });
  for (auto& [ext, names] : exts) {
    const auto [lo, hi] = std::minmax_element(names.begin(), names.end(), by_number);
    scan.extensions.push_back({ext, static_cast<std::int64_t>(names.size()), *lo, *hi});
  }
  std::sort(scan.extensions.begin(), scan.extensions.end(), [](const auto& a, const auto& b) {
    return a.count != b.count ? a.count > b.count : a.extension < b.extension;
  });
  return scan;
}

std::string DirectoryScan::describe(
    const std::function<bool(std::string_view extension)>& known) const {
  if (entries == 0) return "is empty";
  std::string out = "holds " + std::to_string(entries) +
                    (any_directory ? (entries == 1 ? " entry" : " entries")
                                   : (entries == 1 ? " file" : " files"));
  std::string parts;
  std::int64_t other = 0;
  for (const auto& x : extensions) {
    if (x.extension.empty() || !known(x.extension)) {
      other += x.count;
      continue;
    }
    parts += (parts.empty() ? ": " : ", ") + std::to_string(x.count) + " *" + x.extension + " (" +
             path_for_message(x.first);
    if (x.count > 1) parts += " ... " + path_for_message(x.last);
    parts += ")";
  }
  if (other > 0) parts += (parts.empty() ? ": " : ", ") + std::to_string(other) + " other";
  return out + parts;
}

namespace {

// `text` matched literally by a glob: its wildcards and braces escaped, so that the glob is
// never taken for a numbered pattern (Source::parse). `text` is a local path's every part
// (glob(3) reads them all) or an object's last part (a prefix is taken as spelled).
std::string glob_literal(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == '\\' || c == '{' || c == '}') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string DirectoryScan::suggestion() const {
  // A URL's query ends the glob, as it ends every URL derived from the directory's.
  const auto glob = [&](const std::string& name) {
    return path_for_message(is_remote_url(directory) ? join_key(directory, name)
                                                     : join_path(glob_literal(directory), name));
  };
  for (const auto& g : groups) {
    return "; pass " + option_mention("pattern", true) + "'" + path_for_message(g.pattern) +
           "' or a glob '" +
           glob(g.extension.empty() ? glob_literal(g.prefix) + "*"
                                    : "*" + glob_literal(g.extension)) +
           "'";
  }
  for (const auto& x : extensions) {
    if (x.extension.empty()) continue;
    return "; pass a glob '" + glob("*" + glob_literal(x.extension)) + "'";
  }
  return {};
}

Result<std::vector<std::string>> resolve(const Source& source) {
  bool nothing_matches = false;
  return resolve(source, &nothing_matches);
}

Status check_source(const Source& source) {
  // Sources built in C++ (Source::dir, from_glob, list) never passed parse().
  switch (source.kind) {
    case Source::Kind::kDirectory:
      SHARDLOAD_RETURN_IF_ERROR(check_no_nul("directory", source.dir_path));
      SHARDLOAD_RETURN_IF_ERROR(check_scheme("directory", source.dir_path));
      SHARDLOAD_RETURN_IF_ERROR(check_url(source.dir_path));
      SHARDLOAD_RETURN_IF_ERROR(check_no_nul("pattern", source.pattern));
      break;
    case Source::Kind::kGlob:
      SHARDLOAD_RETURN_IF_ERROR(check_no_nul("glob", source.glob_expr));
      SHARDLOAD_RETURN_IF_ERROR(check_scheme("glob", source.glob_expr));
      SHARDLOAD_RETURN_IF_ERROR(check_url(source.glob_expr));
      break;
    case Source::Kind::kList:
      for (const auto& p : source.paths) {
        SHARDLOAD_RETURN_IF_ERROR(check_no_nul("path", p));
        SHARDLOAD_RETURN_IF_ERROR(check_scheme("path", p));
        SHARDLOAD_RETURN_IF_ERROR(check_url(p));
      }
      break;
  }
  return Status::ok();
}

Result<std::vector<std::string>> resolve(const Source& source, bool* nothing_matches) {
  *nothing_matches = false;
  SHARDLOAD_RETURN_IF_ERROR(check_source(source));
  switch (source.kind) {
    case Source::Kind::kDirectory:
      return resolve_directory(source, nothing_matches);
    case Source::Kind::kGlob:
      return resolve_glob(source, nothing_matches);
    case Source::Kind::kList:
      if (source.paths.empty()) return layout_error("the list of shard paths is empty");
      return source.paths;
  }
  return layout_error("unknown source kind");
}

}  // namespace shardload
