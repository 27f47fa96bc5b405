// The bundle's one use of glibc 2.36: the static libstdc++'s std::random_device refers to
// arc4random (glibc 2.36, Debian 12, Ubuntu 23.04). Defined here, the programs need glibc 2.35
// at most and so also start on older GPU images (Ubuntu 22.04). Nothing in the check draws
// random numbers; this serves the reference, from the kernel's generator.
#include <sys/random.h>

#include <cstdint>

extern "C" std::uint32_t arc4random() noexcept {
  std::uint32_t v = 0;
  while (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
  }
  return v;
}
