#!/usr/bin/env bash
# Sets up the networked build beside the default one, idempotently: Debian's OpenMPI, a venv
# .venv-mr with the pinned packages of requirements-multirank.txt (Legate 26.01.0, whose wheels
# have UCX networking; the default 26.06.01 ones have none), and a Release build in build-mr/
# with CPU variants only. scripts/multirank.sh runs commands on several ranks with it.
#
# Why CPU variants only: the 26.01 wheels are CUDA 12 builds, while the CUDA toolkit of these
# machines is CUDA 13; a GPU variant compiled by nvcc 13 would need the CUDA 13 runtime beside
# Legate's CUDA 12 one in one process. The build is configured with SHARDLOAD_WITH_CUDA=OFF.
#
# Targets: the shardload program, the Python extension modules and the C++ Legate tests.
# SHARDLOAD_MR_TARGETS overrides the list (e.g. "all"). The engine's objects compile as in
# build/ and come from the compiler cache (scripts/ccache.sh); what touches Legate compiles anew.
#
# --venv-only stops after the Debian packages and the venv (scripts/test.sh runs it in the
# background, so the wheels download while other stages compile).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '[setup-multirank] %s\n' "$*" >&2; }
VENV_ONLY=0
[ "${1:-}" = "--venv-only" ] && VENV_ONLY=1

# ---- Debian packages: what the default build needs, and OpenMPI for mpirun -------------------
DEB_PACKAGES=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev python3-venv
              python3-dev nlohmann-json3-dev zlib1g-dev libzstd-dev liblz4-dev libblosc-dev
              libhdf5-dev libxxhash-dev
              openmpi-bin libopenmpi-dev  # Legate finds its bundled OpenMPI wrapper by itself
              strace)  # tests/multirank counts the files each rank opens
source scripts/debian.sh
install_debian_packages "${DEB_PACKAGES[@]}"
source scripts/ccache.sh

# ---- Python venv with pinned packages ----------------------------------------------------
PY=${PYTHON:-python3}
VENV=.venv-mr
if [ ! -x $VENV/bin/python ]; then
  log "creating $VENV with $($PY --version)"
  $PY -m venv $VENV
fi
stamp=$VENV/.requirements.sha
want=$(sha256sum requirements-multirank.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing pinned Python packages (requirements-multirank.txt, about 3 GB of wheels)"
  $VENV/bin/python -m pip install -q --upgrade pip
  # --no-deps: every package is listed with its version (see the file's header for why).
  $VENV/bin/python -m pip install -q --no-deps -r requirements-multirank.txt
  echo "$want" > "$stamp"
fi
((VENV_ONLY)) && exit 0
SITE=$($VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

# ---- the package: the source tree's Python files beside this build's extension modules ------
# The default build puts its modules into python/shardload/; this one must not overwrite them
# (they are linked to another Legate), so it has its own package folder whose Python files are
# links to the source tree's. Refreshed on every run, so new or removed files are followed.
PKG=build-mr/python/shardload
mkdir -p $PKG
find $PKG -maxdepth 1 -type l -delete
for f in python/shardload/*; do
  case $f in *.so) continue ;; esac
  [ -f "$f" ] && ln -s "$ROOT/$f" "$PKG/"
done
echo "$ROOT/build-mr/python" > "$SITE/shardload-dev.pth"

# ---- the stand-in CUDA driver and the UCX shim --------------------------------------------
# The stand-in of tools/nocuda where no NVIDIA driver exists (scripts/env.sh explains it), and
# the ucp_config_modify shim of tools/ucxshim (its comment explains why UCX needs it here).
if [ ! -f build-mr/nocuda/libcuda.so.1 ] || [ tools/nocuda/nocuda.c -nt build-mr/nocuda/libcuda.so.1 ]; then
  mkdir -p build-mr/nocuda
  cc -O2 -shared -fPIC -fvisibility=hidden -Wl,-soname,libcuda.so.1 \
     -o build-mr/nocuda/libcuda.so.1 tools/nocuda/nocuda.c
fi
if [ ! -f build-mr/ucxshim/libshardload_ucxshim.so ] ||
   [ tools/ucxshim/ucxshim.c -nt build-mr/ucxshim/libshardload_ucxshim.so ]; then
  mkdir -p build-mr/ucxshim
  cc -O2 -Wall -Wextra -shared -fPIC -fvisibility=hidden \
     -o build-mr/ucxshim/libshardload_ucxshim.so tools/ucxshim/ucxshim.c -ldl
fi

# ---- build --------------------------------------------------------------------------------
export PATH="$ROOT/$VENV/bin:$PATH"
# The wheels' libraries find UCX and the CUDA 12 runtime at run time through Python packages
# (or LD_LIBRARY_PATH, scripts/multirank.sh), not through their RPATHs; the linker must be
# shown them too, or it takes Debian's older UCX (installed with OpenMPI) for liblegate's. NCCL
# too: a LD_LIBRARY_PATH of the default build (scripts/env.sh) names the CUDA 13 one.
link_dirs="$SITE/libucx/lib:$SITE/nvidia/cuda_runtime/lib:$SITE/nvidia/nccl/lib"
# The same pyarrow in both venvs: build-mr compiles against .venv's copy of its headers, so the
# readers come from the compiler cache as build/ compiled them (their compile lines then match).
arrow_headers=""
mr_arrow=$SITE/pyarrow/include
default_arrow=$($ROOT/.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)/pyarrow/include
if [ -d "$mr_arrow" ] && [ -d "$default_arrow" ] && diff -rq "$mr_arrow" "$default_arrow" >/dev/null 2>&1; then
  arrow_headers=$default_arrow
fi
log "configuring build-mr/ (Legate $($VENV/bin/python -c 'import importlib.metadata as m; print(m.version("legate"))'), CPU variants only)"
cmake -S . -B build-mr -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE="$ROOT/$VENV/bin/python" -DSHARDLOAD_WITH_CUDA=OFF \
      -DSHARDLOAD_BENCH=OFF -DSHARDLOAD_PYTHON_MODULE_DIR="$ROOT/$PKG" \
      -DSHARDLOAD_ARROW_INCLUDE_DIR="$arrow_headers" \
      -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$link_dirs" \
      -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$link_dirs" \
      -DCMAKE_MODULE_LINKER_FLAGS="-Wl,-rpath-link,$link_dirs" >/dev/null
read -r -a targets <<< "${SHARDLOAD_MR_TARGETS:-shardload _core _legate legate_tests}"
log "building ${targets[*]}"
if ! cmake --build build-mr -j "$(nproc)" --target "${targets[@]}" >build-mr/build.log 2>&1; then
  log "the build failed; the end of build-mr/build.log:"
  tail -60 build-mr/build.log >&2
  exit 1
fi
