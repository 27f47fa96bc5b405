#include "shardload/errors.hpp"

#include <cerrno>

namespace shardload {

void throw_status(const Status& st, ErrorSite site) {
  if (site == ErrorSite::kWrite && st.code() != ErrorCode::kInvalidArgument &&
      st.code() != ErrorCode::kNoMemory) {
    if (st.sys_errno() == EEXIST || st.sys_errno() == ENOTEMPTY) throw DestinationExistsError(st);
    throw ShardWriteError(st);
  }
  switch (st.code()) {
    case ErrorCode::kInvalidArgument:
      throw ArgumentError(st);
    case ErrorCode::kNoMemory:
      throw OutOfMemoryError(st);
    case ErrorCode::kIo:
    case ErrorCode::kChanged:
      throw ShardReadError(st);
    default:
      break;
  }
  if (site == ErrorSite::kRead) throw ShardReadError(st);
  if (st.code() == ErrorCode::kLayout && st.sys_errno() == ENOENT) throw SourceNotFoundError(st);
  throw LayoutError(st);
}

}  // namespace shardload
