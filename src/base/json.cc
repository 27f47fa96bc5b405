#include "base/detail/json.hpp"

#include <algorithm>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "shardload/io.hpp"

namespace shardload::detail {

namespace {

// Thrown by the parse callback to stop at the first level too deep; caught
// in parse_json_object, so it never leaves this file.
struct TooDeep {};

// Why `text`, which the strict parse discarded, is refused: a number past a double's range
// (valid JSON, which nlohmann cannot hold) named with the key it is the value of, else "not
// valid JSON". Parsed again, with exceptions, up to the same fault: no deeper than the first
// parse went.
std::string why_not_json(std::string_view text) {
  // The key being read in each open object, innermost last: the fault's is the last one's.
  std::vector<std::string> keys;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      throw TooDeep{};
    }
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.empty() && parsed.is_string()) {
      keys.back() = parsed.get_ref<const std::string&>().substr(0, 60);
    }
    return true;
  };
  try {
    [[maybe_unused]] const Json whole = Json::parse(text.begin(), text.end(), callback,
                                                    /*allow_exceptions=*/true,
                                                    /*ignore_comments=*/false);
  } catch (const Json::out_of_range& e) {
    // 406: "number overflow parsing '<token>'".
    const std::string what = e.what();
    const std::size_t open = what.find("parsing '");
    const std::size_t close = what.rfind('\'');
    if (e.id == 406 && open != std::string::npos && close > open + 9) {
      std::string number = what.substr(open + 9, close - open - 9);
      if (number.size() > 40) number = number.substr(0, 37) + "...";
      const std::string key = keys.empty() ? std::string() : keys.back();
      return (key.empty() ? std::string() : key + ": ") + "the number " + number +
             " is out of float64's range (magnitudes up to about 1.8e308; valid JSON, but no "
             "double holds it)";
    }
  } catch (...) {
  }
  return "not valid JSON";
}

}  // namespace

Result<Json> parse_json_object(const std::string& file, std::string_view text) {
  // Everything nlohmann may still throw (allocation, a callback's misuse) is
  // caught here: no exception leaves the core.
  try {
    // One set of seen keys per open object, innermost last.
    std::vector<std::set<std::string>> seen;
    std::string duplicate;
    // nlohmann parses iteratively, but copying, comparing and dumping a value
    // recurse once per level: stopping at the first object or array past the
    // limit keeps every tree we build shallow, however deep the input.
    // `depth` counts the containers around the one starting.
    auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
      switch (event) {
        case Json::parse_event_t::object_start:
          if (depth >= kMaxJsonDepth) throw TooDeep{};
          seen.emplace_back();
          break;
        case Json::parse_event_t::array_start:
          if (depth >= kMaxJsonDepth) throw TooDeep{};
          break;
        case Json::parse_event_t::object_end:
          if (!seen.empty()) seen.pop_back();
          break;
        case Json::parse_event_t::key:
          if (!seen.empty() && parsed.is_string() &&
              !seen.back().insert(parsed.get_ref<const std::string&>()).second &&
              duplicate.empty()) {
            duplicate = parsed.get_ref<const std::string&>();
          }
          break;
        default:
          break;
      }
      return true;
    };
    // nlohmann ends its input at a NUL byte, so "{...}" followed by a NUL and anything at all
    // would parse as the object alone. JSON holds no raw NUL anywhere (inside a string it is
    // written \u0000), so any is refused.
    if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
      return Status(ErrorCode::kFormat,
                    file + ": not valid JSON (a NUL byte at offset " + std::to_string(nul) + ")");
    }
    Json j = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/false,
                         /*ignore_comments=*/false);
    if (j.is_discarded()) return Status(ErrorCode::kFormat, file + ": " + why_not_json(text));
    if (!duplicate.empty()) {
      return Status(ErrorCode::kFormat, file + ": duplicate key '" + duplicate + "'");
    }
    if (!j.is_object()) {
      return Status(ErrorCode::kFormat,
                    file + ": expected a JSON object at the top level, found " + json_brief(j));
    }
    return j;
  } catch (const TooDeep&) {
    return Status(ErrorCode::kFormat,
                  file + ": JSON nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const std::exception& e) {
    return Status(ErrorCode::kFormat, file + ": cannot parse the JSON (" + e.what() + ")");
  }
}

std::string json_brief(const Json& value) {
  try {
    std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
  } catch (const std::exception&) {
    return "?";
  }
}

Status json_error(const std::string& file, const std::string& field, const std::string& expected,
                  const Json& found) {
  return {ErrorCode::kFormat,
          file + ": " + field + ": expected " + expected + ", found " + json_brief(found)};
}

Result<std::string> json_string(const std::string& file, const std::string& field, const Json& v) {
  if (!v.is_string()) return json_error(file, field, "a string", v);
  return v.get_ref<const std::string&>();
}

Result<std::int64_t> json_nonneg_int(const std::string& file, const std::string& field,
                                     const Json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(INT64_MAX)) return static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i >= 0) return i;
  }
  return json_error(file, field, "a non-negative integer", v);
}

Result<std::vector<std::int64_t>> json_shape(const std::string& file, const std::string& field,
                                             const Json& v) {
  if (!v.is_array()) return json_error(file, field, "a list of non-negative integers", v);
  std::vector<std::int64_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    SHARDLOAD_ASSIGN_OR_RETURN(const std::int64_t d,
                               json_nonneg_int(file, field + "[" + std::to_string(i) + "]", v[i]));
    out.push_back(d);
  }
  return out;
}

Status json_only_keys(const std::string& file, const std::string& where, const Json& obj,
                      const std::vector<std::string_view>& known) {
  for (const auto& item : obj.items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end()) {
      std::string list;
      for (const auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return {ErrorCode::kFormat, file + ": " + (where.empty() ? "" : where + ": ") +
                                      "unknown field '" + item.key() + "' (expected " + list + ")"};
    }
  }
  return Status::ok();
}

Result<std::string> read_small_file(IoBackend& io, const std::string& path, std::uint64_t max_bytes,
                                    FileInfo* info) {
  SHARDLOAD_ASSIGN_OR_RETURN(File f, File::open(io, path));
  SHARDLOAD_ASSIGN_OR_RETURN(const FileInfo st, f.stat());
  return read_small_opened(f, st, max_bytes, info);
}

Result<std::string> read_small_opened(const File& f, const FileInfo& st, std::uint64_t max_bytes,
                                      FileInfo* info) {
  if (!st.regular) return Status(ErrorCode::kFormat, f.path() + ": not a regular file");
  if (st.size > max_bytes) {
    return Status(ErrorCode::kFormat, f.path() + ": size: " + std::to_string(st.size) +
                                          " bytes is more than the " + std::to_string(max_bytes) +
                                          " a metadata file may have");
  }
  std::string text(static_cast<std::size_t>(st.size), '\0');
  SHARDLOAD_RETURN_IF_ERROR(f.read_exact(text.data(), text.size(), 0));
  if (info != nullptr) *info = st;
  return text;
}

}  // namespace shardload::detail
