#include "shardload/layout.hpp"

#include <sstream>

#include "shardload/detail/checked.hpp"
#include "shardload/npy.hpp"

namespace shardload {

const char* format_name(Format f) {
  switch (f) {
    case Format::kNpy: return "npy";
  }
  return "unknown";
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += std::to_string(shape[i]);
    if (i + 1 < shape.size() || shape.size() == 1) s += ",";
    if (i + 1 < shape.size()) s += " ";
  }
  return s + ")";
}

std::vector<std::int64_t> Layout::shape() const {
  std::vector<std::int64_t> s{total_rows()};
  s.insert(s.end(), trailing_shape.begin(), trailing_shape.end());
  return s;
}

std::vector<std::int64_t> Layout::rows() const {
  std::vector<std::int64_t> r;
  r.reserve(shards.size());
  for (const auto& s : shards) r.push_back(s.rows);
  return r;
}

Result<Layout> assemble_layout(Format format, DType dtype, std::vector<std::int64_t> trailing,
                               std::vector<Shard> shards) {
  Layout l;
  l.format = format;
  l.dtype = dtype;
  l.trailing_shape = std::move(trailing);
  std::uint64_t row_bytes = dtype.size;
  for (const auto d : l.trailing_shape) {
    if (d < 0 || !detail::checked_mul(row_bytes, static_cast<std::uint64_t>(d), &row_bytes)) {
      return Status(ErrorCode::kLayout, "trailing shape " + shape_string(l.trailing_shape) +
                                            ": the row size overflows 64 bits");
    }
  }
  l.row_bytes = row_bytes;
  l.offsets.reserve(shards.size() + 1);
  l.offsets.push_back(0);
  std::int64_t total = 0;
  for (const auto& s : shards) {
    std::uint64_t bytes = 0;
    if (s.rows < 0 || !detail::checked_add(total, s.rows, &total) ||
        !detail::checked_mul(static_cast<std::uint64_t>(total), row_bytes, &bytes) ||
        bytes > static_cast<std::uint64_t>(INT64_MAX)) {
      return Status(ErrorCode::kLayout,
                    s.path + ": rows: the dataset size overflows 64 bits at this shard");
    }
    l.offsets.push_back(total);
  }
  l.shards = std::move(shards);
  return l;
}

Result<Layout> discover_paths(const std::vector<std::string>& paths,
                              const DiscoverOptions& options) {
  if (paths.empty()) return Status(ErrorCode::kLayout, "no shards to load");
  IoBackend& io = options.io != nullptr ? *options.io : posix_io();
  std::vector<Shard> shards;
  shards.reserve(paths.size());
  DType dtype;
  std::vector<std::int64_t> trailing;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    Shard s;
    s.path = paths[i];
    auto h = probe_npy(io, s.path, &s.snapshot);
    if (!h) {
      // At discovery every failure is a layout failure, whatever its cause.
      return Status(ErrorCode::kLayout, h.status().message());
    }
    std::vector<std::int64_t> tr(h->shape.begin() + 1, h->shape.end());
    if (i == 0) {
      dtype = h->dtype;
      trailing = tr;
    } else if (h->dtype != dtype) {
      return Status(ErrorCode::kLayout, s.path + ": dtype " + h->dtype.name() + " differs from " +
                                            dtype.name() + " of " + paths[0]);
    } else if (tr != trailing) {
      return Status(ErrorCode::kLayout, s.path + ": trailing shape " + shape_string(tr) +
                                            " differs from " + shape_string(trailing) + " of " +
                                            paths[0]);
    }
    s.rows = h->shape[0];
    s.data_offset = h->data_offset;
    s.byte_swap = h->dtype.size > 1 && h->big_endian == host_is_little_endian();
    // A Fortran-ordered array with at most one dimension longer than 1 has
    // the same bytes as the C-ordered one; treat it as C to read it directly.
    int long_dims = 0;
    for (const auto d : h->shape) long_dims += d > 1 ? 1 : 0;
    s.fortran_order = h->fortran_order && long_dims > 1;
    shards.push_back(std::move(s));
  }
  return assemble_layout(Format::kNpy, dtype, std::move(trailing), std::move(shards));
}

Result<Layout> discover(const Source& source, const DiscoverOptions& options) {
  SHARDLOAD_ASSIGN_OR_RETURN(auto paths, resolve(source));
  return discover_paths(paths, options);
}

std::string describe(const Layout& l, std::size_t edge) {
  std::ostringstream o;
  const std::size_t n = l.shards.size();
  o << "format:         " << format_name(l.format) << "\n";
  o << "shards:         " << n << "\n";
  o << "dtype:          " << l.dtype.name() << "\n";
  o << "trailing shape: " << shape_string(l.trailing_shape) << "\n";
  o << "total rows:     " << l.total_rows() << "\n";
  o << "shape:          " << shape_string(l.shape()) << "\n";
  o << "bytes:          " << l.total_bytes() << "\n";
  o << "rows per shard:\n";
  for (std::size_t i = 0; i < n; ++i) {
    if (n > 2 * edge && i == edge) {
      o << "  ... (" << (n - 2 * edge) << " more)\n";
      i = n - edge - 1;
      continue;
    }
    o << "  [" << i << "] " << l.shards[i].path << ": " << l.shards[i].rows << "\n";
  }
  return o.str();
}

}  // namespace shardload
