// The file side of a save (shardload/save.hpp, shardload/host_save.hpp), free of any runtime: the
// shard files' names, creating them at their final sizes in the hidden staging directory,
// positional writes of row ranges into them, the metadata and the final rename. What a format's
// files hold is its writer's (the format descriptor's, shardload/formats.hpp); this file names no
// format. Returns Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardload/dtype.hpp"
#include "shardload/manifest.hpp"
#include "shardload/save_options.hpp"
#include "shardload/status.hpp"
#include "shardload/storage.hpp"

namespace shardload::detail {

// What every point task needs to find where a row goes; travels as int64 scalars.
struct SaveSpec {
  SaveFormat format = SaveFormat::kNpy;
  DType dtype;
  std::vector<std::int64_t> trailing;  // trailing shape
  std::size_t row_bytes = 0;
  std::vector<std::int64_t> offsets;  // cumulative rows, shards + 1
  // Per shard, where its writer put its rows (ShardPlacement).
  std::vector<std::int64_t> data_offset;
  std::vector<std::int64_t> chunk_rows;
  // Per shard, the (device, inode) of each key create_shard_keys made, two numbers a key in
  // the plan's order (none where the store has no files): what a process that reopens a key,
  // this one or another, requires the key's file to be.
  std::vector<std::vector<std::int64_t>> key_files;

  [[nodiscard]] std::int64_t shards() const {
    return static_cast<std::int64_t>(offsets.size()) - 1;
  }
  [[nodiscard]] std::vector<std::int64_t> encode() const;
  static Result<SaveSpec> decode(std::span<const std::int64_t> ints);
};

// shard_0000.npy / .bin / .zarr: the loader's default names for the format (its first
// extension).
std::string save_shard_name(SaveFormat format, std::int64_t shard);

// Whether a save writes a regular file (or object) of this name into a dataset: a shard of a
// format whose shards are files (shard_NNNN.npy, .bin), a format's metadata, the manifest,
// _meta.json. What an overwrite may replace.
bool is_saved_file_name(std::string_view name);

// Whether `name` is a file a dataset's directory holds beside its shards, never a shard: the
// CLI's _meta.json, the manifest, a format's metadata (raw's shardload.json) and the seed's
// raw sidecar shard_meta.json. Discovery refuses a list or glob that names one.
bool is_dataset_metadata_name(std::string_view name);

// The writer of the store a save names `name` (shard_NNNN.zarr), or null: whose metadata
// file and chunk names an overwrite may replace inside it.
const ShardWriter* saved_store_writer(std::string_view name);

// --- The one writer of every save: a shard's keys, written through the store's sinks.
//
// A shard is the keys its format's layout gives (readers/detail/object_layout.hpp): one key
// (npy: its header, then the rows; raw: the rows) or a store of chunk keys (Zarr:
// "shard_0000.zarr/0.0", each chunk_rows rows, the last padded with zeros to full size). Every
// byte of a save goes into a key through a KeySink (Store::open_sink); what differs between
// stores is only how a key's sink is had:
//  - keys that several writers fill (a local directory, the memory store): the launcher makes
//    every key at its final size with its header (create_shard_keys), then any number of
//    threads and processes write their rows at their offsets, each through a sink of its own
//    on the key made (Store::reopen_sink: locally open(2) and pwrite(2)), in any order
//    (write_rows);
//  - objects, which cannot be written after they are made: one writer per shard opens each key
//    as its first rows come and finishes it as it fills (ShardUpload, save_remote.hpp).

// One key of a shard, below the dataset, and its size in bytes.
struct ShardKey {
  std::string key;
  std::uint64_t size = 0;
};

// Where shard rows [lo, hi) go: into key `key` (an index into ShardPlan::keys) at byte
// `offset`.
struct KeyWrite {
  std::size_t key = 0;
  std::uint64_t offset = 0;
  std::int64_t lo = 0, hi = 0;  // rows of the shard
};

// One shard's keys, from its format's layout.
struct ShardPlan {
  std::string head;             // the bytes before row 0 in the first key (the npy header)
  std::int64_t rows = 0;        // the shard's rows
  std::int64_t chunk_rows = 0;  // rows per key of a store of chunks; 0: the shard is one key
  std::size_t row_bytes = 0;
  std::vector<ShardKey> keys;  // none for a store without bytes

  // Shard rows [lo, hi) as writes into the keys, in row order.
  [[nodiscard]] std::vector<KeyWrite> writes(std::int64_t lo, std::int64_t hi) const;
};

// Shard `s`'s plan. kInvalidArgument naming WHERE + the shard's name for rows whose bytes
// overflow a file size, and ("no writer for the hdf5 format") for a format without a layout;
// `where` is what a shard's name follows in those messages ("DIR/").
Result<ShardPlan> plan_shard(const SaveSpec& spec, std::int64_t s, const std::string& where = {});

// Every shard's plan checked, and data_offset and chunk_rows filled from them (the placement
// that travels with the spec to the processes that write rows).
Status plan_shard_keys(const std::string& where, SaveSpec* spec);

// Makes every key of every shard in `staging` at its final size with its header, data still
// zeros (plan_shard_keys first).
Status create_shard_keys(Store& store, const Staging& staging, SaveSpec* spec);

// Writes global rows [lo, hi) from `src` (dense C-order rows) into the keys create_shard_keys
// made, through sinks reopened on them.
Status write_shard_rows(Store& store, const Staging& staging, const SaveSpec& spec, std::int64_t lo,
                        std::int64_t hi, const std::byte* src);

// The format's metadata (raw's shardload.json, each Zarr store's .zarray), then the extra
// files, written last, each a new key through a sink; `written`, where given, gets each key
// as its sink finished it (the key below the staging, its size and ETag). `begun`, where
// given, gets each key and the bytes sent before its upload starts: an upload that fails
// unanswered (a Ctrl-C, a connection cut, a timeout) may still have been stored, and a
// clean-up must know to look there.
Status write_metadata(Store& store, const Staging& staging, const SaveSpec& spec,
                      const std::vector<std::pair<std::string, std::string>>& extra_files = {},
                      std::vector<WrittenKey>* written = nullptr,
                      std::vector<std::pair<std::string, std::string>>* begun = nullptr);

// The three above on the local staging directory `dir` (a path, which travels between
// processes): create_shard_keys, write_shard_rows and write_metadata through the local store
// at `dir`.
Status create_shard_files(const std::string& dir, SaveSpec* spec);
Status write_rows(const std::string& dir, const SaveSpec& spec, std::int64_t lo, std::int64_t hi,
                  const std::byte* src);
Status write_metadata(const std::string& dir, const SaveSpec& spec,
                      const std::vector<std::pair<std::string, std::string>>& extra_files = {});

// The manifest of the finished dataset in `dir` (DIR/shardload.manifest, as `shardload index`
// writes it), written after every other file: its presence means the set is complete.
// `held_to`, where given, is asked about the dataset's index before anything is written: its
// refusal is returned and no manifest written.
Status write_save_manifest(const std::string& dir, Checksum checksum,
                           const std::function<Status(const Layout&)>& held_to = {});

// `dest` with the directory it is in resolved, once, to its physical path (no "." or ".."
// segments, no symbolic links): every later step checks, writes, renames and cleans up that
// very directory, even if a link on the way (say "current/../out") is changed during the
// save. The last segment is kept as given (a link there is refused by check_destination);
// "." and ".." there are refused (kInvalidArgument). kIo naming dest (with errno) where the
// directory it is in cannot be resolved: it is missing, or not searchable.
Result<std::string> physical_destination(const std::string& dest);

// One entry of an existing dataset that check_destination found to be a save's, as it was
// then: an overwrite deletes it only while it is still that file (its generation: size, times
// and inode); a directory as its name and '/', deleted when empty.
using SavedEntry = ReplacedKey;

// What check_destination found at dest, when it is a directory.
struct ExistingDestination {
  bool exists = false;
  unsigned mode = 0;  // permission bits (07777)
  unsigned uid = 0, gid = 0;
  std::vector<SavedEntry> entries;  // what an overwrite replaces, files before their directory
};

// Checks `dest` before anything is written: absent, an empty directory, or (overwrite) a
// directory holding only what a save writes, to the last file of its Zarr stores: with the
// dataset's manifest, what it lists with the snapshots it records; without one, entries of
// the names and types a save writes. Refuses a destination whose owner or group this process
// cannot keep. kIo with EEXIST / ENOTEMPTY when it is refused as taken.
Status check_destination(const std::string& dest, bool overwrite,
                         ExistingDestination* existing = nullptr);

// Deletes `entries` (relative to `dir`), each only while it is the file that was checked,
// then `dir`; false where anything is left (then `dir` is too). The local store's removal of
// what a publish replaced (remove_checked_keys).
bool remove_saved_entries(const std::string& dir, const std::vector<SavedEntry>& entries);

// A new hidden directory beside dest (mode 0700 until the commit), for the dataset to be
// built in: ".NAME.shardload-tmp-HOST-PID-N", or ".HASH.shardload-tmp-HOST-PID-N" where NAME
// is too long for that to fit NAME_MAX. Staging directories of earlier saves to the same
// destination on this host whose process is gone are removed first. The local store's stage()
// (shardload/storage.hpp) in the directory dest is in.
Result<std::string> make_staging_dir(const std::string& dest);

// Makes the staging directory DEST (see save.hpp), with the mode, owner, group and extended
// attributes of the directory it replaces (a new one: 0777 less the umask); removes what it
// replaced, entry by entry. *published: whether the new dataset is at dest (then `staging`
// is no longer the staging directory, even when an error is returned). The local store's
// publish(), check_destination its check before each swap.
Status commit_staging(const std::string& staging, const std::string& dest, bool overwrite,
                      bool* published);

// The (device, inode) of the directory at `path` (not followed if a link), or {0, 0}.
std::pair<std::uint64_t, std::uint64_t> directory_identity(const std::string& path) noexcept;

// Removes the staging directory `path` (the local store's discard()) only while it is still the
// directory of that identity: a staging directory whose path now leads elsewhere (a link on
// the way changed) is left alone.
void remove_tree_if_same(const std::string& path,
                         std::pair<std::uint64_t, std::uint64_t> identity) noexcept;

// make_staging_dir(dest), then create_shard_files in it; on failure the directory is
// removed (while its path still leads to it) and nothing is left.
Result<std::string> prepare_staging(const std::string& dest, SaveSpec* spec);

// The end of a save to a directory, once every row is written: write_metadata (with the
// options' extra files), the manifest when options.manifest, then commit_staging.
// *published as commit_staging's, also on an error.
Status publish_staging(const std::string& staging, const std::string& dest, const SaveSpec& spec,
                       const SaveOptions& options, bool* published);

}  // namespace shardload::detail
