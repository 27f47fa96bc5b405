#include "shardload/status.hpp"

#include <array>
#include <cctype>
#include <string_view>

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

// The query keys whose values are secrets: shardload's store options, and the signatures and
// tokens of presigned URLs (S3's, GCS's, an Azure SAS), which grant access to whoever holds
// them. Compared without case.
constexpr std::array<std::string_view, 6> kSecretKeys = {"secret_key",       "session_token",
                                                         "x-amz-signature",  "x-amz-security-token",
                                                         "x-goog-signature", "sig"};

bool ends_value(char c) {
  return c == '&' || c == '\'' || c == '"' || c == ':' || c == ',' || c == ')' || c == ']' ||
         c == '>' || std::isspace(static_cast<unsigned char>(c)) != 0;
}

// The length of the secret key that starts at text[i], or 0.
std::size_t secret_key_at(std::string_view text, std::size_t i) {
  for (const std::string_view key : kSecretKeys) {
    if (i + key.size() >= text.size() || text[i + key.size()] != '=') continue;
    bool same = true;
    for (std::size_t k = 0; k < key.size() && same; ++k) {
      same = std::tolower(static_cast<unsigned char>(text[i + k])) == key[k];
    }
    if (same) return key.size();
  }
  return 0;
}

}  // namespace

std::string redact_secrets(std::string text) {
  if (text.find('=') == std::string::npos) return text;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const bool starts_key = i > 0 && (text[i - 1] == '?' || text[i - 1] == '&');
    const std::size_t key = starts_key ? secret_key_at(text, i) : 0;
    if (key == 0) {
      out += text[i++];
      continue;
    }
    out.append(text, i, key + 1);  // the key and its '='
    std::size_t end = i + key + 1;
    while (end < text.size() && !ends_value(text[end])) ++end;
    if (end > i + key + 1) out += "***";
    i = end;
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
