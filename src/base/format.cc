#include "shardload/format.hpp"

#include <string_view>

namespace shardload {

Status set_dtype_option(std::string_view text, FormatOptions* options) {
  bool big = false;
  SHARDLOAD_ASSIGN_OR_RETURN(const DType dtype, parse_dtype(text, &big));
  options->dtype = dtype;
  if (!text.empty() && (text[0] == '<' || text[0] == '>')) options->big_endian = big;
  return Status::ok();
}

}  // namespace shardload
