#!/usr/bin/env bash
# One rank of a multi-rank test: runs the command with this rank's stdout, stderr and exit
# status in SHARDLOAD_MR_OUT/rank<R>.{out,err,rc}. With SHARDLOAD_MR_TRACE=1 the command runs
# under strace, which records every file this rank's process (all threads) opens or renames in
# SHARDLOAD_MR_OUT/rank<R>.trace: the tests count per rank which files each rank touched.
# --seccomp-bpf stops the process only at those calls, so the rest runs at full speed; -y prints
# each descriptor's path, so a name opened or renamed through a held directory is known.
r=${OMPI_COMM_WORLD_RANK:?not started by mpirun}
out=${SHARDLOAD_MR_OUT:?}
mkdir -p "$out"
# SHARDLOAD_MR_HIDE=R:PATH: on rank R, an empty file system over PATH, in a mount namespace of
# that rank alone: PATH exists on every rank but its files only on the others (a node-local
# path, as on a cluster where a dataset sits on one node's disk).
if [ -n "${SHARDLOAD_MR_HIDE:-}" ] && [ "${SHARDLOAD_MR_HIDE%%:*}" = "$r" ]; then
  hide=${SHARDLOAD_MR_HIDE#*:}
  set -- unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs "$0" && exec "$@"' \
         "$hide" "$@"
fi
if [ "${SHARDLOAD_MR_TRACE:-0}" = 1 ]; then
  set -- strace -f -qq -y --seccomp-bpf -e trace=open,openat,openat2,rename,renameat,renameat2 \
         -e signal=none -o "$out/rank$r.trace" "$@"
fi
"$@" >"$out/rank$r.out" 2>"$out/rank$r.err"
rc=$?
echo $rc >"$out/rank$r.rc"
exit $rc
