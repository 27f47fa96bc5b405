#!/usr/bin/env bash
# Runs every test: sets up first, then the C++ tests (the core plain and under
# AddressSanitizer + UndefinedBehaviorSanitizer, the C++ API under Legate) and
# the Python tests (the core against numpy, shardload.load under Legate).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
scripts/setup.sh
source scripts/env.sh

echo "== C++ tests (core, and the C++ API under Legate with LEGATE_CONFIG)"
ctest --test-dir build --output-on-failure -j "$(nproc)"

echo "== C++ core tests under ASan + UBSan"
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSHARDLOAD_SANITIZE=ON \
        -DSHARDLOAD_PYTHON=OFF -DSHARDLOAD_BENCH=OFF -DSHARDLOAD_WITH_LEGATE=OFF >/dev/null
fi
cmake --build build-asan -j "$(nproc)" --target core_tests >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build-asan/core_tests --gtest_brief=1

echo "== Python tests"
cd tests/python
python -m pytest -q "$@"
