#!/usr/bin/env bash
# The device check (docs/benchmarks.md, "GPU destination"): builds the core and the CUDA
# backend with cmake + nvcc, writes the shards, measures (a) the pinned copy ceiling,
# (b) the naive pageable path and (c) the engine's device fill side by side, checks the data on
# the GPU, prints the table and removes what it wrote. Within 5 minutes, offline.
#
#   bench/device_check/run.sh [--gib G] [--dir DIR] [--shards N] [--reps R] [--gds]
#
# Defaults: 8 GiB in 16 shards under /dev/shm (a directory on local storage works too; the run
# reads it once before timing, so (c) reads from the page cache). Environment: CUDA_ARCH
# (default "80-real;90"; "native" on the GPU machine), BUILD_DIR (default
# build-device-check in the checkout), JOBS (build parallelism, default nproc). Exit status:
# 0 goals met, 3 goals missed, 1 failure, 2 cannot run here (no CUDA device, memory, disk).
set -euo pipefail

start=$SECONDS
budget=290  # seconds for everything, build included
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Inside the checkout (build*/ is ignored), so two checkouts never share a CMake cache.
build=${BUILD_DIR:-$here/../../build-device-check}
arch=${CUDA_ARCH:-80-real;90}

dir=""
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --gib|--shards|--reps) args+=("$1" "$2"); shift 2 ;;
    --gds) args+=("$1"); shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $dir ]] || dir=/dev/shm
data="$dir/shardload-device-check-$$"

for tool in cmake nvcc g++; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool not found on PATH" >&2; exit 2; }
done
# CMake learned the C++20 dialect for nvcc after 3.25 (3.25 stops at "CUDA20 not supported").
cmake_version=$(cmake --version | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
read -r cmake_major cmake_minor <<<"$cmake_version"
if (( cmake_major < 3 || (cmake_major == 3 && cmake_minor < 26) )); then
  echo "run.sh: CMake >= 3.26 needed for CUDA C++20, found $(cmake --version | head -1)" \
       "(pip install cmake, or source scripts/env.sh for the project's)" >&2
  exit 2
fi

cleanup() { rm -rf -- "$data"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== build ($build, CUDA architectures $arch)"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DSHARDLOAD_CHECK_ARCH="$arch" >"$build.log" 2>&1 ||
  { tail -30 "$build.log"; echo "run.sh: cmake configure failed (log: $build.log)" >&2; exit 1; }
cmake --build "$build" --target device_check -j "${JOBS:-$(nproc)}" >>"$build.log" 2>&1 ||
  { tail -30 "$build.log"; echo "run.sh: build failed (log: $build.log)" >&2; exit 1; }
echo "   built in $((SECONDS - start)) s"

left=$((budget - (SECONDS - start)))
(( left > 30 )) || { echo "run.sh: the build left no time to run" >&2; exit 1; }
echo "== run (at most $left s; data in $data)"
set +e
timeout --signal=TERM --kill-after=10 "$left" "$build/device_check" --dir "$data" "${args[@]}"
rc=$?
set -e
if [[ $rc -eq 124 ]]; then echo "run.sh: the check ran out of time (5-minute budget)" >&2; fi
echo "== done in $((SECONDS - start)) s, exit status $rc"
exit $rc
