# Sourced by the build scripts: the compiler cache for every CMake configure they run (CMake
# takes CMAKE_<LANG>_COMPILER_LAUNCHER from the environment at a tree's first configure). The
# cache lives in the checkout (.cache/ccache, not in git) and hashes paths inside the checkout
# relative to it, so every build tree of the same sources (build/, build-mr/, the wheel's)
# shares the objects that compile alike, and a second run reuses them all.
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
  export CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  # What lets ccache serve files compiled with a precompiled header (src/legate/CMakeLists.txt).
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  # nvcc too: the wheel of the install check compiles build/'s two .cu files again otherwise.
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
fi
