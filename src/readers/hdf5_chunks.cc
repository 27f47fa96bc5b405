// Direct-chunk decoding: chunks filtered by exactly deflate (optionally after shuffle) are
// read with H5Dread_chunk and inflated by the reader itself, outside HDF5's lock; what they
// need to know of a dataset, and the copy of a decoded chunk's box into the rows.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "readers/detail/hdf5.hpp"
#include "shardload/byte_order.hpp"

namespace shardload::detail::hdf5 {

// Rows along axis 0 of a chunked dataset's chunk; 0 for contiguous or compact storage.
// Called with the lock held.
std::int64_t chunk_rows(const Hdf5Api& api, hid_t dataset, std::size_t rank) {
  if (rank == 0) return 0;
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  if (!dcpl.valid() || api.H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return 0;
  std::vector<hsize_t> chunk(rank, 0);
  if (api.H5Pget_chunk(dcpl.get(), static_cast<int>(rank), chunk.data()) !=
      static_cast<int>(rank)) {
    return 0;
  }
  return static_cast<std::int64_t>(chunk[0]);
}

Status filters_available(const Hdf5Api& api, hid_t dataset) {
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  if (!dcpl.valid() || api.H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return Status::ok();
  for (int i = 0, n = api.H5Pget_nfilters(dcpl.get()); i < n && i < 32; ++i) {
    unsigned flags = 0, config = 0;
    unsigned cd[8] = {};
    std::size_t ncd = 8;
    char name[64] = {};
    const H5Z_filter_t id = api.H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd,
                                               cd, sizeof name - 1, name, &config);
    // Asking loads a plugin from HDF5_PLUGIN_PATH where one is there.
    if (id < 0 || api.H5Zfilter_avail(id) > 0) continue;
    std::string shown;
    for (const char* c = name; *c != '\0'; ++c) {
      if (*c >= ' ' && *c <= '~' && *c != '\'') shown += *c;
    }
    const std::string filter = (shown.empty() ? std::string("filter") : "filter '" + shown + "'") +
                               " (id " + std::to_string(id) + ")";
    // h5py's LZF is compiled into h5py itself, no plugin; hdf5plugin ships most others.
    const std::string where =
        id == 32000 ? "h5py reads it with the LZF filter built into h5py itself, which "
                      "no other program's HDF5 can load: rewrite the dataset with "
                      "compression='gzip', or put an LZF filter plugin in HDF5_PLUGIN_PATH"
                    : "h5py reads it where a plugin provides the filter (the hdf5plugin "
                      "package ships the common ones): set HDF5_PLUGIN_PATH to that "
                      "directory (hdf5plugin.PLUGIN_PATH), or rewrite the dataset with "
                      "compression='gzip'";
    return Status(ErrorCode::kFormat,
                  "compressed with the " + filter +
                      ", which the HDF5 library shardload loads does not have; " + where);
  }
  return Status::ok();
}

namespace {

// Whether the dataset's edge chunks (those reaching past its extent in some dimension) are
// stored unfiltered: H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS, a layout flag their filter mask
// does not show. Such a chunk holds its raw bytes, which HDF5's own read takes as they are.
bool edge_chunks_unfiltered(const Hdf5Api& api, hid_t dcpl) {
  unsigned opts = 0;
  return api.H5Pget_chunk_opts != nullptr && api.H5Pget_chunk_opts(dcpl, &opts) >= 0 &&
         (opts & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS) != 0;
}

// The memory type of `dtype` with its numbers in the other byte order than the host's; invalid
// where HDF5 cannot build it. h5py's complex is built member by member: each half has its own
// order.
Hid other_order(const Hdf5Api& api, hid_t mem, DType dtype) {
  const H5T_order_t other = host_is_little_endian() ? H5T_ORDER_BE : H5T_ORDER_LE;
  if (dtype.kind == DTypeKind::kComplex) {
    const std::size_t half = dtype.size / 2u;
    Hid part(api.H5Tcopy(half == 4 ? api.H5T_NATIVE_FLOAT_g : api.H5T_NATIVE_DOUBLE_g),
             api.H5Tclose);
    Hid t(api.H5Tcreate(H5T_COMPOUND, dtype.size), api.H5Tclose);
    if (!part.valid() || !t.valid() || api.H5Tset_order(part.get(), other) < 0 ||
        api.H5Tinsert(t.get(), "r", 0, part.get()) < 0 ||
        api.H5Tinsert(t.get(), "i", half, part.get()) < 0) {
      return Hid();
    }
    return t;
  }
  Hid t(api.H5Tcopy(mem), api.H5Tclose);
  if (!t.valid() || api.H5Tset_order(t.get(), other) < 0) return Hid();
  return t;
}

}  // namespace

std::optional<std::size_t> stored_swap_unit(const Hdf5Api& api, hid_t type, DType dtype) {
  const auto cls = classify(api, type);
  if (!cls || !(*cls == dtype)) return std::nullopt;
  // The whole type is compared, not a few of its properties: class, size, byte order,
  // precision, offset, padding, sign, the float's fields, bias and normalisation, a
  // compound's members and an enum's values. Any difference (an unnormalised mantissa, pad
  // bits, a member at another offset) leaves the conversion to H5Dread.
  auto mem = memory_type(api, dtype);
  if (!mem) return std::nullopt;
  if (api.H5Tequal(type, mem->get()) > 0) return std::size_t{0};
  // h5py's bool is one byte: no other order to try (nor can an enum's order change).
  if (dtype.kind == DTypeKind::kBool) return std::nullopt;
  const Hid other = other_order(api, mem->get(), dtype);
  if (!other.valid() || api.H5Tequal(type, other.get()) <= 0) return std::nullopt;
  const std::size_t unit = dtype.kind == DTypeKind::kComplex ? dtype.size / 2u : dtype.size;
  return unit > 1 ? unit : std::size_t{0};
}

// Whether a contiguous dataset's storage was never allocated (never written: it reads as its
// fill value). H5Dget_offset alone does not say: it adds the file's base address (the user
// block's size) to the undefined address too, so behind a user block of 512 bytes an
// unallocated dataset's offset is 511, not HADDR_UNDEF.
static bool never_allocated(const Hdf5Api& api, hid_t dataset) {
  H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
  if (api.H5Dget_space_status(dataset, &status) >= 0 && status == H5D_SPACE_STATUS_NOT_ALLOCATED) {
    return true;
  }
  return api.H5Dget_offset(dataset) == HADDR_UNDEF;
}

std::optional<ContiguousRows> contiguous_rows(const Hdf5Api& api, hid_t dataset, hid_t type,
                                              DType dtype, const std::vector<hsize_t>& dims,
                                              std::uint64_t file_size) {
  if (dims.empty() || dtype.size == 0) return std::nullopt;
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  if (!dcpl.valid() || api.H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS ||
      api.H5Pget_external_count(dcpl.get()) != 0) {
    return std::nullopt;
  }
  // The dataset's bytes, checked against overflow: what the file must hold whole.
  std::uint64_t bytes = dtype.size;
  for (const hsize_t d : dims) {
    if (d == 0) return std::nullopt;  // nothing stored: H5Dread gives the (empty) answer
    if (bytes > std::numeric_limits<std::uint64_t>::max() / d) return std::nullopt;
    bytes *= d;
  }
  // Unallocated storage reads as the fill value; H5Dread gives that.
  if (never_allocated(api, dataset)) return std::nullopt;
  const haddr_t offset = api.H5Dget_offset(dataset);
  if (api.H5Dget_storage_size(dataset) != bytes || offset > file_size ||
      bytes > file_size - offset) {
    return std::nullopt;
  }
  const std::optional<std::size_t> swap = stored_swap_unit(api, type, dtype);
  if (!swap) return std::nullopt;
  return ContiguousRows{static_cast<std::uint64_t>(offset), *swap};
}

Status storage_in_file(const Hdf5Api& api, hid_t dataset, hid_t type,
                       const std::vector<hsize_t>& dims, std::uint64_t file_size) {
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  if (dcpl.valid() && api.H5Pget_layout(dcpl.get()) == H5D_COMPACT) {
    // A compact layout message's data is its own size field's bytes; HDF5 1.10 copies the
    // dataset's bytes out of a buffer of that size without comparing the two (past its end:
    // other memory's values, or a fault where it says 0). Newer HDF5s refuse the dataset.
    std::uint64_t bytes = api.H5Tget_size(type);
    bool overflow = bytes == 0;
    for (const hsize_t d : dims) overflow = overflow || __builtin_mul_overflow(bytes, d, &bytes);
    const std::uint64_t stored = api.H5Dget_storage_size(dataset);
    if (!overflow && stored == bytes) return Status::ok();
    return Status(ErrorCode::kFormat, "its compact storage holds " + std::to_string(stored) +
                                          " bytes, where its " +
                                          (overflow ? std::string("elements need more than 2^64")
                                                    : "elements need " + std::to_string(bytes)) +
                                          ": the file is damaged");
  }
  if (!dcpl.valid() || api.H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS ||
      api.H5Pget_external_count(dcpl.get()) != 0) {
    return Status::ok();
  }
  if (never_allocated(api, dataset)) return Status::ok();  // never written: the fill value
  const haddr_t offset = api.H5Dget_offset(dataset);
  // What HDF5 reads: the elements' bytes, or the storage size its layout message records
  // when that is larger. An extent past 2^64 is past any file's end too.
  std::uint64_t bytes = api.H5Tget_size(type);
  bool overflow = bytes == 0;
  for (const hsize_t d : dims) overflow = overflow || __builtin_mul_overflow(bytes, d, &bytes);
  const std::uint64_t recorded = api.H5Dget_storage_size(dataset);
  if (!overflow && bytes == 0 && recorded != 0) {
    // Storage for no element: a dataspace cut to 0 (newer HDF5s refuse it).
    return Status(ErrorCode::kFormat, "its contiguous storage holds " + std::to_string(recorded) +
                                          " bytes, where its elements (none: a dimension is 0) "
                                          "need 0: the dataspace is damaged");
  }
  if (!overflow && recorded < bytes) {
    // HDF5 1.10 bounds its read by the recorded size and leaves the rest of the caller's
    // buffer as it was (zeros, or rows placed by an earlier tile); newer HDF5s read the
    // extent. Neither is the file's answer for sure: refuse the disagreement.
    return Status(ErrorCode::kFormat, "its contiguous storage holds " + std::to_string(recorded) +
                                          " bytes, where its elements need " +
                                          std::to_string(bytes) + ": the file is damaged");
  }
  if (!overflow) bytes = std::max<std::uint64_t>(bytes, recorded);
  if (bytes == 0) return Status::ok();
  if (!overflow && offset <= file_size && bytes <= file_size - offset) return Status::ok();
  return Status(ErrorCode::kFormat,
                "its contiguous storage (" +
                    (overflow ? std::string("more than 2^64") : std::to_string(bytes)) +
                    " bytes at offset " + std::to_string(offset) +
                    ") runs past the end of the file (" + std::to_string(file_size) +
                    " bytes): the file is truncated or damaged");
}

Status defined_everywhere(const Hdf5Api& api, hid_t dataset) {
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  if (!dcpl.valid()) return Status::ok();
  H5D_fill_time_t when = H5D_FILL_TIME_IFSET;
  const bool never = api.H5Pget_fill_time(dcpl.get(), &when) >= 0 && when == H5D_FILL_TIME_NEVER;
  H5D_fill_value_t value = H5D_FILL_VALUE_DEFAULT;
  const bool undefined =
      api.H5Pfill_value_defined(dcpl.get(), &value) >= 0 && value == H5D_FILL_VALUE_UNDEFINED;
  if (!never && !undefined) return Status::ok();
  H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
  if (api.H5Dget_space_status(dataset, &status) < 0 || status == H5D_SPACE_STATUS_ALLOCATED) {
    return Status::ok();
  }
  return Status(ErrorCode::kFormat,
                std::string(status == H5D_SPACE_STATUS_NOT_ALLOCATED
                                ? "its storage was never written"
                                : "some of its chunks were never written") +
                    (never ? " and its fill time is 'never'" : " and it has no fill value") +
                    ", so HDF5 gives those elements no value (a read would return whatever "
                    "memory held); write the dataset whole or give it a fill " +
                    (never ? "time" : "value"));
}

Status chunk_in_file(haddr_t addr, hsize_t size, std::uint64_t file_size,
                     const std::vector<hsize_t>& offset) {
  if (addr == HADDR_UNDEF || (addr <= file_size && size <= file_size - addr)) {
    return Status::ok();
  }
  std::string at;
  for (std::size_t i = 0; i < offset.size(); ++i) at += (i ? ", " : "") + std::to_string(offset[i]);
  return Status(ErrorCode::kFormat,
                "its chunk at (" + at + ") (" + std::to_string(size) + " bytes at offset " +
                    std::to_string(addr) + ") runs past the end of the file (" +
                    std::to_string(file_size) + " bytes): the file is truncated or damaged");
}

bool next_chunk(std::vector<hsize_t>& at, const std::vector<hsize_t>& first,
                const std::vector<hsize_t>& last) {
  std::size_t i = at.size();
  while (i > 0 && at[i - 1] == last[i - 1]) {
    at[i - 1] = first[i - 1];
    --i;
  }
  if (i == 0) return false;
  ++at[i - 1];
  return true;
}

Status chunks_in_file(const Hdf5Api& api, hid_t dataset, const std::vector<hsize_t>& dims,
                      std::int64_t lo, std::int64_t hi, std::uint64_t file_size) {
  if (api.H5Dget_chunk_info_by_coord == nullptr || hi <= lo || dims.empty()) return Status::ok();
  const std::size_t rank = dims.size();
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  if (!dcpl.valid() || api.H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return Status::ok();
  std::vector<hsize_t> chunk(rank, 0);
  if (api.H5Pget_chunk(dcpl.get(), static_cast<int>(rank), chunk.data()) !=
      static_cast<int>(rank)) {
    return Status::ok();
  }
  // HDF5 reads the size the chunk index gives, runs the filters over it, and leaves what
  // they did not fill of its chunk buffer as it was, whatever memory that held. Where the
  // filters' output size is known from the input's, the stored size is checked: a chunk
  // stored raw (no filters, or every one skipped by its mask) must hold all its bytes, and
  // one of shuffle (same size) and Fletcher-32 (4 more) exactly what they make of them.
  // Deflate is checked where the chunk is inflated outside HDF5 (read_direct); other filters
  // cannot be checked without running them.
  std::vector<H5Z_filter_t> filters;
  for (int i = 0, n = api.H5Pget_nfilters(dcpl.get()); i < n && i < 32; ++i) {
    unsigned flags = 0, config = 0;
    unsigned cd[8] = {};
    std::size_t ncd = 8;
    char name[64] = {};
    filters.push_back(api.H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd,
                                         sizeof name, name, &config));
  }
  std::uint64_t raw_bytes = 0;
  {
    Hid type(api.H5Dget_type(dataset), api.H5Tclose);
    raw_bytes = type.valid() ? api.H5Tget_size(type.get()) : 0;
    for (const hsize_t c : chunk) raw_bytes *= c;
  }
  // The bytes a chunk stored with `mask` must hold (exactly, or at least for a raw one);
  // nullopt where its filters' output size cannot be told.
  const auto stored_bytes = [&](unsigned mask, bool* raw,
                                std::string* names) -> std::optional<std::uint64_t> {
    std::uint64_t bytes = raw_bytes;
    *raw = true;
    for (std::size_t i = 0; i < filters.size(); ++i) {
      if ((mask >> i) & 1u) continue;  // skipped for this chunk
      *raw = false;
      if (filters[i] == H5Z_FILTER_SHUFFLE) {
        *names += std::string(names->empty() ? "" : ", ") + "shuffle";
      } else if (filters[i] == H5Z_FILTER_FLETCHER32) {
        *names += std::string(names->empty() ? "" : ", ") + "fletcher32";
        bytes += 4;
      } else {
        return std::nullopt;
      }
    }
    return bytes;
  };
  std::vector<hsize_t> first(rank, 0), last(rank, 0);
  for (std::size_t i = 0; i < rank; ++i) {
    if (chunk[i] == 0 || (i > 0 && dims[i] == 0)) return Status::ok();  // nothing stored
    last[i] = (dims[i] - 1) / chunk[i];
  }
  // An edge chunk of such a dataset is its raw bytes whatever its mask says: held to the
  // filters' size, a valid file was called damaged.
  const bool edges_raw = edge_chunks_unfiltered(api, dcpl.get());
  first[0] = static_cast<hsize_t>(lo) / chunk[0];
  last[0] = static_cast<hsize_t>(hi - 1) / chunk[0];
  std::vector<hsize_t> at = first, offset(rank, 0);
  for (;;) {
    for (std::size_t i = 0; i < rank; ++i) offset[i] = at[i] * chunk[i];
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    // A chunk HDF5 cannot locate is left to H5Dread, which reports why.
    if (api.H5Dget_chunk_info_by_coord(dataset, offset.data(), &mask, &addr, &size) >= 0) {
      SHARDLOAD_RETURN_IF_ERROR(chunk_in_file(addr, size, file_size, offset));
      bool edge = false;
      for (std::size_t i = 0; i < rank; ++i) edge = edge || offset[i] + chunk[i] > dims[i];
      bool raw = false;
      std::string names;
      const std::optional<std::uint64_t> need =
          stored_bytes(edges_raw && edge ? ~0u : mask, &raw, &names);
      if (addr != HADDR_UNDEF && need && raw_bytes != 0 && (raw ? size < *need : size != *need)) {
        std::string where;
        for (std::size_t i = 0; i < rank; ++i) {
          where += (i ? ", " : "") + std::to_string(offset[i]);
        }
        return Status(ErrorCode::kFormat,
                      "its chunk at (" + where + ") holds " + std::to_string(size) +
                          " bytes, but " +
                          (raw ? std::to_string(*need) +
                                     " unfiltered bytes make the chunk: the chunk index is "
                                     "damaged"
                               : "its filters (" + names + ") need " + std::to_string(*need) +
                                     ": the chunk or the chunk index is damaged"));
      }
    }
    if (!next_chunk(at, first, last)) break;
  }
  return Status::ok();
}

// The direct plan when the dataset is chunked, filtered by exactly deflate
// (optionally after shuffle), and stored in a type whose bytes are the
// destination's up to byte order. Anything else (fletcher32, szip, nbit,
// scale-offset, unknown filters, padded compounds, VAX order) is nullopt and
// read by H5Dread, which handles it exactly. Called with the lock held; leaves
// HDF5's error stack for the caller to clear.
std::optional<DirectPlan> direct_plan(const Hdf5Api& api, hid_t dataset, DType dtype,
                                      const std::vector<hsize_t>& dims) {
  if (api.H5Dget_chunk_storage_size == nullptr || api.H5Dread_chunk == nullptr) return std::nullopt;
  DirectPlan p;
  const int rank = static_cast<int>(dims.size());
  Hid dcpl(api.H5Dget_create_plist(dataset), api.H5Pclose);
  if (!dcpl.valid() || api.H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return std::nullopt;
  p.chunk.assign(dims.size(), 0);
  if (api.H5Pget_chunk(dcpl.get(), rank, p.chunk.data()) != rank) return std::nullopt;
  // An edge chunk stored unfiltered reads with mask 0, as a deflated one: inflated here it was
  // refused as corrupt. Those chunks go to H5Dread, which knows the flag (unfiltered_edge).
  p.edges_unfiltered = edge_chunks_unfiltered(api, dcpl.get());

  // The pipeline in write order: [shuffle,] deflate; read undoes it backwards.
  const int nfilters = api.H5Pget_nfilters(dcpl.get());
  if (nfilters < 1 || nfilters > 2) return std::nullopt;
  std::size_t shuffle_size = 0;
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, config = 0;
    unsigned cd[8] = {};
    std::size_t ncd = 8;
    char name[64] = {};
    const H5Z_filter_t f = api.H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd,
                                              cd, sizeof name, name, &config);
    if (f != (i == nfilters - 1 ? H5Z_FILTER_DEFLATE : H5Z_FILTER_SHUFFLE)) return std::nullopt;
    if (f == H5Z_FILTER_SHUFFLE) {
      // HDF5 records the element size it shuffled by as the first parameter.
      if (ncd < 1) return std::nullopt;
      p.shuffle = true;
      shuffle_size = cd[0];
    }
  }

  Hid type(api.H5Dget_type(dataset), api.H5Tclose);
  if (!type.valid()) return std::nullopt;
  const std::optional<std::size_t> swap = stored_swap_unit(api, type.get(), dtype);
  if (!swap) return std::nullopt;
  p.elem = dtype.size;
  p.swap_unit = *swap;
  if (p.shuffle && shuffle_size != p.elem) return std::nullopt;

  std::size_t elems = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    // An empty trailing extent has no bytes to decode; H5Dread handles it.
    if (p.chunk[i] == 0 || (i > 0 && dims[i] == 0)) return std::nullopt;
    if (elems > kMaxDirectChunkBytes / p.elem / p.chunk[i]) return std::nullopt;
    elems *= p.chunk[i];
  }
  p.chunk_elems = elems;
  p.chunk_bytes = elems * p.elem;
  return p;
}

// Copies the box `count` at chunk-local `src_start` of a decoded chunk into
// the destination (shape `dst_dims`, C order) at `dst_start`, undoing the
// shuffle and the byte order on the way. Dimensions that both the chunk and
// the destination hold whole merge into one contiguous run, so a chunk of
// full rows is one copy.
void copy_box(const DirectPlan& p, const std::byte* raw, const std::vector<hsize_t>& src_start,
              const std::vector<hsize_t>& dst_dims, const std::vector<hsize_t>& dst_start,
              const std::vector<hsize_t>& count, std::byte* dst) {
  const std::size_t rank = count.size();
  std::vector<std::size_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (std::size_t i = rank - 1; i > 0; --i) {
    src_stride[i - 1] = src_stride[i] * p.chunk[i];
    dst_stride[i - 1] = dst_stride[i] * dst_dims[i];
  }
  std::size_t k = rank - 1;
  std::size_t run = count[k];
  while (k > 0 && count[k] == p.chunk[k] && count[k] == dst_dims[k]) {
    --k;
    run *= count[k];
  }
  const std::size_t es = p.elem;
  std::vector<hsize_t> at(k, 0);  // position within the box in the outer dimensions
  for (;;) {
    std::size_t s = src_start[k] * src_stride[k];
    std::size_t d = dst_start[k] * dst_stride[k];
    for (std::size_t i = 0; i < k; ++i) {
      s += (src_start[i] + at[i]) * src_stride[i];
      d += (dst_start[i] + at[i]) * dst_stride[i];
    }
    std::byte* out = dst + d * es;
    if (p.shuffle) {
      // Shuffled: byte j of element e sits at j * chunk_elems + e.
      for (std::size_t j = 0; j < es; ++j) {
        const std::byte* plane = raw + j * p.chunk_elems + s;
        for (std::size_t e = 0; e < run; ++e) out[e * es + j] = plane[e];
      }
    } else {
      std::memcpy(out, raw + s * es, run * es);
    }
    if (p.swap_unit != 0) byte_swap(out, run * es / p.swap_unit, p.swap_unit);
    std::size_t i = k;
    while (i > 0 && ++at[i - 1] == count[i - 1]) at[--i] = 0;
    if (i == 0) break;
  }
}

}  // namespace shardload::detail::hdf5
