// `shardload index DIR`: discovers DIR by probing and writes its manifest.
#include <atomic>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "shardload/io.hpp"
#include "shardload/layout.hpp"
#include "shardload/manifest.hpp"
#include "shardload/source.hpp"

namespace shardload::cli {

namespace {

// posix_io() (which also routes object-store URLs), counting the bytes the checksums read and
// the shards done, for the bar of `index --checksum`: write_manifest stats each shard once,
// after hashing it.
class CountingIo : public IoBackend {
 public:
  explicit CountingIo(TerminalBar* bar) : bar_(bar) {}
  Result<int> open(const std::string& path) override { return io_.open(path); }
  Result<FileInfo> stat(int fd, const std::string& path) override { return io_.stat(fd, path); }
  Result<int> open_stat(const std::string& path, FileInfo* info) override {
    return io_.open_stat(path, info);
  }
  Result<int> open_known(const std::string& path, const FileInfo& snapshot) override {
    return io_.open_known(path, snapshot);
  }
  Result<int> open_whole(const std::string& path, FileInfo* info, std::size_t expected) override {
    return io_.open_whole(path, info, expected);
  }
  Result<int> open_tail(const std::string& path, FileInfo* info, std::size_t tail) override {
    return io_.open_tail(path, info, tail);
  }
  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t offset) override {
    const std::int64_t got = io_.pread(fd, buf, n, offset);
    if (got > 0) bar_->update(bytes_ += static_cast<std::uint64_t>(got));
    return got;
  }
  void close(int fd) override { io_.close(fd); }
  Result<FileInfo> stat_path(const std::string& path) override {
    bar_->update(bytes_, ++shards_);
    return io_.stat_path(path);
  }
  std::string last_read_error() const override { return io_.last_read_error(); }

 private:
  IoBackend& io_ = posix_io();
  TerminalBar* bar_;
  std::atomic<std::uint64_t> bytes_{0};
  std::atomic<std::int64_t> shards_{0};
};

}  // namespace

IndexSteps local_index_steps() {
  return {[](const std::string&, const std::string&, const Source& parsed,
             const DiscoverOptions& options) -> Result<Layout> {
            auto layout = try_discover(parsed, options);
            if (!layout) return layout.status().with_context("loading " + parsed.describe());
            return layout;
          },
          [](const Layout& layout, const std::string& directory, const ManifestOptions& options) {
            return write_manifest(layout, directory, options);
          }};
}

int cmd_index(const Args& args, const IndexSteps& steps) {
  const char* cmd = "index";
  Parsed p;
  if (auto rc = parse_command_line(*find_command(cmd), args, &p)) return *rc;
  if (p.positional.size() != 1) {
    return usage_error(cmd, "expected one DIR, the directory that holds the shards");
  }
  DiscoverOptions opts;
  opts.use_manifest = false;  // the files themselves, not the manifest being replaced
  if (Status s = parse_format_options(p.opts, &opts.format); !s) {
    return usage_error(cmd, s.message());
  }
  ManifestOptions mopts;
  if (auto c = parse_checksum(p.opts["checksum"]); c) {
    mopts.checksum = *c;
  } else {
    return usage_error(cmd, "--checksum: " + c.status().message());
  }
  mopts.pattern = p.opts["pattern"];
  // Before discovery, which would only say that HTTP has no listing.
  if (Status st = check_manifest_writable(p.positional[0]); !st) return fail(cmd, st.message());
  Result<Source> src = Source::parse(p.positional[0], mopts.pattern);
  if (!src) return source_error(cmd, src.status());
  if (src->kind != Source::Kind::kDirectory) {
    return fail(cmd, path_for_message(p.positional[0]) +
                         ": a manifest is written into the directory of the shards; give that "
                         "directory (with --pattern for another numbering)");
  }
  auto layout = steps.discover(p.positional[0], mopts.pattern, *src, opts);
  if (!layout) {
    if (auto rc = check_type_options_after_failure(cmd, p.opts, *src, opts)) return *rc;
    return fail(cmd, layout.status().message());
  }
  if (auto rc = check_type_options(cmd, p.opts, layout->format)) return *rc;
  // The checksums read every byte of every shard: the part that runs long.
  std::uint64_t bytes = 0;
  for (const auto& s : layout->shards) bytes += s.snapshot.size;
  TerminalBar bar("index", bytes, static_cast<std::int64_t>(layout->shards.size()), "shards",
                  mopts.checksum != Checksum::kNone && stderr_is_terminal());
  CountingIo counting(&bar);
  if (bar.on() && steps.takes_io) mopts.io = &counting;
  IoTicker ticker(steps.takes_io ? nullptr : &bar, false);
  auto written = steps.write(*layout, src->dir_path, mopts);
  ticker.stop();
  if (!written) {
    bar.clear();
    return fail(cmd, "indexing " + src->describe() + ": " + written.status().message());
  }
  bar.finish();
  std::cout << "wrote " << printable_redacted(*written) << ": " << layout->shards.size()
            << " shards, " << layout->total_rows() << " rows, checksums "
            << checksum_name(mopts.checksum) << "\n";
  return 0;
}

}  // namespace shardload::cli
