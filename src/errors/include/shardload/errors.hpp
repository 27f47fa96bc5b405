// The public exceptions of shardload's C++ API, and throw_status: the one place where a Status
// becomes one of them. The C++ API (shardload/legate.hpp), the command line and both Python
// modules go through it, so a given failure is the same exception everywhere.
//
// Contract: every exception carries the Status it came from (code, full message, the file as
// data where one is known, the errno of a failed system call) and is safe to copy and to pass
// between threads. The layers below never throw; only front ends call throw_status.
#pragma once

#include <stdexcept>
#include <string>

#include "shardload/format.hpp"
#include "shardload/status.hpp"

namespace shardload {

// Base of shardload's exceptions: the Status as data. message() is the whole message, bytes
// included that what() would cut (a file name holding a NUL), with the options it names
// spelled the front end's way (what(): the C++ API's words, "the dtype option").
class Error {
 public:
  explicit Error(Status status) : status_(std::move(status)) {}
  virtual ~Error() = default;
  [[nodiscard]] const Status& status() const noexcept { return status_; }
  [[nodiscard]] std::string message(OptionSpelling spelling = OptionSpelling::kNeutral) const {
    return spell_options(status_.message(), spelling);
  }
  // The file the error is about ("" when none is known) and the errno of the failed system
  // call (0 when none), as data: also from a Legate task, whose error carries them beside its
  // message. Decide on these, not on the message.
  [[nodiscard]] const std::string& filename() const noexcept { return status_.path(); }
  [[nodiscard]] int sys_errno() const noexcept { return status_.sys_errno(); }

 private:
  Status status_;
};

// The files do not form a valid dataset, or an option is invalid.
class LayoutError : public std::invalid_argument, public Error {
 public:
  explicit LayoutError(Status status)
      : std::invalid_argument(spell_options(status.message(), OptionSpelling::kNeutral)),
        Error(std::move(status)) {}
  explicit LayoutError(const std::string& message)
      : LayoutError(Status{ErrorCode::kLayout, message}) {}
};

// The source itself (a directory, a numbered pattern's directory) does not exist.
class SourceNotFoundError : public LayoutError {
 public:
  using LayoutError::LayoutError;
};

// A caller's argument is out of range or malformed (ErrorCode::kInvalidArgument). A
// LayoutError in C++, as it always was; Python raises it as a plain ValueError.
class ArgumentError : public LayoutError {
 public:
  using LayoutError::LayoutError;
};

// Reading a shard failed: an I/O error, a file changed since discovery, or
// data found damaged (or null) while reading.
class ShardReadError : public std::runtime_error, public Error {
 public:
  explicit ShardReadError(Status status)
      : std::runtime_error(spell_options(status.message(), OptionSpelling::kNeutral)),
        Error(std::move(status)) {}
  explicit ShardReadError(const std::string& message)
      : ShardReadError(Status{ErrorCode::kIo, message}) {}
};

// The dataset does not fit the memory Legate has for the processors the load would run on
// (checked before anything is allocated); the message names both sizes.
class OutOfMemoryError : public std::runtime_error, public Error {
 public:
  explicit OutOfMemoryError(Status status)
      : std::runtime_error(spell_options(status.message(), OptionSpelling::kNeutral)),
        Error(std::move(status)) {}
  explicit OutOfMemoryError(const std::string& message)
      : OutOfMemoryError(Status{ErrorCode::kNoMemory, message}) {}
};

// Writing a dataset (shardload/save.hpp) failed: the destination cannot be created or
// written, something that is not a regular file or directory is in the way, or a write
// failed. Nothing of the new dataset is visible when it is thrown.
class ShardWriteError : public std::runtime_error, public Error {
 public:
  explicit ShardWriteError(Status status)
      : std::runtime_error(spell_options(status.message(), OptionSpelling::kNeutral)),
        Error(std::move(status)) {}
  explicit ShardWriteError(const std::string& message)
      : ShardWriteError(Status{ErrorCode::kIo, message}) {}
};

// A save's destination already holds something and overwrite was not asked for, or it holds
// files that no save writes (which overwrite would otherwise delete).
class DestinationExistsError : public ShardWriteError {
 public:
  using ShardWriteError::ShardWriteError;
};

// Where a Status arose, which decides what a kLayout or kFormat code means: found while
// discovering, the files are not a valid dataset; found while reading data, any failure
// (I/O, a changed file, a damaged chunk, a null) is a read error; found while writing, any
// failure but a bad argument is a write error (EEXIST / ENOTEMPTY: the destination exists).
enum class ErrorSite { kDiscover, kRead, kWrite };

// Throws the exception that matches the status (which must not be ok):
//   kInvalidArgument -> ArgumentError (a LayoutError)        kNoMemory -> OutOfMemoryError
//   discovering: kIo, kChanged -> ShardReadError; a missing source (kLayout with ENOENT)
//                -> SourceNotFoundError; anything else -> LayoutError
//   reading:     anything else -> ShardReadError
//   writing:     EEXIST, ENOTEMPTY -> DestinationExistsError; anything else -> ShardWriteError
[[noreturn]] void throw_status(const Status& status, ErrorSite site = ErrorSite::kDiscover);

}  // namespace shardload
