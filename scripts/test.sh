#!/usr/bin/env bash
# Runs every test: sets up first, then the C++ tests (the core plain and under
# AddressSanitizer + UndefinedBehaviorSanitizer, the C++ API under Legate), the device bundle,
# fuzzing, the examples, the package as a user installs it (scripts/check_install.sh: the wheel
# installed into a new venv, a smoke test with nothing sourced, the C++ consumer), the
# multi-rank suite on 2 Legate ranks (tests/multirank, with the networked build of
# scripts/setup_multirank.sh), the Python API reference (scripts/api_docs.sh) and, last, the
# Python tests (the core against numpy, shardload.load under Legate). Every stage fails the
# run when it fails; each one's wall time and the total are printed at the end.
#
#   scripts/test.sh                   everything
#   scripts/test.sh --quick           the loop to run while working (a few minutes on a warm
#                                     build): the build, the include and stub checks, the C++
#                                     tests of build/ and the Python tests not marked slow
#   scripts/test.sh --fuzz-seconds N  fuzz each target N seconds after replaying its corpus
#                                     (default FUZZ_SECONDS, else 10; 0 only replays)
#   PYTEST_WORKERS=N scripts/test.sh  the Python tests on N processes (default 2; 0: one)
#
# Other arguments go to pytest. The build scripts use a compiler cache (scripts/ccache.sh), so
# a second run, and the trees that compile the same engine again (the networked build, the
# wheel of the install check), reuse the objects.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
QUICK=0
FUZZ_SECONDS=${FUZZ_SECONDS:-10}
PYTEST_ARGS=()
while (($#)); do
  case $1 in
    --quick) QUICK=1; shift ;;
    --fuzz-seconds) FUZZ_SECONDS=$2; shift 2 ;;
    --fuzz-seconds=*) FUZZ_SECONDS=${1#*=}; shift ;;
    *) PYTEST_ARGS+=("$1"); shift ;;
  esac
done
[[ $FUZZ_SECONDS =~ ^[0-9]+$ ]] || { echo "--fuzz-seconds takes whole seconds, got '$FUZZ_SECONDS'" >&2; exit 2; }
# The Python tests run on PYTEST_WORKERS processes (pytest-xdist; 2 unless set, 0 runs them in
# this one process): most of them wait on subprocesses, servers and sleeps, which overlap. Each
# worker starts its own Legate runtime. --dist loadfile keeps a module on one worker, so its
# tests run in their order and its module-scoped S3 server starts once.
PYTEST_WORKERS=${PYTEST_WORKERS:-2}
[[ $PYTEST_WORKERS =~ ^[0-9]+$ ]] || { echo "PYTEST_WORKERS takes a number of processes, got '$PYTEST_WORKERS'" >&2; exit 2; }
XDIST=(-n "$PYTEST_WORKERS" --dist loadfile)

# ---- stage timing: each stage's wall time, printed at the end whatever happens ---------------
STAGE_NAMES=()
STAGE_SECONDS=()
STAGE_STATUS=()
CURRENT_STAGE=""
RUN_START=$(date +%s)
record() {  # record STATUS: closes the current stage
  STAGE_NAMES+=("$CURRENT_STAGE")
  STAGE_SECONDS+=("$(($(date +%s) - CURRENT_START))")
  STAGE_STATUS+=("$1")
  CURRENT_STAGE=""
}
report() {
  local rc=$? i
  if [ -n "${MR_VENV_PID:-}" ]; then kill "$MR_VENV_PID" 2>/dev/null || true; fi  # none left
  if [ -n "${BUNDLE_PID:-}" ]; then kill "$BUNDLE_PID" 2>/dev/null || true; fi
  if [ -n "${TORCH_PID:-}" ]; then kill "$TORCH_PID" 2>/dev/null || true; fi
  [ -n "$CURRENT_STAGE" ] && record "FAILED (exit $rc)"
  ((${#STAGE_NAMES[@]})) || return 0
  echo
  echo "== Stage times (scripts/test.sh$( ((QUICK)) && echo ' --quick'), $(nproc) CPUs)"
  for i in "${!STAGE_NAMES[@]}"; do
    printf '  %-56s %6s s  %s\n' "${STAGE_NAMES[$i]}" "${STAGE_SECONDS[$i]}" "${STAGE_STATUS[$i]}"
  done
  printf '  %-56s %6s s  %s\n' "total" "$(($(date +%s) - RUN_START))" \
    "$( ((rc == 0)) && echo ok || echo "FAILED (exit $rc)")"
}
trap report EXIT
# Killed or interrupted: the table then says so (the EXIT trap would see status 0).
trap 'exit 130' INT
trap 'exit 143' TERM
# stage NAME COMMAND...: runs COMMAND as one stage. Not called as `COMMAND || ...`, which would
# switch off set -e inside it: a failing command ends the run, and the EXIT trap records it.
stage() {
  CURRENT_STAGE=$1
  CURRENT_START=$(date +%s)
  shift
  echo "== $CURRENT_STAGE"
  "$@"
  record ok
}

# built DIR [ARGS]: builds a tree quietly; shows the end of its log when the build fails.
built() {
  local dir=$1
  shift
  cmake --build "$dir" -j "$(nproc)" "$@" >"$dir/build.log" 2>&1 ||
    { echo "building $dir failed; the end of $dir/build.log:"; tail -60 "$dir/build.log"; return 1; }
}

stage "Setup (scripts/setup.sh: packages, .venv, build/)" scripts/setup.sh
source scripts/env.sh
source scripts/ccache.sh  # for the tree configured here (build-san)

# The device check's bundle needs g++, nvcc, GoogleTest and .venv's CMake (3.26 or later, for
# nvcc's C++20; Debian 12 has 3.25), so it starts once setup.sh has made .venv: it compiles (one
# job, through the compiler cache) beside the stages below, while PyTorch and the networked
# build's wheels download; its stage links and checks it, compiling only what is missing (all of
# it, where this did not run or failed). Not where that stage skips (a real driver, no nvcc).
BUNDLE_PID=""
if [ "$QUICK" = 0 ] && command -v g++ >/dev/null && command -v ccache >/dev/null &&
   { command -v nvcc >/dev/null || [ -n "${NVCC:-}" ] || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && [ ! -e /dev/nvidiactl ]; then
  mkdir -p build-device
  (source scripts/ccache.sh && JOBS=1 bench/device_check/bundle.sh build-device/bundle) \
    >build-device/background.log 2>&1 &
  BUNDLE_PID=$!
fi

if [ "$QUICK" = 0 ]; then
  # The networked build's 3 GB of wheels download while the stages below compile and test; its
  # log is shown, and its failure fails the run, at the multi-rank stage.
  MR_VENV_LOG=$ROOT/build/setup-multirank-venv.log
  scripts/setup_multirank.sh --venv-only >"$MR_VENV_LOG" 2>&1 &
  MR_VENV_PID=$!
fi

# PyTorch for the feed's tests (requirements-torch.txt: 1.4 GB of wheels into .venv) installs
# while the stages below run; the stage before the Python tests waits for it.
TORCH_LOG=$ROOT/build/setup-torch.log
scripts/setup_torch.sh >"$TORCH_LOG" 2>&1 &
TORCH_PID=$!
torch_ready() {
  local pid=$TORCH_PID
  TORCH_PID=""
  if ! wait "$pid"; then echo "installing requirements-torch.txt failed:"; tail -40 "$TORCH_LOG"; return 1; fi
  cat "$TORCH_LOG"
}

stage "Layers: every #include points down" python tools/check_includes.py

stubs() {
  # The cache goes into the build, not beside the sources.
  (cd python && MYPY_CACHE_DIR="$ROOT/build/.mypy_cache" python -m mypy.stubtest \
     --allowlist "$ROOT/tools/stubtest_allowlist.txt" shardload._core shardload._feed_core shardload._legate)
}
stage "Stubs: python/shardload/*.pyi (stubtest)" stubs

stage "C++ tests of build/ (ctest)" ctest --test-dir build --output-on-failure -j "$(nproc)"

if [ "$QUICK" = 1 ]; then
  stage "PyTorch for the feed tests (setup_torch.sh, background)" torch_ready
  quick_python() { (cd tests/python && python -m pytest -q "${XDIST[@]}" -m "not slow" --durations=10 ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"}); }
  stage "Python tests not marked slow" quick_python
  exit 0
fi

device_bundle() {
  if [ -n "$BUNDLE_PID" ]; then
    wait "$BUNDLE_PID" || true  # a failure there shows again below, where it fails the stage
    BUNDLE_PID=""
  fi
  bench/device_check/selftest.sh
}
stage "Device check bundle (g++ and nvcc, stand-in driver)" device_bundle

# One sanitizer tree for the ASan + UBSan tests and the fuzz targets (build-san/): the engine
# compiles once with ASan + UBSan and libFuzzer's coverage (which the tests do not mind), and
# each stage builds what it runs (core_tests, then the fuzzers). Clang 16, not Debian's default
# clang 14, which has no _Float16 on x86-64 (the Arrow column copies use it). Debug (-O0):
# clang's ASan at -O1 takes minutes on arrow_columns.cc alone.
configure_san() {
  # Configured every time (quick once configured) so the options below always hold.
  CC=clang-16 CXX=clang++-16 cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug \
        -DSHARDLOAD_SANITIZE=ON -DSHARDLOAD_FUZZ=ON -DSHARDLOAD_PYTHON=OFF -DSHARDLOAD_BENCH=OFF \
        -DSHARDLOAD_WITH_LEGATE=OFF -DSHARDLOAD_WITH_CUDA=OFF >/dev/null
}
asan() {
  configure_san
  built build-san --target core_tests
  # Stack use after return unchecked, as the g++ tree ran them: clang turns it on by default, and
  # the run took 94 CPU s with it, 56 without (g++: 52).
  ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=0 UBSAN_OPTIONS=print_stacktrace=1 \
    build-san/core_tests --gtest_brief=1
}
stage "C++ core tests under ASan + UBSan" asan

fuzz_one() {  # fuzz_one TARGET: replays the committed corpus, then fuzzes FUZZ_SECONDS
  local fuzzer=$1 name work
  name=${fuzzer#build-san/fuzz_}
  work=$(mktemp -d)  # new inputs stay out of the committed corpus
  cp fuzz/corpus/"$name"/* "$work"/
  if ! "$fuzzer" -runs=0 -artifact_prefix="$work/" fuzz/corpus/"$name" >"$work.log" 2>&1 ||
     { ((FUZZ_SECONDS > 0)) && ! "$fuzzer" -max_total_time="$FUZZ_SECONDS" -print_final_stats=0 \
         -artifact_prefix="$work/" "$work" >>"$work.log" 2>&1; }; then
    echo "fuzz_$name FAILED; its log and crash input:"; tail -40 "$work.log"; ls "$work"/crash-* || true
    return 1
  fi
  echo "fuzz_$name: corpus of $(ls fuzz/corpus/"$name" | wc -l) replayed;" \
       "$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$work.log" | tail -1 || echo 'no fuzzing'), no crash"
  rm -rf "$work" "$work.log"
}
fuzz() {
  configure_san
  built build-san --target fuzzers
  # One target per CPU at a time; each is single-threaded. Stack use after return unchecked, as
  # clang 14 fuzzed before: with it, the -O0 targets ran 2-9x fewer inputs in 10 s (without,
  # 0.1-0.7x as many as clang 14's -O2 ones did).
  export ASAN_OPTIONS=detect_stack_use_after_return=0
  export -f fuzz_one
  export FUZZ_SECONDS
  printf '%s\n' build-san/fuzz_* | xargs -P "$(nproc)" -I{} bash -c 'fuzz_one "$1"' _ {}
}
stage "Fuzzing: corpus replay + ${FUZZ_SECONDS} s per target" fuzz

examples() {
  local example
  for example in examples/*.py; do
    echo "-- $example"
    python "$example"
  done
}
stage "Examples (examples/*.py, each its own process)" examples

stage "Installed package: new venv, nothing sourced, C++ consumer" scripts/check_install.sh

multirank() {
  local pid=$MR_VENV_PID
  MR_VENV_PID=""
  if ! wait "$pid"; then
    echo "setting up .venv-mr failed:"; tail -40 "$MR_VENV_LOG"; return 1
  fi
  # The networked build beside the default one (scripts/setup_multirank.sh), then the suite of
  # tests/multirank, each test one job of scripts/multirank.sh; -s shows each job's ranks.
  scripts/setup_multirank.sh
  (cd tests/multirank && "$ROOT/.venv-mr/bin/python" -m pytest -q -s -p no:cacheprovider)
}
stage "Multi-rank tests: 2 Legate ranks (build-mr)" multirank

stage "Python API reference (pdoc, no Legate start)" scripts/api_docs.sh build/api

stage "PyTorch for the feed tests (setup_torch.sh, background)" torch_ready
python_tests() { (cd tests/python && python -m pytest -q "${XDIST[@]}" --durations=15 ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"}); }
# Last, so that its summary closes the output (before the stage table).
stage "Python tests" python_tests
