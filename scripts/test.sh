#!/usr/bin/env bash
# Runs every test: sets up first, then the C++ tests (the core plain and under
# AddressSanitizer + UndefinedBehaviorSanitizer, the C++ API under Legate), the
# package as a user installs it (scripts/check_install.sh: pip install . into a
# new venv, a smoke test with nothing sourced, the C++ consumer), the multi-rank
# suite on 2 Legate ranks (tests/multirank, with the networked build of
# scripts/setup_multirank.sh), the Python API reference (scripts/api_docs.sh)
# and, last, the Python tests (the core against numpy,
# shardload.load under Legate).
#
# scripts/test.sh --quick is the loop to run while working (a few minutes on a warm build): the
# build, the include check, the stub check, the C++ tests of build/ (core and the C++ API under
# Legate) and the Python tests not marked slow. Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
QUICK=0
if [ "${1:-}" = "--quick" ]; then
  QUICK=1
  shift
fi
scripts/setup.sh
source scripts/env.sh

echo "== Layers: every #include points down (tools/check_includes.py)"
python tools/check_includes.py

echo "== Stubs: python/shardload/*.pyi against the built modules (mypy's stubtest)"
# The cache goes into the build, not beside the sources.
(cd python && MYPY_CACHE_DIR="$ROOT/build/.mypy_cache" python -m mypy.stubtest \
   --allowlist "$ROOT/tools/stubtest_allowlist.txt" shardload._core shardload._legate)

echo "== C++ tests (core, and the C++ API under Legate with LEGATE_CONFIG)"
ctest --test-dir build --output-on-failure -j "$(nproc)"

if [ "$QUICK" = 1 ]; then
  echo "== Python tests not marked slow (scripts/test.sh without --quick runs them all)"
  cd tests/python
  python -m pytest -q -m "not slow" "$@"
  exit 0
fi

echo "== Device check bundle: built with g++ and nvcc alone, run through the stand-in driver"
bench/device_check/selftest.sh

echo "== C++ core tests under ASan + UBSan"
# Configured every time (quick once configured) so the options below always hold.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSHARDLOAD_SANITIZE=ON \
      -DSHARDLOAD_PYTHON=OFF -DSHARDLOAD_BENCH=OFF -DSHARDLOAD_WITH_LEGATE=OFF >/dev/null
cmake --build build-asan -j "$(nproc)" --target core_tests >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build-asan/core_tests --gtest_brief=1

echo "== Fuzzing: each libFuzzer target for ${FUZZ_SECONDS:-60} s from its seed corpus"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSHARDLOAD_FUZZ=ON -DSHARDLOAD_SANITIZE=ON -DSHARDLOAD_WITH_LEGATE=OFF \
      -DSHARDLOAD_PYTHON=OFF -DSHARDLOAD_TESTS=OFF -DSHARDLOAD_BENCH=OFF \
      -DSHARDLOAD_WITH_CUDA=OFF -DSHARDLOAD_WITH_HDF5=OFF -DSHARDLOAD_WITH_ARROW=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" >/dev/null
for fuzzer in build-fuzz/fuzz_*; do
  name=${fuzzer#build-fuzz/fuzz_}
  work=$(mktemp -d)  # new inputs stay out of the committed corpus
  cp fuzz/corpus/"$name"/* "$work"/
  if ! "$fuzzer" -max_total_time="${FUZZ_SECONDS:-60}" -print_final_stats=0 \
       -artifact_prefix="$work/" "$work" >"$work.log" 2>&1; then
    echo "fuzz_$name FAILED; its log and crash input:"; tail -40 "$work.log"; ls "$work"/crash-* || true
    exit 1
  fi
  echo "fuzz_$name: $(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$work.log"), no crash"
  rm -rf "$work" "$work.log"
done

echo "== Examples (examples/*.py, each in its own process under Legate)"
for example in examples/*.py; do
  echo "-- $example"
  python "$example"
done

echo "== Installed package: pip install . in a new venv, smoke test, C++ consumer"
scripts/check_install.sh

echo "== Multi-rank tests: 2 Legate ranks over loopback (Legate 26.01 with UCX in build-mr)"
# The networked build beside the default one (scripts/setup_multirank.sh), then the suite of
# tests/multirank, each test one job of scripts/multirank.sh; -s shows each job's ranks.
scripts/setup_multirank.sh
(cd tests/multirank && "$ROOT/.venv-mr/bin/python" -m pytest -q -s -p no:cacheprovider)

echo "== Python API reference: pdoc from the docstrings into build/api, without starting Legate"
scripts/api_docs.sh build/api

# Last, so that its summary closes the output.
echo "== Python tests"
cd tests/python
python -m pytest -q "$@"
