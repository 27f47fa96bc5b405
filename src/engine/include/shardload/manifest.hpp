// A manifest: a dataset's layout written next to its shards, so that discovery reads one
// file instead of opening every shard, and optional per-file checksums that `verify` checks.
//
// The file is DIR/shardload.manifest (kManifestName), a versioned binary container:
//
//   offset 0   8 bytes  magic "SLMANIF\n"
//          8   u32 LE   container version (1)
//         12   u32 LE   checksum kind of the shards (0 none, 1 xxh3)
//         16   u64 LE   body length B
//         24   B bytes  body: pattern (varint length + bytes), the layout in the codec's
//                       encoding (varint length + bytes; shard and linked-file paths relative
//                       to DIR), then 8 bytes LE per shard (its checksum) when the kind is not 0
//     24 + B   u64 LE   XXH3-64 of bytes [0, 24 + B): the container's own checksum
//
// A file of any other size, with another magic, version or container checksum, or whose
// layout fails to decode or names a path that is absolute, empty, holds "." / ".." parts or
// a NUL, is a kLayout error naming the manifest; nothing is taken from it. Reading costs one
// open, one read and one decode whatever the shard count.
//
// Contract: values and free functions, safe from any thread. Errors are Status naming the
// manifest or the shard; nothing throws. write_manifest leaves either the complete new
// manifest or what was there before (a temporary file in DIR, fsync, rename, fsync of DIR);
// a failure removes its temporary file. In object storage (DIR an "s3://" prefix, with the
// store's options in its query) the manifest is one object uploaded whole through the
// RemoteIo (the store shows it only once complete); it holds keys relative to DIR and never
// the query, which every URL read from it gets from the URL it was read from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/io.hpp"
#include "shardload/layout.hpp"
#include "shardload/source.hpp"
#include "shardload/status.hpp"

namespace shardload {

inline constexpr std::string_view kManifestName = "shardload.manifest";

// Per-file checksums. CRC32C has no maintained library in Debian bookworm (libcrc32c-dev
// is not packaged), so only xxHash3 (libxxhash) is offered; parse_checksum says so.
enum class Checksum : std::uint32_t { kNone = 0, kXxh3 = 1 };

// "none" | "xxh3"; "crc32c" and anything else are kInvalidArgument naming what is offered.
Result<Checksum> parse_checksum(std::string_view name);
const char* checksum_name(Checksum c);

struct ManifestOptions {
  Checksum checksum = Checksum::kNone;
  // The numbering the dataset was discovered with ("shard_{:04d}.npy"); empty: inferred from
  // the directory when one numbered group holds exactly the shards. Discovery compares the
  // directory's listing under it with the manifest to see files added or removed.
  std::string pattern;
  IoBackend* io = nullptr;  // for the checksums' reads; nullptr: posix_io()
};

struct Manifest {
  std::string path;       // the manifest file
  std::string directory;  // the directory its relative paths are joined to
  std::string pattern;    // see ManifestOptions::pattern ("" when none was found)
  Layout layout;          // shard paths joined to `directory`, as discover() writes them
  Checksum checksum = Checksum::kNone;
  std::vector<std::uint64_t> checksums;  // one per shard, empty when kNone
  std::uint64_t container_hash = 0;      // the container's own checksum (its last 8 bytes)
};

// The manifest path for a directory: DIR/shardload.manifest.
std::string manifest_path(const std::string& directory);

// kInvalidArgument naming `directory` where no manifest can be written there (an http(s)://
// URL: HTTP has no upload), else ok.
Status check_manifest_writable(const std::string& directory);

// Writes the manifest of `layout` (whose shards must all lie under `directory`) to
// manifest_path(directory), atomically, computing the checksums first (each file read once;
// a file whose size no longer matches its snapshot is kChanged). Returns the path written.
// The manifest is published only where it describes the directory as it is when it lands:
// the directory's shards (under the pattern given or inferred; without one, the directory's
// own numbered group wherever it holds any of the layout's shards) must be the layout's, each
// local shard's file its snapshot, and the directory the one the temporary file was written
// into, before the rename and again after it (the manifest is removed then). Otherwise
// kLayout naming the directory, "changed while indexing", and the first difference.
Result<std::string> write_manifest(const Layout& layout, const std::string& directory,
                                   const ManifestOptions& options = {});

namespace detail {
// What write_manifest wrote: its path and, for a local manifest, the (device, inode) of the file
// written, taken from the descriptor it was written through, so that a file renamed over the
// path meanwhile is not taken for it ((0, 0) for an object).
struct WrittenManifest {
  std::string path;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
};
Result<WrittenManifest> write_manifest_file(const Layout& layout, const std::string& directory,
                                            const ManifestOptions& options = {});
}  // namespace detail

// Reads and checks a manifest file; its paths are joined to the file's directory.
Result<Manifest> read_manifest(const std::string& path);

// The checksum of a whole file (kNone: 0). kIo naming the file when it cannot be read.
Result<std::uint64_t> file_checksum(const std::string& path, Checksum kind, IoBackend& io);

// Why a manifest no longer describes its files, or "" when it does. Per shard: for npy, raw
// and Zarr its probe (the header, the raw geometry with the sidecar, the metadata file)
// compared with the manifest's shard, dtype and trailing shape; for the other formats, and
// for .npy objects in object storage, one stat (a HEAD: size and ETag) compared with the
// snapshot (their metadata is the manifest's while it matches), on as many threads as
// probing would use.
// Linked files: one stat each. Then one listing of the directory under the manifest's
// pattern for added or removed shards. "DIR/shard_0003.npy: size 10 -> 8 bytes",
// "DIR/shard_0001.npy: the file says dtype int32, the manifest float32".
std::string manifest_staleness(const Manifest& manifest, IoBackend& io);

// One shard whose checksum differs from the manifest's, or that cannot be read.
struct ChecksumMismatch {
  std::size_t shard = 0;
  std::string path;
  std::string what;  // "xxh3 0x... expected, found 0x..." or the read error
};

// Checks the checksums of shards [lo, hi) serially (the Legate verify task runs one range
// per point). kInvalidArgument when the manifest has no checksums or the range is outside.
Result<std::vector<ChecksumMismatch>> verify_range(const Manifest& manifest, std::size_t lo,
                                                   std::size_t hi, IoBackend& io);

// Adds to `mismatches` (verify_range's, in shard order) what the directory's listing says
// against the manifest, as discovery's freshness check compares them: each shard the directory
// holds now that the manifest does not list ("not in the manifest", `shard` its index in the
// listing), each listed shard that is gone from it whose checksum read reported nothing, and
// each linked file (HDF5 external storage, a virtual dataset's source file) whose snapshot is
// not the manifest's (`shard` its shard's index, `path` the linked file), which no checksum
// covers and which discovery calls the manifest stale for; the result is in shard order. Returns
// how many shards were added. The listing is the one under the manifest's pattern, or without one
// the directory's own numbered group (as discovery without a pattern finds it); an HTTP directory
// (no listing) and a Zarr store add nothing.
Result<std::size_t> add_listing_mismatches(const Manifest& manifest,
                                           std::vector<ChecksumMismatch>* mismatches);

// What discover() does with a directory source before probing. Exactly one of: a layout
// (from the manifest, with its manifest_status "manifest: used ..."), an error (a damaged
// manifest, or a trusted one that does not fit the request), or a note for the probed
// layout ("manifest: absent", "manifest: not used: ...", "manifest: stale because ...") with
// its state (the layout's own manifest_state when a layout is given).
// A manifest fits a request made with exactly the format options it was indexed with
// (format kAuto standing for the recorded one): a plain request does not get the columns,
// fill value or cast an index recorded.
// An http(s):// directory, which has no listing, is discovered from its manifest only: no
// manifest there is an error (naming the manifest's URL and the server's answer), and a note
// comes with `probe_paths`, the objects the manifest names, to probe instead of the directory.
struct ManifestDiscovery {
  std::optional<Layout> layout;
  Status error;
  std::string note;
  ManifestState state = ManifestState::kNone;
  std::vector<std::string> probe_paths;
};
ManifestDiscovery discover_from_manifest(const Source& source, const DiscoverOptions& options);

}  // namespace shardload
