// How both extension modules take the format options: one dict from the package's checker
// (shardload._options._options), converted row by row through the option table
// (shardload/format.hpp), so that neither binding names an option. Included by
// core_module.cc and legate_module.cc only.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "shardload/errors.hpp"
#include "shardload/format.hpp"
#include "shardload/formats.hpp"
#include "shardload/layout.hpp"
#include "shardload/reader_registry.hpp"
#include "shardload/store_options.hpp"

namespace shardload::python {

namespace py = pybind11;

// A value of `kind` from the Python object the package checked.
inline OptionValue option_value_from(OptionKind kind, const py::handle& value) {
  switch (kind) {
    case OptionKind::kDType:
    case OptionKind::kText:
      return py::cast<std::string>(value);
    case OptionKind::kDims:
      return py::cast<std::vector<std::int64_t>>(value);
    case OptionKind::kCount:
      return py::cast<std::uint64_t>(value);
    case OptionKind::kTextList:
      return py::cast<std::vector<std::string>>(value);
    case OptionKind::kNumber:
      return py::cast<double>(value);
    case OptionKind::kFlag:
      return py::cast<bool>(value);
  }
  return {};
}

// {"format": str, name: value or None, ...}: None (or a name left out) keeps the default.
// The package checked every value's type and range; a name the table lacks is a TypeError.
inline FormatOptions format_options_from(const py::dict& given) {
  FormatOptions out;
  auto fail = [](const Status& st) { throw_status(st, ErrorSite::kDiscover); };
  for (const auto& [key, value] : given) {
    const std::string name = py::cast<std::string>(key);
    if (value.is_none()) continue;
    if (name == "format") {
      // A built-in format or a reader registered in C++ (custom_format selects it).
      if (Status st = set_format_option(py::cast<std::string>(value), &out); !st) fail(st);
      continue;
    }
    const FormatOptionSpec* row = find_format_option(name);
    if (row == nullptr) throw py::type_error("unknown format option '" + name + "'");
    if (Status st = row->set(option_value_from(row->kind, value), &out); !st) fail(st);
  }
  return out;
}

// {name: value or None, ...} of the discovery option table (shardload/layout.hpp) into
// `out`, as format_options_from takes the format options.
inline void discover_options_from(const py::dict& given, DiscoverOptions* out) {
  for (const auto& [key, value] : given) {
    const std::string name = py::cast<std::string>(key);
    if (value.is_none()) continue;
    const DiscoverOptionSpec* row = nullptr;
    for (const auto& r : discover_option_table()) {
      if (name == r.name) row = &r;
    }
    if (row == nullptr) throw py::type_error("unknown discovery option '" + name + "'");
    if (Status st = row->set(option_value_from(row->kind, value), out); !st) {
      throw py::value_error(name + ": " + st.message());
    }
  }
}

// A kind as the package names its checks: "dtype", "dims", "count", "text", "text_list",
// "number" or "flag".
inline const char* option_kind_name(OptionKind k) {
  const char* kind = "";
  switch (k) {
    case OptionKind::kDType:
      kind = "dtype";
      break;
    case OptionKind::kDims:
      kind = "dims";
      break;
    case OptionKind::kCount:
      kind = "count";
      break;
    case OptionKind::kText:
      kind = "text";
      break;
    case OptionKind::kTextList:
      kind = "text_list";
      break;
    case OptionKind::kNumber:
      kind = "number";
      break;
    case OptionKind::kFlag:
      kind = "flag";
      break;
  }
  return kind;
}

// The tables as the package checks them: (name, kind) per row.
inline py::list format_option_rows() {
  py::list rows;
  for (const auto& row : format_option_table()) {
    rows.append(py::make_tuple(row.name, option_kind_name(row.kind)));
  }
  return rows;
}

// The format table (shardload/formats.hpp), the built-in formats in its order: the package
// and the documentation tests take their lists of formats and extensions from it.
inline py::list format_rows() {
  py::list rows;
  for (const auto& d : formats()) {
    if (d.registered) continue;
    py::dict row;
    row["name"] = d.name;
    row["aliases"] = d.aliases;
    row["extensions"] = d.extensions;
    row["store"] = static_cast<bool>(d.is_store);
    row["writable"] = d.writer != nullptr;
    // The capabilities the engine asks of a format, by their C++ names.
    const FormatCapabilities& c = d.capabilities;
    py::list capabilities;
    for (const auto& [name, has] : {std::pair{"contiguous_rows", c.contiguous_rows},
                                    std::pair{"parallel_probe", c.parallel_probe},
                                    std::pair{"cheap_reprobe", c.cheap_reprobe},
                                    std::pair{"remote_reads", c.remote_reads},
                                    std::pair{"remote_piece_lanes", c.remote_piece_lanes}}) {
      if (has) capabilities.append(name);
    }
    row["capabilities"] = std::move(capabilities);
    rows.append(std::move(row));
  }
  return rows;
}

inline py::list discover_option_rows() {
  py::list rows;
  for (const auto& row : discover_option_table()) {
    rows.append(py::make_tuple(row.name, option_kind_name(row.kind)));
  }
  return rows;
}

// The store option table (shardload/store_options.hpp) as the package types and documents it:
// (name, kind, stores, secret, default, help) per row; stores a tuple of "s3" / "http", default
// the value of a default StoreOptions (None for a row of Arrow's client, whose default is
// Arrow's).
inline py::list storage_option_rows() {
  py::list rows;
  const StoreOptions defaults;
  for (const auto& row : store_option_table()) {
    py::list stores;
    if ((row.stores & kStoreS3) != 0) stores.append("s3");
    if ((row.stores & kStoreHttp) != 0) stores.append("http");
    py::object value = py::none();
    if (row.get != nullptr) {
      value =
          std::visit([](const auto& v) -> py::object { return py::cast(v); }, row.get(defaults));
    }
    rows.append(py::make_tuple(row.name, option_kind_name(row.kind), py::tuple(stores), row.secret,
                               value, row.help));
  }
  return rows;
}

}  // namespace shardload::python
