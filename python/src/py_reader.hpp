// The trampoline of the Python readers (shardload.register_reader): a C++ reader in the
// registry of libshardload.so whose probe and read_rows call the Python functions, so a
// Python reader goes through the engine's discovery, plan, load, batches and manifest like
// any registered format.
//
// Contract: the Python callables are kept for the life of the process (a registration cannot
// be undone: tasks may be running with it). probe and read_rows take the GIL themselves, from
// whatever thread the engine calls them on; every binding that waits for such threads releases
// the GIL first. While any thread runs a callback, Python's cyclic garbage collector is off in
// the whole process (a depth count kept under the GIL: the first thread in saves
// gc.isenabled() and disables it, the last one out restores it), so no collection ever runs on
// a Legate task or probe thread, where freeing a Legate object ends the process. A Python
// exception never leaves a callback: it becomes the Status the reader returns.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace shardload::python {

// Registers the reader `name` whose probe calls probe(path) -> (rows, dtype name, trailing
// shape), raising shardload.LayoutError with its message, and whose read_rows calls
// read_into(path, lo, hi, dst) -> None, dst a writable numpy array of the rows' dtype and
// shape, raising shardload.ShardReadError (its filename and errno are kept as data). Raises
// ValueError with the registry's message when the registration is refused.
void register_python_reader(const std::string& name, const pybind11::object& probe,
                            const pybind11::object& read_into,
                            const std::vector<std::string>& extensions);

}  // namespace shardload::python
