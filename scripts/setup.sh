#!/usr/bin/env bash
# Sets up everything shardload needs on a fresh Debian machine, idempotently:
# Debian build packages, a project-local venv (.venv) with pinned Python
# packages, and a Release build in build/. Safe to run again; quick when
# nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '[setup] %s\n' "$*" >&2; }

# ---- Debian packages -------------------------------------------------------------
DEB_PACKAGES=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev
              libbenchmark-dev python3-venv python3-dev
              clang-16 libclang-rt-16-dev  # the sanitizer tree: libFuzzer, ASan, UBSan
              nlohmann-json3-dev zlib1g-dev libzstd-dev liblz4-dev libblosc-dev  # raw + zarr readers
              libhdf5-dev  # HDF5 reader: headers + the libhdf5_serial.so.103 it dlopens
              libxxhash-dev  # manifest checksums (XXH3)
              libcurl4-openssl-dev  # http(s):// sources
              ccache)  # every build tree shares one compiler cache (scripts/ccache.sh)
source scripts/debian.sh
install_debian_packages "${DEB_PACKAGES[@]}"
source scripts/ccache.sh

# ---- Python venv with pinned packages ----------------------------------------------
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing pinned Python packages (requirements.txt)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  echo "$want" > "$stamp"
fi
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The package is used from the source tree; the build puts its extension there.
echo "$ROOT/python" > "$SITE/shardload-dev.pth"

# ---- a stand-in CUDA driver where no real one exists ---------------------------------------
# The Legate wheels are CUDA builds whose libraries need libcuda.so.1 to load at all. Where no
# NVIDIA driver is installed, tools/nocuda builds a libcuda.so.1 that answers "no device" to
# every call; scripts/env.sh puts it on the library path only then.
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && [ ! -e /dev/nvidiactl ]; then
  if [ ! -f build/nocuda/libcuda.so.1 ] || [ tools/nocuda/nocuda.c -nt build/nocuda/libcuda.so.1 ]; then
    log "building the stand-in driver build/nocuda/libcuda.so.1 (no NVIDIA driver here)"
    mkdir -p build/nocuda
    cc -O2 -shared -fPIC -fvisibility=hidden -Wl,-soname,libcuda.so.1 \
       -o build/nocuda/libcuda.so.1 tools/nocuda/nocuda.c
  fi
fi

# ---- build -----------------------------------------------------------------------------
export PATH="$ROOT/.venv/bin:$PATH"
if [ ! -f build/build.ninja ]; then
  log "configuring build/"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
fi
log "building"
# Quiet when it works; the end of its log (the compiler's errors) when it fails.
if ! cmake --build build -j "$(nproc)" >build/build.log 2>&1; then
  log "the build failed; the end of build/build.log:"
  tail -60 build/build.log >&2
  exit 1
fi
