// The HDF5 reader: one dataset per file, contiguous or chunked (any filter the
// library has, gzip included), read as a hyperslab of only the requested rows
// straight into the destination with a native memory type, so HDF5 itself
// converts byte order and h5py's bool enum and complex compound. Chunks whose
// only filters are [shuffle,] deflate are instead fetched raw and inflated
// outside HDF5 (read_direct says why), with H5Dread for anything unusual.
//
// Every HDF5 call goes through the privately loaded library (detail/hdf5_api.hpp says
// why). Debian's libhdf5 is built thread-safe; when a library is not, calls
// are serialized by one process-wide mutex, held only around HDF5 calls and
// never across anything that can wait on a runtime.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/detail/environment.hpp"
#include "base/detail/links.hpp"
#include "readers/detail/hdf5.hpp"
#include "readers/detail/readers.hpp"
#include "shardload/byte_order.hpp"
#include "shardload/location.hpp"
#include "storage/detail/read_ranges.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail {

namespace {

using namespace hdf5;  // NOLINT(google-build-using-namespace)

// The chunks of one remote read fetched and not yet inflated, at most (fetch_ranges' window).
constexpr std::uint64_t kRemoteChunkWindowBytes = std::uint64_t{64} << 20;

// Shard::extra of an HDF5 shard: the dataset's path, then this marker where the probe found
// the rows at data_offset by this build's rule (a stored type equal to the array's in every
// property). A NUL cannot be in an HDF5 name. A layout or manifest of an earlier build, whose
// rule took an unnormalised float for IEEE's, has no marker: its rows are read through HDF5.
constexpr std::string_view kRowsAtOffset{"\0rows at offset", 15};

std::string dataset_of(const Shard& s) { return s.extra.substr(0, s.extra.find('\0')); }

// H5F_ACC_RDONLY without the H5check() / H5open() calls its macro expands to:
// this file must not reference an HDF5 symbol directly.
constexpr unsigned kReadOnly = 0x0000u;

// The file's datasets, and the objects HDF5 could not open (with its reason): a file written
// by a newer HDF5 (h5py's libver="latest") may hold objects this HDF5 cannot read, and an
// error that counted only the datasets would say the file has none.
struct DatasetList {
  std::vector<std::string> names;
  std::vector<std::string> unopened;  // "'/x' (HDF5: bad version number for layout message)"
};

DatasetList list_datasets(const Hdf5Api& api, hid_t file) {
  struct Ctx {
    const Hdf5Api* api;
    DatasetList list;
  } ctx{&api, {}};
  api.H5Lvisit(
      file, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t g, const char* name, const H5L_info_t* info, void* data) -> herr_t {
        auto* c = static_cast<Ctx*>(data);
        if (info->type != H5L_TYPE_HARD) return 0;  // soft links name a dataset twice
        Hid o(c->api->H5Oopen(g, name, H5P_DEFAULT), c->api->H5Oclose);
        if (!o.valid()) {
          c->list.unopened.push_back("'/" + std::string(name) + "' (" + take_error(*c->api) + ")");
        } else if (c->api->H5Iget_type(o.get()) == H5I_DATASET) {
          c->list.names.push_back(std::string("/") + name);
        }
        return 0;
      },
      &ctx);
  api.H5Eclear2(H5E_DEFAULT);
  return ctx.list;
}

// What a message listing the datasets adds about objects HDF5 could not open.
std::string unopened_text(const Hdf5Api& api, const DatasetList& list) {
  if (list.unopened.empty()) return "";
  std::string s = "; objects HDF5 " + std::to_string(api.version[0]) + "." +
                  std::to_string(api.version[1]) + "." + std::to_string(api.version[2]) +
                  " cannot open (written by a newer HDF5, or damaged): ";
  // Three: each carries HDF5's reason.
  return s + listed_names(list.unopened, 3);
}

// The external link a traversal of this thread last refused (refuse_external_link): the file
// and object it names, as stored in the link.
struct RefusedLink {
  bool refused = false;
  std::string file;
  std::string object;
};
thread_local RefusedLink t_refused_link;

// HDF5 opens an external link's file by name, with a plain open that waits forever on a FIFO,
// before anything could look at what it opened; and a dataset in another file is refused
// anyway (check_in_the_shard). So no traversal follows one: the callback runs before the open
// and fails the traversal, noting the link for the message. It keeps no pointer (op_data is
// unused): an access list is copied into a dataset and may outlive the call that made it.
herr_t refuse_external_link(const char* /*parent_file*/, const char* /*parent_group*/,
                            const char* file, const char* object, unsigned* /*flags*/,
                            hid_t /*fapl*/, void* /*op_data*/) {
  if (!t_refused_link.refused) {
    t_refused_link = {true, file != nullptr ? file : "", object != nullptr ? object : ""};
  }
  return -1;
}

// True when every link along `path` exists (H5Lexists needs the parents).
bool path_exists(const Hdf5Api& api, hid_t file, const std::string& path, hid_t lapl) {
  std::size_t pos = path.front() == '/' ? 1 : 0;
  while (pos <= path.size()) {
    const std::size_t next = std::min(path.find('/', pos), path.size());
    const std::string prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/" && api.H5Lexists(file, prefix.c_str(), lapl) <= 0) {
      return false;
    }
    pos = next + 1;
  }
  return true;
}

// `path` as an absolute path: a relative one in the working directory (as it is now).
std::string absolute_path(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  std::string cwd(PATH_MAX + 1, '\0');
  if (::getcwd(cwd.data(), cwd.size()) == nullptr) return path;
  cwd.resize(std::strlen(cwd.c_str()));
  return cwd.back() == '/' ? cwd + path : cwd + "/" + path;
}

// The HDF5_EXTFILE_PREFIX HDF5 uses in front of a relative external storage name, or "" where
// it uses none (unset, empty or "."): then the name is the working directory's.
std::string external_env_prefix() {
  const std::string prefix =
      detail::environment_value("HDF5_EXTFILE_PREFIX").value_or(std::string());
  return prefix == "." ? std::string() : prefix;
}

// Where HDF5 1.10 itself looks for an external storage file `name` of the
// dataset in `file` opened with the default access list (H5D__build_file_prefix
// and H5_combine_path): HDF5_EXTFILE_PREFIX in front of a relative name, with
// a leading ${ORIGIN} meaning the file's directory; else the name as it is,
// relative to the working directory. For an absolute `file`, made absolute against the
// working directory as it is now: its layout keeps the file discovery found, which a later
// working directory (a chdir, a worker started elsewhere) does not change. A relative `file`
// is itself the working directory's, and so stays its external file.
std::string external_path(const std::string& file, const std::string& name) {
  if (name.empty() || name.front() == '/') return name;
  std::string prefix = external_env_prefix();
  std::string full = name;
  if (!prefix.empty()) {
    if (prefix.rfind("${ORIGIN}", 0) == 0) {
      const auto slash = file.rfind('/');
      const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash + 1);
      prefix = dir + prefix.substr(9);
    }
    full = prefix.back() == '/' ? prefix + name : prefix + "/" + name;
  }
  return !file.empty() && file.front() == '/' ? absolute_path(full) : full;
}

// For a message: how HDF5 resolved the relative external storage name `name` to `full`; "" for
// an absolute one.
std::string external_resolution(const std::string& name, const std::string& full) {
  if (name.empty() || name.front() == '/') return {};
  const std::string prefix = external_env_prefix();
  return " (a relative name, which HDF5 resolves against " +
         (prefix.empty() ? std::string("the working directory")
                         : "HDF5_EXTFILE_PREFIX '" + prefix + "'") +
         ": " + full + ")";
}

// The external storage files of a dataset, each once, in the dataset's
// order. Called with the lock held.
Result<std::vector<std::string>> external_names(const Hdf5Api& api, hid_t dataset,
                                                const std::string& where) {
  std::vector<std::string> names;
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  if (!dcpl.valid()) return Status(ErrorCode::kFormat, where + ": " + take_error(api));
  const int count = api.H5Pget_external_count(dcpl.get());
  if (count < 0)
    return Status(ErrorCode::kFormat, where + ": external storage: " + take_error(api));
  std::vector<char> buf(4097);
  for (int i = 0; i < count; ++i) {
    buf.back() = '\0';
    if (api.H5Pget_external(dcpl.get(), static_cast<unsigned>(i), buf.size(), buf.data(), nullptr,
                            nullptr) < 0) {
      return Status(ErrorCode::kFormat, where + ": external storage file " + std::to_string(i) +
                                            ": " + take_error(api));
    }
    if (buf.back() != '\0') {
      return Status(ErrorCode::kFormat, where + ": external storage file " + std::to_string(i) +
                                            ": name longer than " + std::to_string(buf.size() - 1) +
                                            " bytes");
    }
    std::string n(buf.data());
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(std::move(n));
  }
  return names;
}

// Where the dataset's data ends in each of its external storage files (the offset of each
// segment and the part of it the data fills), by name: HDF5 reads what lies past a file's end
// as zeros, so each file must reach that far. Called with the lock held.
std::vector<std::pair<std::string, std::uint64_t>> external_ends(const Hdf5Api& api, hid_t dataset,
                                                                 hid_t type,
                                                                 const std::vector<hsize_t>& dims) {
  std::vector<std::pair<std::string, std::uint64_t>> ends;
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  const int count = dcpl.valid() ? api.H5Pget_external_count(dcpl.get()) : -1;
  std::uint64_t left = api.H5Tget_size(type);
  for (const hsize_t d : dims) {
    if (__builtin_mul_overflow(left, d, &left)) left = UINT64_MAX;
  }
  std::vector<char> name(4097);
  for (int i = 0; i < count && left > 0; ++i) {
    off_t offset = 0;
    hsize_t size = 0;
    name.back() = '\0';
    if (api.H5Pget_external(dcpl.get(), static_cast<unsigned>(i), name.size(), name.data(), &offset,
                            &size) < 0 ||
        name.back() != '\0' || offset < 0) {
      break;  // external_names reports it
    }
    const std::uint64_t take = std::min<std::uint64_t>(left, size);
    std::uint64_t end = 0;
    if (__builtin_add_overflow(static_cast<std::uint64_t>(offset), take, &end)) end = UINT64_MAX;
    ends.emplace_back(name.data(), end);
    left -= take;
  }
  return ends;
}

struct OpenDataset {
  Hid file;
  Hid dataset;
  std::string name;
  std::vector<hsize_t> dims;
};

class Hdf5Reader final : public ShardReader {
 public:
  Hdf5Reader(const FormatOptions& options, const ReaderContext& ctx, const Hdf5Api* api)
      : options_(options), ctx_(ctx), api_(*api) {}
  Hdf5Reader(const Hdf5Reader&) = delete;
  Hdf5Reader& operator=(const Hdf5Reader&) = delete;
  ~Hdf5Reader() override {
    if (zlib_ready_) inflateEnd(&zlib_);
  }

  Result<ShardProbe> probe(const std::string& path) override {
    ShardProbe p;
    p.shard.path = path;
    // From object storage, the open's own request brings the first window (open_whole).
    SHARDLOAD_ASSIGN_OR_RETURN(File f,
                               ctx_.source->round_trips(path)
                                   ? ctx_.source->open_whole(path, &p.shard.snapshot, kRemoteWindow)
                                   : ctx_.source->open_stat(path, &p.shard.snapshot));
    if (!p.shard.snapshot.regular) {
      return Status(ErrorCode::kFormat, path + ": not a regular file");
    }
    // The metadata read here is kept for the reads of this snapshot (RemoteMetadata).
    std::optional<RemoteMetadata> meta;
    if (ctx_.source->round_trips(path)) {
      meta.emplace(path, p.shard.snapshot);
      meta->forget_url();
      SHARDLOAD_RETURN_IF_ERROR(meta->fetch_head(f, p.shard.snapshot.size));
    }
    std::vector<std::string> external;
    std::vector<std::pair<std::string, std::uint64_t>> external_end;
    std::vector<std::string> source_files;  // of a virtual dataset, each once
    try {
      Hdf5Lock lock(api_);
      api_.H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
      SHARDLOAD_ASSIGN_OR_RETURN(OpenDataset d,
                                 open(f, p.shard.snapshot.size, options_.dataset, meta));
      Hid type(api_.H5Dget_type(d.dataset.get()), api_.H5Tclose);
      if (!type.valid()) {
        return Status(ErrorCode::kFormat,
                      path + ": dataset '" + d.name + "': type: " + take_error(api_));
      }
      auto dtype = classify(api_, type.get());
      if (!dtype) return dtype.status().with_context(path + ": dataset '" + d.name + "'");
      SHARDLOAD_RETURN_IF_ERROR(
          storage_in_file(api_, d.dataset.get(), type.get(), d.dims, p.shard.snapshot.size)
              .with_context(path + ": dataset '" + d.name + "'"));
      SHARDLOAD_RETURN_IF_ERROR(chunk_element_size_matches(api_, d.file.get(), d.dataset.get(),
                                                           type.get(), file_bytes(f, meta))
                                    .with_context(path + ": dataset '" + d.name + "'"));
      SHARDLOAD_RETURN_IF_ERROR(defined_everywhere(api_, d.dataset.get())
                                    .with_context(path + ": dataset '" + d.name + "'"));
      SHARDLOAD_RETURN_IF_ERROR(filters_available(api_, d.dataset.get())
                                    .with_context(path + ": dataset '" + d.name + "'"));
      const ShardBytes self{p.shard.snapshot.size, file_bytes(f, meta)};
      SHARDLOAD_RETURN_IF_ERROR(no_virtual_cycle(d, path, &source_files, &self));
      p.dtype = *dtype;
      p.shard.rows = static_cast<std::int64_t>(d.dims[0]);
      for (std::size_t i = 1; i < d.dims.size(); ++i) {
        p.trailing_shape.push_back(static_cast<std::int64_t>(d.dims[i]));
      }
      p.decode_rows = chunk_rows(api_, d.dataset.get(), d.dims.size());
      p.shard.decode_rows = p.decode_rows;
      // The resolved dataset path: with the default, each file's only dataset
      // may have its own name, and the read must not search again.
      p.shard.extra = d.name;
      SHARDLOAD_ASSIGN_OR_RETURN(
          external, external_names(api_, d.dataset.get(), path + ": dataset '" + d.name + "'"));
      if (!external.empty())
        external_end = external_ends(api_, d.dataset.get(), type.get(), d.dims);
      // A contiguous dataset whose bytes are the array's: the load reads its rows as it
      // reads a .npy's (data_offset, byte_swap), in parallel, without HDF5 or its lock.
      if (const auto rows = contiguous_rows(api_, d.dataset.get(), type.get(), p.dtype, d.dims,
                                            p.shard.snapshot.size);
          rows && external.empty()) {
        p.shard.data_offset = rows->offset;
        p.shard.byte_swap = rows->swap_unit != 0;
        p.shard.extra += kRowsAtOffset;
      }
      api_.H5Eclear2(H5E_DEFAULT);
      const PathTraits traits = ctx_.source->traits(path);
      // Where the files a dataset names are, as a refusal says it: not beside the file on a
      // file system HDF5 can open by name.
      const std::string where = !traits.scheme_label.empty() ? "object storage"
                                : !traits.kernel_files       ? "a store's keys"
                                                             : "an injected I/O backend's files";
      if (!ctx_.source->kernel_descriptor(f)) {
        // A virtual dataset's data is in its source files, which HDF5 opens itself, by name,
        // with the access list of the file it read through the backend: none opens from object
        // storage or a store (HDF5 gives the fill value for every element instead of an
        // error), and the backend's own file is no source. Sources in the file itself (".")
        // would read.
        const std::vector<std::string> sources = virtual_sources(d.dataset.get());
        if (!sources.empty()) {
          return Status(ErrorCode::kFormat,
                        path + ": dataset '" + d.name +
                            "' is a virtual dataset whose data is in its source files (" +
                            sources.front() + (sources.size() > 1 ? ", ..." : "") +
                            "), which are not read from " + where +
                            "; copy the files to a local or shared file system");
        }
      }
      if (!external.empty() && !traits.kernel_files) {
        // HDF5 opens external storage itself, by a local name: nothing of the store's.
        return Status(ErrorCode::kFormat,
                      path + ": dataset '" + d.name + "': its data is in external storage files (" +
                          external.front() + (external.size() > 1 ? ", ..." : "") +
                          "), which are not read from " + where +
                          "; copy the files to a local or shared file system");
      }
    } catch (const std::exception& e) {
      return Status(ErrorCode::kFormat, path + ": " + e.what());
    }
    // The data of a dataset with external storage lives in those files: they
    // are snapshotted and checked like the file itself.
    for (const auto& name : external) {
      LinkedFile x;
      x.path = external_path(path, name);
      auto ext = ctx_.source->open(x.path);
      if (!ext) {
        return ext.status().with_context(path + ": dataset '" + dataset_of(p.shard) +
                                         "': external storage file '" + name + "'" +
                                         external_resolution(name, x.path));
      }
      SHARDLOAD_ASSIGN_OR_RETURN(x.snapshot, ext->stat());
      if (!x.snapshot.regular) {
        return Status(ErrorCode::kFormat, path + ": dataset '" + dataset_of(p.shard) +
                                              "': external storage file " + x.path +
                                              ": not a regular file");
      }
      for (const auto& [n, end] : external_end) {
        if (n == name && x.snapshot.size < end) {
          return Status(ErrorCode::kFormat,
                        path + ": dataset '" + dataset_of(p.shard) + "': external storage file " +
                            x.path + " holds " + std::to_string(x.snapshot.size) +
                            " bytes, but the dataset's data runs to byte " + std::to_string(end) +
                            " of it: the file is truncated (HDF5 would read the rest as zeros)");
        }
      }
      p.shard.linked.push_back(std::move(x));
    }
    // So do a virtual dataset's source files (HDF5 opens them by name when it reads): a
    // source rewritten after discovery is a changed file, not rows of another version.
    for (const auto& source : source_files) {
      LinkedFile x;
      x.path = source;
      auto src = ctx_.source->open(x.path);
      if (!src) {
        return src.status().with_context(path + ": dataset '" + dataset_of(p.shard) +
                                         "': virtual dataset source file");
      }
      SHARDLOAD_ASSIGN_OR_RETURN(x.snapshot, src->stat());
      if (!x.snapshot.regular) {
        return Status(ErrorCode::kFormat, path + ": dataset '" + dataset_of(p.shard) +
                                              "': virtual dataset source file " + x.path +
                                              ": not a regular file");
      }
      p.shard.linked.push_back(std::move(x));
    }
    return p;
  }

  Result<std::vector<std::string>> other_files_read(const Shard& s) override {
    std::vector<std::string> files;
    // From object storage or a store a virtual dataset of other files is refused at discovery.
    if (!ctx_.source->traits(s.path).kernel_files) return files;
    SHARDLOAD_ASSIGN_OR_RETURN(File f, ctx_.source->open(s.path));
    try {
      Hdf5Lock lock(api_);
      api_.H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
      std::optional<RemoteMetadata> none;
      SHARDLOAD_ASSIGN_OR_RETURN(OpenDataset d,
                                 open(f, s.snapshot.size, dataset_of(s), none, &s.linked));
      SHARDLOAD_RETURN_IF_ERROR(no_virtual_cycle(d, s.path, &files));
    } catch (const std::exception& e) {
      return Status(ErrorCode::kFormat, s.path + ": " + e.what());
    }
    return files;
  }

  Status read_rows(const ReadSpec& l, const Shard& s, std::int64_t lo, std::int64_t hi,
                   std::byte* dst) override {
    // Our own descriptors of the file and its external storage stay open
    // over HDF5's reads, so that their state after the reads can be compared
    // with the snapshots: a write through any path moves ctime, and a
    // file renamed over the path moves the replaced inode's ctime.
    if (hi <= lo) return Status::ok();
    SHARDLOAD_ASSIGN_OR_RETURN(File f, open_checked(*ctx_.source, s, ctx_.check_snapshot));
    if (hdf5_rows_at_offset(s)) {
      // Contiguous rows (see probe): the snapshot check after the read covers the bytes as
      // it covers HDF5's reads. A layout of a build without this (data_offset 0) reads
      // through HDF5.
      const std::size_t bytes = static_cast<std::size_t>(hi - lo) * l.row_bytes;
      Status read =
          f.read_exact(dst, bytes, s.data_offset + static_cast<std::uint64_t>(lo) * l.row_bytes);
      if (ctx_.check_snapshot) read = check_unchanged(f, s.snapshot, std::move(read));
      SHARDLOAD_RETURN_IF_ERROR(read);
      if (s.byte_swap) byte_swap(dst, bytes / l.dtype.swap_unit(), l.dtype.swap_unit());
      return Status::ok();
    }
    std::vector<File> linked;
    if (ctx_.check_snapshot) {
      for (const auto& x : s.linked) {
        SHARDLOAD_ASSIGN_OR_RETURN(File lf, ctx_.source->open(x.path));
        SHARDLOAD_RETURN_IF_ERROR(check_snapshot(lf, x.snapshot));
        linked.push_back(std::move(lf));
      }
    }
    // What HDF5 reads of a remote object's metadata, and what other reads of its snapshot
    // kept (RemoteMetadata); the check below covers both.
    std::optional<RemoteMetadata> meta;
    if (ctx_.source->round_trips(s.path)) meta.emplace(s.path, s.snapshot);
    Status read = read_dataset(f, l, s, lo, hi, dst, meta);
    if (ctx_.check_snapshot) {
      read = check_unchanged(f, s.snapshot, std::move(read));
      for (std::size_t i = 0; i < linked.size(); ++i) {
        read = check_unchanged(linked[i], s.linked[i].snapshot, std::move(read));
      }
    }
    if (meta && read.code() == ErrorCode::kChanged) meta->forget();
    return read;
  }

 private:
  // Reads of `f`'s bytes for the reader's own parsing; a remote object's are served from its
  // metadata (the head, what earlier reads kept) where it holds them, so that a header there
  // costs no request.
  static ReadBytes file_bytes(const File& f, std::optional<RemoteMetadata>& meta) {
    if (meta) return meta->reader(f);
    return [&f](std::uint64_t offset, std::size_t n, std::byte* out) {
      return f.read_exact(out, n, offset).is_ok();
    };
  }

  // HDF5 opens the file through `f` (see open()), the descriptor whose state
  // read_rows compares with the snapshot afterwards.
  // `meta`: a remote object's metadata (read_rows); its head is fetched here when no earlier
  // read's is held.
  Status read_dataset(const File& f, const ReadSpec& l, const Shard& s, std::int64_t lo,
                      std::int64_t hi, std::byte* dst, std::optional<RemoteMetadata>& meta) {
    if (meta && !meta->held()) SHARDLOAD_RETURN_IF_ERROR(meta->fetch_head(f, s.snapshot.size));
    try {
      Hdf5Lock lock(api_);
      api_.H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
      SHARDLOAD_ASSIGN_OR_RETURN(OpenDataset d,
                                 open(f, s.snapshot.size, dataset_of(s), meta, &s.linked));
      const std::string where = s.path + ": dataset '" + d.name + "'";
      // The snapshot guards the file; this guards a layout rebuilt from stale
      // task arguments.
      bool same = d.dims.size() == l.trailing_shape.size() + 1 &&
                  d.dims[0] == static_cast<hsize_t>(s.stored_rows());
      for (std::size_t i = 1; same && i < d.dims.size(); ++i) {
        same = d.dims[i] == static_cast<hsize_t>(l.trailing_shape[i - 1]);
      }
      if (!same) {
        return Status(ErrorCode::kChanged, where + ": shape differs from the layout's (" +
                                               std::to_string(s.stored_rows()) +
                                               " rows, trailing " + shape_string(l.trailing_shape) +
                                               ")");
      }
      // HDF5 1.10 reads storage past the file's end as zeros (a layout from a manifest has not
      // been probed by this build): the bytes the rows need must all be in the file.
      Hid type(api_.H5Dget_type(d.dataset.get()), api_.H5Tclose);
      if (!type.valid()) return Status(ErrorCode::kFormat, where + ": type: " + take_error(api_));
      Status in_file = storage_in_file(api_, d.dataset.get(), type.get(), d.dims, s.snapshot.size);
      if (in_file) {
        in_file = chunk_element_size_matches(api_, d.file.get(), d.dataset.get(), type.get(),
                                             file_bytes(f, meta));
      }
      if (in_file) in_file = chunks_in_file(api_, d.dataset.get(), d.dims, lo, hi, s.snapshot.size);
      // A layout from a manifest was not probed by this process, whose HDF5 may lack a filter.
      if (in_file) in_file = filters_available(api_, d.dataset.get());
      SHARDLOAD_RETURN_IF_ERROR(take_remote_error());
      api_.H5Eclear2(H5E_DEFAULT);
      SHARDLOAD_RETURN_IF_ERROR(in_file.with_context(where));
      SHARDLOAD_ASSIGN_OR_RETURN(Hid mem_type, memory_type(api_, l.dtype));
      const std::optional<DirectPlan> plan = direct_plan(api_, d.dataset.get(), l.dtype, d.dims);
      api_.H5Eclear2(H5E_DEFAULT);  // the plan's probing leaves nothing to report
      if (plan) {
        return read_direct(lock, f, s.snapshot.size, d, where, *plan, mem_type.get(), lo, hi, dst,
                           meta ? &*meta : nullptr);
      }
      std::vector<hsize_t> start(d.dims.size(), 0), count = d.dims;
      start[0] = static_cast<hsize_t>(lo);
      count[0] = static_cast<hsize_t>(hi - lo);
      Hid file_space(api_.H5Dget_space(d.dataset.get()), api_.H5Sclose);
      Hid mem_space(api_.H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr),
                    api_.H5Sclose);
      if (!file_space.valid() || !mem_space.valid() ||
          api_.H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                   count.data(), nullptr) < 0) {
        return Status(ErrorCode::kIo, where + ": selecting rows: " + take_error(api_));
      }
      if (api_.H5Dread(d.dataset.get(), mem_type.get(), mem_space.get(), file_space.get(),
                       H5P_DEFAULT, dst) < 0) {
        return hdf5_failure(ErrorCode::kIo, where + ": ");
      }
    } catch (const std::exception& e) {
      return Status(ErrorCode::kIo, s.path + ": " + e.what());
    }
    // A bool outside h5py's enum (raw 2..255; H5Dread's conversion gives
    // 0xFF, the direct path the stored byte) is left for the fill, which
    // applies numpy's rule to every format alike: nonzero is True.
    return Status::ok();
  }

  // One chunk's part of a read: where the chunk starts (its offset in elements) and the box of
  // it the rows need, in the chunk (src_start) and in the destination (dst_start).
  struct ChunkBox {
    std::vector<hsize_t> offset, box_lo, count, src_start, dst_start;
  };

  // Rows [lo, hi) chunk by chunk, for a dataset that direct_plan accepted.
  // HDF5's thread-safe build runs every API call, the deflate filter inside
  // H5Dread included, under one global lock, so tasks reading through H5Dread
  // decode one at a time. Here only the stored bytes come out of HDF5
  // (H5Dread_chunk); inflating, unshuffling and copying run outside any HDF5
  // call (and outside Hdf5Lock), in parallel across tasks. A chunk that is
  // not stored (its rows read as the fill value), skipped a filter (filter
  // mask), is an edge chunk stored unfiltered (DirectPlan::unfiltered_edge),
  // or cannot be read directly for any other reason is read by H5Dread
  // for just its box, so the result stays what H5Dread gives. From object
  // storage, see read_direct_remote.
  // `file_size`: the snapshot's, which every range read from `f` lies within.
  Status read_direct(Hdf5Lock& lock, const File& f, std::uint64_t file_size, const OpenDataset& d,
                     const std::string& where, const DirectPlan& p, hid_t mem_type, std::int64_t lo,
                     std::int64_t hi, std::byte* dst, RemoteMetadata* meta) {
    const std::size_t rank = d.dims.size();
    std::vector<hsize_t> dst_dims = d.dims;
    dst_dims[0] = static_cast<hsize_t>(hi - lo);
    // The chunk grid's indices that meet rows [lo, hi), every one across the
    // trailing dimensions.
    std::vector<hsize_t> first(rank, 0), last(rank, 0);
    first[0] = static_cast<hsize_t>(lo) / p.chunk[0];
    last[0] = static_cast<hsize_t>(hi - 1) / p.chunk[0];
    for (std::size_t i = 1; i < rank; ++i) last[i] = (d.dims[i] - 1) / p.chunk[i];
    std::vector<ChunkBox> boxes;
    std::vector<hsize_t> at = first;
    for (;;) {
      ChunkBox b{std::vector<hsize_t>(rank), std::vector<hsize_t>(rank), std::vector<hsize_t>(rank),
                 std::vector<hsize_t>(rank), std::vector<hsize_t>(rank)};
      for (std::size_t i = 0; i < rank; ++i) {
        b.offset[i] = at[i] * p.chunk[i];
        const hsize_t begin =
            i == 0 ? std::max<hsize_t>(b.offset[i], static_cast<hsize_t>(lo)) : b.offset[i];
        const hsize_t end = std::min<hsize_t>(b.offset[i] + p.chunk[i],
                                              i == 0 ? static_cast<hsize_t>(hi) : d.dims[i]);
        b.box_lo[i] = begin;
        b.count[i] = end - begin;
        b.src_start[i] = begin - b.offset[i];
        b.dst_start[i] = i == 0 ? begin - static_cast<hsize_t>(lo) : begin;
      }
      boxes.push_back(std::move(b));
      if (!next_chunk(at, first, last)) break;
    }
    if (ctx_.source->round_trips(f.path()) && api_.H5Dget_chunk_info_by_coord != nullptr) {
      if (auto done = read_direct_remote(lock, f, file_size, d, where, p, mem_type, dst_dims, boxes,
                                         dst, meta)) {
        return *done;
      }
    }
    for (const ChunkBox& b : boxes) {
      hsize_t stored = 0;
      std::uint32_t mask = 0;
      if (ctx_.stats != nullptr) ctx_.stats->decodes.fetch_add(1, std::memory_order_relaxed);
      bool direct =
          !p.unfiltered_edge(b.offset, d.dims) &&
          api_.H5Dget_chunk_storage_size(d.dataset.get(), b.offset.data(), &stored) >= 0 &&
          stored > 0 && stored <= kMaxDirectChunkBytes;
      if (direct) {
        if (stored_.size() < stored) stored_.resize(stored);
        direct = api_.H5Dread_chunk(d.dataset.get(), H5P_DEFAULT, b.offset.data(), &mask,
                                    stored_.data()) >= 0 &&
                 mask == 0;
      }
      if (!direct) {
        // A store that failed the chunk's read (after its retries) fails it for H5Dread too.
        SHARDLOAD_RETURN_IF_ERROR(take_remote_error());
        api_.H5Eclear2(H5E_DEFAULT);
        SHARDLOAD_RETURN_IF_ERROR(
            read_box(d, where, mem_type, dst_dims, b.box_lo, b.dst_start, b.count, dst));
        continue;
      }
      Hdf5Unlocked unlocked(lock);
      SHARDLOAD_RETURN_IF_ERROR(decode_chunk(where, d, p, b, stored_.data(),
                                             static_cast<std::size_t>(stored), dst_dims, dst));
    }
    return Status::ok();
  }

  // Inflates one chunk's stored bytes and copies its box into the destination; the error
  // names the chunk. Outside the lock.
  Status decode_chunk(const std::string& where, const OpenDataset& d, const DirectPlan& p,
                      const ChunkBox& b, const std::byte* stored, std::size_t size,
                      const std::vector<hsize_t>& dst_dims, std::byte* dst) {
    Status st = inflate_chunk(stored, size, p.chunk_bytes);
    if (!st.is_ok()) {
      const hsize_t rows_end = std::min<hsize_t>(b.offset[0] + p.chunk[0], d.dims[0]);
      std::string at_text;
      for (std::size_t i = 0; i < b.offset.size(); ++i) {
        at_text += (i ? ", " : "") + std::to_string(b.offset[i]);
      }
      return st.with_context(where + ": chunk of rows [" + std::to_string(b.offset[0]) + ", " +
                             std::to_string(rows_end) + ") at (" + at_text + ")");
    }
    copy_box(p, decoded_.data(), b.src_start, dst_dims, b.dst_start, b.count, dst);
    return Status::ok();
  }

  // The chunks of read_direct in an object in object storage. H5Dread_chunk would make each
  // chunk's GET under the lock, one task's at a time and one chunk after another; here HDF5
  // says only where each chunk lies (H5Dget_chunk_info_by_coord, under the lock), and the
  // stored chunks are declared to the storage layer as byte ranges (fetch_ranges: chunks
  // written next to each other, as HDF5 allocates them, come in one GET), fetched outside the
  // lock while this thread inflates them as they arrive. The stored chunk at the lowest address,
  // the first to arrive, is also read by H5Dread_chunk and compared before anything is decoded:
  // an HDF5 whose addresses mean something else (those of a file with a user block) leaves the
  // read to the caller's path (nullopt), as does a range with no stored chunk. HDF5 reads that
  // chunk through `meta`, lent the fetched bytes (RemoteMetadata::lend): a read of exactly the
  // chunk's address and size costs no second request, one elsewhere asks the store. Chunks that are
  // not stored or skipped a filter are read by H5Dread for their box, each before the first
  // stored chunk after it (in the order of the boxes, which is the order of arrival where the
  // addresses grow with the chunks, as h5py writes them), as read_direct reads them.
  std::optional<Status> read_direct_remote(Hdf5Lock& lock, const File& f, std::uint64_t file_size,
                                           const OpenDataset& d, const std::string& where,
                                           const DirectPlan& p, hid_t mem_type,
                                           const std::vector<hsize_t>& dst_dims,
                                           const std::vector<ChunkBox>& boxes, std::byte* dst,
                                           RemoteMetadata* meta) {
    std::vector<ByteRange> ranges;
    std::vector<std::size_t> box_of;  // ranges[k] is boxes[box_of[k]]'s stored bytes
    std::vector<bool> by_hdf5(boxes.size(), false);
    std::size_t check = 0;  // the range at the lowest address
    for (std::size_t i = 0; i < boxes.size(); ++i) {
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      if (p.unfiltered_edge(boxes[i].offset, d.dims) ||
          api_.H5Dget_chunk_info_by_coord(d.dataset.get(), boxes[i].offset.data(), &mask, &addr,
                                          &size) < 0 ||
          addr == HADDR_UNDEF || size == 0 || size > kMaxDirectChunkBytes || mask != 0 ||
          addr > file_size || size > file_size - addr) {
        SHARDLOAD_RETURN_IF_ERROR(take_remote_error());
        api_.H5Eclear2(H5E_DEFAULT);
        by_hdf5[i] = true;
        continue;
      }
      if (!ranges.empty() && addr < ranges[check].offset) check = ranges.size();
      ranges.push_back(ByteRange{addr, size, nullptr});
      box_of.push_back(i);
    }
    if (ranges.empty()) return std::nullopt;
    SHARDLOAD_ASSIGN_OR_RETURN(const std::size_t in_flight, chunks_in_flight_of(f.path()));
    // Takes the lock back for what HDF5 reads itself, and gives it up again after.
    struct Relocked {
      explicit Relocked(Hdf5Lock& l) : lock(l) { lock.lock(); }
      Relocked(const Relocked&) = delete;
      Relocked& operator=(const Relocked&) = delete;
      ~Relocked() { lock.unlock(); }
      Hdf5Lock& lock;
    };
    std::size_t next_box = 0;  // the boxes before it are read
    // The boxes before `end` that HDF5 reads itself and are not read yet.
    const auto read_by_hdf5 = [&](std::size_t end) -> Status {
      for (; next_box < end; ++next_box) {
        if (!by_hdf5[next_box]) continue;
        if (ctx_.stats != nullptr) ctx_.stats->decodes.fetch_add(1, std::memory_order_relaxed);
        Relocked relocked(lock);
        const ChunkBox& b = boxes[next_box];
        SHARDLOAD_RETURN_IF_ERROR(
            read_box(d, where, mem_type, dst_dims, b.box_lo, b.dst_start, b.count, dst));
      }
      return Status::ok();
    };
    // HDF5's read of the chunk at ranges[check], `bytes` its fetched bytes: ok where they are
    // the same; else the read is left to the caller's path (left_to_hdf5), or the store's error.
    bool left_to_hdf5 = false;
    const auto same_as_hdf5 = [&](std::size_t k, const std::byte* bytes) -> Status {
      const std::size_t size = static_cast<std::size_t>(ranges[k].length);
      Relocked relocked(lock);
      if (stored_.size() < size) stored_.resize(size);
      if (meta != nullptr) meta->lend(ranges[k].offset, bytes, size);
      std::uint32_t hdf5_mask = 0;
      const bool read =
          api_.H5Dread_chunk(d.dataset.get(), H5P_DEFAULT, boxes[box_of[k]].offset.data(),
                             &hdf5_mask, stored_.data()) >= 0 &&
          hdf5_mask == 0;
      if (meta != nullptr) meta->lend(0, nullptr, 0);
      if (!read) {
        SHARDLOAD_RETURN_IF_ERROR(take_remote_error());
        api_.H5Eclear2(H5E_DEFAULT);
      }
      if (!read || std::memcmp(bytes, stored_.data(), size) != 0) {
        left_to_hdf5 = true;
        return Status(ErrorCode::kIo, where + ": chunk addresses differ from HDF5's read");
      }
      return Status::ok();
    };
    Hdf5Unlocked unlocked(lock);
    Status st =
        fetch_ranges(f, ranges, CoalesceLimits{}, in_flight, kRemoteChunkWindowBytes,
                     [&](std::size_t k, const std::byte* bytes) -> Status {
                       const std::size_t i = box_of[k];
                       const std::size_t size = static_cast<std::size_t>(ranges[k].length);
                       if (k == check) SHARDLOAD_RETURN_IF_ERROR(same_as_hdf5(k, bytes));
                       SHARDLOAD_RETURN_IF_ERROR(read_by_hdf5(i));
                       next_box = std::max(next_box, i + 1);
                       if (ctx_.stats != nullptr)
                         ctx_.stats->decodes.fetch_add(1, std::memory_order_relaxed);
                       return decode_chunk(where, d, p, boxes[i], bytes, size, dst_dims, dst);
                     });
    if (left_to_hdf5) return std::nullopt;
    SHARDLOAD_RETURN_IF_ERROR(st);
    return read_by_hdf5(boxes.size());
  }

  // One chunk's box through H5Dread, which knows fill values, skipped
  // filters and whatever else the direct path leaves to the library.
  Status read_box(const OpenDataset& d, const std::string& where, hid_t mem_type,
                  const std::vector<hsize_t>& dst_dims, const std::vector<hsize_t>& box_lo,
                  const std::vector<hsize_t>& dst_start, const std::vector<hsize_t>& count,
                  std::byte* dst) {
    const int rank = static_cast<int>(count.size());
    Hid file_space(api_.H5Dget_space(d.dataset.get()), api_.H5Sclose);
    Hid mem_space(api_.H5Screate_simple(rank, dst_dims.data(), nullptr), api_.H5Sclose);
    if (!file_space.valid() || !mem_space.valid() ||
        api_.H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, box_lo.data(), nullptr,
                                 count.data(), nullptr) < 0 ||
        api_.H5Sselect_hyperslab(mem_space.get(), H5S_SELECT_SET, dst_start.data(), nullptr,
                                 count.data(), nullptr) < 0) {
      return Status(ErrorCode::kIo, where + ": selecting rows: " + take_error(api_));
    }
    if (api_.H5Dread(d.dataset.get(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT,
                     dst) < 0) {
      return hdf5_failure(ErrorCode::kIo, where + ": ");
    }
    return Status::ok();
  }

  // Inflates `in` bytes at `stored` into decoded_, which must come out exactly
  // `out` bytes (a whole chunk): a damaged chunk is an error, never data.
  Status inflate_chunk(const std::byte* stored, std::size_t in, std::size_t out) {
    if (decoded_.size() < out) decoded_.resize(out);
    if (!zlib_ready_) {
      if (inflateInit(&zlib_) != Z_OK) {
        return Status(ErrorCode::kIo, "deflate: cannot initialize zlib");
      }
      zlib_ready_ = true;
    } else if (inflateReset(&zlib_) != Z_OK) {
      return Status(ErrorCode::kIo, "deflate: cannot reset zlib");
    }
    // zlib's next_in is not const in its older headers; it only reads.
    zlib_.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(stored));
    zlib_.avail_in = static_cast<uInt>(in);
    zlib_.next_out = reinterpret_cast<Bytef*>(decoded_.data());
    zlib_.avail_out = static_cast<uInt>(out);
    const int rc = inflate(&zlib_, Z_FINISH);
    const std::string expected = std::to_string(out) + " bytes";
    if (rc == Z_STREAM_END) {
      if (zlib_.total_out == out) return Status::ok();
      return Status(ErrorCode::kIo, "deflate: corrupt chunk: decodes to " +
                                        std::to_string(zlib_.total_out) + " bytes, expected " +
                                        expected);
    }
    if (rc == Z_BUF_ERROR && zlib_.avail_out == 0) {
      return Status(ErrorCode::kIo,
                    "deflate: corrupt chunk: decodes to more than the expected " + expected);
    }
    if (rc == Z_BUF_ERROR) {
      return Status(ErrorCode::kIo, "deflate: corrupt chunk: truncated after " +
                                        std::to_string(zlib_.total_out) + " of " + expected);
    }
    if (rc == Z_MEM_ERROR) return Status(ErrorCode::kIo, "deflate: out of memory");
    return Status(ErrorCode::kIo, std::string("deflate: corrupt chunk: ") +
                                      (zlib_.msg ? zlib_.msg : "zlib error " + std::to_string(rc)));
  }

  // Opens the file `checked` (opened and found regular by the caller) and its
  // dataset `name` (empty: the file's only dataset). Called with the lock
  // held and HDF5's error printing off.
  //
  // HDF5 opens files by name, and a plain open of a FIFO waits for a writer
  // forever; so HDF5 gets "/proc/self/fd/N" of a descriptor we checked, which
  // opens that very file whatever the name points to by now. That name
  // changes what HDF5 takes as the file's directory (its "extpath"), which
  // only two things use: relative external links, for which the link access
  // list below names the real directory instead (the same search order), and
  // an external-storage prefix "${ORIGIN}" from HDF5_EXTFILE_PREFIX or
  // HDF5_VDS_PREFIX, which no property can override: then HDF5 gets the
  // path itself, after our check. External storage without ${ORIGIN}
  // resolves against the working directory either way.
  //
  // An object in object storage has no name HDF5 can open: HDF5 reads it through `checked`
  // (of `size` bytes, its snapshot's) by ranged reads (hdf5_remote.cc).
  // `meta`: a remote object's metadata (RemoteMetadata), its head fetched before the lock was
  // taken; none for other files.
  // `linked`: the discovered shard's linked files, whose external storage files the dataset's
  // relative names are pinned to (pinned_external_prefix); null at discovery.
  Result<OpenDataset> open(const File& checked, std::uint64_t size, const std::string& name,
                           std::optional<RemoteMetadata>& meta,
                           const std::vector<LinkedFile>* linked = nullptr) {
    const std::string& path = checked.path();
    OpenDataset d;
    // A descriptor that is not the kernel's (an object, a store's key, a file through an
    // injected backend): HDF5 reads it through the File (a virtual file driver over it), never
    // by name, so that it reads what the source serves.
    const bool remote = !ctx_.source->kernel_descriptor(checked);
    (void)take_remote_error();  // nothing of an earlier call's is this one's
    Hid fapl;
    if (remote) {
      SHARDLOAD_ASSIGN_OR_RETURN(fapl,
                                 remote_access_list(api_, checked, size, meta ? &*meta : nullptr));
    } else {
      fapl = Hid(api_.H5Pcreate(api_.H5P_CLS_FILE_ACCESS_ID_g), api_.H5Pclose);
    }
    if (fapl.valid() && api_.H5Pset_file_locking != nullptr) {
      api_.H5Pset_file_locking(fapl.get(), 0, 1);
    }
    std::string open_name = path;
    if (remote) {
      d.file = Hid(api_.H5Fopen(path.c_str(), kReadOnly, fapl.get()), api_.H5Fclose);
    } else if (!prefix_uses_origin("HDF5_EXTFILE_PREFIX") &&
               !prefix_uses_origin("HDF5_VDS_PREFIX")) {
      // HDF5 opens the file by its descriptor's name (the kernel's, see above).
      open_name = descriptor_path(checked.fd(), path);
      d.file =
          Hid(api_.H5Fopen(open_name.c_str(), kReadOnly, fapl.valid() ? fapl.get() : H5P_DEFAULT),
              api_.H5Fclose);
    } else {
      d.file = Hid(api_.H5Fopen(path.c_str(), kReadOnly, fapl.valid() ? fapl.get() : H5P_DEFAULT),
                   api_.H5Fclose);
    }
    if (!d.file.valid())
      return hdf5_failure(ErrorCode::kFormat, path + ": not a readable HDF5 file: ");
    Hid dapl(api_.H5Pcreate(api_.H5P_CLS_DATASET_ACCESS_ID_g), api_.H5Pclose);
    if (!dapl.valid()) {
      return Status(ErrorCode::kFormat, path + ": dataset access list: " + take_error(api_));
    }
    if (open_name != path &&
        api_.H5Pset_elink_prefix(dapl.get(), (parent_directory(path) + "/").c_str()) < 0) {
      return Status(ErrorCode::kFormat, path + ": external link prefix: " + take_error(api_));
    }
    if (api_.H5Pset_elink_cb(dapl.get(), refuse_external_link, nullptr) < 0) {
      return Status(ErrorCode::kFormat, path + ": external link callback: " + take_error(api_));
    }
    t_refused_link = {};
    if (name.empty()) {
      const DatasetList all = list_datasets(api_, d.file.get());
      if (all.names.size() != 1) {
        return Status(ErrorCode::kFormat,
                      path + ": dataset: expected exactly one dataset when none is named, found " +
                          std::to_string(all.names.size()) + " (" + listed_names(all.names) +
                          "); name one with " + option_mention("dataset") +
                          unopened_text(api_, all));
      }
      d.name = all.names[0];
    } else {
      d.name = name.front() == '/' ? name : "/" + name;
    }
    const bool exists = path_exists(api_, d.file.get(), d.name, dapl.get());
    if (t_refused_link.refused) return refused_link_error(path, d.name);
    if (!exists) {
      api_.H5Eclear2(H5E_DEFAULT);
      const DatasetList all = list_datasets(api_, d.file.get());
      return Status(ErrorCode::kFormat,
                    path + ": dataset '" + d.name + "' not found (datasets in the file: " +
                        listed_names(all.names) + unopened_text(api_, all) + ")");
    }
    d.dataset = Hid(api_.H5Dopen2(d.file.get(), d.name.c_str(), dapl.get()), api_.H5Dclose);
    if (t_refused_link.refused) return refused_link_error(path, d.name);
    if (!d.dataset.valid()) {
      return hdf5_failure(ErrorCode::kFormat,
                          path + ": '" + d.name + "' is not a readable dataset: ");
    }
    SHARDLOAD_RETURN_IF_ERROR(check_in_the_shard(d, path));
    std::string efile_prefix, vds_prefix;
    if (linked != nullptr) {
      SHARDLOAD_ASSIGN_OR_RETURN(efile_prefix, pinned_external_prefix(d, path, *linked));
      SHARDLOAD_ASSIGN_OR_RETURN(vds_prefix, pinned_virtual_prefix(d, path, *linked));
    }
    if (!efile_prefix.empty() || !vds_prefix.empty()) {
      // The prefixes are taken when the dataset is opened: opened again with them.
      d.dataset = Hid();
      if (!efile_prefix.empty() && api_.H5Pset_efile_prefix(dapl.get(), efile_prefix.c_str()) < 0) {
        return Status(ErrorCode::kFormat, path + ": external storage prefix: " + take_error(api_));
      }
      if (!vds_prefix.empty() && api_.H5Pset_virtual_prefix(dapl.get(), vds_prefix.c_str()) < 0) {
        return Status(ErrorCode::kFormat,
                      path + ": virtual dataset source prefix: " + take_error(api_));
      }
      d.dataset = Hid(api_.H5Dopen2(d.file.get(), d.name.c_str(), dapl.get()), api_.H5Dclose);
      if (!d.dataset.valid()) {
        return hdf5_failure(ErrorCode::kFormat,
                            path + ": '" + d.name + "' is not a readable dataset: ");
      }
    }
    SHARDLOAD_RETURN_IF_ERROR(check_external_files(d, path, efile_prefix));
    SHARDLOAD_RETURN_IF_ERROR(check_virtual_files(d, path));
    Hid space(api_.H5Dget_space(d.dataset.get()), api_.H5Sclose);
    const H5S_class_t sc =
        space.valid() ? api_.H5Sget_simple_extent_type(space.get()) : H5S_NO_CLASS;
    const int rank = sc == H5S_SIMPLE ? api_.H5Sget_simple_extent_ndims(space.get()) : 0;
    if (rank < 1) {
      return Status(
          ErrorCode::kFormat,
          path + ": dataset '" + d.name +
              "': shape: expected at least 1 dimension, found a scalar or empty dataspace");
    }
    d.dims.resize(static_cast<std::size_t>(rank));
    std::vector<hsize_t> most(static_cast<std::size_t>(rank), 0);
    if (api_.H5Sget_simple_extent_dims(space.get(), d.dims.data(), most.data()) < 0) {
      return Status(ErrorCode::kFormat,
                    path + ": dataset '" + d.name + "': shape: " + take_error(api_));
    }
    // HDF5 1.10 does not hold a dataspace to its maximum (newer ones refuse it): a chunked
    // dataset's rows past what was stored would read as the fill value, rows of no file.
    for (std::size_t i = 0; i < d.dims.size(); ++i) {
      if (most[i] != H5S_UNLIMITED && d.dims[i] > most[i]) {
        return Status(ErrorCode::kFormat,
                      path + ": dataset '" + d.name + "': shape: dimension " + std::to_string(i) +
                          " is " + std::to_string(d.dims[i]) + ", more than its maximum " +
                          std::to_string(most[i]) +
                          " (HDF5 1.10 would read the elements past it as the fill value): the "
                          "dataspace is damaged");
      }
    }
    for (const auto dim : d.dims) {
      if (dim > static_cast<hsize_t>(INT64_MAX)) {
        return Status(ErrorCode::kFormat, path + ": dataset '" + d.name + "': shape: dimension " +
                                              std::to_string(dim) + " exceeds int64");
      }
    }
    return d;
  }

  // One mapping of a virtual dataset: the source file and dataset it names, each nullopt
  // where HDF5 cannot give it.
  struct VirtualMapping {
    std::optional<std::string> file;
    std::optional<std::string> dataset;
  };

  // A virtual dataset's mappings, in mapping order; none for any other layout.
  std::vector<VirtualMapping> virtual_mappings(hid_t dataset) {
    std::vector<VirtualMapping> out;
    Hid dcpl(api_.H5Dget_create_plist(dataset), api_.H5Pclose);
    std::size_t count = 0;
    if (!dcpl.valid() || api_.H5Pget_layout(dcpl.get()) != H5D_VIRTUAL ||
        api_.H5Pget_virtual_count(dcpl.get(), &count) < 0) {
      api_.H5Eclear2(H5E_DEFAULT);
      return out;
    }
    for (std::size_t i = 0; i < count; ++i) {
      VirtualMapping& m = out.emplace_back();
      std::string file(PATH_MAX + 1, '\0');
      const ssize_t n = api_.H5Pget_virtual_filename(dcpl.get(), i, file.data(), file.size());
      if (n >= 0) {
        file.resize(std::min<std::size_t>(static_cast<std::size_t>(n), PATH_MAX));
        m.file = std::move(file);
      }
      const ssize_t k = api_.H5Pget_virtual_dsetname(dcpl.get(), i, nullptr, 0);
      if (k < 0) continue;
      std::string name(static_cast<std::size_t>(k) + 1, '\0');
      if (api_.H5Pget_virtual_dsetname(dcpl.get(), i, name.data(), name.size()) >= 0) {
        name.resize(static_cast<std::size_t>(k));
        m.dataset = std::move(name);
      }
    }
    api_.H5Eclear2(H5E_DEFAULT);
    return out;
  }

  // The files other than the dataset's own that a virtual dataset's mappings name (each
  // once, in mapping order); none for any other layout.
  std::vector<std::string> virtual_sources(hid_t dataset) {
    std::vector<std::string> out;
    const auto mappings = virtual_mappings(dataset);
    for (std::size_t i = 0; i < mappings.size(); ++i) {
      std::string name = mappings[i].file.value_or("mapping " + std::to_string(i));
      if (name != "." && std::find(out.begin(), out.end(), name) == out.end()) {
        out.push_back(std::move(name));
      }
    }
    return out;
  }

  // A printf-style source file name: HDF5 reads "%b" as a block number and finds the files by
  // trying names one after another ("%%" is a plain '%').
  static bool printf_style(const std::string& name) {
    for (std::size_t i = 0; i + 1 < name.size(); ++i) {
      if (name[i] != '%') continue;
      if (name[i + 1] == 'b') return true;
      if (name[i + 1] == '%') ++i;
    }
    return false;
  }

  // A virtual dataset's source files, checked before HDF5 is asked for the dataset's extent,
  // which for an unlimited mapping opens them: a name HDF5 would open that is no regular file
  // (a FIFO) would make it wait forever.
  Status check_virtual_files(const OpenDataset& d, const std::string& path) {
    for (const VirtualMapping& m : virtual_mappings(d.dataset.get())) {
      if (!m.file) continue;
      SHARDLOAD_RETURN_IF_ERROR(
          virtual_mapping_sources(path, *m.file, "", path + ": dataset '" + d.name + "'").status());
    }
    return Status::ok();
  }

  // A virtual dataset whose mappings lead back to itself, through datasets of its own file (a
  // source file "." or the file's own name) or of other files that map back: HDF5 reads a
  // source by reading it again, without end, until the stack runs out (SIGSEGV; h5py too), or,
  // where it notices the loop across files, gives the fill value for every row, silently.
  // Followed from dataset to dataset and from file to file, each once, at most
  // kMaxVirtualDepth deep.
  static constexpr std::size_t kMaxVirtualDepth = 32;

  // The shard's own bytes where it is no regular file of this host's (an object, a store's
  // key): its size and reads of it.
  struct ShardBytes {
    std::uint64_t size = 0;
    ReadBytes read;
  };

  // `files`, where given, gets every other file the mappings lead to, each once. A shard that
  // is no regular file here is followed through `self` where given, to the datasets of its own
  // file (source file "."), the only sources HDF5 reads from it; without, not at all.
  Status no_virtual_cycle(const OpenDataset& d, const std::string& path,
                          std::vector<std::string>* files = nullptr,
                          const ShardBytes* self = nullptr) {
    std::string own = file_identity(path);
    if (!own.empty()) self = nullptr;
    if (own.empty() && self == nullptr) return Status::ok();
    if (own.empty()) own = "shard";  // no device/inode pair reads so
    std::vector<VirtualStep> chain{
        {own + ":" + (d.name.empty() || d.name[0] != '/' ? "/" + d.name : d.name),
         d.name.empty() || d.name[0] != '/' ? "/" + d.name : d.name}};
    std::vector<std::string> done;
    return follow_virtual(d.file.get(), d.dataset.get(), path, path, own, chain, done, files, self);
  }

  struct VirtualStep {
    std::string key;    // the file's device and inode, and the dataset
    std::string shown;  // the dataset, after its file's path where that is not the shard
  };

  // A regular file's device and inode ("" where it is none): what makes two names one file.
  static std::string file_identity(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
    return std::to_string(st.st_dev) + "/" + std::to_string(st.st_ino);
  }

  // The regular file a virtual mapping's source file `name` names, seen from the file at
  // `path`, where HDF5 looks for it: "." is that file; a relative name under each directory of
  // HDF5_VDS_PREFIX (a list split at ':', "${ORIGIN}" at a part's start standing for the
  // file's directory, as H5F_prefix_open_file reads it), then beside that file, then from the
  // working directory. nullopt where none is a regular file (HDF5 then gives the fill value,
  // as h5py shows).
  // `odd` gets the first name HDF5 would try that is there but no regular file (a FIFO,
  // whose plain open waits for a writer, a device, a directory): HDF5 would open it first.
  // `dangling` gets the first one that is a symbolic link whose target is gone, or lies under
  // one (a source linked from a pool that was deleted, an unmounted volume), and `link` that
  // link: HDF5 would read the rows it held as the fill value, or take a later name's file.
  static std::optional<std::string> virtual_source_file(const std::string& path,
                                                        const std::string& name,
                                                        std::string* odd = nullptr,
                                                        std::string* dangling = nullptr,
                                                        std::string* link = nullptr) {
    if (name == ".") return path;
    if (name.empty()) return std::nullopt;
    std::vector<std::string> candidates;
    if (name[0] != '/') {
      if (const std::string env =
              detail::environment_value("HDF5_VDS_PREFIX").value_or(std::string());
          !env.empty()) {
        constexpr std::string_view kOrigin = "${ORIGIN}";
        const std::string_view list = env;
        for (std::size_t at = 0; at <= list.size();) {
          const std::size_t end = std::min(list.find(':', at), list.size());
          std::string part(list.substr(at, end - at));
          at = end + 1;
          if (part.empty()) continue;
          if (part.compare(0, kOrigin.size(), kOrigin) == 0) {
            part = parent_directory(path) + part.substr(kOrigin.size());
          }
          candidates.push_back(part + (part.back() == '/' ? "" : "/") + name);
        }
      }
      const auto slash = path.rfind('/');
      if (slash != std::string::npos) candidates.push_back(path.substr(0, slash + 1) + name);
    }
    candidates.push_back(name);
    for (const std::string& c : candidates) {
      struct stat st {};
      if (::stat(c.c_str(), &st) != 0) {
        if (std::string to;
            dangling != nullptr && errno == ENOENT && detail::is_dangling_link(c, &to)) {
          *dangling = c;
          if (link != nullptr) *link = std::move(to);
          return std::nullopt;
        }
        continue;
      }
      if (S_ISREG(st.st_mode)) return c;
      if (odd != nullptr) *odd = c;
      return std::nullopt;
    }
    return std::nullopt;
  }

  Status follow_virtual(hid_t file, hid_t dataset, const std::string& path,
                        const std::string& shard, const std::string& shard_id,
                        std::vector<VirtualStep>& chain, std::vector<std::string>& done,
                        std::vector<std::string>* files, const ShardBytes* self) {
    const std::string here = self != nullptr ? shard_id : file_identity(path);
    Hid opened;
    std::string opened_id, unopened;
    for (const VirtualMapping& m : virtual_mappings(dataset)) {
      if (!m.file || !m.dataset) continue;
      // Other files of a shard that is no regular file here: HDF5 opens none (probe refuses
      // them), and their names are not this host's to look up.
      if (self != nullptr && *m.file != ".") continue;
      SHARDLOAD_ASSIGN_OR_RETURN(
          const auto sources,
          virtual_mapping_sources(path, *m.file, *m.dataset,
                                  shard + ": dataset '" + chain.front().shown + "'"));
      for (const auto& [target, name] : sources) {
        std::string source = name;
        const std::string target_id = self != nullptr ? shard_id : file_identity(target);
        if (files != nullptr && target_id != shard_id &&
            std::find(files->begin(), files->end(), target) == files->end()) {
          files->push_back(target);
        }
        if (source.empty() || source[0] != '/') source.insert(0, "/");
        const VirtualStep step{target_id + ":" + source,
                               target_id == shard_id ? source : target + ":" + source};
        const auto seen = [&](const VirtualStep& c) { return c.key == step.key; };
        if (std::find_if(chain.begin(), chain.end(), seen) != chain.end()) {
          std::string route;
          for (const VirtualStep& c : chain) route += c.shown + " -> ";
          return Status(ErrorCode::kFormat,
                        shard + ": dataset '" + chain.front().shown +
                            "' is a virtual dataset whose mappings lead back to itself (" + route +
                            step.shown + "): HDF5 would read it without end; the file is damaged");
        }
        if (std::find(done.begin(), done.end(), step.key) != done.end()) continue;
        if (chain.size() >= kMaxVirtualDepth) {
          return Status(ErrorCode::kFormat,
                        shard + ": dataset '" + chain.front().shown +
                            "' is a virtual dataset whose sources are virtual datasets nested "
                            "more than " +
                            std::to_string(kMaxVirtualDepth) + " deep");
        }
        const std::string refused = shard + ": dataset '" + chain.front().shown +
                                    "' is a virtual dataset whose source " + step.shown +
                                    " is refused";
        hid_t source_file = file;
        if (target_id != here) {
          // Mappings of one file's datasets follow one another: that file is opened once.
          if (opened_id != target_id) {
            opened = open_source_file(target, unopened);
            opened_id = target_id;
          }
          // HDF5 takes a source file it cannot open for a missing one and gives the fill
          // value for its elements, without a word; this one is there.
          if (!opened.valid()) {
            return Status(
                ErrorCode::kFormat,
                refused + ": not a readable HDF5 file: " + unopened +
                    unreadable_source_note("no HDF5 file, a damaged one, or unreadable here"));
          }
          source_file = opened.get();
        }
        Hid dapl(api_.H5Pcreate(api_.H5P_CLS_DATASET_ACCESS_ID_g), api_.H5Pclose);
        if (!dapl.valid() || api_.H5Pset_elink_cb(dapl.get(), refuse_external_link, nullptr) < 0) {
          return Status(ErrorCode::kFormat, path + ": dataset access list: " + take_error(api_));
        }
        t_refused_link = {};
        Hid src(api_.H5Dopen2(source_file, source.c_str(), dapl.get()), api_.H5Dclose);
        if (t_refused_link.refused) {
          api_.H5Eclear2(H5E_DEFAULT);
          return Status(ErrorCode::kFormat,
                        shard + ": dataset '" + chain.front().shown +
                            "' is a virtual dataset whose source " + step.shown +
                            " is reached through an external link to '" + t_refused_link.object +
                            "' in " + t_refused_link.file + "; external links are not followed");
        }
        if (!src.valid()) {
          // HDF5 gives the fill value for a source dataset it cannot open, as for a missing
          // one: one that is there (written by a newer HDF5, its header damaged) would load
          // as the fill value, where h5py or a newer HDF5 reads its values. A store's read that
          // failed inside HDF5 is named as the store gave it.
          Status remote = take_remote_error();
          const std::string why = take_error(api_);
          if (remote.is_ok() && source_missing(source_file, source, dapl.get())) {
            remote = take_remote_error();
            if (remote.is_ok()) continue;
          }
          if (!remote.is_ok()) return remote.with_context(refused);
          return Status(
              ErrorCode::kFormat,
              refused + ": it is not a readable dataset: " + why +
                  unreadable_source_note("written by a newer HDF5, damaged, or no dataset"));
        }
        SHARDLOAD_RETURN_IF_ERROR(
            source_storage(source_file, src.get(), target_id != here ? target : path, self)
                .with_context(refused));
        chain.push_back(step);
        SHARDLOAD_RETURN_IF_ERROR(follow_virtual(source_file, src.get(),
                                                 target_id != here ? target : path, shard, shard_id,
                                                 chain, done, files, self));
        chain.pop_back();
        done.push_back(step.key);
      }
    }
    return Status::ok();
  }

  // A virtual dataset's source file, opened as HDF5 opens it to read the rows: with file locks
  // off, as the default file access list HDF5 opens sources with has them (load_api), so that
  // this open and the library's own of the same file are one file, never refused as a second
  // open with other locking.
  // `why`: HDF5's words where it cannot (taken before the list's close clears them).
  Hid open_source_file(const std::string& target, std::string& why) {
    Hid fapl(api_.H5Pcreate(api_.H5P_CLS_FILE_ACCESS_ID_g), api_.H5Pclose);
    if (fapl.valid() && api_.H5Pset_file_locking != nullptr) {
      api_.H5Pset_file_locking(fapl.get(), 0, 1);
    }
    Hid file(api_.H5Fopen(target.c_str(), kReadOnly, fapl.valid() ? fapl.get() : H5P_DEFAULT),
             api_.H5Fclose);
    if (!file.valid()) why = take_error(api_);
    return file;
  }

  // What a refusal of a source HDF5 cannot open adds: the library's version, and what it
  // would have done. `causes`: what makes such a source.
  std::string unreadable_source_note(const char* causes) const {
    return " (HDF5 " + std::to_string(api_.version[0]) + "." + std::to_string(api_.version[1]) +
           "." + std::to_string(api_.version[2]) + " cannot open it: " + causes +
           "; it would read the virtual dataset's fill value in its place)";
  }

  // Whether the source dataset `name` (from '/') of a virtual mapping is missing from `file`:
  // no link of that name in its group, or a soft link to nothing. HDF5 gives the fill value
  // there, and h5py (HDF5 2.0) does too. Anything else HDF5 1.10 cannot open as a dataset
  // (an object a newer HDF5 wrote, a damaged header, a group, a name under a group that is
  // not there or under a dataset) it reads as the fill value as well, where h5py reads its
  // values or refuses it: not missing. An error on the way is no answer: not missing.
  bool source_missing(hid_t file, const std::string& name, hid_t lapl) {
    struct Clear {
      const Hdf5Api& api;
      ~Clear() { api.H5Eclear2(H5E_DEFAULT); }
    } const clear{api_};
    for (std::size_t pos = 1; pos <= name.size();) {
      const std::size_t next = std::min(name.find('/', pos), name.size());
      const std::string prefix = name.substr(0, next);
      pos = next + 1;
      if (prefix.size() <= 1 || prefix.back() == '/') continue;
      const htri_t link = api_.H5Lexists(file, prefix.c_str(), lapl);
      if (link == 0) return next == name.size();
      if (link < 0) return false;
    }
    return api_.H5Oexists_by_name(file, name.c_str(), lapl) == 0;
  }

  // Why a virtual dataset's source `dataset` (in the HDF5 file `file`, the regular file at
  // `path`) would not read as its elements: the checks the shard's own dataset gets at
  // discovery (probe), since HDF5 1.10 reads a source as it reads any dataset: storage past
  // the end of its file as zeros, a short compact buffer into other memory, a contiguous
  // layout recording less than its elements need as other rows, unwritten chunks of fill time
  // 'never' as whatever memory held, an external storage file cut short as zeros. Ok where
  // its shape or type cannot be had: HDF5's read then fails on its own. `self`: the shard's
  // bytes where it is no regular file here (the source is then one of its own datasets).
  Status source_storage(hid_t file, hid_t dataset, const std::string& path,
                        const ShardBytes* self) {
    Hid type(api_.H5Dget_type(dataset), api_.H5Tclose);
    Hid space(api_.H5Dget_space(dataset), api_.H5Sclose);
    const int rank = space.valid() && api_.H5Sget_simple_extent_type(space.get()) == H5S_SIMPLE
                         ? api_.H5Sget_simple_extent_ndims(space.get())
                         : -1;
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
    if (!type.valid() || rank < 0 ||
        api_.H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
      api_.H5Eclear2(H5E_DEFAULT);
      return Status::ok();
    }
    if (self != nullptr) {
      // External storage is refused for such a shard's own dataset in probe; HDF5 would not
      // open it from there either.
      Status ok = storage_in_file(api_, dataset, type.get(), dims, self->size);
      if (ok) ok = chunk_element_size_matches(api_, file, dataset, type.get(), self->read);
      if (ok) ok = defined_everywhere(api_, dataset);
      if (ok) ok = filters_available(api_, dataset);
      api_.H5Eclear2(H5E_DEFAULT);
      return ok;
    }
    // Our own descriptor of the file HDF5 opened by name: its size, and the bytes of the
    // layout message (non-blocking: the name was a regular file a moment ago).
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct ::stat st {};
    const bool regular = fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    struct Closer {
      int fd;
      ~Closer() {
        if (fd >= 0) ::close(fd);
      }
    } const closer{fd};
    if (!regular) {
      return Status(ErrorCode::kFormat, path + ": not a regular file");
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const ReadBytes read = [fd, size](std::uint64_t offset, std::size_t n, std::byte* out) {
      if (offset > size || n > size - offset) return false;
      std::size_t done = 0;
      while (done < n) {
        const ssize_t got = ::pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
        if (got <= 0) return false;
        done += static_cast<std::size_t>(got);
      }
      return true;
    };
    Status ok = storage_in_file(api_, dataset, type.get(), dims, size);
    if (ok) ok = chunk_element_size_matches(api_, file, dataset, type.get(), read);
    if (ok) ok = defined_everywhere(api_, dataset);
    if (ok) ok = filters_available(api_, dataset);
    if (ok) ok = source_external_files(dataset, type.get(), dims, path);
    api_.H5Eclear2(H5E_DEFAULT);
    return ok;
  }

  // A source's external storage files, where HDF5 opens them (external_path): each that is
  // there must be a regular file (a FIFO's plain open waits for a writer) that reaches as far
  // as the source's data runs in it (HDF5 reads what lies past its end as zeros). A missing
  // one fails HDF5's read on its own.
  Status source_external_files(hid_t dataset, hid_t type, const std::vector<hsize_t>& dims,
                               const std::string& path) {
    for (const auto& [name, end] : external_ends(api_, dataset, type, dims)) {
      const std::string full = external_path(path, name);
      struct ::stat st {};
      if (::stat(full.c_str(), &st) != 0) continue;
      if (!S_ISREG(st.st_mode)) {
        return Status(ErrorCode::kFormat, "external storage file " + full + ": not a regular file");
      }
      if (static_cast<std::uint64_t>(st.st_size) < end) {
        return Status(ErrorCode::kFormat,
                      "external storage file " + full + " holds " + std::to_string(st.st_size) +
                          " bytes, but the dataset's data runs to byte " + std::to_string(end) +
                          " of it: the file is truncated (HDF5 would read the rest as zeros)");
      }
    }
    return Status::ok();
  }

  // A printf-style name with "%b" as block `block` and "%%" as '%'.
  static std::string printf_name(const std::string& pattern, std::uint64_t block) {
    std::string out;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == '%' && i + 1 < pattern.size() &&
          (pattern[i + 1] == 'b' || pattern[i + 1] == '%')) {
        out += pattern[i + 1] == 'b' ? std::to_string(block) : "%";
        ++i;
      } else {
        out += pattern[i];
      }
    }
    return out;
  }

  static constexpr std::uint64_t kMaxPrintfBlocks = 1 << 16;

  // The regular files (and their dataset names) one mapping of a virtual dataset in the file
  // at `path` reads, where HDF5 finds them: its file, or for a printf-style file or dataset
  // name ("%b") the files of blocks 0, 1, ... up to the first that is missing (HDF5's
  // default printf gap of 0). A name HDF5 would open that is no regular file is refused: a
  // FIFO's plain open waits for a writer forever. `where` begins the message.
  static Result<std::vector<std::pair<std::string, std::string>>> virtual_mapping_sources(
      const std::string& path, const std::string& file_name, const std::string& dataset_name,
      const std::string& where) {
    std::vector<std::pair<std::string, std::string>> out;
    const bool blocks = printf_style(file_name) || printf_style(dataset_name);
    for (std::uint64_t b = 0; b < (blocks ? kMaxPrintfBlocks : 1); ++b) {
      const std::string name = blocks ? printf_name(file_name, b) : file_name;
      std::string odd, dangling, link;
      const std::optional<std::string> target =
          virtual_source_file(path, name, &odd, &dangling, &link);
      if (!odd.empty()) {
        return Status(ErrorCode::kFormat, where + " is a virtual dataset whose source file " + odd +
                                              " is not a regular file (HDF5 would open it to "
                                              "read the rows: a FIFO waits for a writer)");
      }
      if (!dangling.empty()) {
        return Status(
            ErrorCode::kFormat,
            where + " is a virtual dataset whose source file " + dangling +
                (link == dangling ? std::string(" is") : " lies under " + link + ", which is") +
                " a symbolic link whose target does not exist (HDF5 would read its "
                "rows as the fill value)");
      }
      if (!target) break;
      out.emplace_back(*target, blocks ? printf_name(dataset_name, b) : dataset_name);
    }
    return out;
  }

  // HDF5 follows an external link into another file, and the offsets and chunk addresses it
  // then gives are that file's: the direct paths would read them from the shard's bytes (other
  // data, silently), the end-of-file checks would measure the wrong file, and a manifest's
  // checksum covers the shard alone. H5Iget_file_id gives back the shard's own id for a
  // dataset stored in it, and another id for a file HDF5 opened on the way.
  Status check_in_the_shard(const OpenDataset& d, const std::string& path) {
    Hid owner(api_.H5Iget_file_id(d.dataset.get()), api_.H5Fclose);
    if (!owner.valid()) {
      return hdf5_failure(ErrorCode::kFormat,
                          path + ": dataset '" + d.name + "': the file holding it: ");
    }
    if (owner.get() == d.file.get()) return Status::ok();
    std::string other(PATH_MAX + 1, '\0');
    const ssize_t n = api_.H5Fget_name(owner.get(), other.data(), other.size());
    other.resize(n > 0 ? std::min<std::size_t>(static_cast<std::size_t>(n), PATH_MAX) : 0);
    return Status(ErrorCode::kFormat,
                  path + ": dataset '" + d.name + "' is stored in another file (" +
                      (other.empty() ? std::string("unnamed") : other) +
                      ") that an external link leads to; only datasets stored in the shard "
                      "itself are read (name that file as the shard instead)");
  }

  // A traversal of `name` in the shard at `path` met an external link (t_refused_link), which
  // is refused as check_in_the_shard refuses what one leads to, without opening its file.
  Status refused_link_error(const std::string& path, const std::string& name) {
    api_.H5Eclear2(H5E_DEFAULT);
    const RefusedLink link = std::exchange(t_refused_link, {});
    // Where a local shard's link leads (the access list's prefix is the shard's directory);
    // an object's link would be opened on this host, so it is shown as written.
    const bool as_written =
        link.file.empty() || link.file.front() == '/' || !ctx_.source->traits(path).kernel_files;
    const std::string file = as_written ? link.file : parent_directory(path) + "/" + link.file;
    return Status(ErrorCode::kFormat,
                  path + ": dataset '" + name + "' is stored in another file (" + file +
                      ") that an external link leads to; only datasets stored in the shard "
                      "itself are read (name that file as the shard instead; the link, to '" +
                      link.object + "', is not followed)");
  }

  // A dataset with external storage has its data in files that HDF5 opens
  // itself, by name, with a plain (blocking) open, when it reads. We cannot
  // hand it checked descriptors, so each file that exists is checked here,
  // by the name HDF5 will use (at discovery and before each read): a FIFO,
  // socket or device is refused instead of hanging the read. This narrows
  // but cannot close the window between the check and HDF5's open.
  // `efile_prefix`: the dataset's pinned prefix (pinned_external_prefix), "" for HDF5's search
  // (external_path).
  Status check_external_files(const OpenDataset& d, const std::string& path,
                              const std::string& efile_prefix) {
    Hid dcpl(api_.H5Dget_create_plist(d.dataset.get()), api_.H5Pclose);
    const int count = dcpl.valid() ? api_.H5Pget_external_count(dcpl.get()) : -1;
    if (count <= 0) {
      api_.H5Eclear2(H5E_DEFAULT);
      return Status::ok();
    }
    for (int i = 0; i < count; ++i) {
      std::vector<char> buf(PATH_MAX + 1, '\0');
      off_t offset = 0;
      hsize_t size = 0;
      if (api_.H5Pget_external(dcpl.get(), static_cast<unsigned>(i), buf.size() - 1, buf.data(),
                               &offset, &size) < 0) {
        return Status(ErrorCode::kFormat, path + ": dataset '" + d.name + "': external file " +
                                              std::to_string(i) + ": " + take_error(api_));
      }
      const std::string file = buf.data();
      const std::string full = efile_prefix.empty() || file.empty() || file.front() == '/'
                                   ? external_path(path, file)
                                   : efile_prefix + file;
      struct ::stat st {};
      if (::stat(full.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        return Status(ErrorCode::kFormat, path + ": dataset '" + d.name + "': external file " +
                                              full + ": not a regular file");
      }
    }
    return Status::ok();
  }

  // The directory (ending in '/') in which the dataset's relative external storage names are
  // to be read so that HDF5 opens the files discovery found (`linked`, each external name's file
  // in the order external_names gives), where HDF5's own search would now find others: its
  // search follows the working directory, which a chdir or a worker started elsewhere changes
  // after discovery. "" where the search finds them as it is. Refused, naming both paths,
  // where HDF5_EXTFILE_PREFIX is set (HDF5 takes it over the access list's prefix) or this
  // HDF5 has no H5Pset_efile_prefix.
  Result<std::string> pinned_external_prefix(const OpenDataset& d, const std::string& path,
                                             const std::vector<LinkedFile>& linked) {
    const std::string where = path + ": dataset '" + d.name + "'";
    SHARDLOAD_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                               external_names(api_, d.dataset.get(), where));
    for (std::size_t i = 0; i < names.size() && i < linked.size(); ++i) {
      const std::string& name = names[i];
      const std::string& found = linked[i].path;
      const std::string now = external_path(path, name);
      if (name.empty() || name.front() == '/' || now == found) continue;
      const bool ends_with_name =
          found.size() > name.size() &&
          found.compare(found.size() - name.size(), name.size(), name) == 0 &&
          found[found.size() - name.size() - 1] == '/';
      if (ends_with_name && external_env_prefix().empty() && api_.H5Pset_efile_prefix != nullptr) {
        return found.substr(0, found.size() - name.size());
      }
      return Status(ErrorCode::kFormat,
                    where + ": external storage file '" + name + "' was " + found +
                        " at discovery, and HDF5 would now read " + now +
                        " (a relative name, resolved against " +
                        (external_env_prefix().empty()
                             ? std::string("the working directory")
                             : "HDF5_EXTFILE_PREFIX '" + external_env_prefix() + "'") +
                        ", which changed since discovery); read in the working directory "
                        "discovery ran in, or store an absolute name");
    }
    return std::string();
  }

  // The directory (ending in '/') HDF5 is to look in first for the virtual dataset's relative
  // source names so that it opens the files discovery found (`linked`, the shard's linked files,
  // which hold each source once), where its own search would now find others or none: after
  // HDF5_VDS_PREFIX's directories and before the shard's own, it looks in the working
  // directory, which a chdir or a worker started elsewhere changes after discovery. "" where
  // the search finds them as it is. Refused, naming both paths, where no one directory serves
  // (sources found in several that the search now misses, HDF5_VDS_PREFIX set, which HDF5
  // takes before the access list's prefix, or an HDF5 without H5Pset_virtual_prefix).
  Result<std::string> pinned_virtual_prefix(const OpenDataset& d, const std::string& path,
                                            const std::vector<LinkedFile>& linked) {
    std::vector<std::string> names;
    const auto add = [&names](const std::string& name) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    };
    for (const VirtualMapping& m : virtual_mappings(d.dataset.get())) {
      if (!m.file || m.file->empty() || *m.file == "." || m.file->front() == '/') continue;
      if (!printf_style(*m.file)) {
        add(*m.file);
        continue;
      }
      // A printf-style name's blocks: those discovery found are among the linked files.
      for (std::uint64_t b = 0; b <= linked.size(); ++b) add(printf_name(*m.file, b));
    }
    api_.H5Eclear2(H5E_DEFAULT);
    const auto discovered = [&](const std::string& file) {
      return std::any_of(linked.begin(), linked.end(),
                         [&](const LinkedFile& x) { return x.path == file; });
    };
    // Where HDF5 finds `name` now, made absolute as the layout's paths are; "" for nowhere.
    const auto found_now = [&](const std::string& name) {
      const std::optional<std::string> now = virtual_source_file(path, name);
      return now ? absolute_path(*now) : std::string();
    };
    const auto refuse = [&](const std::string& name, const std::string& found,
                            const std::string& now, const std::string& why) {
      return Status(ErrorCode::kFormat,
                    path + ": dataset '" + d.name + "': virtual dataset source file '" + name +
                        "' was " + found + " at discovery, and HDF5 would now read " +
                        (now.empty() ? std::string("none (its fill value)") : now) +
                        " (a relative name, resolved against the working directory, which "
                        "changed since discovery" +
                        why +
                        "); read in the working directory discovery ran in, or store an "
                        "absolute name");
    };
    std::string prefix;
    std::string pinned_found;
    for (const std::string& name : names) {
      const std::string now = found_now(name);
      if (!now.empty() && discovered(now)) continue;
      const std::string tail = "/" + name;
      const auto at = std::find_if(linked.begin(), linked.end(), [&](const LinkedFile& x) {
        return x.path.size() > tail.size() &&
               x.path.compare(x.path.size() - tail.size(), tail.size(), tail) == 0;
      });
      // Not found at discovery either: HDF5 gave its fill value then too.
      if (at == linked.end()) continue;
      const std::string dir = at->path.substr(0, at->path.size() - name.size());
      if (api_.H5Pset_virtual_prefix == nullptr) return refuse(name, at->path, now, "");
      if (!prefix.empty() && dir != prefix) {
        return refuse(name, at->path, now,
                      "; its sources were found in " + prefix + " and " + dir +
                          ", and one prefix can lead HDF5 to one of them");
      }
      prefix = dir;
      pinned_found = at->path;
    }
    if (prefix.empty()) return prefix;
    // HDF5 takes a file under HDF5_VDS_PREFIX first, then the prefix, before the shard's own
    // directory and the working directory: no source may now be taken from another file.
    for (const std::string& name : names) {
      std::string now = found_now(name);
      const bool from_env = !now.empty() &&
                            now != absolute_path(path.substr(0, path.rfind('/') + 1) + name) &&
                            now != absolute_path(name);
      struct ::stat st {};
      if (const std::string first = prefix + name;
          !from_env && ::stat(first.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        now = first;
      }
      if (!now.empty() && !discovered(now)) return refuse(name, pinned_found, now, "");
    }
    return prefix;
  }

  // A failed HDF5 call: the store's error where a remote read failed inside it (the URL and
  // the store's words, which HDF5 reports only as "read failed"), else `what` and HDF5's
  // messages.
  Status hdf5_failure(ErrorCode code, const std::string& what) {
    Status remote = take_remote_error();
    if (!remote.is_ok()) {
      api_.H5Eclear2(H5E_DEFAULT);
      return remote;
    }
    return Status(code, what + take_error(api_));
  }

  static bool prefix_uses_origin(const char* variable) {
    return detail::environment_value(variable).value_or(std::string()).find("${ORIGIN}") !=
           std::string::npos;
  }

  static std::string parent_directory(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
  }

  FormatOptions options_;
  ReaderContext ctx_;
  const Hdf5Api& api_;
  // The direct path's scratch, reused across chunks and calls: one chunk as
  // stored and one decoded, so the memory stays two chunks whatever the rows.
  std::vector<std::byte> stored_;
  std::vector<std::byte> decoded_;
  z_stream zlib_{};
  bool zlib_ready_ = false;
};

}  // namespace

bool hdf5_rows_at_offset(const Shard& shard) {
  // A contiguous dataset's offset is past the superblock, never 0: 0 is "not found".
  const std::string_view extra = shard.extra;
  return shard.data_offset > 0 && shard.linked.empty() && extra.size() >= kRowsAtOffset.size() &&
         extra.substr(extra.size() - kRowsAtOffset.size()) == kRowsAtOffset;
}

Result<std::unique_ptr<ShardReader>> make_hdf5_reader(const FormatOptions& options,
                                                      const ReaderContext& context) {
  SHARDLOAD_ASSIGN_OR_RETURN(const Hdf5Api* api, hdf5_api());
  return std::unique_ptr<ShardReader>(std::make_unique<Hdf5Reader>(options, context, api));
}

}  // namespace shardload::detail
