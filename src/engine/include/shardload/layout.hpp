// The validated dataset: ordered shards, rows per shard, cumulative row
// offsets, dtype, trailing shape and a (size, mtime, ctime, inode) snapshot
// of each file.
// Every check on the files happens in discover(), before anything launches.
//
// Contract: a Layout is a value (copy it freely; it holds paths and snapshots, no open
// files), immutable once built and safe to share between threads. discover() and friends
// return Status (kLayout for a dataset that does not hold together, kIo/kChanged for a file
// that cannot be read, kInvalidArgument for options) naming the file; nothing throws.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/format.hpp"
#include "shardload/formats.hpp"
#include "shardload/io.hpp"
#include "shardload/reader.hpp"
#include "shardload/source.hpp"
#include "shardload/status.hpp"

namespace shardload {

// How discover() used a directory's manifest (shardload/manifest.hpp), as data: front ends
// decide on this (what to log, what to print), never on the text of Layout::manifest_status.
enum class ManifestState : std::uint8_t {
  kNone,          // no directory was discovered, or the manifest was not to be consulted
  kAbsent,        // the directory holds no manifest; the files were probed
  kUsed,          // taken from the manifest, every shard checked unchanged
  kTrusted,       // taken from the manifest without touching a shard (trust_manifest)
  kStale,         // a shard changed since indexing; the files were probed
  kOtherOptions,  // indexed with other format options than asked; the files were probed
  kOtherPattern,  // indexed under another pattern than the request's; the files were probed
};

// "none", "absent", "used", "trusted", "stale", "other_options", "other_pattern": the names
// the Python package and the encodings between processes use.
const char* manifest_state_name(ManifestState state);
std::optional<ManifestState> parse_manifest_state(std::string_view name);

// A ReadSpec (options, dtype, trailing shape, row bytes: all a reader needs)
// plus the shards and where each starts.
struct Layout : ReadSpec {
  Format format = Format::kNpy;  // always resolved (never kAuto)
  std::vector<Shard> shards;
  std::vector<std::int64_t> offsets;  // size shards+1: offsets[i] = first global row of shard i
  // How discover() got this layout, for people (shardload/manifest.hpp): "manifest: used",
  // "manifest: stale because ...", "manifest: absent", ...; empty where no directory was
  // discovered. Not part of the encoding: it describes the discovery, not the data. Options
  // it names are marked as in a Status's message (spell_options, shardload/format.hpp), and
  // the URLs it names have their secrets redacted (redact_secrets), as a message's have.
  std::string manifest_status;
  ManifestState manifest_state = ManifestState::kNone;  // the same, as data; not encoded either
  // The credentials table's entries its paths name (CredentialPins, shardload/store_options.hpp:
  // taken by assemble_layout), kept while the layout or a copy of it is. Not encoded: the
  // encoding carries the entries themselves.
  std::shared_ptr<const void> credentials;

  [[nodiscard]] std::int64_t total_rows() const { return offsets.empty() ? 0 : offsets.back(); }
  [[nodiscard]] std::uint64_t total_bytes() const {
    return row_bytes * static_cast<std::uint64_t>(total_rows());
  }
  [[nodiscard]] std::vector<std::int64_t> shape() const;
  [[nodiscard]] std::vector<std::int64_t> rows() const;
};

// discover() on a directory without a pattern recognises what it holds: a Zarr store is
// that one store; otherwise the numbered files (or stores) of one known format, by
// extension or by content (sniff_format); the format's default naming wins among groups
// of one format. Anything else is kLayout naming what the directory holds and the
// pattern or glob to pass. A format option keeps its default naming (shard_{:04d}.h5).
struct DiscoverOptions {
  IoBackend* io = nullptr;  // nullptr: posix_io()
  FormatOptions format;     // format kAuto: from the extension or the store's metadata
  // A directory holding a manifest (kManifestName) is discovered from it when it was made
  // with exactly these format options and every shard still matches it (manifest_staleness:
  // header per file for npy / raw / Zarr, one stat per file otherwise); else by probing,
  // with the reason in Layout::manifest_status. trust_manifest: take the manifest without
  // touching any shard (no stat, no listing). use_manifest false: ignore it.
  bool use_manifest = true;
  bool trust_manifest = false;
  // Threads probing the shards; 0 picks (several for many .npy or raw shards through
  // posix_io(), else one). Errors are the same whatever the count: the first bad shard in
  // path order.
  unsigned probe_threads = 0;
};

// The discovery options a caller names (all of DiscoverOptions but io, format and
// use_manifest, which a front end sets for its own reasons) as rows, the sibling of the format
// option table (shardload/format.hpp) with its kinds and its one text parser: the command
// line's flags, help and parser (the name with '-' for '_') and both Python bindings' keywords
// and checks derive from it. Adding a discovery option is a field above plus a row below.
struct DiscoverOptionSpec {
  const char* name;     // the Python keyword; the CLI flag with '-' for '_'
  const char* metavar;  // the CLI's placeholder; nullptr for a flag (kFlag)
  OptionKind kind;
  const char* help;  // the CLI's help line
  // The value when set; nullopt at the default. A value of the row's kind.
  std::optional<OptionValue> (*get)(const DiscoverOptions&);
  // Sets a value of the row's kind; kInvalidArgument when out of the field's range.
  Status (*set)(const OptionValue&, DiscoverOptions*);
};

namespace detail {

// A row's getter and setter over a field of DiscoverOptions: a bool (kFlag) or an unsigned
// count (kCount) at most `Max`, unset at its type's default.
template <auto Field>
std::optional<OptionValue> get_field(const DiscoverOptions& o) {
  using T = std::remove_cvref_t<decltype(o.*Field)>;
  if (o.*Field == T{}) return std::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    return OptionValue(true);
  } else {
    return OptionValue(static_cast<std::uint64_t>(o.*Field));
  }
}

template <auto Field, std::uint64_t Max = 0>
Status set_field(const OptionValue& v, DiscoverOptions* o) {
  using T = std::remove_cvref_t<decltype(o->*Field)>;
  if constexpr (std::is_same_v<T, bool>) {
    o->*Field = std::get<bool>(v);
  } else {
    const std::uint64_t n = std::get<std::uint64_t>(v);
    if (n > Max) {
      return {ErrorCode::kInvalidArgument,
              "expected at most " + std::to_string(Max) + ", found " + std::to_string(n)};
    }
    o->*Field = static_cast<T>(n);
  }
  return Status::ok();
}

}  // namespace detail

inline constexpr DiscoverOptionSpec kDiscoverOptionTable[] = {
    {"trust_manifest", nullptr, OptionKind::kFlag,
     "take DIR/shardload.manifest without checking any shard",
     detail::get_field<&DiscoverOptions::trust_manifest>,
     detail::set_field<&DiscoverOptions::trust_manifest>},
    {"probe_threads", "N", OptionKind::kCount,
     "threads probing the shards, at most 1024 (default 0: several for many npy or raw shards)",
     detail::get_field<&DiscoverOptions::probe_threads>,
     detail::set_field<&DiscoverOptions::probe_threads, 1024>},
};

inline constexpr std::span<const DiscoverOptionSpec> discover_option_table() {
  return kDiscoverOptionTable;
}

// Resolves the source and probes every shard. All errors are kLayout and
// name the offending file, e.g. "DIR/shard_0007.npy: dtype float64 differs
// from float32 of DIR/shard_0000.npy".
Result<Layout> try_discover(const Source& source, const DiscoverOptions& options = {});
Result<Layout> try_discover_paths(const std::vector<std::string>& paths,
                                  const DiscoverOptions& options = {});

// Builds a layout from probed shards (used by discover and by the task side
// when it rebuilds the layout from task arguments). Validates agreement.
Result<Layout> assemble_layout(Format format, FormatOptions options, DType dtype,
                               std::vector<std::int64_t> trailing, std::vector<Shard> shards);

// Rows [lo, hi) of a layout as a layout of its own, without opening a file: the shards
// the range covers, each a view of its file's rows (Shard::first_row), so that a plan and
// a fill over it read only those rows. kInvalidArgument unless 0 <= lo <= hi <=
// total_rows. Slicing a slice composes (rows count in the given layout).
Result<Layout> slice_rows(const Layout& layout, std::int64_t lo, std::int64_t hi);

// The format of a dataset whose first shard is `path`: the option when set,
// else the extension, else what the path holds (sniff_format, through `source` when given).
Result<Format> resolve_format(const std::string& path, const FormatOptions& options);
Result<Format> resolve_format(const std::string& path, const FormatOptions& options,
                              ShardSource& source);

// A human-readable summary: shard count, first and last rows, totals; the shards' paths
// with their secrets redacted (redact_secrets).
std::string describe(const Layout& layout, std::size_t edge_shards = 3);

}  // namespace shardload
