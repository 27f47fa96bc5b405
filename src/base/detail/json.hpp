// Strict JSON for the readers' metadata files (the raw sidecar, Zarr's
// .zarray / zarr.json), over nlohmann::json without exceptions.
//
// nlohmann's parser is asked not to throw and reports failure as a discarded
// value; its accessors (get, at) do throw, so the readers only use the typed
// helpers below, which check the type first and return a Status naming the
// file and the field. Duplicate keys, which nlohmann would silently resolve
// to the last one, are an error: two values for one field is ambiguity we
// refuse rather than guess at.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/io.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

using Json = nlohmann::json;

// Objects and arrays nested deeper than this are refused: metadata needs a
// handful of levels, and a deep tree would overflow the stack of the
// recursive code that copies, compares or prints it.
constexpr int kMaxJsonDepth = 64;

// Parses `text` of the metadata file `file`. kFormat errors name the file and
// say why ("not valid JSON", "duplicate key 'shape'", "expected an object",
// "JSON nesting deeper than 64 levels").
Result<Json> parse_json_object(const std::string& file, std::string_view text);

// A short, bounded rendering of a JSON value for error messages.
std::string json_brief(const Json& value);

// Typed field access: each returns kFormat "FILE: FIELD: expected ..., found ..."
// when the value has another type or range. `field` is the dotted path used in
// messages ("codecs[1].configuration.endian").
Status json_error(const std::string& file, const std::string& field, const std::string& expected,
                  const Json& found);
Result<std::string> json_string(const std::string& file, const std::string& field, const Json& v);
Result<std::int64_t> json_nonneg_int(const std::string& file, const std::string& field,
                                     const Json& v);
Result<std::vector<std::int64_t>> json_shape(const std::string& file, const std::string& field,
                                             const Json& v);

// The keys of `obj` that are not in `known`, as an error naming the first one
// (typos such as "header_byte" must not be ignored).
Status json_only_keys(const std::string& file, const std::string& where, const Json& obj,
                      const std::vector<std::string_view>& known);

// Reads a whole metadata file of at most `max_bytes` through `io`; `info`
// (when not null) receives its snapshot. Errors name the file.
Result<std::string> read_small_file(IoBackend& io, const std::string& path, std::uint64_t max_bytes,
                                    FileInfo* info);

// The same for a file already open (`st`: its state at the open), however it was opened.
Result<std::string> read_small_opened(const File& f, const FileInfo& st, std::uint64_t max_bytes,
                                      FileInfo* info);

}  // namespace shardload::detail
