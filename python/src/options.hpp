// How both extension modules take the format options: one dict from the package's checker
// (shardload._api._options), converted row by row through the option table
// (shardload/format.hpp), so that neither binding names an option. Included by
// core_module.cc and legate_module.cc only.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "shardload/errors.hpp"
#include "shardload/format.hpp"
#include "shardload/formats.hpp"
#include "shardload/reader_registry.hpp"

namespace shardload::python {

namespace py = pybind11;

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
    OptionValue v;
    switch (row->kind) {
      case OptionKind::kDType:
      case OptionKind::kText:
        v = py::cast<std::string>(value);
        break;
      case OptionKind::kDims:
        v = py::cast<std::vector<std::int64_t>>(value);
        break;
      case OptionKind::kCount:
        v = py::cast<std::uint64_t>(value);
        break;
      case OptionKind::kTextList:
        v = py::cast<std::vector<std::string>>(value);
        break;
      case OptionKind::kNumber:
        v = py::cast<double>(value);
        break;
    }
    if (Status st = row->set(v, &out); !st) fail(st);
  }
  return out;
}

// The table as the package checks it: (name, kind) per row, kind as "dtype", "dims",
// "count", "text", "text_list" or "number".
inline py::list format_option_rows() {
  py::list rows;
  for (const auto& row : format_option_table()) {
    const char* kind = "";
    switch (row.kind) {
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
    }
    rows.append(py::make_tuple(row.name, kind));
  }
  return rows;
}

}  // namespace shardload::python
