// The subcommands of the `shardload` program. Each returns the process exit
// code and prints its own errors; none throws.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "shardload/format.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"
#include "shardload/source.hpp"
#include "shardload/status.hpp"

namespace shardload::cli {

using Args = std::vector<std::string>;

// One option of a command: a flag when `metavar` is null, else it takes a
// value (`--name VALUE` or `--name=VALUE`). An empty value is refused, as the
// Python API refuses "" for its options, unless it means something (`empty_ok`:
// --trailing-shape '' is 1-D data).
struct OptionSpec {
  const char* name;
  const char* metavar;
  const char* help;
  bool empty_ok = false;
};

// A command's usage, summary and options; `--help` prints exactly these, and
// the parser accepts exactly these options.
struct CommandSpec {
  const char* name;
  const char* usage;    // after "shardload NAME "
  const char* brief;    // one line, for `shardload --help`
  const char* summary;  // a few lines
  std::vector<OptionSpec> options;
  bool format_options = false;    // also accepts format_option_specs()
  bool discover_options = false;  // also accepts discover_option_specs()
};

const CommandSpec* find_command(const std::string& name);
const std::vector<CommandSpec>& commands();
void print_help(const CommandSpec& spec, std::ostream& out);

struct Parsed {
  std::map<std::string, std::string> opts;  // options that take a value, by name without "--"
  std::set<std::string> flags;              // flags given
  std::vector<std::string> positional;
};

// Parses a command's arguments: "--name value", "--name=value", flags, "--"
// (the rest are positionals), "-h"/"--help" anywhere. Returns nullopt to go
// on, or the exit code to return: 0 after printing the help to stdout, 2
// after an error on stderr that names the option and points at --help. Usage
// errors besides unknown options: an option given twice (which value would win
// is a guess), an empty value (see OptionSpec), an empty positional argument.
std::optional<int> parse_command_line(const CommandSpec& spec, const Args& args, Parsed* out);

// The most dimensions `write --shape` takes: those of a Legate array (LEGATE_MAX_DIM of the
// Legate wheels; write.cc checks at compile time that they agree), so that what write makes,
// read loads. Host reads of data with more dimensions work; Legate cannot hold it.
inline constexpr std::size_t kMaxWriteDims = 6;

// What `shardload write` was asked to do, checked before anything is written.
struct WriteArgs {
  std::string dir;
  long long shards = 0;
  long long seed = 0;
  std::vector<long long> shape;
  DType dtype;
};
std::optional<int> parse_write_args(const Args& args, WriteArgs* out);
// The rows of each shard (synth_split), _meta.json's text and the line write prints.
std::vector<std::int64_t> write_rows_per_shard(const WriteArgs& args);
std::string write_meta_json(const WriteArgs& args, const std::vector<std::int64_t>& rows);
std::string write_summary(const WriteArgs& args);

// Without Legate: each shard written by this process in turn.
int cmd_write(const Args& args);
#ifdef SHARDLOAD_WITH_LEGATE
// With Legate: the data made by a synth task per tile and written by shardload::save.
int cmd_write_legate(const WriteArgs& args);
#endif
int cmd_inspect(const Args& args);
// How index discovers the directory (never consulting the manifest it replaces; an error
// begins "loading SOURCE: ", as discover_once's does) and writes the manifest: in this
// process (the default), or once for a job of several ranks.
struct IndexSteps {
  std::function<Result<Layout>(const std::string& source, const std::string& pattern,
                               const Source& parsed, const DiscoverOptions& options)>
      discover;
  std::function<Result<std::string>(const Layout& layout, const std::string& directory,
                                    const ManifestOptions& options)>
      write;
  // Whether `write` reads through ManifestOptions::io (write_manifest_once refuses one); the
  // progress bar counts the checksums' reads there, else this process's I/O counters.
  bool takes_io = true;
};
IndexSteps local_index_steps();
// `shardload index DIR`: writes DIR/shardload.manifest.
int cmd_index(const Args& args, const IndexSteps& steps = local_index_steps());
#ifdef SHARDLOAD_WITH_LEGATE
// The same on several ranks, under Legate: one rank probes and one writes (with checksums,
// reads every shard), every rank exits with the same status, the first one prints
// (src/cli/index_legate.cc).
int cmd_index_legate(const Args& args);
#endif
#ifdef SHARDLOAD_WITH_LEGATE
// `shardload verify DIR|MANIFEST`: the checksums, in a Legate task (src/cli/verify.cc).
int cmd_verify(const Args& args);
#endif

// What `shardload read` was asked to do, checked before Legate starts.
struct ReadArgs {
  std::string source;  // a directory, numbered pattern, glob or file
  // Where _meta.json is looked for: the source directory, else its parent; for a URL, the URL
  // (read_write_meta looks below its key, then beside it).
  std::string meta_dir;
  std::string pattern;
  std::int64_t overdecompose = 1;
  std::int64_t repeat = 1;
  bool verify = true;
  std::optional<long long> seed;
  FormatOptions format;
  std::map<std::string, std::string> type_options;  // --dtype / --astype, for check_type_options
  // The discovery option table's rows (trust_manifest, ...); its format is `format`.
  DiscoverOptions discovery;
};

// Parses `read`'s arguments into `out`; nullopt to go on, else the exit code
// (0 after --help, 2 after a usage error). Nothing here starts Legate.
std::optional<int> parse_read_args(const Args& args, ReadArgs* out);
// What `read` verifies against: the seed of --seed, else of the _meta.json `shardload write`
// put beside the shards; without one (or --no-verify) the line saying why, and rc 0; rc 1
// after an error on `err` (an unreadable _meta.json, a dtype other than the shards'). A
// SOURCE that is a part of the directory (a shard, a pattern or glob of some) holds the
// values of its rows in the dataset: `first_row` is where the part begins there, told by
// _meta.json's rows and the shards' numbers (`place` says so in the verify line); a part
// whose place cannot be told is skipped, saying why.
struct VerifySeed {
  std::optional<long long> seed;
  int rc = 0;
  std::int64_t first_row = 0;
  std::string place;  // " at rows [A, B) of the dataset in D", or "" for the whole SOURCE
};
VerifySeed verify_seed(const ReadArgs& a, const Layout& layout, std::ostream& out,
                       std::ostream& err);
// The verify line for `bad` mismatching elements; the exit status (1 when any differ).
int report_verify(std::int64_t bad, const Layout& layout, const VerifySeed& v, std::ostream& out);
// Without Legate: the dataset filled into host memory by the engine's threads (read_host.cc).
int cmd_read_host(const ReadArgs& args);
#ifdef SHARDLOAD_WITH_LEGATE
int cmd_read(const ReadArgs& args);

// The streams of a command that runs under Legate (call after legate::start()). Under
// control replication every rank runs the program and sees the same results; only the first
// rank speaks, so a multi-node run prints once: elsewhere `out` and `err` discard.
class RankStreams {
 public:
  RankStreams();
  RankStreams(const RankStreams&) = delete;
  RankStreams& operator=(const RankStreams&) = delete;

  const bool speaks;

 private:
  std::ostream null_{nullptr};

 public:
  std::ostream& out;
  std::ostream& err;
};
#endif

// The options that select a format and what to read from it, shared by the
// commands that discover a layout: --format, --astype and a flag for each row of the
// format option table (shardload/format.hpp). --dtype is the stored type (raw);
// --astype the type parquet/arrow decode into (refused with another --format); not both.
const std::vector<OptionSpec>& format_option_specs();
const std::vector<std::string>& format_option_names();
Status parse_format_options(const std::map<std::string, std::string>& opts, FormatOptions* out);

// The flags of the discovery option table (shardload/layout.hpp), for the commands that
// discover: each row's flag, help and value parsed by its kind, as the Python keywords are.
const std::vector<OptionSpec>& discover_option_specs();
Status parse_discover_options(const Parsed& parsed, DiscoverOptions* out);
// Once discovery has resolved the format: a usage error (exit 2) for --astype with a format
// that reads its stored type; a note on stderr for --dtype with parquet/arrow (its read-as
// type there is spelled --astype; --dtype stays accepted one release).
std::optional<int> check_type_options(const char* cmd,
                                      const std::map<std::string, std::string>& opts,
                                      Format format);
// After a discovery with --astype and no --format failed: the usage error (exit 2) when the
// source holds a format that reads its stored type (whose reader refused the option), found
// by discovering again without it; nullopt to report the failure as it is.
std::optional<int> check_type_options_after_failure(const char* cmd,
                                                    const std::map<std::string, std::string>& opts,
                                                    const Source& source, DiscoverOptions options);

// A JSON string literal of a file system name: valid UTF-8 is kept, and each
// byte that is not part of valid UTF-8 becomes \udcXX (XX the byte), as
// Python's os.fsdecode (errors="surrogateescape") decodes it, so
// os.fsencode(json.loads(text)) gives back the exact bytes.
std::string json_path_string(const std::string& bytes);

// What `shardload write` recorded in DIR/_meta.json for `shardload read` to
// verify against. A missing file, or one without a seed, gives no seed; a file
// that is not such JSON (too large, nested too deep, a seed that is not an
// integer) is a kFormat error naming it. A JSON object whose keys are not exactly
// those shardload write writes (seed, dtype, shape, num_shards, rows) is another tool's
// (the seed recipe's script writes one too): foreign, and its values are not read.
struct WriteMeta {
  std::optional<long long> seed;
  std::string dtype;                // empty when not recorded
  std::vector<std::int64_t> shape;  // the array written; empty when not recorded
  std::vector<std::int64_t> rows;   // each shard's rows, shard_0000.npy's first
  bool foreign = false;             // not written by shardload write
};
Result<WriteMeta> read_write_meta(const std::string& dir);

// The error reports every command shares (args.cc). fail prints "shardload CMD: error: MSG"
// (in the command line's spelling) and returns 1; usage_error prints MSG and a pointer to
// --help, and returns 2; source_error is usage_error for a malformed SOURCE (kInvalidArgument)
// and fail for one that is not there.
int fail(const char* cmd, const std::string& msg);
int usage_error(const char* cmd, const std::string& msg);
int source_error(const char* cmd, const Status& s);

// Several SOURCE arguments are a list of files (a Zarr store counts as one): a directory of
// shards, a numbered pattern or a glob among them is a usage error (exit 2), nullopt if none.
std::optional<int> check_file_list(const char* cmd, const std::vector<std::string>& paths);

// Parses a whole string as a decimal integer (no sign '+', no spaces); false on anything else.
bool parse_int(const std::string& text, long long* out);

// Parses "a,b,c" into integers; false on anything else.
bool parse_int_list(const std::string& text, std::vector<long long>* out);

}  // namespace shardload::cli
