// The process's environment as the engine's threads read it.
//
// glibc's setenv of a new variable (Python's `os.environ[k] = v`) may move the array getenv
// walks and free the old one: a getenv on another thread at that moment read freed memory and
// the process died of SIGSEGV (a load in a background thread while the main thread set a
// variable). Python writes the environment with the GIL held, so a thread that holds it may
// read it; the engine's threads do not. A front end that releases its lock around an engine
// call takes a copy first (take_environment_snapshot) and says which threads may read the
// environment itself (read_environment_only_when): the others read that copy. Without a front
// end saying so (the program, the C++ tests) every thread reads the environment, as before.
#pragma once

#include <optional>
#include <string>

namespace shardload::detail {

// The value of the variable `name`, or nullopt where it is unset: read from the environment
// where this thread may read it (the copy is then renewed with it), else from the last copy.
std::optional<std::string> environment_value(const char* name);

// Copies the whole environment for the threads that may not read it. Called by a thread that
// may (a Python thread holding the GIL), before it lets them run.
void take_environment_snapshot();

// From now on only threads for which `may_read_now()` returns nonzero read the environment
// itself (Python: PyGILState_Check). Thread-safe; the last call counts.
void read_environment_only_when(int (*may_read_now)());

}  // namespace shardload::detail
