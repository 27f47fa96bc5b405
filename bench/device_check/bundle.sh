#!/usr/bin/env bash
# Builds the device check's bundle: a folder that a machine with an NVIDIA driver and nothing
# else (no compiler, CMake, CUDA toolkit, GoogleTest or network) runs with no build step.
#
#   bench/device_check/bundle.sh [OUT]      # default OUT: .device in the checkout (ignored)
#
# OUT holds run.sh (this folder's, which runs everything), device_check, cuda_tests (with
# fake_cufile.so, the stand-in cuFile some of its tests load) and BUILD-INFO. Both programs link
# the CUDA runtime (cudart_static), libstdc++, libgcc, GoogleTest and the codecs statically;
# they need only glibc and the driver's libcuda.so.1, which the CUDA runtime loads at run time.
# The script checks that (readelf) and that OUT stays under 64 MiB.
#
# Needs g++, nvcc, CMake 3.26 or later (.venv's, else the one on PATH), GoogleTest's static
# libraries (Debian libgtest-dev: libgtest.a, or its sources under /usr/src/googletest) and the
# static archives of zlib, zstd, lz4, blosc and xxHash (their Debian -dev packages), nothing
# else. It configures a tree of its own with SHARDLOAD_DEVICE_BUNDLE=ON (bench/device_check/
# CMakeLists.txt): the programs link the objects of every layer libshardload.so is made of and
# those of the CUDA backend and synth, as CMake lists them, so no list of sources is kept here.
# The drivers and readers whose libraries do not link statically are left out by their
# options (Arrow: Parquet, Arrow IPC and s3://; libcurl: http(s)://; HDF5), as in any build
# without them: the check reads native .npy shards. The tree's device_bundle/sources.txt
# names every source compiled.
# Environment: NVCC (default: nvcc on PATH, then $CUDA_HOME/bin, /usr/local/cuda/bin), CMAKE,
# BUILD_DIR for the tree (default build-device in the checkout; the tree is BUILD_DIR/tree),
# JOBS (default nproc). ccache is used when on PATH. The CUDA code is the project's
# (SHARDLOAD_CUDA_ARCHITECTURES: sm_80 code and sm_90 code + PTX).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/.device}
obj=${BUILD_DIR:-$root/build-device}
tree=$obj/tree
jobs=${JOBS:-$(nproc)}

die() { echo "bundle.sh: $*" >&2; exit 1; }

nvcc=${NVCC:-}
if [[ -z $nvcc ]]; then
  for c in "$(command -v nvcc || true)" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" /usr/local/cuda/bin/nvcc; do
    if [[ -n $c && -x $c ]]; then nvcc=$c; break; fi
  done
fi
[[ -n $nvcc && -x $nvcc ]] || die "nvcc not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin; or set NVCC)"
command -v g++ >/dev/null || die "g++ not found on PATH"
# CMake 3.26 knows nvcc's C++20 (the CUDA backend's dialect); Debian 12's is 3.25.
cmake=${CMAKE:-}
if [[ -z $cmake ]]; then
  for c in "$root/.venv/bin/cmake" "$(command -v cmake || true)"; do
    if [[ -n $c && -x $c ]]; then cmake=$c; break; fi
  done
fi
[[ -n $cmake ]] || die "cmake not found (.venv/bin, PATH; or set CMAKE)"
cmake_version=$("$cmake" --version | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')
[[ $(printf '%s\n3.26\n' "$cmake_version" | sort -V | head -1) == 3.26 ]] ||
  die "$cmake is CMake $cmake_version; the CUDA backend's C++20 needs 3.26 or later (scripts/setup.sh installs it into .venv; or set CMAKE)"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launchers=()
if command -v ccache >/dev/null; then
  for lang in C CXX CUDA; do launchers+=(-DCMAKE_${lang}_COMPILER_LAUNCHER=ccache); done
fi

mkdir -p "$obj"
log=$obj/build.log
: >"$log"
echo "bundle.sh: building into $out (tree $tree, log $log)"
echo "bundle.sh: $("$nvcc" --version | tail -1), $(g++ --version | head -1), CMake $cmake_version"
# A tree configured for another checkout or by another CMake (an older one, before
# scripts/setup.sh installed .venv's) is made again.
if [[ -f $tree/CMakeCache.txt ]] &&
   ! { grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$tree/CMakeCache.txt" &&
       [[ $(sed -n 's/^CMAKE_CACHE_\(MAJOR\|MINOR\)_VERSION:INTERNAL=//p' "$tree/CMakeCache.txt" |
            paste -sd.) == "$cmake_version" ]]; }; then
  rm -rf "$tree"
fi
"$cmake" -S "$root" -B "$tree" "${generator[@]}" "${launchers[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DSHARDLOAD_DEVICE_BUNDLE=ON -DSHARDLOAD_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DSHARDLOAD_WITH_ARROW=OFF -DSHARDLOAD_WITH_HTTP=OFF -DSHARDLOAD_WITH_HDF5=OFF \
  -DSHARDLOAD_WITH_LEGATE=OFF -DSHARDLOAD_PYTHON=OFF -DSHARDLOAD_TESTS=OFF -DSHARDLOAD_BENCH=OFF \
  >>"$log" 2>&1 || { tail -30 "$log" >&2; die "configuring $tree failed"; }
"$cmake" --build "$tree" -j "$jobs" --target device_bundle >>"$log" 2>&1 ||
  { grep -B2 -A20 -m3 'FAILED\|error' "$log" | tail -60 >&2; die "building the bundle failed (see $log)"; }

rm -rf "$out"
mkdir -p "$out"
cp "$tree/device_bundle/device_check" "$tree/device_bundle/cuda_tests" \
  "$tree/device_bundle/fake_cufile.so" "$out/"
strip --strip-unneeded "$out/device_check" "$out/cuda_tests"
cp "$here/run.sh" "$out/run.sh"
chmod +x "$out/run.sh"

# Nothing the GPU image must provide but glibc and the driver.
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$'
for p in device_check cuda_tests; do
  while read -r lib; do
    [[ $lib =~ $allowed ]] || die "$p needs $lib, which the GPU image need not have"
  done < <(readelf -d "$out/$p" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
glibc=$(objdump -T "$out/device_check" "$out/cuda_tests" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)
bytes=$(du -sb "$out" | cut -f1)
limit=$((64 << 20))
{
  echo "shardload device check bundle"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  echo "nvcc: $("$nvcc" --version | tail -1)"
  echo "g++: $(g++ --version | head -1)"
  echo "CUDA code: CUDA_ARCHITECTURES $(cat "$tree/device_bundle/cuda_architectures.txt")"
  echo "sources: $(wc -l <"$tree/device_bundle/sources.txt") of the CMake targets (sources.txt in $tree/device_bundle)"
  echo "needs: an NVIDIA driver (libcuda.so.1) and glibc with $glibc"
  echo "size: $bytes bytes"
} >"$out/BUILD-INFO"
(( bytes < limit )) || die "the bundle is $bytes bytes, over the 64 MiB limit"
echo "bundle.sh: $out: $(ls "$out" | tr '\n' ' ')($((bytes / 1024)) KiB; needs the driver and $glibc)"
