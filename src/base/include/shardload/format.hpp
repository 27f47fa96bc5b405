// The on-disk formats shardload reads and the options that select what to
// read from them. The options are the same for every shard of a dataset and
// travel with the layout to wherever the data is read.
//
// Contract: FormatOptions is a value, copied into the Layout; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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

}  // namespace shardload
