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
#include <vector>

namespace shardload::detail {

// The value of the variable `name`, or nullopt where it is unset: read from the environment
// where this thread may read it (the copy is then renewed with it), else from the last copy.
std::optional<std::string> environment_value(const char* name);

// The whole environment as "NAME=VALUE" entries, read as environment_value reads one variable:
// what a process this thread starts is given (a credential_process), never the live array,
// which a setenv on another thread may move and free while it is copied.
std::vector<std::string> environment_entries();

// Copies the whole environment for the threads that may not read it. Called by a thread that
// may (a Python thread holding the GIL), before it lets them run.
void take_environment_snapshot();

// From now on only threads for which `may_read_now()` returns nonzero read the environment
// itself (Python: PyGILState_Check). Thread-safe; the last call counts. The first call also
// guards the libraries' own reads (guard_environment_of_loaded_libraries).
void read_environment_only_when(int (*may_read_now)());

// Libraries the engine calls read the environment themselves, on its threads: the AWS SDK and
// libcurl inside Arrow's S3 client as a client is made and on each of its requests
// (AWS_LAMBDA_FUNCTION_NAME), HDF5 as it starts (its prefixes, HDF5_USE_FILE_LOCKING). No copy
// reaches them, so every library loaded in the process (not the C library, the loader or
// shardload) is made to call getenv and secure_getenv under a shared lock, and setenv,
// unsetenv, putenv and clearenv (Python's os.environ writes) under the same lock held alone: a
// reader never walks the array a writer is moving. The lock is held for the C library's call
// alone, which takes no lock a holder of this one waits for. Called again after a library is
// loaded (HDF5), and by read_environment_only_when (every Python call) where the loader has
// loaded a library since the last pass; does nothing before read_environment_only_when was called
// (the program and the C++ tests, which change no environment on another thread, keep the
// libraries' calls).
void guard_environment_of_loaded_libraries();

}  // namespace shardload::detail
