// `shardload write` without Legate, and the argument checks the Legate version shares
// (write_legate.cc).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/detail/checked.hpp"
#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/source.hpp"
#include "shardload/synth.hpp"

namespace shardload::cli {

namespace {

bool is_shard_name(const std::string& n) {
  // shard_NNNN.npy (four or more digits) or its temporary shard_NNNN.npy.tmp.
  std::string stem = n;
  if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".tmp") == 0) {
    stem.resize(stem.size() - 4);
  }
  if (stem.rfind("shard_", 0) != 0 || stem.size() < 14 ||
      stem.compare(stem.size() - 4, 4, ".npy") != 0) {
    return false;
  }
  for (std::size_t i = 6; i + 4 < stem.size(); ++i) {
    if (stem[i] < '0' || stem[i] > '9') return false;
  }
  return true;
}

// Removes what an earlier `write` left (shard_NNNN.npy, _meta.json and their temporaries) so
// that a write can replace it. Anything else in the directory (a user's file, a directory, a
// link, a _meta.json that write did not write) refuses the write before anything is removed:
// the directory is not a demo dataset, and emptying it would lose the user's data.
Status remove_stale(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status(ErrorCode::kIo, dir + ": cannot list the directory");
  std::vector<std::string> stale;
  std::string foreign;
  bool meta = false;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct ::stat st {};
    const std::string p = dir + "/" + n;
    const bool regular = ::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    const bool ours = is_shard_name(n) || n == "_meta.json" || n == "_meta.json.tmp";
    if (!regular || !ours) {
      if (foreign.empty()) foreign = p;
      continue;
    }
    meta = meta || n == "_meta.json";
    stale.push_back(p);
  }
  ::closedir(d);
  const auto refuse = [&](const std::string& what) {
    return Status(ErrorCode::kLayout,
                  dir + ": not replaced: " + what +
                      "; write replaces only a directory that an earlier write made (or an "
                      "empty one): pass another --shard-dir");
  };
  if (!foreign.empty()) return refuse(foreign + " was not written by shardload write");
  if (!stale.empty()) {
    if (!meta) return refuse("it holds shard files without the _meta.json a write leaves");
    const Result<WriteMeta> m = read_write_meta(dir);
    if (!m || m->foreign) return refuse(dir + "/_meta.json was not written by shardload write");
  }
  for (const auto& p : stale) {
    if (::unlink(p.c_str()) != 0) return Status(ErrorCode::kIo, p + ": cannot remove a stale file");
  }
  return Status::ok();
}

}  // namespace

std::optional<int> parse_write_args(const Args& args, WriteArgs* out) {
  const char* cmd = "write";
  Parsed p;
  if (auto rc = parse_command_line(*find_command(cmd), args, &p)) return *rc;
  if (!p.positional.empty())
    return usage_error(cmd, "unexpected argument '" + p.positional[0] + "'");
  for (const char* req : {"shard-dir", "num-shards", "shape"}) {
    if (p.opts.count(req) == 0) return usage_error(cmd, std::string("--") + req + " is required");
  }
  out->dir = p.opts["shard-dir"];
  if (!parse_int(p.opts["num-shards"], &out->shards) || out->shards < 1) {
    return usage_error(
        cmd, "--num-shards: expected an integer >= 1, found '" + p.opts["num-shards"] + "'");
  }
  if (out->shards > 1000000) {  // save's bound (shardload/save.hpp)
    return usage_error(
        cmd, "--num-shards: expected at most 1000000 shards, found " + p.opts["num-shards"]);
  }
  if (p.opts.count("seed") != 0 && !parse_int(p.opts["seed"], &out->seed)) {
    return usage_error(cmd, "--seed: expected an integer, found '" + p.opts["seed"] + "'");
  }
  if (!parse_int_list(p.opts["shape"], &out->shape)) {
    return usage_error(cmd, "--shape: expected ROWS[,DIM...] (1 to " +
                                std::to_string(kMaxWriteDims) + " integers), found '" +
                                p.opts["shape"] + "'");
  }
  if (out->shape.size() > kMaxWriteDims) {
    // Legate ends the process on a store of more dimensions than it was built for.
    return usage_error(cmd, "--shape: " + std::to_string(out->shape.size()) +
                                " dimensions, and a Legate array has at most " +
                                std::to_string(kMaxWriteDims) + " (LEGATE_MAX_DIM); found '" +
                                p.opts["shape"] + "'");
  }
  for (const auto d : out->shape) {
    if (d < 0) return usage_error(cmd, "--shape: dimensions must be >= 0");
  }
  const std::string dtype_text = p.opts.count("dtype") != 0 ? p.opts["dtype"] : "float32";
  bool big = false;
  auto dtype = parse_dtype(dtype_text, &big);
  if (!dtype) return usage_error(cmd, "--dtype: " + dtype.status().message());
  // The shards are written in this machine's byte order; another one is refused, not ignored.
  if (dtype->size > 1 && big != !host_is_little_endian()) {
    return usage_error(cmd, "--dtype: '" + dtype_text + "' is " + (big ? "big" : "little") +
                                "-endian, and write writes " + (big ? "little" : "big") +
                                "-endian shards (this machine's order); pass '" + dtype->name() +
                                "'");
  }
  out->dtype = *dtype;
  // A shape whose bytes wrap 64 bits would be written as a header alone, announced as written,
  // and refused by every reader: numpy and shardload refuse it whatever dimension is 0 (numpy's
  // size check, shardload's row size), so zeros are left out of the product.
  std::uint64_t bytes = 1;
  bool fits = true;
  for (const auto d : out->shape) {
    if (d != 0) fits = fits && detail::checked_mul(bytes, static_cast<std::uint64_t>(d), &bytes);
  }
  constexpr std::uint64_t kMostBytes = INT64_MAX - 4096;  // a header of at most 4 KiB before
  fits = fits && detail::checked_mul(bytes, std::uint64_t{out->dtype.size}, &bytes);
  if (!fits || bytes > kMostBytes) {
    return usage_error(cmd, "--shape: more than 2**63 - 1 bytes of " + out->dtype.name() +
                                ", the most a file holds; found '" + p.opts["shape"] + "'");
  }
  return std::nullopt;
}

std::vector<std::int64_t> write_rows_per_shard(const WriteArgs& a) {
  return synth_split(static_cast<std::uint64_t>(a.seed), a.shape[0], a.shards);
}

std::string write_meta_json(const WriteArgs& a, const std::vector<std::int64_t>& rows) {
  std::ostringstream m;
  m << "{\"seed\": " << a.seed << ", \"dtype\": \"" << a.dtype.name() << "\", \"shape\": [";
  for (std::size_t i = 0; i < a.shape.size(); ++i) m << (i ? ", " : "") << a.shape[i];
  m << "], \"num_shards\": " << a.shards << ", \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) m << (i ? ", " : "") << rows[i];
  m << "]}\n";
  return m.str();
}

std::string write_summary(const WriteArgs& a) {
  std::ostringstream o;
  o << "wrote " << a.shards << " shards to " << printable_redacted(a.dir) << ": shape "
    << "(";
  for (std::size_t i = 0; i < a.shape.size(); ++i) o << (i ? ", " : "") << a.shape[i];
  o << (a.shape.size() == 1 ? ",)" : ")") << " " << a.dtype.name() << ", seed " << a.seed << "\n";
  return o.str();
}

int cmd_write(const Args& args) {
  const char* cmd = "write";
  WriteArgs a;
  if (auto rc = parse_write_args(args, &a)) return *rc;
  const std::string& dir = a.dir;
  if (!path_traits(dir).kernel_files) {
    return fail(cmd, dir + ": this build (without Legate) writes local directories only");
  }

  ::mkdir(dir.c_str(), 0755);
  struct ::stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(cmd, dir + ": cannot create the shard directory");
  }
  if (Status s = remove_stale(dir); !s) return fail(cmd, s.message());

  const auto rows = write_rows_per_shard(a);
  std::uint64_t row_elements = 1;
  for (std::size_t i = 1; i < a.shape.size(); ++i)
    row_elements *= static_cast<std::uint64_t>(a.shape[i]);
  const NumberPattern pat{"shard_", 4, ".npy"};
  // parse_write_args checked that the whole size fits 63 bits.
  const std::uint64_t row_bytes = row_elements * a.dtype.size;
  TerminalBar bar("write", static_cast<std::uint64_t>(a.shape[0]) * row_bytes, a.shards, "shards");
  std::uint64_t first_row = 0;
  for (long long i = 0; i < a.shards; ++i) {
    // Ctrl-C between shards: main reports the interrupt (status 130); no _meta.json, so the
    // set is not complete.
    if (interrupt_requested()) {
      bar.clear();
      return 130;
    }
    NpyWriteSpec spec{a.dtype, {rows[static_cast<std::size_t>(i)]}};
    spec.shape.insert(spec.shape.end(), a.shape.begin() + 1, a.shape.end());
    const std::string path = dir + "/" + pat.format(i);
    if (Status s =
            write_npy(path, spec, static_cast<std::uint64_t>(a.seed), first_row * row_elements);
        !s) {
      bar.clear();
      return fail(cmd, s.message());
    }
    first_row += static_cast<std::uint64_t>(rows[static_cast<std::size_t>(i)]);
    bar.update(first_row * row_bytes, i + 1);
  }
  bar.finish();
  // The metadata goes last: its presence means the set is complete.
  const std::string meta = dir + "/_meta.json";
  {
    std::ofstream m(meta + ".tmp");
    m << write_meta_json(a, rows);
    if (!m) return fail(cmd, meta + ": write failed");
  }
  if (std::rename((meta + ".tmp").c_str(), meta.c_str()) != 0) {
    return fail(cmd, meta + ": rename failed");
  }
  std::cout << write_summary(a);
  return 0;
}

}  // namespace shardload::cli
