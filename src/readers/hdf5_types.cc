// HDF5 types: which file types read as which dtype, and the memory type each dtype is read
// into.
#include <string>

#include "readers/detail/hdf5.hpp"

namespace shardload::detail::hdf5 {

namespace {

std::string type_class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER:
      return "integer";
    case H5T_FLOAT:
      return "float";
    case H5T_TIME:
      return "time";
    case H5T_STRING:
      return "string";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_COMPOUND:
      return "compound";
    case H5T_REFERENCE:
      return "reference";
    case H5T_ENUM:
      return "enum";
    case H5T_VLEN:
      return "variable-length";
    case H5T_ARRAY:
      return "array";
    default:
      return "class " + std::to_string(static_cast<int>(c));
  }
}

constexpr const char* kExpectedTypes =
    "expected integer, IEEE float of 2, 4 or 8 bytes, h5py's bool enum {FALSE: 0, TRUE: 1} "
    "or h5py's complex compound {r, i}";

// True when `t` is an IEEE binary float of `size` bytes in either order.
bool is_ieee_float(const Hdf5Api& api, hid_t t, std::size_t size) {
  struct Fields {
    std::size_t spos, epos, esize, mpos, msize, ebias;
  };
  static constexpr Fields k16{15, 10, 5, 0, 10, 15};
  static constexpr Fields k32{31, 23, 8, 0, 23, 127};
  static constexpr Fields k64{63, 52, 11, 0, 52, 1023};
  const Fields* want = size == 2 ? &k16 : size == 4 ? &k32 : size == 8 ? &k64 : nullptr;
  if (want == nullptr || api.H5Tget_size(t) != size) return false;
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (api.H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  // HDF5 converts a mantissa stored with its leading bit (H5T_NORM_NONE) to IEEE's implied
  // one, and nothing else (H5T_NORM_MSBSET fails inside H5Dread).
  const H5T_norm_t norm = api.H5Tget_norm(t);
  return spos == want->spos && epos == want->epos && esize == want->esize && mpos == want->mpos &&
         msize == want->msize && api.H5Tget_ebias(t) == want->ebias &&
         api.H5Tget_precision(t) == 8 * size && api.H5Tget_offset(t) == 0 &&
         (norm == H5T_NORM_IMPLIED || norm == H5T_NORM_NONE);
}

// What a float type is, for the refusal of one that is not IEEE's.
std::string describe_float(const Hdf5Api& api, hid_t t) {
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  api.H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize);
  const H5T_norm_t norm = api.H5Tget_norm(t);
  const char* norm_name = norm == H5T_NORM_IMPLIED  ? "implied"
                          : norm == H5T_NORM_MSBSET ? "msb set"
                          : norm == H5T_NORM_NONE   ? "none"
                                                    : "unknown";
  return "float of " + std::to_string(api.H5Tget_size(t)) + " bytes (precision " +
         std::to_string(api.H5Tget_precision(t)) + " bits at offset " +
         std::to_string(api.H5Tget_offset(t)) + ", sign bit " + std::to_string(spos) +
         ", exponent " + std::to_string(esize) + " bits at " + std::to_string(epos) + " bias " +
         std::to_string(api.H5Tget_ebias(t)) + ", mantissa " + std::to_string(msize) + " bits at " +
         std::to_string(mpos) + ", normalisation " + norm_name +
         "; IEEE's layout is needed, its mantissa normalised as IEEE's or not at all)";
}

std::string member_name(const Hdf5Api& api, hid_t t, unsigned i) {
  char* n = api.H5Tget_member_name(t, i);
  std::string s = n ? n : "";
  if (n) api.H5free_memory(n);
  return s;
}

}  // namespace

// The dtype a file type reads as, or why it cannot.
Result<DType> classify(const Hdf5Api& api, hid_t t) {
  const H5T_class_t cls = api.H5Tget_class(t);
  const std::size_t size = api.H5Tget_size(t);
  auto unsupported = [&](const std::string& what) {
    return Status(ErrorCode::kFormat,
                  "type: " + what + " is not supported (" + kExpectedTypes + ")");
  };
  switch (cls) {
    case H5T_INTEGER: {
      if ((size != 1 && size != 2 && size != 4 && size != 8) ||
          api.H5Tget_precision(t) != 8 * size || api.H5Tget_offset(t) != 0) {
        return unsupported("integer of " + std::to_string(size) + " bytes with precision " +
                           std::to_string(api.H5Tget_precision(t)) + " bits");
      }
      const bool is_signed = api.H5Tget_sign(t) == H5T_SGN_2;
      return DType{is_signed ? DTypeKind::kInt : DTypeKind::kUInt, static_cast<std::uint8_t>(size)};
    }
    case H5T_FLOAT:
      if (!is_ieee_float(api, t, size)) {
        return unsupported("non-IEEE " + describe_float(api, t));
      }
      return DType{DTypeKind::kFloat, static_cast<std::uint8_t>(size)};
    case H5T_ENUM: {
      // h5py's bool: enum over an 8-bit integer with exactly FALSE = 0, TRUE = 1.
      Hid base(api.H5Tget_super(t), api.H5Tclose);
      bool ok = base.valid() && api.H5Tget_class(base.get()) == H5T_INTEGER && size == 1 &&
                api.H5Tget_nmembers(t) == 2;
      for (unsigned i = 0; ok && i < 2; ++i) {
        std::uint8_t v = 0xFF;
        const std::string n = member_name(api, t, i);
        ok = api.H5Tget_member_value(t, i, &v) >= 0 &&
             ((n == "FALSE" && v == 0) || (n == "TRUE" && v == 1));
      }
      if (!ok) return unsupported("enum other than h5py's bool");
      return DType{DTypeKind::kBool, 1};
    }
    case H5T_COMPOUND: {
      // h5py's complex: two IEEE floats of one size named r and i, in that order.
      bool ok = api.H5Tget_nmembers(t) == 2 && member_name(api, t, 0) == "r" &&
                member_name(api, t, 1) == "i";
      std::size_t fs = 0;
      for (unsigned i = 0; ok && i < 2; ++i) {
        Hid m(api.H5Tget_member_type(t, i), api.H5Tclose);
        const std::size_t ms = m.valid() ? api.H5Tget_size(m.get()) : 0;
        ok = m.valid() && api.H5Tget_class(m.get()) == H5T_FLOAT && (ms == 4 || ms == 8) &&
             (i == 0 || ms == fs) && is_ieee_float(api, m.get(), ms);
        fs = ms;
      }
      if (!ok) return unsupported("compound other than h5py's complex {r, i}");
      return DType{DTypeKind::kComplex, static_cast<std::uint8_t>(2 * fs)};
    }
    default:
      return unsupported(type_class_name(cls));
  }
}

// The native memory type that `dtype` is read into; HDF5 converts the file's
// byte order (and the member order of a compound) on the way.
Result<Hid> memory_type(const Hdf5Api& api, DType d) {
  auto native = [&](hid_t t) { return Hid(api.H5Tcopy(t), api.H5Tclose); };
  switch (d.kind) {
    case DTypeKind::kBool: {
      Hid t(api.H5Tenum_create(api.H5T_NATIVE_INT8_g), api.H5Tclose);
      const std::int8_t f = 0, tr = 1;
      if (!t.valid() || api.H5Tenum_insert(t.get(), "FALSE", &f) < 0 ||
          api.H5Tenum_insert(t.get(), "TRUE", &tr) < 0) {
        break;
      }
      return t;
    }
    case DTypeKind::kInt:
      switch (d.size) {
        case 1:
          return native(api.H5T_NATIVE_INT8_g);
        case 2:
          return native(api.H5T_NATIVE_INT16_g);
        case 4:
          return native(api.H5T_NATIVE_INT32_g);
        case 8:
          return native(api.H5T_NATIVE_INT64_g);
        default:
          break;
      }
      break;
    case DTypeKind::kUInt:
      switch (d.size) {
        case 1:
          return native(api.H5T_NATIVE_UINT8_g);
        case 2:
          return native(api.H5T_NATIVE_UINT16_g);
        case 4:
          return native(api.H5T_NATIVE_UINT32_g);
        case 8:
          return native(api.H5T_NATIVE_UINT64_g);
        default:
          break;
      }
      break;
    case DTypeKind::kFloat:
      if (d.size == 4) return native(api.H5T_NATIVE_FLOAT_g);
      if (d.size == 8) return native(api.H5T_NATIVE_DOUBLE_g);
      if (d.size == 2) {
        // HDF5 1.10 has no predefined half type: h5py's recipe, in host order.
        Hid t = native(host_is_little_endian() ? api.H5T_IEEE_F32LE_g : api.H5T_IEEE_F32BE_g);
        if (t.valid() && api.H5Tset_fields(t.get(), 15, 10, 5, 0, 10) >= 0 &&
            api.H5Tset_size(t.get(), 2) >= 0 && api.H5Tset_ebias(t.get(), 15) >= 0) {
          return t;
        }
      }
      break;
    case DTypeKind::kComplex: {
      const std::size_t half = d.size / 2u;
      Hid t(api.H5Tcreate(H5T_COMPOUND, d.size), api.H5Tclose);
      const hid_t part = half == 4 ? api.H5T_NATIVE_FLOAT_g : api.H5T_NATIVE_DOUBLE_g;
      if (t.valid() && api.H5Tinsert(t.get(), "r", 0, part) >= 0 &&
          api.H5Tinsert(t.get(), "i", half, part) >= 0) {
        return t;
      }
      break;
    }
  }
  return Status(ErrorCode::kFormat,
                "hdf5: cannot build the memory type for " + d.name() + ": " + take_error(api));
}

// Every dataset in the file, by full path, for error messages and the default.
}  // namespace shardload::detail::hdf5
