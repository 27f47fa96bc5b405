#!/usr/bin/env bash
# The device check, run from its bundle (bench/device_check/bundle.sh builds it; this script is
# copied into it): no build step, nothing needed but bash, coreutils and the NVIDIA driver.
#
#   .device/run.sh [--gib G | --size SIZE] [--dir DIR]... [--shards N] [--reps R] [--gds]
#                  [--log FILE]
#
# In order, within 5 minutes (BUDGET seconds, default 280):
#   1. the machine: kernel, CPUs, driver, GPUs, memory, /dev/shm and disk (device_check --info);
#   2. cuda_tests (the CUDA backend's tests, and the training feed's device batches: the
#      engine's device fill of a batch's rows equal to the host fill's bit for bit, in device
#      memory at the pointer its DLPack tensor carries; each skips, after checking the clean
#      "no CUDA device" error, where there is no GPU), at most 90 s;
#   3. device_check: the pinned ceiling, the naive path and the device fill side by side
#      (docs/benchmarks.md), with the data sized and placed by what is free: at most --gib
#      (default 4), in the first --dir that takes it all (default /dev/shm, then TMPDIR or /tmp,
#      then the bundle's folder), else in the one that takes the most. With --gds, a row for
#      the fill through cuFile that says whether cuFile ran in direct or compatibility mode.
# --size SIZE (or DEVICE_CHECK_SIZE=SIZE in the environment; --size or --gib on the command line
# wins) fixes the data's size instead of letting host memory cut it, as on a machine just
# started that reports little MemAvailable: 8 or 0.5 is GiB, 8G, 8GiB, 512M, 512MiB; from
# 64 MiB to 64 GiB. It must still fit the free space of a --dir and the device's memory. The
# arguments are checked before anything runs: junk or a size out of range is exit status 2.
# Every line is printed as it is measured (and appended to FILE with --log), so a time-out or a
# crash keeps what was measured before it.
#
# Exit status: 0 the tests passed and the goals were met; 1 a failure (a test failed, wrong
# data, a CUDA or I/O error, a crash); 2 cannot run here ("no CUDA device", or no room for the
# data) or an invalid argument; 3 the goals were missed; 4 out of time (what was measured is
# printed).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
start=$SECONDS
budget=${BUDGET:-280}

dirs=()
args=()
log=""
sized=""  # the option that sized the data on the command line, if one did
need() { [[ $# -ge 3 && -n $3 ]] || { echo "run.sh: missing value after $2" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --dir) need "$#" "$@"; dirs+=("$2"); shift 2 ;;
    --gib|--size) need "$#" "$@"; args+=("$1" "$2"); sized=$1; shift 2 ;;
    --shards|--reps) need "$#" "$@"; args+=("$1" "$2"); shift 2 ;;
    --gds) args+=("$1"); shift ;;
    --log) need "$#" "$@"; log=$2; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
size_note=""
if [[ -n ${DEVICE_CHECK_SIZE+set} ]]; then
  if [[ -n $sized ]]; then
    size_note="DEVICE_CHECK_SIZE=$DEVICE_CHECK_SIZE ignored: $sized given"
  else
    args+=(--size "$DEVICE_CHECK_SIZE")
    size_note="data size from DEVICE_CHECK_SIZE=$DEVICE_CHECK_SIZE"
  fi
fi
if [[ ${#dirs[@]} -eq 0 ]]; then
  dirs=(/dev/shm "${TMPDIR:-/tmp}" "$here")
fi
if [[ -n $log ]]; then
  # Everything from here on, stdout and stderr, also goes to the log, line by line.
  exec > >(tee -a "$log") 2>&1
fi

# Junk or a size out of range is said now, not after the machine and cuda_tests.
if ! checked=$("$here/device_check" --check-args --dir "${dirs[0]}" "${args[@]}" 2>&1); then
  echo "run.sh: ${size_note:+$size_note: }$checked" >&2
  exit 2
fi

name="shardload-device-check-$$"
cleanup() { for d in "${dirs[@]}"; do rm -rf -- "${d:?}/$name"; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM

section() { echo; echo "== $* ($((SECONDS - start)) s)"; }
left() { echo $((budget - (SECONDS - start))); }

section "machine"
[[ -f $here/BUILD-INFO ]] && sed 's/^/bundle: /' "$here/BUILD-INFO"
echo "kernel: $(uname -srm); $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%M:%SZ)"
if [[ -r /proc/driver/nvidia/version ]]; then
  sed -n '1s/^/driver: /p' /proc/driver/nvidia/version
fi
if command -v nvidia-smi >/dev/null; then
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,pcie.link.gen.max,pcie.link.width.max \
    --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi: /'
else
  echo "nvidia-smi: not on PATH"
fi
grep -E '^(MemTotal|MemAvailable|HugePages_Total):' /proc/meminfo | tr -s ' ' | sed 's/^/memory: /'
if [[ -r /sys/fs/cgroup/memory.max ]]; then
  echo "memory: cgroup limit $(cat /sys/fs/cgroup/memory.max), in use $(cat /sys/fs/cgroup/memory.current 2>/dev/null || echo ?)"
fi
for d in "${dirs[@]}"; do
  df -h --output=target,fstype,size,avail "$d" 2>/dev/null | tail -1 | sed "s|^|space ($d): |"
done
[[ -n $size_note ]] && echo "run.sh: $size_note"
timeout 60 "$here/device_check" --info
info=$?
case $info in
  0) ;;
  2) echo "run.sh: no CUDA device here: cuda_tests check that each test says so, then skip" ;;
  124) echo "run.sh: device_check --info timed out (the driver did not answer in 60 s)"; exit 1 ;;
  *) echo "run.sh: device_check --info failed (exit status $info)"; exit 1 ;;
esac

section "cuda_tests"
timeout --kill-after=5 90 "$here/cuda_tests" --gtest_color=no
tests=$?
case $tests in
  0) echo "run.sh: cuda_tests passed" ;;
  124|137) echo "run.sh: cuda_tests ran out of time (90 s)" ;;
  *) echo "run.sh: cuda_tests FAILED (exit status $tests)" ;;
esac

if [[ $info -eq 2 ]]; then
  status=2
  [[ $tests -eq 0 ]] || status=1
  section "done: no CUDA device; cuda_tests exit $tests; exit status $status"
  exit $status
fi

section "device_check (at most $(($(left) - 10)) s)"
(( $(left) > 40 )) || { echo "run.sh: no time left for device_check"; exit 4; }
dir_args=()
for d in "${dirs[@]}"; do dir_args+=(--dir "$d"); done
timeout --signal=TERM --kill-after=10 $(($(left) - 10)) "$here/device_check" \
  "${dir_args[@]}" --name "$name" --budget $(($(left) - 25)) "${args[@]}"
check=$?
case $check in
  124|137) echo "run.sh: device_check ran out of time; the rows above are what it measured"; check=4 ;;
esac

status=$check
if [[ $tests -ne 0 ]]; then status=1; fi
section "done in $((SECONDS - start)) s: cuda_tests exit $tests, device_check exit $check; exit status $status"
exit $status
