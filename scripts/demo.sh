#!/usr/bin/env bash
# The demo: sets up, writes a demo dataset (4 shards of non-uniform rows,
# total shape (4000000, 8), float32), loads it under Legate with two CPU
# processors (or the GPUs where there are some), verifies it, and prints the
# layout, the plan, the time and GB/s.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
DIR=${DEMO_DIR:-demo-data}
shardload write --shard-dir "$DIR" --num-shards 4 --shape 4000000,8 --dtype float32 --seed 42
shardload read "$DIR"
