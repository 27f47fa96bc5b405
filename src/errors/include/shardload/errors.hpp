// The public exceptions of shardload's C++ API and the one function that turns a Status into
// one of them.
#pragma once

#include <stdexcept>
#include <string>

#include "shardload/status.hpp"

namespace shardload {

// The files do not form a valid dataset, or an option is invalid.
class LayoutError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Reading a shard failed: an I/O error, a file changed since discovery, or
// data found damaged (or null) while reading.
class ShardReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The dataset does not fit the memory Legate has for the processors the load would run on
// (checked before anything is allocated); the message names both sizes.
class OutOfMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws the exception type that matches the status's code.
[[noreturn]] void throw_status(const Status& status);

}  // namespace shardload
