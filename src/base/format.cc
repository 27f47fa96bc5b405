#include "shardload/format.hpp"

#include <array>
#include <string>
#include <utility>

#include "shardload/source.hpp"

namespace shardload {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Status set_dtype_option(std::string_view text, FormatOptions* options) {
  bool big = false;
  SHARDLOAD_ASSIGN_OR_RETURN(const DType dtype, parse_dtype(text, &big));
  options->dtype = dtype;
  if (!text.empty() && (text[0] == '<' || text[0] == '>')) options->big_endian = big;
  return Status::ok();
}

const char* format_name(Format f) {
  switch (f) {
    case Format::kAuto:
      return "auto";
    case Format::kNpy:
      return "npy";
    case Format::kRaw:
      return "raw";
    case Format::kHdf5:
      return "hdf5";
    case Format::kParquet:
      return "parquet";
    case Format::kArrow:
      return "arrow";
    case Format::kZarr:
      return "zarr";
    case Format::kCustom:
      return "custom";
  }
  return "unknown";
}

Result<Format> parse_format(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, Format>, 10> kNames{{
      {"auto", Format::kAuto},
      {"npy", Format::kNpy},
      {"raw", Format::kRaw},
      {"hdf5", Format::kHdf5},
      {"h5", Format::kHdf5},
      {"parquet", Format::kParquet},
      {"arrow", Format::kArrow},
      {"feather", Format::kArrow},
      {"ipc", Format::kArrow},
      {"zarr", Format::kZarr},
  }};
  for (const auto& [n, f] : kNames) {
    if (n == name) return f;
  }
  return Status(ErrorCode::kInvalidArgument,
                "unknown format '" + std::string(name) +
                    "' (expected auto, npy, raw, hdf5, parquet, arrow or zarr)");
}

Format format_from_extension(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  static constexpr std::array<std::pair<std::string_view, Format>, 12> kExt{{
      {".npy", Format::kNpy},
      {".bin", Format::kRaw},
      {".raw", Format::kRaw},
      {".dat", Format::kRaw},
      {".h5", Format::kHdf5},
      {".hdf5", Format::kHdf5},
      {".parquet", Format::kParquet},
      {".pq", Format::kParquet},
      {".arrow", Format::kArrow},
      {".feather", Format::kArrow},
      {".ipc", Format::kArrow},
      {".zarr", Format::kZarr},
  }};
  for (const auto& [ext, f] : kExt) {
    if (ends_with(path, ext)) return f;
  }
  return Format::kAuto;
}

std::string default_pattern(Format f) {
  switch (f) {
    case Format::kRaw:
      return "shard_{:04d}.bin";
    case Format::kHdf5:
      return "shard_{:04d}.h5";
    case Format::kParquet:
      return "shard_{:04d}.parquet";
    case Format::kArrow:
      return "shard_{:04d}.arrow";
    case Format::kZarr:
      return "shard_{:04d}.zarr";
    default:
      return std::string(kDefaultPattern);  // .npy, the numbering Source uses by default
  }
}

}  // namespace shardload
