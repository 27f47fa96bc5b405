// The one place where the Legate versions shardload builds against differ: 26.06 (the default
// build) and 26.01 (the networked build of scripts/setup_multirank.sh, whose wheels have UCX).
// Code elsewhere uses only the names below, never a version test of its own.
#pragma once

#include <legate.h>

// GPU variants exist where Legate is a CUDA build and this build compiled the CUDA copy backend.
// The 26.01 wheels are CUDA 12 builds while the machine's toolkit may be CUDA 13: a GPU variant
// compiled by nvcc 13 would need the CUDA 13 runtime beside Legate's CUDA 12 one, so that build
// leaves the GPU variants out (CMake defines SHARDLOAD_NO_GPU_VARIANTS) and runs on CPUs.
#if LEGATE_DEFINED(LEGATE_USE_CUDA) && !defined(SHARDLOAD_NO_GPU_VARIANTS)
#define SHARDLOAD_GPU_VARIANTS 1
#else
#define SHARDLOAD_GPU_VARIANTS 0
#endif
