// Constructors of the format readers, one per format; make_reader picks.
#pragma once

#include <memory>

#include "shardload/reader.hpp"

namespace shardload::detail {

Result<std::unique_ptr<ShardReader>> make_npy_reader(const FormatOptions& options,
                                                     const ReaderContext& context);

}  // namespace shardload::detail
