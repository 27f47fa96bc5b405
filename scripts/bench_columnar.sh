#!/usr/bin/env bash
# Runs bench/bench_columnar.py with two CPU processors (pyarrow gets two threads).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
export LEGATE_CONFIG="${BENCH_LEGATE_CONFIG:---cpus 2 --utility 1 --gpus 0 --sysmem 6000 --logging gpu=6,threads=5}"
exec python bench/bench_columnar.py "$@"
