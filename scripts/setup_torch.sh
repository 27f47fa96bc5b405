#!/usr/bin/env bash
# Installs requirements-torch.txt (PyTorch on CPUs, for the feed's torch tests) into .venv,
# idempotently: quick when the file has not changed since the last install. Run after
# scripts/setup.sh has made .venv; scripts/test.sh starts it in the background while the other
# stages run and waits for it before the Python tests.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "setup_torch.sh: no .venv; run scripts/setup.sh first" >&2; exit 1; }
stamp=.venv/.requirements-torch.sha
want=$(sha256sum requirements-torch.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup_torch] installing requirements-torch.txt into .venv" >&2
  start=$(date +%s)
  # --no-deps: torch's declared CUDA pins conflict with Legate's (see requirements-torch.txt).
  # --force-reinstall: an install killed half way (scripts/test.sh stopped) is redone whole.
  .venv/bin/python -m pip install -q --no-deps --force-reinstall -r requirements-torch.txt
  # Imported in a process of its own, as the tests do: never beside Legate (docs/feed.md).
  .venv/bin/python -c 'import torch, torch.distributed as d
assert d.is_available() and d.is_gloo_available(), "torch was built without gloo"
print("[setup_torch] torch", torch.__version__, "imports; gloo available")'
  echo "$want" > "$stamp"
  echo "[setup_torch] took $(($(date +%s) - start)) s" >&2
fi
