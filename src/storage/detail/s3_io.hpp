// The object-storage backend (s3_io.cc), built only with SHARDLOAD_WITH_ARROW.
#pragma once

#include "shardload/io.hpp"

namespace shardload::detail {

// Registers the "s3://" transport (set_s3_transport, transports.hpp) and its ObjectStore.
// Cheap: S3 itself is set up on the first URL opened, and finalized at exit.
void register_s3_io();

}  // namespace shardload::detail
