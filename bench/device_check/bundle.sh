#!/usr/bin/env bash
# Builds the device check's bundle: a folder that a machine with an NVIDIA driver and nothing
# else (no compiler, CMake, CUDA toolkit, GoogleTest or network) runs with no build step.
#
#   bench/device_check/bundle.sh [OUT]      # default OUT: .device in the checkout (ignored)
#
# OUT holds run.sh (this folder's, which runs everything), device_check, cuda_tests (with
# fake_cufile.so, the stand-in cuFile some of its tests load) and BUILD-INFO. Both programs link the CUDA runtime (cudart_static), libstdc++, libgcc and
# GoogleTest statically; they need only glibc and the driver's libcuda.so.1, which the CUDA runtime
# loads at run time. The script checks that (readelf) and that OUT stays under 64 MiB.
#
# Needs g++, nvcc and GoogleTest's static libraries (Debian libgtest-dev: libgtest.a, or its
# sources under /usr/src/googletest), nothing else: it compiles only the parts of the engine the
# check uses (base, the .npy reader, discovery, plan, host and device fill, synth and the CUDA
# backend), with stubs.cc in place of the readers and the manifest that need other libraries.
# Environment: NVCC (default: nvcc on PATH, then $CUDA_HOME/bin, /usr/local/cuda/bin),
# CUDA_GENCODE (default: sm_80 code and sm_90 code + PTX), BUILD_DIR for the objects (default
# build-device in the checkout), JOBS (default nproc). ccache is used when on PATH.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/.device}
obj=${BUILD_DIR:-$root/build-device}
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
cuda=$(cd "$(dirname "$nvcc")/.." && pwd)
cudart=""
for d in "$cuda/lib64" "$cuda/lib" "$cuda/targets/x86_64-linux/lib" "$cuda/targets/sbsa-linux/lib"; do
  if [[ -f $d/libcudart_static.a ]]; then cudart=$d/libcudart_static.a; break; fi
done
[[ -n $cudart ]] || die "libcudart_static.a not found under $cuda"
cuda_inc=$(dirname "$cudart")/../include
[[ -f $cuda_inc/cuda_runtime.h ]] || cuda_inc=$cuda/include

launcher=()
command -v ccache >/dev/null && launcher=(ccache)
gencode=${CUDA_GENCODE:--gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=[sm_90,compute_90]}
read -r -a gencode_args <<<"$gencode"

includes=(-I"$root/src" -I"$root/src/base/include" -I"$root/src/storage/include" -I"$root/src/readers/include"
          -I"$root/src/engine/include" -I"$root/src/testing/include" -I"$root/src/cuda/include")
cxxflags=(-std=c++20 -O2 -DNDEBUG -fPIC -pthread -Wall -Wextra "${includes[@]}")
core=(src/base/bytes.cc src/base/dtype.cc src/base/format.cc src/base/io.cc
      src/base/status.cc src/storage/location.cc src/storage/register.cc src/storage/source.cc
      src/readers/byte_order.cc src/readers/npy.cc src/readers/npy_reader.cc src/readers/reader.cc
      src/readers/reader_registry.cc src/readers/formats.cc src/readers/write_files.cc
      src/engine/device_fill.cc src/engine/device_fill_strided.cc src/engine/fill.cc
      src/engine/lanes.cc src/engine/layout.cc src/engine/plan.cc src/engine/probe.cc
      src/engine/reader_threads.cc
      src/engine/staging_pool.cc src/engine/strided.cc
      src/cuda/cufile.cc src/testing/synth.cc bench/device_check/stubs.cc
      bench/device_check/glibc_compat.cc)

mkdir -p "$obj"
log=$obj/build.log
: >"$log"
echo "bundle.sh: building into $out (objects in $obj, log $log)"
echo "bundle.sh: $("$nvcc" --version | tail -1), $(g++ --version | head -1)"

# One compile per line on stdin: OBJECT COMPILER ARGS...; JOBS at a time.
compile() {
  local o=$1; shift
  if ! "$@" -o "$o" >>"$log.$$.$(basename "$o")" 2>&1; then
    cat "$log.$$.$(basename "$o")" >&2
    return 1
  fi
}
failed=0
run_limited() {
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || failed=1; done
  compile "$@" &
}
objects=()
for src in "${core[@]}"; do
  o=$obj/$(echo "$src" | tr / _).o
  objects+=("$o")
  run_limited "$o" "${launcher[@]}" g++ "${cxxflags[@]}" -c "$root/$src"
done
backend_o=$obj/cuda_backend.o
run_limited "$backend_o" "${launcher[@]}" "$nvcc" -std=c++20 -O2 -DNDEBUG "${gencode_args[@]}" \
  -Xcompiler=-fPIC,-Wall,-Wextra "${includes[@]}" -c "$root/src/cuda/cuda_backend.cu"
check_o=$obj/device_check.o
run_limited "$check_o" "${launcher[@]}" "$nvcc" -std=c++20 -O2 -DNDEBUG "${gencode_args[@]}" \
  -Xcompiler=-fPIC,-Wall,-Wextra "${includes[@]}" -c "$here/device_check.cu"

# GoogleTest: Debian's static libraries, else built from its sources.
gtest_lib=""
for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib; do
  if [[ -f $d/libgtest.a && -f $d/libgtest_main.a ]]; then gtest_lib="$d/libgtest_main.a $d/libgtest.a"; break; fi
done
if [[ -z $gtest_lib ]]; then
  gsrc=${GTEST_SOURCE:-/usr/src/googletest/googletest}
  [[ -f $gsrc/src/gtest-all.cc ]] || die "GoogleTest not found (apt-get install libgtest-dev)"
  run_limited "$obj/gtest-all.o" "${launcher[@]}" g++ -std=c++20 -O2 -pthread -I"$gsrc/include" \
    -I"$gsrc" -c "$gsrc/src/gtest-all.cc"
  run_limited "$obj/gtest_main.o" "${launcher[@]}" g++ -std=c++20 -O2 -pthread -I"$gsrc/include" \
    -c "$gsrc/src/gtest_main.cc"
  gtest_lib="$obj/gtest_main.o $obj/gtest-all.o"
fi
tests_o=$obj/test_cuda_backend.o
run_limited "$tests_o" "${launcher[@]}" g++ "${cxxflags[@]}" -I"$cuda_inc" -I"$root/tests/cpp" \
  -c "$root/tests/cpp/test_cuda_backend.cc"
while (( $(jobs -rp | wc -l) > 0 )); do wait -n || failed=1; done
rm -f "$log".$$.*
(( failed == 0 )) || die "a compile failed (see above)"

# Static C++ runtime and CUDA runtime; glibc and libcuda.so.1 (dlopen'ed by cudart) stay dynamic.
rm -rf "$out"
mkdir -p "$out"
link=(g++ -pthread -static-libstdc++ -static-libgcc)
libs=("$cudart" -ldl -lrt)
"${link[@]}" -o "$out/device_check" "$check_o" "$backend_o" "${objects[@]}" "${libs[@]}" >>"$log" 2>&1 ||
  { tail -30 "$log" >&2; die "linking device_check failed"; }
# shellcheck disable=SC2086
"${link[@]}" -o "$out/cuda_tests" "$tests_o" "$backend_o" "${objects[@]}" $gtest_lib "${libs[@]}" \
  >>"$log" 2>&1 || { tail -30 "$log" >&2; die "linking cuda_tests failed"; }
strip --strip-unneeded "$out/device_check" "$out/cuda_tests"
# The stand-in cuFile that cuda_tests' cuFile tests load from beside the program.
gcc -O2 -shared -fPIC -fvisibility=hidden -o "$out/fake_cufile.so" "$root/tests/cpp/fake_cufile.c" \
  >>"$log" 2>&1 || { tail -30 "$log" >&2; die "building fake_cufile.so failed"; }
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
  echo "CUDA code: $gencode"
  echo "needs: an NVIDIA driver (libcuda.so.1) and glibc with $glibc"
  echo "size: $bytes bytes"
} >"$out/BUILD-INFO"
(( bytes < limit )) || die "the bundle is $bytes bytes, over the 64 MiB limit"
echo "bundle.sh: $out: $(ls "$out" | tr '\n' ' ')($((bytes / 1024)) KiB; needs the driver and $glibc)"
