#!/usr/bin/env bash
# Runs bench/bench_load.py with two CPU processors and room for the 2 GB set
# (the output array of each loader plus numpy's copies live side by side).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
export LEGATE_CONFIG="${BENCH_LEGATE_CONFIG:---cpus 2 --utility 1 --gpus 0 --sysmem 9000 --logging gpu=6,threads=5}"
exec python bench/bench_load.py "$@"
