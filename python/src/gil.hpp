// The GIL released around an engine call and taken back after it.
//
// Python 3.11 to 3.13 end a thread that asks for the GIL back while the interpreter finalizes
// (a daemon thread whose load was in flight when the program ended) with pthread_exit, which
// unwinds the thread's C++ frames. pybind11's gil_scoped_release asks from its destructor,
// which is noexcept: the unwinding stopped there in std::terminate, and a program ending with
// status 0 (or 130 after Ctrl-C) aborted with a core dump instead. Letting that unwinding
// through ran the binding's frames' destructors without the GIL while the interpreter
// finalized: the Python objects they hold (the call's arguments) were released without it, and
// a save's frames met a noexcept one (std::terminate again). So the guards below stop the
// unwinding where it starts: a thread that Python ends there waits for the process's end, its
// frames and what they hold left as they are (leaked on purpose), as Python 3.14 makes such
// threads wait. Only pthread_exit's unwinding gets there, so only a thread that Python ends:
// the finalizing thread gets the GIL back as always (its collection may destroy a feed, whose
// destructor releases the GIL to join its thread), and never waits.
#pragma once

#include <Python.h>
#include <cxxabi.h>
#include <unistd.h>

// base/detail/environment.hpp's (libshardload.so), declared here: not every module that
// includes this header sees the library's sources.
namespace shardload::detail {
void take_environment_snapshot();
void read_environment_only_when(int (*may_read_now)());
}  // namespace shardload::detail

namespace shardload::python {

inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Before it lets go, the GIL's thread copies the environment for the engine's threads, which
// never read it themselves (base/detail/environment.hpp): Python changes it with the GIL held,
// and a getenv on another thread while a new variable moved the array crashed the process.
class GilReleased {
 public:
  GilReleased() : state_((take_environment(), PyEval_SaveThread())) {}
  ~GilReleased() {
    try {
      PyEval_RestoreThread(state_);
    } catch (...) {
      for (;;) ::pause();  // only pthread_exit's unwinding gets here (above)
    }
  }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  static void take_environment() {
    detail::read_environment_only_when(&PyGILState_Check);
    detail::take_environment_snapshot();
  }

  PyThreadState* state_;
};

// The GIL taken on a thread the engine runs or calls back on (a progress callback, a Python
// reader's probe and read, a save's look at Ctrl-C before it publishes). pybind11's
// gil_scoped_acquire lets pthread_exit's unwinding (above) into the engine's frames: a pool's
// catch-all that keeps a job's error aborts the process there ("exception not rethrown"), a
// noexcept frame in std::terminate. Such a thread waits for the process's end instead: the
// engine's pool is never destroyed and the call that waits for it is a thread Python ends too,
// so nothing waits for it. Callers look at interpreter_finalizing() first where they can give
// up instead; this covers a finalization that begins while they wait.
class GilAcquired {
 public:
  GilAcquired() {
    try {
      state_ = PyGILState_Ensure();
    } catch (...) {
      for (;;) ::pause();  // only pthread_exit's unwinding gets here
    }
  }
  ~GilAcquired() { PyGILState_Release(state_); }
  GilAcquired(const GilAcquired&) = delete;
  GilAcquired& operator=(const GilAcquired&) = delete;

 private:
  PyGILState_STATE state_;
};

// Calls Python code on a thread holding a GilAcquired. Python code may let go of the GIL and
// take it back (time.sleep, a blocking write): at the interpreter's end that ends the thread
// from inside `f`, as above, and the unwinding would then release the GIL it no longer holds
// (Python's fatal error) or reach the engine's frames. The thread waits there instead.
template <typename F>
decltype(auto) call_python(F&& f) {
  try {
    return f();
  } catch (abi::__forced_unwind&) {
    for (;;) ::pause();
  }
}

}  // namespace shardload::python
