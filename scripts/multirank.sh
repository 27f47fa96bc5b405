#!/usr/bin/env bash
# Runs a command on several Legate ranks of this machine with the networked build of
# scripts/setup_multirank.sh (Legate 26.01.0 with UCX), over loopback only:
#
#   scripts/multirank.sh [-n RANKS] COMMAND [ARG...]          mpirun -np RANKS COMMAND
#   scripts/multirank.sh [-n RANKS] --legate SCRIPT.py [ARG...]  through Legate's own driver,
#                                                 legate --launcher mpirun --ranks-per-node RANKS
#
# COMMAND is anything: `python script.py`, the `shardload` program (build-mr/ is first on
# PATH), a C++ test binary. RANKS defaults to 2. Each rank gets one CPU, one utility processor,
# no GPU and 500 MiB of system memory (SHARDLOAD_MR_CPUS and SHARDLOAD_MR_SYSMEM change the
# CPUs and the memory, for benchmarks). The exit status is mpirun's: 0 when every rank exited
# 0. Nothing else needs to be set; a LEGATE_CONFIG from the caller's environment is replaced.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

ranks=2
driver=mpirun
while (($#)); do
  case $1 in
    -n) ranks=$2; shift 2 ;;
    -n*) ranks=${1#-n}; shift ;;
    --legate) driver=legate; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
if ! [[ $ranks =~ ^[1-9][0-9]*$ ]] || (($# == 0)); then
  echo "usage: scripts/multirank.sh [-n RANKS] [--legate] COMMAND [ARG...]" >&2
  exit 2
fi
VENV=$ROOT/.venv-mr
BUILD=$ROOT/build-mr
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$BUILD/ucxshim/libshardload_ucxshim.so" ]; then
  echo "multirank.sh: the networked build is missing; run scripts/setup_multirank.sh" >&2
  exit 2
fi
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

export PATH="$BUILD:$VENV/bin:$PATH"
export SHARDLOAD_BUILD=$BUILD
# The 26.01 wheels are CUDA 12 builds: they need the CUDA 12 runtime to load, the NCCL they
# were built with, and the libucx wheel's UCX (liblegate's RPATH does not name it; in Python
# the libucx package loads it, but a C++ program would get Debian's older UCX).
LD_LIBRARY_PATH="$SITE/libucx/lib:$SITE/nvidia/cuda_runtime/lib:$SITE/nvidia/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && [ ! -e /dev/nvidiactl ]; then
  # No NVIDIA driver: the stand-in lets the wheels' libraries load (scripts/env.sh). Legate
  # 26.01's own driver loader would pick it up too and insists on cuGetProcAddress, which the
  # stand-in must not export (tools/nocuda/nocuda.c says why): point that loader elsewhere.
  LD_LIBRARY_PATH="$BUILD/nocuda:$LD_LIBRARY_PATH"
  export LEGATE_CUDA_DRIVER=$BUILD/nocuda/no-driver-here
fi
export LD_LIBRARY_PATH
# See tools/ucxshim/ucxshim.c: without it UCX refuses Realm's InfiniBand option and every rank
# aborts.
export LD_PRELOAD="$BUILD/ucxshim/libshardload_ucxshim.so${LD_PRELOAD:+:$LD_PRELOAD}"
# Loopback only: shared memory and TCP on lo between the ranks of this machine.
export UCX_TLS=sm,self,tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
per_rank=(--cpus "${SHARDLOAD_MR_CPUS:-1}" --utility 1 --gpus 0 --sysmem "${SHARDLOAD_MR_SYSMEM:-500}")
# gpu=6,threads=5: the CUDA module's "no device" and Realm's thread-pinning warnings are
# expected here and say nothing.
logging=(--logging gpu=6,threads=5)
# Each rank on cores of its own, where the machine has enough: Realm pins its threads as if its
# rank owned the machine and its UCX module polls without stopping, so unbound ranks pile onto
# the same core and their utility processors starve (2 ranks x 1 CPU here: 23x one rank's load
# time unbound, 2.0x bound). One background worker per rank: enough to poll UCX (0 hangs), and
# no more spinning threads than the rank's cores carry. A caller's REALM_DEFAULT_ARGS is kept.
# SHARDLOAD_MR_BIND=none leaves every rank unbound (to compare, bench/bench_multirank.py --bind).
cpus_per_rank=${SHARDLOAD_MR_CPUS:-1}
if [ "${SHARDLOAD_MR_BIND:-core}" != none ] &&
   ((ranks > 1 && ranks * cpus_per_rank <= $(nproc))); then
  # A rank's CPU processors and its utility processor share its cores (the utility one mostly
  # waits); with one CPU per rank that is one core each. Never for one rank, whose CPUs would
  # all land on one core.
  bind=(--map-by "slot:PE=$cpus_per_rank" --bind-to core)
else
  bind=(--oversubscribe --bind-to none)  # more ranks than cores: the kernel shares them out
fi
export REALM_DEFAULT_ARGS="-ll:bgwork 1${REALM_DEFAULT_ARGS:+ $REALM_DEFAULT_ARGS}"
mpi_options=("${bind[@]}" --mca oob_tcp_if_include lo --mca btl self,vader)

if [ $driver = legate ]; then
  unset LEGATE_CONFIG
  extra=()
  for o in "${mpi_options[@]}"; do extra+=("--launcher-extra=$o"); done
  # The driver forwards the environment variables it knows; these it does not.
  for v in LD_PRELOAD LD_LIBRARY_PATH LEGATE_CUDA_DRIVER UCX_TLS UCX_NET_DEVICES \
           UCX_WARN_UNUSED_ENV_VARS REALM_DEFAULT_ARGS PATH $(compgen -e | grep -E '^(SHARDLOAD|AWS)_' || true); do
    [ -n "${!v:-}" ] && extra+=("--launcher-extra=-x $v")
  done
  exec "$VENV/bin/legate" --launcher mpirun --ranks-per-node "$ranks" "${per_rank[@]}" \
       "${logging[@]}" "${extra[@]}" "$@"
fi

export LEGATE_CONFIG="${per_rank[*]} ${logging[*]}"
forward=()
# The caller's SHARDLOAD_* variables reach every rank too, and AWS_* (object storage's
# credentials and configuration): mpirun's processes on this node would inherit them, those
# on another node only get what -x names.
for v in PATH LD_LIBRARY_PATH LD_PRELOAD LEGATE_CONFIG LEGATE_CUDA_DRIVER UCX_TLS \
         UCX_NET_DEVICES UCX_WARN_UNUSED_ENV_VARS REALM_DEFAULT_ARGS $(compgen -e | grep -E '^(SHARDLOAD|AWS)_' || true); do
  [ -n "${!v:-}" ] && forward+=(-x "$v")
done
exec mpirun --allow-run-as-root "${mpi_options[@]}" -np "$ranks" "${forward[@]}" "$@"
