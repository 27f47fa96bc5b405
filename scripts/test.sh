#!/usr/bin/env bash
# Runs every test: sets up first, then the C++ core tests (plain and under
# AddressSanitizer + UndefinedBehaviorSanitizer) and the Python tests.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
scripts/setup.sh
source scripts/env.sh

echo "== C++ core tests"
ctest --test-dir build --output-on-failure -j "$(nproc)"

echo "== C++ core tests under ASan + UBSan"
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSHARDLOAD_SANITIZE=ON \
        -DSHARDLOAD_PYTHON=OFF -DSHARDLOAD_BENCH=OFF >/dev/null
fi
cmake --build build-asan -j "$(nproc)" --target core_tests >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)"

echo "== Python tests"
cd tests/python
python -m pytest -q "$@"
