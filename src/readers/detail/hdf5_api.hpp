// The HDF5 C API as a table of function pointers into a private copy of the
// library, loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
//
// Why not link libhdf5 like any other library: a Legate process holds other
// HDF5s whose symbols have the same unversioned names. The Legate wheel ships
// HDF5 1.14.6 (legate.libs/libhdf5-67747395.so.310.5.1, not thread-safe, no
// headers), h5py ships 2.0.0, and cuPyNumeric loads libcupynumeric.so with
// RTLD_GLOBAL, which puts Legate's HDF5 into the process's global scope. From
// then on every later-loaded object that imports H5Dread binds to Legate's
// copy, whatever its own DT_NEEDED says (LD_DEBUG=bindings shows h5py doing
// exactly that). A directly linked libhdf5 in the shardload extension would
// be silently served by a different HDF5 version than its headers.
//
// Loaded privately instead: RTLD_LOCAL keeps our copy out of the global scope
// (nobody else binds to it), RTLD_DEEPBIND makes the library resolve its own
// symbols before the global scope's (it keeps calling itself), and every call
// from shardload goes through dlsym(handle, ...) pointers, so no H5* symbol
// is ever imported by a shardload object. The library is the one whose
// headers we compile against (the path is fixed at configure time), and the
// loader checks its version against those headers.
#pragma once

#include <hdf5.h>

#include "shardload/status.hpp"

namespace shardload::detail {

// X(name): one HDF5 function, typed by its declaration in the headers.
#define SHARDLOAD_HDF5_FUNCTIONS(X)                                                                \
  X(H5open)                                                                                        \
  X(H5dont_atexit)                                                                                 \
  X(H5close)                                                                                       \
  X(H5get_libversion)                                                                              \
  X(H5is_library_threadsafe)                                                                       \
  X(H5Eset_auto2)                                                                                  \
  X(H5Ewalk2)                                                                                      \
  X(H5Eclear2)                                                                                     \
  X(H5Pcreate)                                                                                     \
  X(H5Pclose)                                                                                      \
  X(H5Fopen)                                                                                       \
  X(H5Fget_name)                                                                                   \
  X(H5Iget_file_id)                                                                                \
  X(H5Pget_virtual_count)                                                                          \
  X(H5Pget_virtual_filename)                                                                       \
  X(H5Pget_virtual_dsetname)                                                                       \
  X(H5Fclose)                                                                                      \
  X(H5Pset_elink_cb)                                                                               \
  X(H5Dopen2)                                                                                      \
  X(H5Dclose)                                                                                      \
  X(H5Dget_space)                                                                                  \
  X(H5Dget_type)                                                                                   \
  X(H5Dread) X(H5Sget_simple_extent_type) X(H5Sget_simple_extent_ndims) X(                         \
      H5Sget_simple_extent_dims) X(H5Sselect_hyperslab) X(H5Screate_simple) X(H5Sclose)            \
      X(H5Tget_class) X(H5Tget_size) X(H5Tget_sign) X(H5Tget_fields) X(H5Tget_ebias) X(            \
          H5Tget_precision) X(H5Tget_offset) X(H5Tget_nmembers) X(H5Tget_member_name)              \
          X(H5Tget_member_type) X(H5Tget_member_value) X(H5Tget_super) X(H5Tcopy) X(H5Tset_fields) \
              X(H5Tset_size) X(H5Tset_ebias) X(H5Tcreate) X(H5Tinsert) X(H5Tenum_create) X(        \
                  H5Tenum_insert) X(H5Tclose) X(H5free_memory) X(H5Lvisit) X(H5Lexists) X(H5Oopen) \
                  X(H5Oclose) X(H5Iget_type) X(H5Dget_create_plist) X(H5Pget_layout)               \
                      X(H5Pget_chunk) X(H5Pget_nfilters) X(H5Pget_filter2) X(H5Zfilter_avail)      \
                          X(H5Tget_order) X(H5Tget_member_offset) X(H5Pget_external_count)         \
                              X(H5Pget_external) X(H5Pset_elink_prefix) X(H5FDregister)            \
                                  X(H5Pset_driver) X(H5Pget_driver_info) X(H5Dget_offset)          \
                                      X(H5Dget_storage_size) X(H5Tequal) X(H5Tset_order)           \
                                          X(H5Tget_norm) X(H5Pget_fill_time)                       \
                                              X(H5Dget_space_status) X(H5Pfill_value_defined)      \
                                                  X(H5Fget_create_plist) X(H5Pget_sizes)           \
                                                      X(H5Pget_userblock) X(H5Oexists_by_name)

// X(name): one HDF5 global that the H5T_* / H5P_* macros read after H5open().
#define SHARDLOAD_HDF5_GLOBALS(X) \
  X(H5T_NATIVE_INT8_g)            \
  X(H5T_NATIVE_INT16_g)           \
  X(H5T_NATIVE_INT32_g)           \
  X(H5T_NATIVE_INT64_g)           \
  X(H5T_NATIVE_UINT8_g)           \
  X(H5T_NATIVE_UINT16_g)          \
  X(H5T_NATIVE_UINT32_g)          \
  X(H5T_NATIVE_UINT64_g)          \
  X(H5T_NATIVE_FLOAT_g)           \
  X(H5T_NATIVE_DOUBLE_g)          \
  X(H5T_IEEE_F32LE_g) X(H5T_IEEE_F32BE_g) X(H5P_CLS_FILE_ACCESS_ID_g) X(H5P_CLS_DATASET_ACCESS_ID_g)

struct Hdf5Api {
#define SHARDLOAD_HDF5_MEMBER(name) decltype(&::name) name = nullptr;
  SHARDLOAD_HDF5_FUNCTIONS(SHARDLOAD_HDF5_MEMBER)
#undef SHARDLOAD_HDF5_MEMBER
  // Optional (HDF5 >= 1.10.7): turns off HDF5's own file locks, which fail
  // on file systems without flock and add nothing to read-only access.
  decltype(&::H5Pset_file_locking) H5Pset_file_locking = nullptr;
  // Optional (HDF5 >= 1.10.0): the directory a dataset's relative external storage names are
  // read in, so that a read opens the files discovery snapshotted, whatever the working
  // directory is by then.
  decltype(&::H5Pset_efile_prefix) H5Pset_efile_prefix = nullptr;
  // Optional (HDF5 >= 1.10.2): the directory a virtual dataset's relative source names are
  // looked for in first, likewise.
  decltype(&::H5Pset_virtual_prefix) H5Pset_virtual_prefix = nullptr;
  // Optional (HDF5 >= 1.10.3): the direct chunk read that lets deflate run
  // outside the library's global lock; without them every read is H5Dread.
  decltype(&::H5Dget_chunk_storage_size) H5Dget_chunk_storage_size = nullptr;
  decltype(&::H5Dread_chunk) H5Dread_chunk = nullptr;
  // Optional (HDF5 >= 1.10.5): where a chunk lies, so that a remote chunk's bytes are fetched
  // outside the lock.
  decltype(&::H5Dget_chunk_info_by_coord) H5Dget_chunk_info_by_coord = nullptr;
  // Optional (HDF5 >= 1.10.3): where a dataset's object header lies, so that its layout
  // message can be checked (hdf5_header.cc).
  decltype(&::H5Oget_info2) H5Oget_info2 = nullptr;
  // HDF5 >= 1.10.0: whether a dataset's edge chunks are stored unfiltered
  // (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS), which their filter mask does not say.
  decltype(&::H5Pget_chunk_opts) H5Pget_chunk_opts = nullptr;
#define SHARDLOAD_HDF5_GLOBAL(name) hid_t name = -1;
  SHARDLOAD_HDF5_GLOBALS(SHARDLOAD_HDF5_GLOBAL)
#undef SHARDLOAD_HDF5_GLOBAL
  bool thread_safe = false;
  unsigned version[3] = {0, 0, 0};
  const char* path = "";
};

// The process-wide table, loaded on first use and never unloaded (HDF5
// registers atexit handlers). kFormat naming the library when it cannot be
// loaded or its version differs from the headers'.
Result<const Hdf5Api*> hdf5_api();

}  // namespace shardload::detail
