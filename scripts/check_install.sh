#!/usr/bin/env bash
# Checks the package as a user gets it: builds the wheel and installs it with pip into a new venv,
# first without extras (the NumPy front end and the command line without Legate), then with the
# legate extra, and with nothing sourced (only PATH to the venv and HOME), imports it, loads a dataset, runs
# the `shardload` command and builds the C++ consumer in tests/consumer against the installed
# package. Prints the wheel build's time. Usage: scripts/check_install.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${1:-${PYTHON:-python3}}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
VENV=$WORK/venv
log() { printf '[check_install] %s\n' "$*" >&2; }

log "new venv $VENV ($($PY --version))"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
if [ "${SHARDLOAD_ISOLATED_BUILD:-0}" = 1 ]; then
  log "pip install . (isolated: fetches the build requirements, compiles everything)"
  start=$(date +%s)
  "$VENV/bin/python" -m pip install -q "$ROOT"
  log "pip install . took $(($(date +%s) - start)) s"
else
  # The wheel is built once, from this checkout, with .venv's build requirements (pinned to
  # pyproject.toml's, which --check-build-dependencies enforces) in build-wheel/, where the
  # compiler cache gives it build/'s objects; the new venv installs that wheel and fetches its
  # dependencies as any user's install does. SHARDLOAD_ISOLATED_BUILD=1 runs `pip install .`
  # as written in the README instead (a full compile in pip's isolated environment).
  source "$ROOT/scripts/ccache.sh"
  # pyproject.toml's build requirements, as pinned there, must be what .venv has (ninja aside:
  # Debian's ninja-build serves, as it does build/).
  "$ROOT/.venv/bin/python" - "$ROOT/pyproject.toml" <<'PY'
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version

from packaging.requirements import Requirement

with open(sys.argv[1], "rb") as f:
    requires = tomllib.load(f)["build-system"]["requires"]
wrong = []
for req in map(Requirement, requires):
    if req.name == "ninja":
        continue
    try:
        have = version(req.name)
    except PackageNotFoundError:
        wrong.append(f"{req} (not installed)")
        continue
    if not req.specifier.contains(have, prereleases=True):
        wrong.append(f"{req} (.venv has {have})")
if wrong:
    sys.exit("check_install: .venv does not have the wheel's build requirements: " + ", ".join(wrong))
PY
  # The compilers build/ was configured with: scikit-build-core would take Python's (g++, gcc),
  # which the compiler cache keys apart from build/'s c++ and cc, though they are one program.
  compilers=()
  for lang in C CXX; do
    c=$(sed -n "s/^CMAKE_${lang}_COMPILER:FILEPATH=//p" build/CMakeCache.txt 2>/dev/null || true)
    [ -n "$c" ] && compilers+=("--config-settings=cmake.define.CMAKE_${lang}_COMPILER=$c")
  done
  log "building the wheel (pip wheel --no-build-isolation, build-wheel/)"
  start=$(date +%s)
  "$ROOT/.venv/bin/python" -m pip wheel -q --no-build-isolation --no-deps -w "$WORK/wheel" \
    --config-settings=build-dir="$ROOT/build-wheel" ${compilers[@]+"${compilers[@]}"} "$ROOT"
  log "the wheel took $(($(date +%s) - start)) s"
  "$VENV/bin/python" -m pip install -q "$WORK"/wheel/shardload-*.whl
fi

# Nothing from this shell: no LD_LIBRARY_PATH, no LEGATE_CONFIG, no PYTHONPATH.
clean() { env -i PATH="$VENV/bin:/usr/bin:/bin" HOME="$HOME" "$@"; }
DATA=$WORK/data
mkdir -p "$DATA"

# First as installed without extras: no Legate, no cuPyNumeric. The NumPy front end, the
# command line (its program without Legate) and a clear error from the Legate calls.
log "without the legate extra: shardload.numpy, the command line, the Legate calls' error"
(cd "$WORK" && clean python - "$DATA" <<'PY'
import importlib.util
import sys

import numpy as np

import shardload
import shardload.numpy

assert importlib.util.find_spec("legate") is None, "the wheel pulled legate without the extra"
assert importlib.util.find_spec("cupynumeric") is None, "the wheel pulled cuPyNumeric"
data = sys.argv[1]
parts = [np.arange(n * 3, dtype=np.int32).reshape(n, 3) + i for i, n in enumerate((4, 0, 9))]
for i, part in enumerate(parts):
    np.save(f"{data}/part_{i}.npy", part)
got = shardload.numpy.load(data, pattern="part_{}.npy", threads=2)
assert np.array_equal(got, np.concatenate(parts)), "shardload.numpy.load differs from numpy"
try:
    shardload.load(data, pattern="part_{}.npy")
except ImportError as e:
    assert "shardload[legate]" in str(e), e
else:
    raise AssertionError("shardload.load without Legate raised nothing")
print("without Legate: shardload.numpy.load equal to numpy; shardload.load names the extra")
PY
)
out=$(cd "$WORK" && clean shardload inspect "$DATA" --pattern 'part_{}.npy')
grep -q 'shape: *(13, 3)' <<<"$out" || { echo "inspect without Legate: no shape (13, 3): $out"; exit 1; }
out=$(cd "$WORK" && clean shardload read "$DATA" --pattern 'part_{}.npy')
grep -q 'host threads (no Legate)' <<<"$out" || { echo "read without Legate: $out"; exit 1; }
if out=$(cd "$WORK" && clean shardload verify "$DATA" 2>&1); then
  echo "shardload verify without Legate succeeded: $out"; exit 1
fi
grep -q "shardload\[legate\]" <<<"$out" || { echo "shardload verify without Legate: $out"; exit 1; }
rm -f "$DATA"/part_*.npy

log "pip install the legate, jax and dask extras"
extras=$("$VENV/bin/python" - "$ROOT/pyproject.toml" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    extras = tomllib.load(f)["project"]["optional-dependencies"]
print(" ".join(req for name in ("legate", "jax", "dask") for req in extras[name]))
PY
)
"$VENV/bin/python" -m pip install -q $extras
# The consumer's build tools (CMake >= 3.30 for Legate's package config) and the test's writer.
"$VENV/bin/python" -m pip install -q 'cmake>=3.30' ninja

want=$(sed -nE 's/^project\(shardload VERSION ([0-9.]+).*/\1/p' CMakeLists.txt)
got=$(cd "$WORK" && clean python -c 'import shardload; print(shardload.__version__)')
log "shardload.__version__: $got"
[ "$got" = "$want" ] || { echo "shardload.__version__ is $got, CMakeLists.txt says $want"; exit 1; }
got=$(cd "$WORK" && clean shardload --version)
log "shardload --version: $got"
[ "$got" = "shardload $want" ] || { echo "shardload --version printed '$got', want 'shardload $want'"; exit 1; }

log "shardload.load of a generated dataset"
(cd "$WORK" && clean python - "$DATA" <<'PY'
import sys

import numpy as np

import shardload

data = sys.argv[1]
rows = [5, 0, 7, 3]
parts = []
for i, n in enumerate(rows):
    part = (np.arange(n * 4, dtype=np.float32) + 100 * i).reshape(n, 4)
    np.save(f"{data}/shard_{i:04d}.npy", part)
    parts.append(part)
array = shardload.load(data)
want = np.concatenate(parts)
got = np.asarray(array)
assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype)
assert np.array_equal(got, want), "loaded values differ from the shards"
print(f"loaded {got.shape} {got.dtype}: equal to the shards")
PY
)

log "shardload inspect / read"
out=$(cd "$WORK" && clean shardload inspect "$DATA")
echo "$out"
grep -q 'shape: *(15, 4)' <<<"$out" || { echo "inspect: no shape (15, 4)"; exit 1; }
(cd "$WORK" && clean shardload read "$DATA")

log "C++ consumer (tests/consumer) against the installed package"
prefix=$(cd "$WORK" && clean python -c 'import os, shardload; print(os.path.dirname(shardload.__file__))')
clean cmake -S "$ROOT/tests/consumer" -B "$WORK/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
clean cmake --build "$WORK/consumer" >/dev/null
out=$(clean "$WORK/consumer/consumer" "$DATA")
echo "$out"
[ "$out" = "shape (15, 4) float32" ] || { echo "consumer printed '$out'"; exit 1; }
# The Legate-linked consumer needs the stand-in driver where the package uses it.
standin=$(cd "$WORK" && clean python -c 'from shardload import _runtime as r; print(r.STANDIN_DIR if r.standin_loaded else "")')
if [ -n "$standin" ]; then
  out=$(clean LD_LIBRARY_PATH="$standin" "$WORK/consumer/consumer_legate" "$DATA")
else
  out=$(clean "$WORK/consumer/consumer_legate" "$DATA")
fi
echo "$out"
[ "$out" = "shape (15, 4) float32" ] || { echo "consumer_legate printed '$out'"; exit 1; }
log "examples/*.py with the installed package (and the pinned h5py, zarr they write with)"
"$VENV/bin/python" -m pip install -q $(grep -E '^(h5py|zarr|numcodecs|donfig|google-crc32c|typing_extensions)==' requirements.txt)
for example in "$ROOT"/examples/*.py; do
  (cd "$WORK" && clean python "$example" >/dev/null) || { echo "$example failed"; exit 1; }
  log "  $(basename "$example"): OK"
done
log "README.md's command-line and Python examples, as written, in a scratch directory"
# The CLI block writes demo-data; the Python block reads data/, here that dataset.
readme=$WORK/readme
mkdir -p "$readme"
awk '/^## Command line/{c=1} c && /^```sh/{p=1; next} p && /^```/{exit} p' README.md >"$readme/cli.sh"
# Every Python block of the README's "Python" section, one after another (NumPy, Legate, ...).
awk '/^## Python/{c=1; next} c && /^## /{exit} c && /^```python/{p=1; next} p && /^```/{p=0; next} p' \
  README.md >"$readme/example.py"
[ -s "$readme/cli.sh" ] && [ -s "$readme/example.py" ] || { echo "README.md: no examples found"; exit 1; }
(cd "$readme" && clean bash -euo pipefail cli.sh >/dev/null) || { echo "README.md's CLI example failed"; exit 1; }
ln -s demo-data "$readme/data"
(cd "$readme" && clean python -W error::DeprecationWarning example.py >/dev/null) ||
  { echo "README.md's Python example failed"; exit 1; }
log "  README.md: OK"
log "installed package: all checks passed"
