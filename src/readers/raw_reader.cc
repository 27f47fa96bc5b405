// The raw binary reader: files of bare rows after an optional fixed header.
//
// A raw file says nothing about itself, so the dtype, the trailing shape and
// the header size come from the options or from a sidecar JSON file,
// `shardload.json`, in the shards' directory:
//
//   {"dtype": "<f4", "shape": [3, 4], "header_bytes": 16,
//    "rows": [100, 0, 57]  or  {"shard_0000.bin": 100, ...}}
//
// An option and the sidecar must agree when both give a value (a mismatch is
// an error naming both): silently preferring one would hide a stale sidecar
// or a wrong call. The rows of a file always follow from its size, which must
// be exactly header + a whole number of rows; sidecar rows are a check on it.
// Deriving rows as size / row_bytes would drop trailing bytes silently.
//
// A directory without shardload.json may hold the seed recipe's sidecar,
// `shard_meta.json`, read the same way and as strictly:
//
//   {"dtype": "float32", "trailing_shape": [3, 4],
//    "rows_per_shard": [100, 0, 57]  or  100 (every shard)}
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "base/detail/checked.hpp"
#include "base/detail/json.hpp"
#include "base/detail/links.hpp"
#include "readers/detail/object_layout.hpp"
#include "readers/detail/readers.hpp"
#include "readers/detail/write_files.hpp"
#include "shardload/byte_order.hpp"
#include "shardload/location.hpp"

namespace shardload::detail {

namespace {

constexpr const char* kSidecarName = "shardload.json";
constexpr const char* kSeedSidecarName = "shard_meta.json";
constexpr std::uint64_t kMaxSidecarBytes = std::uint64_t{64} << 20;

std::string parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dtype_with_order(DType d, bool big) {
  return d.size == 1 ? d.name() : d.name() + (big ? " (big-endian)" : " (little-endian)");
}

struct Sidecar {
  std::string path;
  std::optional<DType> dtype;
  bool big_endian = !host_is_little_endian();
  std::optional<std::vector<std::int64_t>> shape;
  std::optional<std::uint64_t> header_bytes;
  std::optional<std::vector<std::int64_t>> rows_list;           // in shard order
  std::optional<std::map<std::string, std::int64_t>> rows_map;  // by file name
  std::optional<std::int64_t> rows_each;                        // every shard (seed)
  const char* rows_field = "rows";  // as the file spells it, for messages
  std::size_t next_index = 0;       // the next shard of this directory, for rows_list
};

// "dtype" of either sidecar: a numpy dtype string, its byte order kept.
Status read_sidecar_dtype(const std::string& path, const Json& j, Sidecar* s) {
  auto it = j.find("dtype");
  if (it == j.end()) return Status::ok();
  SHARDLOAD_ASSIGN_OR_RETURN(const std::string name, json_string(path, "dtype", *it));
  bool big = false;
  auto d = parse_dtype(name, &big);
  if (!d) return Status(ErrorCode::kFormat, path + ": dtype: " + d.status().message());
  s->dtype = *d;
  s->big_endian = big;
  return Status::ok();
}

Result<Sidecar> parse_sidecar(const std::string& path, const std::string& text) {
  SHARDLOAD_ASSIGN_OR_RETURN(const Json j, parse_json_object(path, text));
  SHARDLOAD_RETURN_IF_ERROR(
      json_only_keys(path, "", j, {"dtype", "shape", "rows", "header_bytes"}));
  Sidecar s;
  s.path = path;
  SHARDLOAD_RETURN_IF_ERROR(read_sidecar_dtype(path, j, &s));
  if (auto it = j.find("shape"); it != j.end()) {
    SHARDLOAD_ASSIGN_OR_RETURN(s.shape, json_shape(path, "shape", *it));
  }
  if (auto it = j.find("header_bytes"); it != j.end()) {
    SHARDLOAD_ASSIGN_OR_RETURN(const std::int64_t h, json_nonneg_int(path, "header_bytes", *it));
    s.header_bytes = static_cast<std::uint64_t>(h);
  }
  if (auto it = j.find("rows"); it != j.end()) {
    if (it->is_array()) {
      SHARDLOAD_ASSIGN_OR_RETURN(s.rows_list, json_shape(path, "rows", *it));
    } else if (it->is_object()) {
      std::map<std::string, std::int64_t> m;
      for (const auto& item : it->items()) {
        SHARDLOAD_ASSIGN_OR_RETURN(const std::int64_t r,
                                   json_nonneg_int(path, "rows." + item.key(), item.value()));
        m.emplace(item.key(), r);
      }
      s.rows_map = std::move(m);
    } else {
      return json_error(path, "rows", "a list of rows per shard or an object {\"file name\": rows}",
                        *it);
    }
  }
  return s;
}

// The seed's sidecar: its own field names, the same checks (unknown keys refused, every
// error naming the file and field).
Result<Sidecar> parse_seed_sidecar(const std::string& path, const std::string& text) {
  SHARDLOAD_ASSIGN_OR_RETURN(const Json j, parse_json_object(path, text));
  SHARDLOAD_RETURN_IF_ERROR(
      json_only_keys(path, "", j, {"dtype", "trailing_shape", "rows_per_shard"}));
  Sidecar s;
  s.path = path;
  s.rows_field = "rows_per_shard";
  SHARDLOAD_RETURN_IF_ERROR(read_sidecar_dtype(path, j, &s));
  if (auto it = j.find("trailing_shape"); it != j.end()) {
    SHARDLOAD_ASSIGN_OR_RETURN(s.shape, json_shape(path, "trailing_shape", *it));
  }
  if (auto it = j.find("rows_per_shard"); it != j.end()) {
    if (it->is_array()) {
      SHARDLOAD_ASSIGN_OR_RETURN(s.rows_list, json_shape(path, "rows_per_shard", *it));
    } else if (it->is_number_integer() || it->is_number_unsigned()) {
      SHARDLOAD_ASSIGN_OR_RETURN(s.rows_each, json_nonneg_int(path, "rows_per_shard", *it));
    } else {
      return json_error(path, "rows_per_shard",
                        "a list of rows per shard or one int for every shard", *it);
    }
  }
  return s;
}

// The text of a shardload.json holding what `s` holds (its list of rows, if any): what
// parse_sidecar reads back as `s`.
std::string sidecar_text(const Sidecar& s) {
  std::vector<std::string> fields;
  if (s.dtype) {
    const char order = s.dtype->size == 1 ? '|' : s.big_endian ? '>' : '<';
    fields.push_back("\"dtype\": \"" + std::string(1, order) + s.dtype->code() + "\"");
  }
  if (s.shape) fields.push_back("\"shape\": " + json_int_list(*s.shape));
  if (s.header_bytes) {
    fields.push_back("\"header_bytes\": " + std::to_string(*s.header_bytes));
  }
  if (s.rows_list) fields.push_back("\"rows\": " + json_int_list(*s.rows_list));
  std::string text = "{";
  for (std::size_t i = 0; i < fields.size(); ++i) text += (i ? ", " : "") + fields[i];
  return text + "}\n";
}

class RawReader final : public ShardReader {
 public:
  RawReader(const FormatOptions& options, const ReaderContext& ctx)
      : options_(options), ctx_(ctx), sidecars_(std::make_shared<Sidecars>()) {}

  // Another thread's reader with this one's sidecars: one GET of a directory's sidecar for a
  // whole discovery, not one per probe thread.
  std::unique_ptr<ShardReader> sibling() override {
    auto r = std::make_unique<RawReader>(options_, ctx_);
    r->sidecars_ = sidecars_;
    return r;
  }

  Result<ShardProbe> probe(const std::string& path) override {
    return probe_impl(path, std::nullopt);
  }

  Result<ShardProbe> probe_at(const std::string& path, std::size_t position) override {
    return probe_impl(path, position);
  }

 private:
  // `position`: the shard's among its directory's (for the sidecar's "rows" list); without
  // it, the shards of a directory are counted in the order this reader probes them.
  Result<ShardProbe> probe_impl(const std::string& path, std::optional<std::size_t> position) {
    ShardProbe p;
    p.shard.path = path;
    SHARDLOAD_ASSIGN_OR_RETURN(Sidecar * side, sidecar_for(path));
    SHARDLOAD_ASSIGN_OR_RETURN(const Geometry g, geometry(path, side));
    p.dtype = g.dtype;
    p.trailing_shape = g.trailing_shape;

    SHARDLOAD_ASSIGN_OR_RETURN(File f, ctx_.source->open_stat(path, &p.shard.snapshot));
    if (!p.shard.snapshot.regular) return Status(ErrorCode::kFormat, path + ": not a regular file");
    const std::uint64_t size = p.shard.snapshot.size;
    SHARDLOAD_ASSIGN_OR_RETURN(const std::optional<std::int64_t> rows_by_size,
                               rows_from_size(path, size, g));
    SHARDLOAD_ASSIGN_OR_RETURN(const std::optional<std::int64_t> rows_by_sidecar,
                               rows_from_sidecar(path, side, position));
    if (rows_by_sidecar && rows_by_size && *rows_by_sidecar != *rows_by_size) {
      return Status(ErrorCode::kFormat,
                    path + ": rows: " + side->path + " says " + std::to_string(*rows_by_sidecar) +
                        " rows, but the file's size " + std::to_string(size) + " holds " +
                        std::to_string(*rows_by_size) + " (" + g.describe() + ")");
    }
    if (!rows_by_size && !rows_by_sidecar) {
      return Status(ErrorCode::kFormat, path +
                                            ": rows of 0 bytes: the row count cannot follow "
                                            "from the file size; give \"rows\" in " +
                                            parent_dir(path) + "/" + kSidecarName);
    }
    p.shard.rows = rows_by_size ? *rows_by_size : *rows_by_sidecar;
    p.shard.data_offset = g.header;
    p.shard.byte_swap = p.dtype.size > 1 && g.big == host_is_little_endian();
    return p;
  }

 public:
  Status read_rows(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override {
    const std::size_t bytes = static_cast<std::size_t>(hi - lo) * l.row_bytes;
    if (bytes == 0) return Status::ok();
    SHARDLOAD_ASSIGN_OR_RETURN(const File* fp, open_.get(*ctx_.source, s, ctx_.check_snapshot));
    const File& f = *fp;
    const std::uint64_t off = s.data_offset + static_cast<std::uint64_t>(lo) * l.row_bytes;
    Status read = f.read_exact(dst, bytes, off);
    if (ctx_.check_snapshot && ctx_.check_each_read) {
      read = check_unchanged(f, s.snapshot, std::move(read));
    }
    if (!read.is_ok()) {
      open_.reset();
      return read;
    }
    if (s.byte_swap) byte_swap(dst, bytes / l.dtype.swap_unit(), l.dtype.swap_unit());
    return Status::ok();
  }

 private:
  // What a raw file's bytes are, from the options and the directory's sidecar, which must
  // agree where both say something.
  struct Geometry {
    DType dtype;
    bool big = false;  // stored big-endian
    std::vector<std::int64_t> trailing_shape;
    std::uint64_t header = 0;
    std::uint64_t footer = 0;  // the footer_bytes option; no sidecar gives one
    std::uint64_t row_bytes = 0;

    [[nodiscard]] std::string describe() const {
      return "header " + std::to_string(header) + " + rows of " + std::to_string(row_bytes) +
             " bytes (" + dtype_with_order(dtype, big) + ", row shape " +
             shape_string(trailing_shape) + ")" +
             (footer > 0 ? " + footer " + std::to_string(footer) : std::string());
    }
  };

  Result<Geometry> geometry(const std::string& path, const Sidecar* side) const {
    Geometry g;
    // dtype and byte order. An order spelled in the dtype option ("<f4")
    // must agree with the sidecar's; otherwise the sidecar's order applies
    // (native when there is no sidecar).
    g.big = !host_is_little_endian();
    if (side != nullptr) g.big = side->big_endian;
    if (options_.big_endian) {
      if (side != nullptr && side->dtype && side->big_endian != *options_.big_endian) {
        return Status(ErrorCode::kFormat,
                      side->path + ": dtype: byte order " + (side->big_endian ? "big" : "little") +
                          "-endian differs from the " + (*options_.big_endian ? "big" : "little") +
                          "-endian of " + option_mention("dtype"));
      }
      g.big = *options_.big_endian;
    }
    if (options_.dtype && side != nullptr && side->dtype && *options_.dtype != *side->dtype) {
      return Status(ErrorCode::kFormat, side->path + ": dtype: " + side->dtype->name() +
                                            " differs from " + option_mention("dtype", true) +
                                            options_.dtype->name());
    }
    if (options_.dtype) {
      g.dtype = *options_.dtype;
    } else if (side != nullptr && side->dtype) {
      g.dtype = *side->dtype;
    } else {
      return Status(ErrorCode::kFormat, path + ": raw files need a dtype: pass " +
                                            option_mention("dtype") + " or write \"dtype\" in " +
                                            parent_dir(path) + "/" + kSidecarName);
    }

    if (options_.trailing_shape && side != nullptr && side->shape &&
        *options_.trailing_shape != *side->shape) {
      return Status(ErrorCode::kFormat, side->path + ": shape: " + shape_string(*side->shape) +
                                            " differs from " +
                                            option_mention("trailing_shape", true) +
                                            shape_string(*options_.trailing_shape));
    }
    if (options_.trailing_shape) {
      g.trailing_shape = *options_.trailing_shape;
    } else if (side != nullptr && side->shape) {
      g.trailing_shape = *side->shape;
    } else {
      return Status(ErrorCode::kFormat, path +
                                            ": raw files need the trailing shape of a row: pass " +
                                            option_mention("trailing_shape") +
                                            " (empty for 1-D data) or write \"shape\" in " +
                                            parent_dir(path) + "/" + kSidecarName);
    }

    if (options_.header_bytes && side != nullptr && side->header_bytes &&
        *options_.header_bytes != *side->header_bytes) {
      return Status(ErrorCode::kFormat,
                    side->path + ": header_bytes: " + std::to_string(*side->header_bytes) +
                        " differs from " + option_mention("header_bytes", true) +
                        std::to_string(*options_.header_bytes));
    }
    if (options_.header_bytes) {
      g.header = *options_.header_bytes;
    } else if (side != nullptr && side->header_bytes) {
      g.header = *side->header_bytes;
    }
    g.footer = options_.footer_bytes.value_or(0);

    g.row_bytes = g.dtype.size;
    for (const auto d : g.trailing_shape) {
      if (!checked_mul(g.row_bytes, static_cast<std::uint64_t>(d), &g.row_bytes)) {
        return Status(ErrorCode::kFormat, path + ": the row size of trailing shape " +
                                              shape_string(g.trailing_shape) +
                                              " overflows 64 bits");
      }
    }

    return g;
  }

  // The rows the file's size holds after the header; nullopt for rows of 0 bytes, whose
  // count the size cannot tell.
  static Result<std::optional<std::int64_t>> rows_from_size(const std::string& path,
                                                            std::uint64_t size, const Geometry& g) {
    const std::uint64_t header = g.header;
    const std::uint64_t row_bytes = g.row_bytes;
    const std::string geometry = g.describe();
    if (size < header) {
      return Status(ErrorCode::kFormat, path + ": size: " + std::to_string(size) +
                                            " bytes is shorter than the header of " +
                                            std::to_string(header) + " bytes (truncated)");
    }
    if (size - header < g.footer) {
      return Status(ErrorCode::kFormat, path + ": size: " + std::to_string(size) +
                                            " bytes is shorter than the header of " +
                                            std::to_string(header) + " bytes and the footer of " +
                                            std::to_string(g.footer) + " bytes (truncated)");
    }
    const std::uint64_t data = size - header - g.footer;
    std::optional<std::int64_t> rows_by_size;
    if (row_bytes == 0) {
      if (data != 0) {
        return Status(ErrorCode::kFormat, path + ": size: " + std::to_string(size) +
                                              " bytes, but rows of 0 bytes leave no room for data "
                                              "after the header of " +
                                              std::to_string(header) + " bytes" +
                                              (g.footer > 0 ? " and before the footer" : ""));
      }
    } else {
      if (data % row_bytes != 0) {
        return Status(ErrorCode::kFormat,
                      path + ": size: " + std::to_string(size) + " bytes is not " + geometry +
                          ": " + std::to_string(data / row_bytes) + " whole rows and " +
                          std::to_string(data % row_bytes) +
                          " bytes left over (truncated, or the wrong dtype, shape or header)");
      }
      if (data / row_bytes > static_cast<std::uint64_t>(INT64_MAX)) {
        return Status(ErrorCode::kFormat, path + ": size: too many rows");
      }
      rows_by_size = static_cast<std::int64_t>(data / row_bytes);
    }

    return rows_by_size;
  }

  // The rows the sidecar gives this file, by position ("rows": [...]) or by name; nullopt
  // when it gives none.
  static Result<std::optional<std::int64_t>> rows_from_sidecar(
      const std::string& path, Sidecar* side, std::optional<std::size_t> position) {
    std::optional<std::int64_t> rows_by_sidecar;
    if (side != nullptr && side->rows_list) {
      const std::size_t i = position ? *position : side->next_index++;
      if (i >= side->rows_list->size()) {
        return Status(ErrorCode::kFormat, side->path + ": " + side->rows_field + ": lists " +
                                              std::to_string(side->rows_list->size()) +
                                              " shards, but " + path + " is shard " +
                                              std::to_string(i + 1) + " of that directory");
      }
      rows_by_sidecar = (*side->rows_list)[i];
    } else if (side != nullptr && side->rows_map) {
      const auto it = side->rows_map->find(base_name(path));
      if (it == side->rows_map->end()) {
        return Status(ErrorCode::kFormat,
                      side->path + ": rows: no entry for '" + base_name(path) + "' (" + path + ")");
      }
      rows_by_sidecar = it->second;
    } else if (side != nullptr && side->rows_each) {
      rows_by_sidecar = side->rows_each;
    }
    return rows_by_sidecar;
  }

  // The sidecar of a directory, read once per reader (nullptr: none there): shardload.json,
  // else the seed's shard_meta.json.
  // The sidecar of the shard at `shard_path`, from its directory. Beside objects in object
  // storage it is an object too, asked for with the shard URL's query (the store's options).
  Result<Sidecar*> sidecar_for(const std::string& shard_path) {
    // In a flat key space the open's own request answers whether the sidecar is there.
    const bool remote = ctx_.source->traits(shard_path).flat_keys;
    const auto [shard_name, query] = split_options(shard_path);
    const std::string dir = parent_dir(shard_name);
    // Held while the sidecar is fetched: a sibling asking for the same one waits for it.
    std::lock_guard lock(sidecars_->mu);
    // Keyed as probe_shards counts positions, so that a sidecar and the positions in its
    // "rows" list always agree on what one directory is: the one the kernel resolves, asked
    // once per spelling.
    auto [spelled, fresh] = sidecars_->key_of.try_emplace(directory_key(shard_path));
    if (fresh) {
      spelled->second = ctx_.source->traits(shard_path).kernel_files
                            ? detail::resolved_directory_key(spelled->first)
                            : spelled->first;
    }
    const std::string& key = spelled->second;
    auto& by_dir = sidecars_->by_dir;
    auto it = by_dir.find(key);
    if (it != by_dir.end()) return it->second ? &*it->second : nullptr;
    for (const char* name : {kSidecarName, kSeedSidecarName}) {
      const std::string path = dir + "/" + name + query;
      Result<std::string> text = std::string();
      if (remote) {
        // Its GET alone (a look-up first would be a second round trip, asked again by the
        // reader of every probe thread): a 404 is no sidecar.
        text = ctx_.source->read_small(path, kMaxSidecarBytes, nullptr);
        if (!text && text.status().sys_errno() == ENOENT) continue;
        if (!text && text.status().code() == ErrorCode::kIo) {
          return Status(ErrorCode::kIo,
                        path + ": cannot look up the sidecar (" + text.status().message() + ")");
        }
      } else {
        if (const auto st = ctx_.source->stat(path); !st) {
          const int err = st.status().sys_errno() != 0 ? st.status().sys_errno() : EIO;
          if (err != ENOENT) {
            return Status(ErrorCode::kIo,
                          path + ": cannot stat the sidecar (" + std::strerror(err) + ")");
          }
          if (ctx_.source->traits(path).kernel_files && detail::is_dangling_link(path)) {
            return Status(ErrorCode::kLayout,
                          path + ": the sidecar is a symbolic link whose target does not exist");
          }
          continue;
        }
        text = ctx_.source->read_small(path, kMaxSidecarBytes, nullptr);
      }
      if (!text) return text.status();
      SHARDLOAD_ASSIGN_OR_RETURN(Sidecar s, name == kSidecarName ? parse_sidecar(path, *text)
                                                                 : parse_seed_sidecar(path, *text));
      auto [pos, _] = by_dir.emplace(key, std::move(s));
      return &*pos->second;
    }
    by_dir.emplace(key, std::nullopt);
    return nullptr;
  }

  FormatOptions options_;
  ReaderContext ctx_;
  OpenShardFile open_;  // the file read last, for the next piece of the same shard
  // Each directory's sidecar (none: nullopt), by detail::resolved_directory_key; shared by
  // siblings, read-only once made (a map's entries stay where they are).
  struct Sidecars {
    std::mutex mu;
    std::map<std::string, std::optional<Sidecar>> by_dir;
    std::map<std::string, std::string> key_of;  // detail::resolved_directory_key by directory_key
  };
  std::shared_ptr<Sidecars> sidecars_;
};

// What a save's sidecar says: the dtype in this host's byte order, the trailing shape, no
// header and each shard's rows.
std::string saved_sidecar_text(const WriteSpec& spec, const std::vector<WrittenShard>& shards) {
  Sidecar s;
  s.dtype = spec.dtype;
  s.big_endian = !host_is_little_endian();
  s.shape = spec.trailing;
  s.header_bytes = 0;
  s.rows_list.emplace();
  for (const WrittenShard& w : shards) s.rows_list->push_back(w.rows);
  return sidecar_text(s);
}

// Bare rows in this host's byte order, one file per shard, and the directory's
// shardload.json saying their dtype, trailing shape and rows (what the reader needs).
class RawWriter final : public ShardWriter {
 public:
  [[nodiscard]] bool writes_directories() const override { return false; }

  [[nodiscard]] std::vector<std::string> metadata_names() const override { return {kSidecarName}; }
};

}  // namespace

std::shared_ptr<const ShardWriter> raw_writer() { return std::make_shared<RawWriter>(); }

Result<ObjectFiles> raw_object_metadata(const WriteSpec& spec,
                                        const std::vector<WrittenShard>& shards) {
  return ObjectFiles{{kSidecarName, saved_sidecar_text(spec, shards)}};
}

Result<std::unique_ptr<ShardReader>> make_raw_reader(const FormatOptions& options,
                                                     const ReaderContext& context) {
  if (options.trailing_shape) {
    for (const auto d : *options.trailing_shape) {
      if (d < 0) {
        return Status(ErrorCode::kInvalidArgument,
                      "raw: " + option_mention("trailing_shape", true) +
                          shape_string(*options.trailing_shape) + " has a negative dimension");
      }
    }
  }
  return std::unique_ptr<ShardReader>(std::make_unique<RawReader>(options, context));
}

}  // namespace shardload::detail
