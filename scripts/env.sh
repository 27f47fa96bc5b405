# Sourced by the scripts: the project venv and the build on PATH.
SHARDLOAD_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$SHARDLOAD_ROOT/build:$SHARDLOAD_ROOT/.venv/bin:$PATH"
export SHARDLOAD_BUILD="$SHARDLOAD_ROOT/build"
