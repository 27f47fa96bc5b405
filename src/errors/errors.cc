#include "shardload/errors.hpp"

namespace shardload {

void throw_status(const Status& st) {
  switch (st.code()) {
    case ErrorCode::kIo:
    case ErrorCode::kChanged:
      throw ShardReadError(st.message());
    default:
      throw LayoutError(st.message());
  }
}

}  // namespace shardload
