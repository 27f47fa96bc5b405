// The GIL released around an engine call and taken back after it.
//
// Python 3.11 to 3.13 end a thread that asks for the GIL back while the interpreter finalizes
// (a daemon thread whose load was in flight when the program ended) with pthread_exit, which
// unwinds the thread's C++ frames. pybind11's gil_scoped_release asks from its destructor,
// which is noexcept: the unwinding stopped there in std::terminate, and a program ending with
// status 0 (or 130 after Ctrl-C) aborted with a core dump instead. This guard's destructor lets
// the unwinding through, and the thread ends as Python ends its own. (It does not wait for the
// process's end instead, as Python 3.14 makes such threads do: the finalizing thread's
// collection may join it, a feed's destructor does, and that waited for ever.)
#pragma once

#include <Python.h>

namespace shardload::python {

inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) {}
  ~GilReleased() noexcept(false) {
    PyEval_RestoreThread(state_);  // may end this thread (above): unwinds from here
  }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace shardload::python
