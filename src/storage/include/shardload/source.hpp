// What the user names as a dataset, before any file is opened.
//
// A source resolves to an ordered list of shard paths:
//  - a directory with numbered files (default naming shard_0000.npy, ...),
//  - a numbered pattern such as "part-{:05d}.npy" (in a directory),
//  - a glob such as "data/*.npy", ordered naturally (2 before 10),
//  - an explicit ordered list of paths.
//
// Contract: a Source is a value and holds only names; resolving it lists the file system
// (no file is opened) and returns kLayout / kInvalidArgument errors naming the path or
// pattern (a missing directory also carries its path and ENOENT as data). Safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/status.hpp"

namespace shardload {

inline constexpr std::string_view kDefaultPattern = "shard_{:04d}.npy";

struct Source {
  enum class Kind { kDirectory, kGlob, kList };
  Kind kind = Kind::kDirectory;
  std::string dir_path;   // kDirectory
  std::string pattern;    // kDirectory: "{:0Nd}" or "{}" numbering; empty: the format's default
  std::string glob_expr;  // kGlob
  std::vector<std::string> paths;  // kList
  // The credentials table's entries its paths name (CredentialPins, shardload/store_options.hpp),
  // kept while the source is.
  std::shared_ptr<const void> credentials;

  static Source directory(std::string directory, std::string pattern = {});
  static Source glob(std::string glob);
  static Source list(std::vector<std::string> paths);

  // Interprets one string the way the command line and Python do: an
  // existing directory is that directory and an existing regular file a
  // one-shard list, whatever characters their names hold; otherwise a
  // pattern if it holds "{...}" (its directory part names the folder,
  // literally), a glob if it holds * ? or [ (every part of it globbed), else
  // a directory. `pattern` overrides the numbering for a directory (empty:
  // default). A NUL in `text` or `pattern` is kInvalidArgument.
  static Result<Source> parse(const std::string& text, const std::string& pattern = {});

  // The source for messages and printouts, its secrets redacted (redact_secrets): never a
  // path to open.
  [[nodiscard]] std::string describe() const;
};

// A parsed numbering pattern: prefix, minimum digit count, suffix.
struct NumberPattern {
  std::string prefix;
  int width = 0;  // zero-padded minimum width; 0 means plain decimal
  std::string suffix;

  // "shard_{:04d}.npy": one field, {} or {:0Nd}; "{{" and "}}" are literal braces.
  static Result<NumberPattern> parse(std::string_view pattern);
  // `text` as a pattern's literal part: its braces doubled.
  static std::string escape(std::string_view text);
  [[nodiscard]] std::string format(std::int64_t n) const;
  // The number a file name stands for, or -1 if the name does not match
  // exactly as format() would write it.
  [[nodiscard]] std::int64_t match(std::string_view name) const;
};

// Natural order: digit runs compare as numbers ("shard_2" < "shard_10").
bool natural_less(std::string_view a, std::string_view b);

// A directory's names as discovery sees them: the numbered ones grouped by the pattern
// that writes them ("shard_{:04d}.h5", "part-{}.parquet"), and a count of the rest. Names of
// one prefix and extension that no one padding spells (shard_0001.npy beside shard_00002.npy
// or shard_3.npy) are a group per spelling, each with that prefix.
struct NumberedGroup {
  std::string pattern;      // a NumberPattern: prefix, {:0Nd} or {}, extension
  std::string prefix;       // the name before the number ("shard_")
  std::string extension;    // ".h5", or "" when the name has none
  std::string first, last;  // the lowest and highest numbered names
  std::int64_t count = 0;
  bool directories = false;  // the first name is a directory (a store)
};

struct DirectoryScan {
  std::string directory;
  std::int64_t entries = 0;  // names other than . and ..
  bool any_directory = false;
  std::vector<NumberedGroup> groups;  // most names first, then by pattern
  // Per extension: (extension, count, first, last) in natural order, most names first.
  struct Extension {
    std::string extension;
    std::int64_t count = 0;
    std::string first, last;
  };
  std::vector<Extension> extensions;

  // "holds 12 files: 10 *.h5 (shard_0000.h5 ... shard_0009.h5), 2 other" (the extensions
  // `known` accepts by name, the rest as "other"), or "is empty". The caller knows the
  // formats: this layer does not.
  [[nodiscard]] std::string describe(
      const std::function<bool(std::string_view extension)>& known) const;
  // "; pass pattern='shard_{:04d}.h5' or a glob 'D/*.h5'" for the largest group (else the
  // most common extension; the pattern option marked, shardload/format.hpp's option_mention),
  // or "" when there is nothing to suggest.
  [[nodiscard]] std::string suggestion() const;
};

// Lists a directory once (names only; no file is opened), skipping saves' hidden staging
// directories (".*.shardload-tmp-*"). kLayout naming the directory when it is missing or
// cannot be listed.
Result<DirectoryScan> scan_directory(const std::string& directory);

// Resolves a source to its ordered shard paths. Errors (kLayout) name the
// directory or pattern: missing directory, nothing matches, gaps in the
// numbering (the first five missing numbers and the count). Time is bounded
// by the files present, whatever numbers their names hold. A NUL in any
// name is kInvalidArgument (a C string would end there).
Result<std::vector<std::string>> resolve(const Source& source);
// What resolve checks of the names before it lists anything (a NUL, a scheme no backend
// serves, an http(s) URL holding a fragment or no host: kInvalidArgument naming the name), for a
// caller that reads the source's directory (its manifest) before it resolves.
Status check_source(const Source& source);
// The same, and *nothing_matches says, as data, whether the error is that the directory's
// pattern or the glob matches no name (false on success and on every other error): a caller
// that says more in that case (discovery lists what the directory holds) decides on this,
// never on the message.
Result<std::vector<std::string>> resolve(const Source& source, bool* nothing_matches);

}  // namespace shardload
