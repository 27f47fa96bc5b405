#!/usr/bin/env bash
# Makes .venv-peers, the venv of bench/bench_feed_peers.py: numpy and the feed's peers (Grain,
# MosaicML Streaming, Ray Data) from bench/requirements-peers.txt, and shardload from this
# checkout's python/ (built by cmake into build/, as for .venv), with nothing taken from the
# system's or .venv's site-packages. Idempotent: quick when the requirements have not changed.
# Usage: bench/setup_peers.sh [PYTHON]   (default: the Python .venv was made with, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv-peers
if [ -n "${1:-}" ]; then
  PY=$1
elif [ -f .venv/pyvenv.cfg ]; then
  PY=$(sed -n 's/^executable = //p' .venv/pyvenv.cfg)
else
  PY=python3
fi
ls python/shardload/_core.*.so >/dev/null 2>&1 ||
  { echo "setup_peers.sh: no built extension in python/shardload; build first (cmake --build build)" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
stamp=$VENV/.requirements-peers.sha
want=$(sha256sum bench/requirements-peers.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup_peers] installing bench/requirements-peers.txt into .venv-peers" >&2
  start=$(date +%s)
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r bench/requirements-peers.txt
  echo "$want" > "$stamp"
  echo "[setup_peers] took $(($(date +%s) - start)) s" >&2
fi
# shardload as .venv has it: the checkout's python/ on the path (the extension is built there).
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$ROOT/python" > "$site/shardload-dev.pth"
"$VENV/bin/python" -c '
import importlib.metadata as m
import grain, ray, shardload.feed, streaming
print("[setup_peers] imports: shardload, " + ", ".join(
    f"{p} {m.version(p)}" for p in ("numpy", "grain", "mosaicml-streaming", "ray")))' 2>&1 |
  grep -v "Failed to load jax profiler"
