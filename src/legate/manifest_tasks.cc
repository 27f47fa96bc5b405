// The manifest's tasks: verify (one point per group of shards) and discovery once per job
// (one point), with their launchers.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <span>

#include "base/detail/bytes.hpp"
#include "legate/detail/launch.hpp"
#include "legate/detail/load_body.hpp"
#include "legate/detail/point_task.hpp"
#include "legate/detail/tasks.hpp"
#include "shardload/codec.hpp"
#include "shardload/legate.hpp"
#include "shardload/manifest_legate.hpp"

namespace shardload {

namespace {

enum VerifyCode : std::uint8_t { kMatch = 0, kMismatch = 1, kUnreadable = 2 };

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::string string_of(const legate::Scalar& s) {
  return {static_cast<const char*>(s.ptr()), s.size()};
}

void put_str(std::vector<std::uint8_t>& out, const std::string& s) {
  detail::put_varint(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Reads what put_str wrote at *pos; false when the bytes run out.
bool get_str(std::span<const std::uint8_t> b, std::size_t* pos, std::string* s) {
  std::uint64_t v = 0;
  if (!detail::get_varint(b, pos, &v) || v > b.size() - *pos) return false;
  s->assign(reinterpret_cast<const char*>(b.data() + *pos), static_cast<std::size_t>(v));
  *pos += static_cast<std::size_t>(v);
  return true;
}

// The request of discover_once: source, pattern, the manifest flags, the probe threads and the
// format options in the codec's encoding of options alone.
constexpr std::uint8_t kTrustManifest = 1;
constexpr std::uint8_t kIgnoreManifest = 2;

std::vector<std::uint8_t> encode_request(const std::string& source, const std::string& pattern,
                                         const DiscoverOptions& options) {
  std::vector<std::uint8_t> out;
  put_str(out, source);
  put_str(out, pattern);
  out.push_back(static_cast<std::uint8_t>((options.trust_manifest ? kTrustManifest : 0) |
                                          (options.use_manifest ? 0 : kIgnoreManifest)));
  detail::put_varint(out, options.probe_threads);
  const auto enc = encode_format_options(options.format);
  out.insert(out.end(), enc.begin(), enc.end());
  return out;
}

Status decode_request(std::span<const std::uint8_t> b, std::string* source, std::string* pattern,
                      DiscoverOptions* options) {
  std::size_t pos = 0;
  std::uint64_t threads = 0;
  if (!get_str(b, &pos, source) || !get_str(b, &pos, pattern) || pos >= b.size()) {
    return Status(ErrorCode::kInvalidArgument, "discover task: malformed request");
  }
  const std::uint8_t flags = b[pos++];
  if ((flags & ~(kTrustManifest | kIgnoreManifest)) != 0 ||
      !detail::get_varint(b, &pos, &threads) || threads > std::numeric_limits<unsigned>::max()) {
    return Status(ErrorCode::kInvalidArgument, "discover task: malformed request");
  }
  options->trust_manifest = (flags & kTrustManifest) != 0;
  options->use_manifest = (flags & kIgnoreManifest) == 0;
  options->probe_threads = static_cast<unsigned>(threads);
  auto format = decode_format_options(b.subspan(pos));
  if (!format) return format.status().with_context("discover task: request");
  options->format = std::move(format).value();
  return Status::ok();
}

// The request of write_manifest_once: directory, pattern, checksum, then the encoded layout.
std::vector<std::uint8_t> encode_write_request(const Layout& layout, const std::string& directory,
                                               const ManifestOptions& options) {
  std::vector<std::uint8_t> out;
  put_str(out, directory);
  put_str(out, options.pattern);
  out.push_back(static_cast<std::uint8_t>(options.checksum));
  const auto enc = encode_layout(layout);
  out.insert(out.end(), enc.begin(), enc.end());
  return out;
}

}  // namespace

namespace detail {

void VerifyManifestTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const legate::PhysicalStore codes = context.output(0).data();
    const legate::PhysicalStore found = context.output(1).data();
    const legate::Rect<1> rect = codes.shape<1>();
    if (rect.empty()) return;
    const std::string path = string_of(context.scalar(0));
    const auto hash = context.scalar(1).value<std::uint64_t>();
    auto m = read_manifest(path);
    if (!m) throw_task_error(m.status());
    if (m->container_hash != hash) {
      throw_task_error(file_error(ErrorCode::kChanged, path,
                                  "the manifest changed while it was being verified"));
    }
    const auto code_acc = codes.write_accessor<std::uint8_t, 1>();
    const auto found_acc = found.write_accessor<std::uint64_t, 1>();
    for (legate::coord_t i = rect.lo[0]; i <= rect.hi[0]; ++i) {
      const std::string& shard = m->layout.shards[static_cast<std::size_t>(i)].path;
      auto h = file_checksum(shard, m->checksum, posix_io());
      if (!h) {
        code_acc[i] = kUnreadable;
        found_acc[i] = static_cast<std::uint64_t>(h.status().sys_errno());
      } else {
        code_acc[i] = *h == m->checksums[static_cast<std::size_t>(i)] ? kMatch : kMismatch;
        found_acc[i] = *h;
      }
    }
  });
}

void DiscoverTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const legate::Scalar request = context.scalar(0);
    std::string source;
    std::string pattern;
    DiscoverOptions options;
    const Status st =
        decode_request(std::span(static_cast<const std::uint8_t*>(request.ptr()), request.size()),
                       &source, &pattern, &options);
    if (!st) throw_task_error(st);
    auto src = Source::parse(source, pattern);
    if (!src) throw_task_error(src.status().with_context("loading " + source));
    auto layout = try_discover(*src, options);
    if (!layout) throw_task_error(layout.status().with_context("loading " + src->describe()));
    std::vector<std::uint8_t> out;
    put_str(out, layout->manifest_status);
    put_str(out, manifest_state_name(layout->manifest_state));
    const auto enc = encode_layout(*layout);
    out.insert(out.end(), enc.begin(), enc.end());
    detail::write_point_result(context, out);
  });
}

void WriteManifestTask::cpu_variant(legate::TaskContext context) {
  run_task_body([&] {
    const legate::Scalar request = context.scalar(0);
    const std::span b(static_cast<const std::uint8_t*>(request.ptr()), request.size());
    std::string directory;
    ManifestOptions options;
    std::size_t pos = 0;
    if (!get_str(b, &pos, &directory) || !get_str(b, &pos, &options.pattern) || pos >= b.size() ||
        b[pos] > static_cast<std::uint8_t>(Checksum::kXxh3)) {
      throw_task_error({ErrorCode::kInvalidArgument, "write manifest task: malformed request"});
    }
    options.checksum = static_cast<Checksum>(b[pos++]);
    auto layout = decode_layout(b.subspan(pos));
    if (!layout) throw_task_error(layout.status().with_context("write manifest task: request"));
    auto written = write_manifest(*layout, directory, options);
    if (!written) throw_task_error(written.status());
    detail::write_point_result(context, bytes_of(*written));
  });
}

}  // namespace detail

namespace {

const std::uint8_t* element(const legate::InlineAllocation& a, std::size_t i) {
  return static_cast<const std::uint8_t*>(a.ptr) + i * a.strides[0];
}

}  // namespace

VerifyReport verify_manifest(const std::string& manifest_path, std::int64_t groups) {
  auto m = read_manifest(manifest_path);
  if (!m) throw_status(m.status(), ErrorSite::kDiscover);
  if (m->checksum == Checksum::kNone) {
    throw_status(
        file_error(ErrorCode::kLayout, manifest_path,
                   "the manifest holds no checksums; index the directory again with checksum xxh3"),
        ErrorSite::kDiscover);
  }
  VerifyReport report;
  const std::size_t n = m->layout.shards.size();
  report.shards = n;
  if (n == 0) return report;
  auto* runtime = legate::Runtime::get_runtime();
  const legate::Library lib = library();
  if (groups <= 0) {
    groups = 4 * std::max<std::int64_t>(1, static_cast<std::int64_t>(runtime->get_machine().count(
                                               legate::mapping::TaskTarget::CPU)));
  }
  groups = std::min<std::int64_t>(groups, static_cast<std::int64_t>(n));
  const std::uint64_t per =
      (n + static_cast<std::uint64_t>(groups) - 1) / static_cast<std::uint64_t>(groups);
  groups = static_cast<std::int64_t>((n + per - 1) / per);
  report.groups = groups;
  const legate::Shape shape{static_cast<std::uint64_t>(n)};
  auto codes = runtime->create_store(shape, legate::uint8());
  auto found = runtime->create_store(shape, legate::uint64());
  auto task =
      runtime->create_task(lib, detail::VerifyManifestTask::TASK_CONFIG.task_id(),
                           legate::tuple<std::uint64_t>{static_cast<std::uint64_t>(groups)});
  task.add_output(codes.partition_by_tiling({per}));
  task.add_output(found.partition_by_tiling({per}));
  task.add_scalar_arg(legate::Scalar{bytes_of(manifest_path)});
  task.add_scalar_arg(legate::Scalar{m->container_hash});
  detail::submit_or_throw(std::move(task), ErrorSite::kDiscover);
  const auto codes_phys = codes.get_physical_store();
  const auto found_phys = found.get_physical_store();
  const legate::InlineAllocation ca = codes_phys.get_inline_allocation();
  const legate::InlineAllocation fa = found_phys.get_inline_allocation();
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t code = *element(ca, i);
    if (code == kMatch) continue;
    std::uint64_t value = 0;
    std::memcpy(&value, element(fa, i), sizeof value);
    ChecksumMismatch mm{i, m->layout.shards[i].path, {}};
    if (code == kMismatch) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s 0x%016llx expected, found 0x%016llx",
                    checksum_name(m->checksum), static_cast<unsigned long long>(m->checksums[i]),
                    static_cast<unsigned long long>(value));
      mm.what = buf;
    } else {
      mm.what = value != 0
                    ? std::string("cannot be read: ") + std::strerror(static_cast<int>(value))
                    : std::string("cannot be read (not a regular file?)");
    }
    report.mismatches.push_back(std::move(mm));
  }
  // A shard added after indexing has no checksum to fail, yet discovery of the directory
  // reads it: verify says so, as discovery calls the manifest stale for it.
  auto added = add_listing_mismatches(*m, &report.mismatches);
  if (!added) throw_status(added.status(), ErrorSite::kDiscover);
  report.added = *added;
  return report;
}

Layout discover_once(const std::string& source, const std::string& pattern,
                     const FormatOptions& format, bool trust_manifest) {
  DiscoverOptions options;
  options.format = format;
  options.trust_manifest = trust_manifest;
  return discover_once(source, pattern, options);
}

Layout discover_once(const std::string& source, const std::string& pattern,
                     const DiscoverOptions& options) {
  if (options.io != nullptr) {
    // A pointer into this process means nothing to the rank whose point discovers.
    throw_status({ErrorCode::kInvalidArgument,
                  "discover_once: DiscoverOptions::io cannot travel to the discovering point "
                  "task; leave it null (the task reads through posix_io())"});
  }
  std::vector<std::uint8_t> bytes;
  try {
    bytes = detail::run_point_task(detail::DiscoverTask::TASK_CONFIG.task_id(),
                                   encode_request(source, pattern, options));
  } catch (const legate::TaskException& e) {
    throw_status(detail::status_from_task_error(e), ErrorSite::kDiscover);
  }
  std::string status;
  std::string state_name;
  std::size_t pos = 0;
  std::optional<ManifestState> state;
  if (!get_str(bytes, &pos, &status) || !get_str(bytes, &pos, &state_name) ||
      !(state = parse_manifest_state(state_name))) {
    throw LayoutError("discover task: malformed result");
  }
  auto layout = decode_layout(std::span(bytes).subspan(pos));
  if (!layout)
    throw_status(layout.status().with_context("discover task: result"), ErrorSite::kDiscover);
  layout->manifest_status = std::move(status);
  layout->manifest_state = *state;
  return std::move(layout).value();
}

std::string write_manifest_once(const Layout& layout, const std::string& directory,
                                const ManifestOptions& options) {
  if (options.io != nullptr) {
    throw_status({ErrorCode::kInvalidArgument,
                  "write_manifest_once: ManifestOptions::io cannot travel to the writing point "
                  "task; leave it null (the task reads through posix_io())"});
  }
  try {
    const auto bytes = detail::run_point_task(detail::WriteManifestTask::TASK_CONFIG.task_id(),
                                              encode_write_request(layout, directory, options));
    return {bytes.begin(), bytes.end()};
  } catch (const legate::TaskException& e) {
    throw_status(detail::status_from_task_error(e), ErrorSite::kDiscover);
  }
}

}  // namespace shardload
