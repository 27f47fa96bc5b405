# Sourced by the scripts: the project venv and the build on PATH, and what Legate needs to run.
SHARDLOAD_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$SHARDLOAD_ROOT/build:$SHARDLOAD_ROOT/.venv/bin:$PATH"
export SHARDLOAD_BUILD="$SHARDLOAD_ROOT/build"
_sl_site=$("$SHARDLOAD_ROOT/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# Programs linked to Legate must use the NCCL of the wheel Legate was built with, not another one.
export LD_LIBRARY_PATH="$_sl_site/nvidia/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && [ ! -e /dev/nvidiactl ]; then
  # No NVIDIA driver: the stand-in (see scripts/setup.sh) lets the CUDA-built wheels load, and
  # Legate runs on CPUs. Legate's automatic configuration fails on small machines, so give one.
  export LD_LIBRARY_PATH="$SHARDLOAD_ROOT/build/nocuda:$LD_LIBRARY_PATH"
  export LEGATE_CONFIG="${LEGATE_CONFIG:---cpus 2 --utility 1 --gpus 0 --sysmem 4000 --logging gpu=6,threads=5}"
fi
unset _sl_site
