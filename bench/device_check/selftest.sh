#!/usr/bin/env bash
# CI's check of the device check's bundle where there is no GPU: it builds with CMake, g++ and
# nvcc alone (bundle.sh, from the CMake targets), needs nothing beside glibc and the driver, and, run through the stand-in
# driver (build/nocuda/libcuda.so.1, scripts/setup.sh), prints the machine, runs cuda_tests (each
# test checks the clean "no CUDA device" error and skips) and ends with "no CUDA device" and
# exit status 2. Then, without a GPU: the data's sizing (--plan-only), a size fixed by --size or
# DEVICE_CHECK_SIZE and its checks, and the GDS row's text for each mode the stand-in cuFile
# reports (--cufile-mode). Skipped, saying why, where nvcc or the stand-in is absent (a real
# driver).
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
DEVICE_CHECK_SIZE=1G LD_LIBRARY_PATH="$stand_in${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$bundle/run.sh" >"$out" 2>&1
rc=$?
set -e
fail() { cat "$out"; echo "selftest: FAILED: $*" >&2; exit 1; }
[[ $rc -eq 2 ]] || fail "run.sh exit status $rc, expected 2 (no CUDA device)"
grep -q '^== machine' "$out" || fail "no machine section"
grep -q '^device_check: no CUDA device (' "$out" || fail "no 'no CUDA device' message"
grep -q '^run.sh: cuda_tests passed' "$out" || fail "cuda_tests did not pass"
grep -q 'SKIPPED .*CudaFillTest' "$out" || fail "cuda_tests skipped nothing"
grep -q 'OK .*CuFile\.' "$out" || fail "cuda_tests' cuFile tests did not run"
grep -q '^run.sh: data size from DEVICE_CHECK_SIZE=1G$' "$out" || fail "DEVICE_CHECK_SIZE not taken"
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

# expect STATUS PATTERN COMMAND...: COMMAND exits STATUS and prints a line matching PATTERN.
expect() {
  local want=$1 pattern=$2 rc
  shift 2
  set +e
  "$@" >"$out" 2>&1
  rc=$?
  set -e
  [[ $rc -eq $want ]] && { [[ -z $pattern ]] || grep -q -- "$pattern" "$out"; } ||
    fail "exit $rc (expected $want) and no line matching '$pattern' from: $*"
}
plan=("$bundle/device_check" --name selftest)
check=("${plan[@]}" --dir "$root/build-device")

# --size fixes the size where host memory would cut it (3 GiB left allows 0.5 GiB), and says
# that host memory falls short; without it the same host memory cuts the size.
expect 0 '^device_check: (planned, no GPU used) .* 1.00 GiB in 16 shards under ' \
  "${check[@]}" --plan-only 80 --plan-host-gib 3 --size 1G
grep -q '^size: 1.00 GiB fixed by --size 1G' "$out" || fail "no 'fixed by --size' line"
grep -q '^note: --size 1.00 GiB is more than host memory allows (0.50 GiB' "$out" ||
  fail "no note that host memory falls short of --size"
expect 0 '^device_check: (planned, no GPU used) .* 0.50 GiB in 16 shards under ' \
  "${check[@]}" --plan-only 80 --plan-host-gib 3
grep -q 'bound: host memory' "$out" || fail "host memory did not bound the automatic size"
expect 0 ' 0.50 GiB in 16 shards under ' "${check[@]}" --plan-only 80 --size 512MiB
expect 0 ' 0.06 GiB in 16 shards under ' "${check[@]}" --plan-only 80 --size 64m
# Past what the device or the disk holds: refused, not cut.
expect 2 "^device_check: --size 4G (4.00 GiB) does not fit the device: 2.00 GiB free" \
  "${check[@]}" --plan-only 2 --size 4G
expect 2 "^device_check: --size 64 (64.00 GiB): no --dir has that much free space" \
  "${plan[@]}" --dir /proc --plan-only 80 --size 64
# Junk and sizes out of range, each named as given.
for v in abc 8x 1e3 1.5.2 -1 ' 8' 8GB 0x10 ''; do
  expect 2 "^device_check: --size '$v': expected a size such as 8 or 0.5 (GiB), 8G" \
    "${check[@]}" --check-args --size "$v"
done
for v in 0 0.01 63M 65G 64.5 100000000000000000000000; do
  expect 2 "^device_check: --size '$v' is .*: expected from 64 MiB to 64 GiB" \
    "${check[@]}" --check-args --size "$v"
done
expect 0 '' "${check[@]}" --check-args --size 64G
expect 2 "^device_check: --gib '4x': expected a number" "${check[@]}" --check-args --gib 4x
expect 2 "^device_check: --shards '16.5': expected a whole number" \
  "${check[@]}" --check-args --shards 16.5
expect 2 '^device_check: --gib and --size both given' "${check[@]}" --check-args --gib 2 --size 2
# run.sh refuses them before anything runs (no machine section), and names the variable.
expect 2 "^run.sh: data size from DEVICE_CHECK_SIZE=lots: device_check: --size 'lots': expected" \
  env DEVICE_CHECK_SIZE=lots "$bundle/run.sh"
! grep -q '^== machine' "$out" || fail "run.sh ran the machine section before refusing the size"
expect 2 "^run.sh: device_check: --size '100G' is 100 GiB: expected from 64 MiB to 64 GiB" \
  "$bundle/run.sh" --size 100G
expect 2 '^run.sh: missing value after --size' "$bundle/run.sh" --size
expect 2 "^run.sh: DEVICE_CHECK_SIZE=lots ignored: --gib given: device_check: --gib 'x'" \
  env DEVICE_CHECK_SIZE=lots "$bundle/run.sh" --gib x

# The GDS row says which mode cuFile reports, for each the stand-in can report.
mode=("${plan[@]}" --name selftest-cufile --cufile-mode "$bundle/fake_cufile.so")
in_build=(--dir "$root/build-device")
row='^(d) fill_device through cuFile (GDS, --gds) .* not measured (--cufile-mode, no GPU used); '
expect 0 "${row}cuFile compatibility mode: nvidia-fs is not loaded" env -u FAKE_CUFILE_MODE \
  "${mode[@]}" "${in_build[@]}"
expect 0 "${row}cuFile compatibility mode: nvidia-fs is not loaded" \
  env FAKE_CUFILE_MODE=compat "${mode[@]}" "${in_build[@]}"
expect 0 "${row}cuFile direct mode: nvidia-fs 2.17 loaded, serving NVMe, NVMeOF; the data is on " \
  env FAKE_CUFILE_MODE=direct "${mode[@]}" "${in_build[@]}"
expect 0 "${row}cuFile compatibility mode: force_compat_mode is set (cufile.json), though " \
  env FAKE_CUFILE_MODE=forced "${mode[@]}" "${in_build[@]}"
expect 0 "${row}cuFile mode unknown: cuFileDriverGetProperties failed: error 5001" \
  env FAKE_CUFILE_MODE=error "${mode[@]}" "${in_build[@]}"
expect 0 "${row}cuFile declined the files (cuFileHandleRegister refused " \
  env FAKE_CUFILE_MODE=direct "${mode[@]}" --dir "$root/build-device/refused"
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]]; then
  expect 0 "${row}cuFile compatibility mode: the data is on tmpfs" \
    env FAKE_CUFILE_MODE=direct "${mode[@]}" --dir /dev/shm
  [[ ! -e /dev/shm/selftest-cufile ]] || fail "--cufile-mode left /dev/shm/selftest-cufile behind"
fi
expect 1 '^(d) fill_device through cuFile (GDS, --gds) .* cuFile: .*no-such-cufile.so' \
  "${mode[@]}" "${in_build[@]}" --cufile-mode "$root/build-device/no-such-cufile.so"
size=$(sed -n 's/^size: //p' "$bundle/BUILD-INFO")
echo "selftest: the bundle ($size) runs to 'no CUDA device', exit status 2;" \
  "its sizing, --size and the GDS row's modes hold"
