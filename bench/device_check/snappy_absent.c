/* Debian's static libblosc.a calls snappy's C API for blosc's "snappy" compressor, which its
 * blosc.pc does not name and for which no static libsnappy is installed (libsnappy-dev ships
 * one; bundle.sh then links it instead, bench/device_check/CMakeLists.txt). Here a snappy that
 * compresses and decompresses nothing: blosc then stores a chunk uncompressed, and refuses to
 * decode one compressed by snappy, saying so. Zarr chunks of the check are not blosc's. */
#include <stddef.h>

/* snappy-c.h's snappy_status: SNAPPY_INVALID_INPUT. */
enum { kSnappyInvalidInput = 1 };

int snappy_compress(const char* input, size_t input_length, char* compressed,
                    size_t* compressed_length) {
  (void)input;
  (void)input_length;
  (void)compressed;
  (void)compressed_length;
  return kSnappyInvalidInput;
}

int snappy_uncompress(const char* compressed, size_t compressed_length, char* uncompressed,
                      size_t* uncompressed_length) {
  (void)compressed;
  (void)compressed_length;
  (void)uncompressed;
  (void)uncompressed_length;
  return kSnappyInvalidInput;
}

size_t snappy_max_compressed_length(size_t source_length) {
  return 32 + source_length + source_length / 6;
}
