// The on-disk formats shardload reads and the options that select what to
// read from them. The options are the same for every shard of a dataset and
// travel with the layout to wherever the data is read.
//
// Contract: FormatOptions is a value, copied into the Layout; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/status.hpp"

namespace shardload {

// The one format enum: every format's identity, in layouts, manifests and the codec (the
// numbers are stored: add new formats at the end). Names, extensions, recognition and
// readers are the formats' descriptors' (shardload/formats.hpp, in the readers layer).
// kCustom: a reader registered under a name (shardload/reader_registry.hpp), which
// FormatOptions::reader carries to wherever the data is read.
enum class Format : std::uint8_t {
  kAuto = 0,
  kNpy,
  kRaw,
  kHdf5,
  kParquet,
  kArrow,
  kZarr,
  kCustom,
  kNpz,
};

struct FormatOptions {
  Format format = Format::kAuto;
  // raw: the element type and trailing shape (else from the sidecar JSON);
  // parquet / arrow: a type to cast the columns to.
  std::optional<DType> dtype;
  // raw: the byte order the dtype option spelled ("<f4" / ">f4"); unset when
  // it named none ("float32"), and then the sidecar's (or native) applies.
  std::optional<bool> big_endian;
  std::optional<std::vector<std::int64_t>> trailing_shape;
  // raw: bytes to skip at the start of each file (else from the sidecar).
  std::optional<std::uint64_t> header_bytes;
  // raw: bytes to skip at the end of each file (a trailer, such as the record length after
  // each record of a Fortran unformatted file); none when unset.
  std::optional<std::uint64_t> footer_bytes;
  // hdf5: the dataset path in each file (empty: the file's only dataset);
  // zarr: the array path inside each store (empty: the store's root array).
  std::string dataset;
  // parquet / arrow: the columns to read (empty: every numeric column).
  std::vector<std::string> columns;
  // parquet / arrow: the value that replaces nulls (none: nulls are an error).
  std::optional<double> fill_value;
  // custom: the name the reader was registered under (register_reader).
  std::string reader;

  friend bool operator==(const FormatOptions&, const FormatOptions&) = default;
};

// Sets options->dtype from a type as every front end spells it ("float32", "f4", "<f4",
// ">f4"), and options->big_endian only when the text names an order ('<' or '>'), so that
// "float32" leaves the order to the sidecar. kInvalidArgument naming the text; options
// unchanged then.
Status set_dtype_option(std::string_view text, FormatOptions* options);

// The options above (all but format and reader) as one table, from which every front end
// derives them: the codec (shardload/codec.hpp) and the manifest's comparison and text, the
// command line's flags and help (the name with '-' for '_'), and the Python bindings'
// keywords. Adding an option is a field above plus a row below; the front ends, the codec
// and the manifest follow. Rows are only ever appended: the codec stores a row's position.

// How a value is spelled and carried: the Python type, the command line's text (see
// parse_option_text) and the codec's bytes all follow from the kind.
enum class OptionKind : std::uint8_t {
  kDType,     // a type as set_dtype_option takes it ("float32", ">f4"); text in OptionValue
  kDims,      // a list of ints >= 0 (CLI: "3,4", '' for none)
  kCount,     // an int in [0, 2**63)
  kText,      // a non-empty str (unset: empty)
  kTextList,  // a non-empty list of str (CLI: "a,b"; unset: empty)
  kNumber,    // a float64
  kFlag,      // a bool (CLI: a flag without a value; unset: false)
};

using OptionValue = std::variant<std::string, std::vector<std::int64_t>, std::uint64_t,
                                 std::vector<std::string>, double, bool>;

// A set of formats, one bit each (FormatOptionSpec::formats).
constexpr std::uint32_t format_bit(Format f) {
  return std::uint32_t{1} << static_cast<unsigned>(f);
}

struct FormatOptionSpec {
  const char* name;     // the Python keyword; the CLI flag with '-' for '_'
  const char* label;    // the manifest's words for it ("header bytes")
  const char* metavar;  // the CLI's placeholder
  OptionKind kind;
  // The built-in formats whose readers take it (format_bit); the others refuse it when set
  // (make_reader checks, before the reader sees the options). A user's
  // registered reader (kCustom) is given every option.
  std::uint32_t formats;
  const char* help;  // the CLI's help line
  // The value when set; nullopt at the default. A value of the row's kind.
  std::optional<OptionValue> (*get)(const FormatOptions&);
  // Sets a value of the row's kind that parse_option_text or a binding checked by kind.
  Status (*set)(const OptionValue&, FormatOptions*);
};

// The rows. The lambdas only move a value of the row's kind in or out.
inline constexpr FormatOptionSpec kFormatOptionTable[] = {
    {"dtype", "dtype", "T", OptionKind::kDType,
     format_bit(Format::kRaw) | format_bit(Format::kParquet) | format_bit(Format::kArrow),
     "raw: the stored element type (float32, >f4, ...)",
     [](const FormatOptions& o) -> std::optional<OptionValue> {
       if (!o.dtype) return std::nullopt;
       if (!o.big_endian) return OptionValue(o.dtype->name());
       std::string text(1, *o.big_endian ? '>' : '<');
       return OptionValue(text + o.dtype->code());
     },
     [](const OptionValue& v, FormatOptions* o) {
       return set_dtype_option(std::get<std::string>(v), o);
     }},
    {"trailing_shape", "shape", "D[,D...]", OptionKind::kDims, format_bit(Format::kRaw),
     "raw: the shape of one row after the first axis ('' for 1-D data)",
     [](const FormatOptions& o) -> std::optional<OptionValue> {
       if (!o.trailing_shape) return std::nullopt;
       return OptionValue(*o.trailing_shape);
     },
     [](const OptionValue& v, FormatOptions* o) {
       o->trailing_shape = std::get<std::vector<std::int64_t>>(v);
       return Status::ok();
     }},
    {"header_bytes", "header bytes", "N", OptionKind::kCount, format_bit(Format::kRaw),
     "raw: bytes to skip at the start of each file",
     [](const FormatOptions& o) -> std::optional<OptionValue> {
       if (!o.header_bytes) return std::nullopt;
       return OptionValue(*o.header_bytes);
     },
     [](const OptionValue& v, FormatOptions* o) {
       o->header_bytes = std::get<std::uint64_t>(v);
       return Status::ok();
     }},
    {"dataset", "dataset", "NAME", OptionKind::kText,
     format_bit(Format::kHdf5) | format_bit(Format::kZarr) | format_bit(Format::kNpz),
     "hdf5: the dataset in each file; zarr: the array in each store; npz: the array in each "
     "archive",
     [](const FormatOptions& o) -> std::optional<OptionValue> {
       if (o.dataset.empty()) return std::nullopt;
       return OptionValue(o.dataset);
     },
     [](const OptionValue& v, FormatOptions* o) {
       o->dataset = std::get<std::string>(v);
       return Status::ok();
     }},
    {"columns", "columns", "A[,B...]", OptionKind::kTextList,
     format_bit(Format::kParquet) | format_bit(Format::kArrow),
     "parquet/arrow: the columns to read (default: every numeric one)",
     [](const FormatOptions& o) -> std::optional<OptionValue> {
       if (o.columns.empty()) return std::nullopt;
       return OptionValue(o.columns);
     },
     [](const OptionValue& v, FormatOptions* o) {
       o->columns = std::get<std::vector<std::string>>(v);
       return Status::ok();
     }},
    {"fill_value", "fill value", "X", OptionKind::kNumber,
     format_bit(Format::kParquet) | format_bit(Format::kArrow),
     "parquet/arrow: the value for nulls (default: a null is an error)",
     [](const FormatOptions& o) -> std::optional<OptionValue> {
       if (!o.fill_value) return std::nullopt;
       return OptionValue(*o.fill_value);
     },
     [](const OptionValue& v, FormatOptions* o) {
       o->fill_value = std::get<double>(v);
       return Status::ok();
     }},
    {"footer_bytes", "footer bytes", "N", OptionKind::kCount, format_bit(Format::kRaw),
     "raw: bytes to skip at the end of each file",
     [](const FormatOptions& o) -> std::optional<OptionValue> {
       if (!o.footer_bytes) return std::nullopt;
       return OptionValue(*o.footer_bytes);
     },
     [](const OptionValue& v, FormatOptions* o) {
       o->footer_bytes = std::get<std::uint64_t>(v);
       return Status::ok();
     }},
};

inline constexpr std::span<const FormatOptionSpec> format_option_table() {
  return kFormatOptionTable;
}

// The row named `name` (a Python keyword, or with `cli` a flag such as "header-bytes"), or
// nullptr.
const FormatOptionSpec* find_format_option(std::string_view name, bool cli = false);

// Messages name an option as data, never in one front end's spelling: the core puts a mark
// (option_mention) where a message names an option, and each front end spells every mark its
// own way (spell_options) where it turns a Status into its error: Python's keyword (dtype=),
// the command line's flag (--dtype), or words for the C++ API (the dtype option). The mark is
// part of the message text, so it survives with_context and a Legate task's error record;
// the message itself is never rewritten.
enum class OptionSpelling : std::uint8_t { kNeutral, kPython, kCli };

// The mark for the option `name`: a row's name, or one of the options outside the table that
// the core names ("format", "pattern", and "astype", the front ends' name for the type
// parquet/arrow decode into). With `assign`, the option as set to the value that follows
// ("pass " + option_mention("pattern", true) + "'x'": pattern='x', --pattern='x', the
// pattern 'x').
std::string option_mention(std::string_view name, bool assign = false);

// The option `name` as `spelling` writes it ("" for a name option_mention does not take).
std::string option_spelling(std::string_view name, OptionSpelling spelling, bool assign = false);

// `message` with every mark in `spelling`; text that is not a mark of a known option (bytes of
// a file name, say) is left as it is.
std::string spell_options(std::string_view message, OptionSpelling spelling);

// A value of `kind` from the command line's text ("3,4", "16", "a,b", "0.5"); the one text
// parser of the options. kInvalidArgument saying what was expected and found, without the
// option's name (the caller prefixes its own spelling of it).
Result<OptionValue> parse_option_text(OptionKind kind, std::string_view text);

// The value for people: "float32", "(3, 4)", "16", "'x'", "[a, b]", "0.5" (%.17g).
std::string option_value_text(const OptionValue& value, OptionKind kind);

}  // namespace shardload
