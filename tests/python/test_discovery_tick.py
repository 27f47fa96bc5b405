"""A local shard's snapshot (size, mtime, ctime, inode) must change with every write made after
discovery returns. A write stamps the kernel's coarse clock tick, so a file written in a tick and
rewritten at the same size before that tick is over keeps every stamp; file systems with
multigrain timestamps (ext4, xfs, btrfs, tmpfs since Linux 6.13) stamp a finer time once the
file's times were asked, but others (ramfs, network and FUSE file systems, older kernels) do not.
The test runs on a ramfs mounted in a mount namespace of its own."""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

TRIES = 40

# Run inside the namespace, on the ramfs at argv[1]: writes, discovers and rewrites the shard at
# once, TRIES times, and prints how many loads read the rewritten rows without an error.
CHILD = textwrap.dedent("""
    import os, sys
    import numpy as np
    import shardload, shardload.numpy

    fmt, d, tries = sys.argv[2], sys.argv[1], int(sys.argv[3])

    def write(values):
        if fmt == "npy":
            np.save(os.path.join(d, "shard_0000.npy"), values)
        elif fmt == "raw":
            with open(os.path.join(d, "shard_0000.bin"), "wb") as f:
                f.write(values.tobytes())
        elif fmt == "npz":
            np.savez(os.path.join(d, "shard_0000.npz"), x=values)
        else:
            import h5py
            with h5py.File(os.path.join(d, "shard_0000.h5"), "w") as f:
                f.create_dataset("data", data=values)

    def rewrite(values):  # the same file, in place, at the same size
        if fmt == "hdf5":
            import h5py
            with h5py.File(os.path.join(d, "shard_0000.h5"), "r+") as f:
                f["data"][...] = values
            return
        name = os.path.join(d, os.listdir(d)[0])
        size = os.path.getsize(name)
        write(values)  # truncated and written again: the same inode
        assert os.path.getsize(name) == size

    def stamps(name):
        s = os.stat(name)
        return s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino

    # The oracle: does this file system keep every stamp of a file rewritten at once?
    write(np.zeros((8, 3), "<i8"))
    name = os.path.join(d, os.listdir(d)[0])
    kept = 0
    for i in range(tries):
        write(np.full((8, 3), i, "<i8"))
        before = stamps(name)
        rewrite(np.full((8, 3), i + 1, "<i8"))
        kept += stamps(name) == before
    print("kept", kept)

    silent = 0
    options = {"dtype": "int64", "trailing_shape": (3,)} if fmt == "raw" else {}
    for i in range(tries):
        write(np.full((8, 3), i, "<i8"))
        layout = shardload.discover(d, format=fmt, **options)
        new = np.full((8, 3), i + 1000, "<i8")
        rewrite(new)
        try:
            got = shardload.numpy.load(layout)
        except shardload.ShardReadError as e:
            assert "changed since discovery" in str(e), e
            continue
        assert np.array_equal(got, new), got
        silent += 1
    print("silent", silent)
""")


@pytest.mark.parametrize("fmt", ["npy", "raw", "npz", "hdf5"])
def test_a_shard_rewritten_at_once_after_discovery_returns_is_refused(tmp_path: pathlib.Path,
                                                                      fmt: str) -> None:
    """A shard written and discovered in one clock tick, then rewritten in place at the same size
    right after discover() returned, kept its size, mtime, ctime and inode on a file system
    without multigrain timestamps: 185 of 200 loads read the new rows silently, as if they were
    the discovered ones. Discovery now returns once the coarse clock has passed the newest change
    time among the local files it snapshot (at most one tick later)."""
    if fmt == "hdf5":
        pytest.importorskip("h5py")
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    d = tmp_path / "ramfs"
    d.mkdir()
    script = f'mount -t ramfs none "{d}" && exec "$0" -c "$1" "{d}" {fmt} {TRIES}'
    try:
        run = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                              sys.executable, CHILD], capture_output=True, text=True, timeout=120,
                             env=os.environ.copy())
    except subprocess.TimeoutExpired:
        pytest.fail("the child did not finish in 120 s")
    if "kept" not in run.stdout:
        if run.returncode != 0 and "Traceback" not in run.stderr:
            pytest.skip("cannot mount a ramfs in a mount namespace here (needs CAP_SYS_ADMIN): " +
                        run.stderr.strip()[-200:])
    assert run.returncode == 0, run.stdout + run.stderr
    counts = dict(line.split() for line in run.stdout.split("\n") if line)
    if int(counts["kept"]) == 0:
        pytest.skip("this file system stamps a finer time than its tick: nothing to see")
    assert int(counts["silent"]) == 0, run.stdout
