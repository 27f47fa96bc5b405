// How both extension modules raise shardload's Python exceptions: the C++ ones that
// shardload::throw_status (the one mapping from a Status) throws become the classes of
// shardload._errors, one for one. Included by core_module.cc and legate_module.cc only.
#pragma once

#include <pybind11/pybind11.h>

#include <cerrno>
#include <exception>
#include <string>

#include "shardload/errors.hpp"

namespace shardload::python {

namespace py = pybind11;

// A message as str: UTF-8 where it is, bytes that are not as \xNN escapes,
// so building an exception never fails with UnicodeDecodeError.
inline py::str message_str(const std::string& m) {
  PyObject* s =
      PyUnicode_DecodeUTF8(m.data(), static_cast<Py_ssize_t>(m.size()), "backslashreplace");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// A path as str the way os.fsdecode gives it (undecodable bytes as
// surrogate escapes), so os.fsencode gives back the very bytes.
inline py::str path_str(const std::string& p) {
  PyObject* s = PyUnicode_DecodeFSDefaultAndSize(p.data(), static_cast<Py_ssize_t>(p.size()));
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// Sets the Python error for a C++ one. The message travels from status(), not what(): paths
// in it are the file system's bytes, which need not be UTF-8 (nor free of NUL); the options
// it names are spelled as Python's keywords (dtype=).
inline void set_python_error(const Error& e) {
  const Status& st = e.status();
  if (dynamic_cast<const ArgumentError*>(&e) != nullptr) {
    PyErr_SetObject(PyExc_ValueError, message_str(e.message(OptionSpelling::kPython)).ptr());
    return;
  }
  const char* name = "LayoutError";
  bool os_error = false;
  if (dynamic_cast<const SourceNotFoundError*>(&e) != nullptr) {
    name = "SourceNotFoundError";
    os_error = true;
  } else if (dynamic_cast<const ShardReadError*>(&e) != nullptr) {
    name = "ShardReadError";
    os_error = true;
  } else if (dynamic_cast<const DestinationExistsError*>(&e) != nullptr) {
    name = "DestinationExistsError";
    os_error = true;
  } else if (dynamic_cast<const ShardWriteError*>(&e) != nullptr) {
    name = "ShardWriteError";
    os_error = true;
  } else if (dynamic_cast<const OutOfMemoryError*>(&e) != nullptr) {
    name = "OutOfMemoryError";
  }
  const py::object type = py::module_::import("shardload._errors").attr(name);
  py::object exc = type(message_str(e.message(OptionSpelling::kPython)));
  if (os_error && !st.path().empty()) exc.attr("filename") = path_str(st.path());
  if (os_error && st.sys_errno() != 0) exc.attr("errno") = st.sys_errno();
  PyErr_SetObject(type.ptr(), exc.ptr());
}

inline void register_error_translator() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      set_python_error(e);
    }
  });
}

}  // namespace shardload::python
