#include "shardload/format.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace shardload {

Status set_dtype_option(std::string_view text, FormatOptions* options) {
  bool big = false;
  SHARDLOAD_ASSIGN_OR_RETURN(const DType dtype, parse_dtype(text, &big));
  options->dtype = dtype;
  if (!text.empty() && (text[0] == '<' || text[0] == '>')) options->big_endian = big;
  return Status::ok();
}

}  // namespace shardload

namespace shardload {

const FormatOptionSpec* find_format_option(std::string_view name, bool cli) {
  for (const auto& row : format_option_table()) {
    std::string key = row.name;
    if (cli) std::replace(key.begin(), key.end(), '_', '-');
    if (key == name) return &row;
  }
  return nullptr;
}

namespace {

constexpr char kMentionMark = '\x1f';

// Options the core names that are no row of the table, with their words for the C++ API.
struct OtherOption {
  std::string_view name;
  std::string_view neutral;         // as a name
  std::string_view neutral_assign;  // before a value
};
constexpr OtherOption kOtherOptions[] = {
    {"format", "the format option", "the format "},
    {"pattern", "the pattern argument", "the pattern "},
    // The front ends' name for the type parquet/arrow decode into; FormatOptions::dtype in C++.
    {"astype", "the dtype option", "the dtype "},
};

}  // namespace

std::string option_spelling(std::string_view name, OptionSpelling spelling, bool assign) {
  const FormatOptionSpec* row = find_format_option(name);
  const OtherOption* other = nullptr;
  for (const auto& o : kOtherOptions) {
    if (o.name == name) other = &o;
  }
  if (row == nullptr && other == nullptr) return {};
  std::string key(name);
  switch (spelling) {
    case OptionSpelling::kPython:
      return key + "=";
    case OptionSpelling::kCli:
      std::replace(key.begin(), key.end(), '_', '-');
      return "--" + key + (assign ? "=" : "");
    case OptionSpelling::kNeutral:
      break;
  }
  if (other != nullptr) return std::string(assign ? other->neutral_assign : other->neutral);
  std::replace(key.begin(), key.end(), '_', ' ');
  return "the " + key + " option" + (assign ? " " : "");
}

std::string option_mention(std::string_view name, bool assign) {
  assert(!option_spelling(name, OptionSpelling::kNeutral).empty() && "an option the core names");
  std::string out(1, kMentionMark);
  out += name;
  if (assign) out += '=';
  out += kMentionMark;
  return out;
}

std::string spell_options(std::string_view message, OptionSpelling spelling) {
  std::string out;
  out.reserve(message.size());
  std::size_t i = 0;
  while (i < message.size()) {
    const std::size_t open = message.find(kMentionMark, i);
    if (open == std::string_view::npos) break;
    out.append(message.substr(i, open - i));
    const std::size_t close = message.find(kMentionMark, open + 1);
    std::string_view name =
        message.substr(open + 1, close == std::string_view::npos ? 0 : close - open - 1);
    const bool assign = name.ends_with('=');
    if (assign) name.remove_suffix(1);
    const std::string spelled =
        close == std::string_view::npos ? std::string() : option_spelling(name, spelling, assign);
    if (spelled.empty()) {
      out += kMentionMark;  // not a mark: kept as it was
      i = open + 1;
      continue;
    }
    out += spelled;
    i = close + 1;
  }
  if (i < message.size()) out.append(message.substr(i));
  return out;
}

namespace {

bool parse_int64(std::string_view text, std::int64_t* out) {
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size();
}

Status expected(const char* what, std::string_view text, std::string_view why = {}) {
  return {ErrorCode::kInvalidArgument, std::string("expected ") + what + ", found '" +
                                           std::string(text) + "'" + std::string(why)};
}

}  // namespace

Result<OptionValue> parse_option_text(OptionKind kind, std::string_view text) {
  switch (kind) {
    case OptionKind::kDType:
    case OptionKind::kText:
      return OptionValue(std::string(text));
    case OptionKind::kDims: {
      std::vector<std::int64_t> dims;
      for (std::size_t start = 0; !text.empty() && start <= text.size();) {
        const auto comma = text.find(',', start);
        std::int64_t d = 0;
        if (!parse_int64(
                text.substr(start, comma == std::string_view::npos ? comma : comma - start), &d)) {
          return expected("DIM[,DIM...] or '' for 1-D", text);
        }
        dims.push_back(d);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      // Refused as Python's trailing_shape= refuses a negative dimension (ValueError).
      if (std::any_of(dims.begin(), dims.end(), [](std::int64_t d) { return d < 0; })) {
        return Status(ErrorCode::kInvalidArgument,
                      "dimensions must be >= 0, found '" + std::string(text) + "'");
      }
      return OptionValue(std::move(dims));
    }
    case OptionKind::kCount: {
      std::int64_t n = 0;
      if (!parse_int64(text, &n) || n < 0) return expected("an integer >= 0", text);
      return OptionValue(static_cast<std::uint64_t>(n));
    }
    case OptionKind::kTextList: {
      std::vector<std::string> items;
      for (std::size_t start = 0; start <= text.size();) {
        const auto comma = text.find(',', start);
        items.emplace_back(
            text.substr(start, comma == std::string_view::npos ? comma : comma - start));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      return OptionValue(std::move(items));
    }
    case OptionKind::kNumber: {
      const std::string s(text);
      char* end = nullptr;
      errno = 0;
      const double d = std::strtod(s.c_str(), &end);
      // strtod skips leading spaces, which no other number option takes.
      if (s.empty() || std::isspace(static_cast<unsigned char>(s[0])) != 0 ||
          end != s.c_str() + s.size()) {
        return expected("a number", text);
      }
      // The value travels as a float64, as Python's does: a finite number past its range
      // would arrive as inf, and an integer it cannot hold as a neighbour, each filling
      // nulls with another value than the one written (Python refuses both).
      if (errno == ERANGE && std::isinf(d)) {
        return expected("a number a float64 holds", text,
                        " (it overflows to inf; write inf for infinity)");
      }
      const std::size_t sign = s[0] == '-' || s[0] == '+' ? 1 : 0;
      // Text is read as Python reads the literal: digits alone, or 0x and hex digits alone,
      // are an int, which must travel exactly; anything else is a float, which rounds.
      if (s.size() > sign + 2 && s[sign] == '0' && (s[sign + 1] == 'x' || s[sign + 1] == 'X') &&
          s.find_first_not_of("0123456789abcdefABCDEF", sign + 2) == std::string::npos) {
        // Exact where its set bits span at most float64's 53.
        const std::string_view hex = std::string_view(s).substr(sign + 2);
        const std::size_t first = hex.find_first_not_of('0');
        if (first != std::string_view::npos) {
          const auto nibble = [](char c) {
            return static_cast<unsigned>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
          };
          const std::size_t last = hex.find_last_not_of('0');
          const std::size_t high = (hex.size() - first - 1) * 4 +
                                   static_cast<std::size_t>(std::bit_width(nibble(hex[first])));
          const std::size_t low = (hex.size() - last - 1) * 4 +
                                  static_cast<std::size_t>(std::countr_zero(nibble(hex[last])));
          if (high - low > 53) {
            return Status(ErrorCode::kInvalidArgument,
                          s + " cannot be passed exactly (it travels as a float64, which holds "
                              "every int only up to 2**53)");
          }
        }
      }
      if (s.size() > sign && s.find_first_not_of("0123456789", sign) == std::string::npos) {
        std::string digits = s.substr(std::min(s.find_first_not_of('0', sign), s.size() - 1));
        char held[400];
        std::snprintf(held, sizeof held, "%.0f", std::fabs(d));
        if (digits != held) {
          return Status(ErrorCode::kInvalidArgument,
                        s + " cannot be passed exactly (it travels as a float64, which holds "
                            "every int only up to 2**53)");
        }
      }
      return OptionValue(d);
    }
    case OptionKind::kFlag:
      // A flag's presence is its value; the text form is for completeness.
      if (text == "true") return OptionValue(true);
      if (text == "false") return OptionValue(false);
      return expected("true or false", text);
  }
  return Status(ErrorCode::kInvalidArgument, "unknown option kind");
}

std::string option_value_text(const OptionValue& value, OptionKind kind) {
  switch (kind) {
    case OptionKind::kDType:
      return std::get<std::string>(value);
    case OptionKind::kText:
      return "'" + std::get<std::string>(value) + "'";
    case OptionKind::kDims:
      return shape_string(std::get<std::vector<std::int64_t>>(value));
    case OptionKind::kCount:
      return std::to_string(std::get<std::uint64_t>(value));
    case OptionKind::kTextList: {
      std::string out = "[";
      const auto& items = std::get<std::vector<std::string>>(value);
      for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
      return out + "]";
    }
    case OptionKind::kNumber: {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.17g", std::get<double>(value));
      return buf;
    }
    case OptionKind::kFlag:
      return std::get<bool>(value) ? "true" : "false";
  }
  return {};
}

}  // namespace shardload
