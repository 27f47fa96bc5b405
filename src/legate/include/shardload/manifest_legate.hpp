// The manifest under Legate: checking its checksums in parallel, and discovering a dataset
// once for a whole job.
//
//   auto bad = shardload::verify_manifest("data/shardload.manifest");  // every mismatch
//   auto layout = shardload::discover_once("data/");  // one point discovers, every rank gets it
//   shardload::write_manifest_once(layout, "data/");   // one point writes the manifest
//
// Discovery once per job: under control replication every rank runs the top-level program,
// so a plain discover() probes every shard on every rank (ranks x files metadata operations
// on a shared file system) and each rank's layout carries the snapshots its own stats saw.
// discover_once() runs discovery (or the manifest's reading) in a single-point task; the
// point binds the encoded layout to an unbound 1-D uint8 store, and every rank reads that
// store through an inline mapping (get_physical_store), so one processor of the job touches
// the files and every rank decodes the same bytes. See docs/manifest.md.
//
// Contract: the Legate runtime must be started; calls are made alike on every rank from the
// thread that drives the program (as load()). Errors are the exceptions of
// shardload/errors.hpp: discover_once throws as discover() does, verify_manifest throws
// LayoutError for a manifest it cannot read or without checksums and returns the mismatches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardload/errors.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"

namespace shardload {

struct VerifyReport {
  std::size_t shards = 0;                    // shards checked
  std::int64_t groups = 0;                   // points of the launch
  std::vector<ChecksumMismatch> mismatches;  // in shard order; empty: every checksum matches
  // Of the mismatches, the shards the directory holds that the manifest does not list
  // (add_listing_mismatches): their `shard` is their index in the directory's listing.
  std::size_t added = 0;
};

// Checks every shard's checksum against the manifest at `manifest_path`, `groups` points
// (0: four per CPU, at most one per shard), each hashing its range of shards; then the
// directory's listing against the manifest's shards (add_listing_mismatches: a shard added
// after indexing, or gone, is a mismatch naming it).
VerifyReport verify_manifest(const std::string& manifest_path, std::int64_t groups = 0);

// discover(source, pattern, format) with trust_manifest, run in one point task for the job.
Layout discover_once(const std::string& source, const std::string& pattern = {},
                     const FormatOptions& format = {}, bool trust_manifest = false);
// The same with every discovery option: the format options, trust_manifest, use_manifest and
// probe_threads travel to the point task; `io` must be null (ArgumentError otherwise: the
// point reads through posix_io()).
Layout discover_once(const std::string& source, const std::string& pattern,
                     const DiscoverOptions& options);

// write_manifest(layout, directory, options) in one point task for the job: under control
// replication every rank calls it, one writes (and, with checksums, reads every shard), and
// every rank gets the path written or throws the same exception (LayoutError as
// write_manifest's Status says). `layout` must be the same on every rank, as discover_once's
// is; options.io must be null (ArgumentError otherwise).
std::string write_manifest_once(const Layout& layout, const std::string& directory,
                                const ManifestOptions& options = {});

}  // namespace shardload
