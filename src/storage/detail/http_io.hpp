// The HTTP backend (http_io.cc), built only where libcurl is found (SHARDLOAD_WITH_HTTP).
#pragma once

#include "shardload/io.hpp"

namespace shardload::detail {

// Registers the "http://" and "https://" transport (set_http_transport, transports.hpp).
// Cheap: libcurl itself is set up on the first URL opened.
void register_http_io();

}  // namespace shardload::detail
