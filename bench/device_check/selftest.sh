#!/usr/bin/env bash
# CI's check of the device check's bundle where there is no GPU: it builds with g++ and nvcc
# alone (bundle.sh), needs nothing beside glibc and the driver, and, run through the stand-in
# driver (build/nocuda/libcuda.so.1, scripts/setup.sh), prints the machine, runs cuda_tests (each
# test checks the clean "no CUDA device" error and skips) and ends with "no CUDA device" and
# exit status 2. Skipped, saying why, where nvcc or the stand-in is absent (a real driver).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
stand_in=$root/build/nocuda
if [[ ! -f $stand_in/libcuda.so.1 ]]; then
  echo "selftest: skipped: no stand-in driver (build/nocuda/libcuda.so.1): a real driver is here"
  exit 0
fi
if ! command -v nvcc >/dev/null && [[ -z ${NVCC:-} && ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "selftest: skipped: no nvcc"
  exit 0
fi
bundle=$root/build-device/bundle
"$root/bench/device_check/bundle.sh" "$bundle"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
LD_LIBRARY_PATH="$stand_in${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bundle/run.sh" >"$out" 2>&1
rc=$?
set -e
fail() { cat "$out"; echo "selftest: FAILED: $*" >&2; exit 1; }
[[ $rc -eq 2 ]] || fail "run.sh exit status $rc, expected 2 (no CUDA device)"
grep -q '^== machine' "$out" || fail "no machine section"
grep -q '^device_check: no CUDA device (' "$out" || fail "no 'no CUDA device' message"
grep -q '^run.sh: cuda_tests passed' "$out" || fail "cuda_tests did not pass"
grep -q 'SKIPPED .*CudaFillTest' "$out" || fail "cuda_tests skipped nothing"
grep -q 'OK .*CuFile\.' "$out" || fail "cuda_tests' cuFile tests did not run"
# The sizing and placement, without a GPU: a 60 GiB cap is cut to what is free, 64 MiB of
# device memory is too little.
plan=$("$bundle/device_check" --plan-only 1000 --dir "$root/build-device" --gib 60 --name selftest)
echo "$plan" | grep -q '^device_check: (planned, no GPU used) .* GiB in 16 shards under ' ||
  { echo "$plan"; echo "selftest: FAILED: no data plan" >&2; exit 1; }
echo "$plan" | grep -q 'allows .* (bound: \(free space\|host memory\)' ||
  { echo "$plan"; echo "selftest: FAILED: a 60 GiB cap was not cut to what is free" >&2; exit 1; }
set +e
"$bundle/device_check" --plan-only 0.0625 --dir "$root/build-device" --name selftest >"$out" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q 'no room for even 64 MiB' "$out" ||
  { cat "$out"; echo "selftest: FAILED: exit $rc, expected 2 and 'no room'" >&2; exit 1; }
echo "selftest: the bundle ($(sed -n 's/^size: //p' "$bundle/BUILD-INFO")) runs to 'no CUDA device', exit status 2"
