// The built-in drivers' transports: the RemoteIo that a built-in driver's Store reads and
// writes through (s3_io.cc for "s3://", http_io.cc for "http://" and "https://"). Each driver
// registers its own at load time (register.cc); the adapter (store_schemes.cc) reaches a key
// of theirs only through the Store made for its URL, so posix_io() never sees a transport or
// its descriptors. This is also the one seam where a test puts a fake transport in place.
#pragma once

#include <cstdint>

#include "shardload/io.hpp"

namespace shardload::detail {

// A transport's descriptors are its own, handed only to its own calls (File over the
// transport, the adapter's open keys); each numbers them from here, far above any the kernel
// hands out and below the adapter's range (kRemoteFdBase), so that one handed to the wrong
// backend by mistake is refused (EBADF) rather than read.
inline constexpr int kTransportFdBase = 1 << 29;

// The registered s3:// and http(s):// transports, or nullptr in a build without the driver.
RemoteIo* s3_transport();
RemoteIo* http_transport();

// Put `io` in place of a transport (nullptr: as in a build without the driver) and return
// the one before: the drivers at load time, and the tests that inject a fake transport.
RemoteIo* set_s3_transport(RemoteIo* io);
RemoteIo* set_http_transport(RemoteIo* io);

// The requests the registered transports retried so far in this process (the adapter's
// retries(), hence remote_retries()).
std::uint64_t transport_retries();

}  // namespace shardload::detail
