// Status and Result<T>: how the engine-independent core reports errors.
//
// The core never throws: it runs inside Legate tasks, where an escaping
// exception aborts the process. Errors carry a code (what kind of failure)
// and a message that names the file, the field, what was expected and what
// was found; each layer adds its context in front with with_context().
//
// Contract: values; copy and move freely, share between threads read-only. A Result holds a
// value or a non-ok Status, never both; value() on an error is a bug (asserted in debug).
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace shardload {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // a caller's option is out of range or malformed
  kLayout,           // the set of shards is not a valid dataset
  kFormat,           // a file's own metadata is malformed or unsupported
  kIo,               // the operating system failed a call, or a read came up short
  kChanged,          // a file changed between discovery and load
  kNoMemory,         // the data does not fit the memory it is to be loaded into
};

const char* error_code_name(ErrorCode code);

// `text` with every credential in a URL replaced by "***": the value of each secret query
// key (shardload's secret_key and session_token, a presigned or signed URL's signature or
// token: X-Amz-Signature, X-Amz-Security-Token, Signature, X-Goog-Signature, an Azure SAS's
// sig, token, access_token, key, ...; the list and why: status.cc) in a query or a fragment,
// keys compared without case and percent-decoded, and the password of a URL's user part
// ("https://user:***@host/"; a user part without a password is hidden whole). The rest of
// the URL stays as it was. The one redaction of the project: every Status's message and path
// pass through it, and so does every place that shows a URL (Source::describe, describe(Layout),
// the command line's output, Python's Layout and messages), so no error, log line or printout
// shows a credential given in a URL or in storage options.
std::string redact_secrets(std::string text);

// `value` (a credential that is in no URL: a session token from the environment, a config
// file or a role, a request's signature) hidden by redact_secrets wherever a text quotes it,
// as a server's error page may echo a request's headers. Values shorter than 6 bytes are
// not taken; the 64 most recent are kept. (A request's own answer is cleared of that
// request's credentials before it is quoted, whatever was signed since.)
void hide_in_messages(std::string value);

// `text` as it may be shown to a person on a terminal: each control character (C0, DEL,
// C1, and the bidirectional overrides and isolates) and each byte that is not part of valid
// UTF-8 becomes an escape ("\n", "\r", "\t", "\0", "\x1b", "\u009b", "\u202e",
// "\xff"), so a crafted file name or key can neither rewrite the terminal nor forge a
// line of output. The rest, backslashes included, is kept; applying it twice gives the
// same text. Every message (Status), path_for_message and the command line's plain text go
// through it; JSON output does not (it escapes for itself and keeps the name exact).
// `keep_option_marks`: a Status message keeps the unit separator (0x1f) that marks an option
// for spell_options (format.hpp; a terminal does nothing with it), and the command line
// escapes whatever of it is left after spelling.
std::string printable(std::string_view text, bool keep_option_marks = false);

// `text` as it may be shown to a person: its credentials hidden (redact_secrets), then its
// controls and invalid bytes escaped (printable). The one composition of the two, for every
// message, path and line of output a person reads.
std::string printable_redacted(std::string text, bool keep_option_marks = false);

// The UTF-8 sequence that starts at text[i], by the strict rules Python's decoder applies (no
// overlong forms, no surrogates, nothing past U+10FFFF): its length in bytes and its code
// point; a length of 0 where the byte starts no valid sequence.
struct Utf8Sequence {
  std::size_t length = 0;
  unsigned code_point = 0;
};
Utf8Sequence utf8_sequence_at(std::string_view text, std::size_t i);

// text with each "%XX" of two hex digits replaced by that byte; a '%' not followed by two
// hex digits is kept as it is.
std::string percent_decoded(std::string_view text);

// A code point a terminal may act on though it is valid text: a C1 control (U+0080..U+009F,
// U+009B being CSI to some terminals) or a bidirectional embedding, override or isolate
// (U+202A..U+202E, U+2066..U+2069), which reorder what follows them on the line.
inline bool acts_on_a_terminal(unsigned code_point) {
  return (code_point >= 0x80 && code_point <= 0x9f) ||
         (code_point >= 0x202a && code_point <= 0x202e) ||
         (code_point >= 0x2066 && code_point <= 0x2069);
}

class Status;
// An error about one file: "PATH: what", with the path (and the errno, when a system call
// failed) kept as data for the front ends (Python's OSError.filename).
Status file_error(ErrorCode code, const std::string& path, const std::string& what, int err = 0);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message)
      : code_(code), message_(printable_redacted(std::move(message), true)) {}

  static Status ok() { return {}; }

  [[nodiscard]] bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  [[nodiscard]] ErrorCode code() const { return code_; }
  [[nodiscard]] const std::string& message() const { return message_; }

  // The file the error is about, as data (the message names it too), or "" when none is
  // known; and the errno of the failed system call, or 0. Both survive with_context.
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] int sys_errno() const { return sys_errno_; }

  // Prefixes the message with "context: " and keeps the code, path and errno.
  [[nodiscard]] Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    Status s = *this;
    s.message_ = printable_redacted(context, true) + ": " + message_;
    return s;
  }
  // The same error about `path`, unless it names a file already (the innermost site that
  // knows the file wins: an HDF5 dataset's external file rather than the shard).
  [[nodiscard]] Status with_path(const std::string& path) const {
    if (is_ok() || !path_.empty()) return *this;
    Status s = *this;
    s.path_ = redact_secrets(path);
    return s;
  }
  [[nodiscard]] Status with_errno(int err) const {
    Status s = *this;
    s.sys_errno_ = err;
    return s;
  }

  // A write to object storage that failed unanswered (no answer, a 5xx, a timeout, a Ctrl-C)
  // and whose look after it could not tell whether the store took it (RemoteStore's "whether it
  // was stored cannot be told"): for a save's manifest, the dataset may be published. As data,
  // so that a front end decides on it and not on the message's words; it survives with_context,
  // with_path and with_errno, and a Status rebuilt from another's message copies it
  // (with_stored_untold).
  [[nodiscard]] bool stored_untold() const { return stored_untold_; }
  [[nodiscard]] Status with_stored_untold(bool untold = true) const {
    Status s = *this;
    s.stored_untold_ = untold;
    return s;
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  std::string path_;
  int sys_errno_ = 0;
  bool stored_untold_ = false;
};

// The message of an error about `path` without the "PATH: " in front that file_error puts
// there (the path as the message shows it: redacted, a NUL as "\0"); the whole message where
// it does not start so.
std::string message_after_path(const Status& status, const std::string& path);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).is_ok() && "a Result needs a value or an error");
  }

  [[nodiscard]] bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }

  [[nodiscard]] const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

inline Status file_error(ErrorCode code, const std::string& path, const std::string& what,
                         int err) {
  return Status(code, path + ": " + what).with_path(path).with_errno(err);
}

}  // namespace shardload

// Returns early from a function returning Status or Result<T>.
#define SHARDLOAD_RETURN_IF_ERROR(expr)               \
  do {                                                \
    ::shardload::Status shardload_st_ = (expr);       \
    if (!shardload_st_.is_ok()) return shardload_st_; \
  } while (0)

#define SHARDLOAD_CONCAT_INNER(a, b) a##b
#define SHARDLOAD_CONCAT(a, b) SHARDLOAD_CONCAT_INNER(a, b)
#define SHARDLOAD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.is_ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
#define SHARDLOAD_ASSIGN_OR_RETURN(lhs, expr) \
  SHARDLOAD_ASSIGN_OR_RETURN_IMPL(SHARDLOAD_CONCAT(shardload_r_, __LINE__), lhs, expr)
