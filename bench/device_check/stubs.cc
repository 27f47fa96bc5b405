// What the device check's bundle leaves out (bench/device_check/bundle.sh): the readers and the
// manifest that need nlohmann-json, blosc, zstd, lz4, zlib or xxHash, none of which the GPU image
// need have. The check reads native .npy shards only; anything that would reach these says so
// instead of failing to link.
#include "readers/detail/readers.hpp"
#include "shardload/manifest.hpp"

namespace shardload {

namespace {

Status left_out(const char* what) {
  return {ErrorCode::kInvalidArgument,
          std::string(what) + ": not in the device check's build (native .npy shards only)"};
}

}  // namespace

namespace detail {

Result<std::unique_ptr<ShardReader>> make_raw_reader(const FormatOptions& /*options*/,
                                                     const ReaderContext& /*context*/) {
  return left_out("raw reader");
}

Result<std::unique_ptr<ShardReader>> make_zarr_reader(const FormatOptions& /*options*/,
                                                      const ReaderContext& /*context*/) {
  return left_out("Zarr reader");
}

// Save's raw and Zarr writers live beside their readers, left out with them: no writer.
std::shared_ptr<const ShardWriter> raw_writer() { return nullptr; }
std::shared_ptr<const ShardWriter> zarr_writer() { return nullptr; }

// .npz needs zlib: the format is known by name and extension, its reader says it is left out.
FormatDescriptor npz_format() {
  FormatDescriptor d;
  d.format = Format::kNpz;
  d.name = "npz";
  d.extensions = {".npz"};
  d.make_reader = [](const FormatOptions& /*options*/,
                     const ReaderContext& /*context*/) -> Result<std::unique_ptr<ShardReader>> {
    return left_out("npz reader");
  };
  return d;
}

}  // namespace detail

// No manifest: discovery probes the shards, as for a directory without one.
ManifestDiscovery discover_from_manifest(const Source& /*source*/,
                                         const DiscoverOptions& /*options*/) {
  return {std::nullopt, Status::ok(), "manifest: not in the device check's build"};
}

}  // namespace shardload
