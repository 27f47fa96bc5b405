"""A program that ends while another of its threads is inside a shardload call (a daemon
thread's background loader, the usual prefetcher) ends with the status the program gives: 0
from the script's end, 130 from an uncaught Ctrl-C, as it would without shardload.

Python 3.11 to 3.13 end a thread that asks for the GIL back during the interpreter's
finalization with pthread_exit; the unwinding that starts met a noexcept C++ frame and the
process aborted ("terminate called without an active exception", status 134); HDF5's own exit
handler waited for the lock of a read still in flight. Each case runs in a process of its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

MAKE = {
    "npy": "np.save(f'{d}/a.npy', A); src, kw = [f'{d}/a.npy'], {}",
    "zarr": (
        "import zarr; z = zarr.open_array(f'{d}/z', mode='w', shape=A.shape, chunks=(5000, 8),"
        " dtype='f4', zarr_format=2); z[...] = A; src, kw = f'{d}/z', {}"
    ),
    "hdf5": (
        "import h5py\n"
        "with h5py.File(f'{d}/h.h5', 'w') as h:\n"
        "    h.create_dataset('x', data=A, chunks=(5000, 8), compression='gzip')\n"
        "src, kw = [f'{d}/h.h5'], {'format': 'hdf5', 'dataset': 'x'}"
    ),
    "parquet": (
        "import pyarrow as pa, pyarrow.parquet as pq\n"
        "pq.write_table(pa.table({f'c{i}': A[:, i] for i in range(8)}), f'{d}/p.parquet',"
        " row_group_size=5000)\n"
        "src, kw = [f'{d}/p.parquet'], {}"
    ),
}


def ends(script: str) -> subprocess.CompletedProcess:
    """Runs `script` in a process of its own and checks that it ended with status 0 and no
    abort of the C++ runtime's or Python's on its standard error."""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    for abort in ("terminate called", "exception not rethrown", "Fatal Python error"):
        assert abort not in r.stderr, r.stderr[-2000:]
    return r


def run(tmp_path, fmt: str, ending: str) -> subprocess.CompletedProcess:
    script = textwrap.dedent("""
        import os, signal, sys, threading, time
        import numpy as np
        import shardload.numpy as sn
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a test runner may ignore it
        d = {d!r}
        A = np.arange(200000 * 8, dtype="f4").reshape(200000, 8)
        """).format(d=str(tmp_path)) + MAKE[fmt] + textwrap.dedent("""
        assert (sn.load(src, **kw) == A).all()
        started = threading.Event()
        def loop():
            while True:
                started.set()
                sn.load(src, threads=4, **kw)
        threading.Thread(target=loop, daemon=True).start()
        started.wait()
        time.sleep(0.5)
        """) + ending
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("fmt", sorted(MAKE))
def test_the_program_ends_with_its_own_status_while_a_thread_loads(tmp_path, fmt):
    r = run(tmp_path, fmt, "print('main ends', flush=True)\n")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "main ends" in r.stdout and "terminate called" not in r.stderr


@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
def test_an_uncaught_ctrl_c_ends_the_program_as_python_does_while_a_thread_loads(tmp_path, fmt):
    r = run(tmp_path, fmt, "os.kill(os.getpid(), signal.SIGINT); time.sleep(30)\n")
    assert r.returncode == 130 or r.returncode == -2, (r.returncode, r.stderr[-2000:])
    assert "KeyboardInterrupt" in r.stderr and "terminate called" not in r.stderr


def test_a_python_reader_in_a_thread_at_the_programs_end(tmp_path):
    """A reader written in Python needs the GIL for each read: at the program's end its reads
    fail (the interpreter has ended) or wait; the program still ends with its status."""
    for i in range(4):
        (tmp_path / f"part{i}.rows").write_bytes(b"\0" * 16 * 20000)
    script = textwrap.dedent("""
        import os, threading, time
        import numpy as np
        import shardload, shardload.numpy
        def count_rows(path):
            return os.path.getsize(path) // 16
        def read(path, lo, hi):
            time.sleep(0.001)
            return np.fromfile(path, np.float32, count=(hi - lo) * 4, offset=lo * 16).reshape(-1, 4)
        shardload.register_reader("exitrows", count_rows=count_rows, read=read, dtype="float32",
                                  trailing_shape=(4,), extension=".rows")
        def loop():
            while True:
                shardload.numpy.load({d!r}, reader="exitrows", threads=4, overdecompose=8)
        threading.Thread(target=loop, daemon=True).start()
        time.sleep(0.5)
        print("main ends", flush=True)
        """).format(d=str(tmp_path))
    ends(script)


@pytest.mark.parametrize("progress", ["lambda *a: None", "True", "lambda *a: time.sleep(0.01)"],
                         ids=["callback", "bar", "callback-that-sleeps"])
def test_a_thread_loading_with_progress_at_the_programs_end(tmp_path, progress):
    """The progress callback (the user's, or the bar's) takes the GIL on an engine thread: at
    the program's end Python ended that thread inside the engine's pool, whose catch-all kept
    the unwinding as a job's error and the process aborted ("exception not rethrown", 134) every
    time. A callback that lets go of the GIL (a sleep, a write) was ended inside it, and the
    unwinding released a GIL it no longer held: Python's fatal error."""
    np = pytest.importorskip("numpy")
    np.save(tmp_path / "a.npy", np.ones((400000, 8), "f4"))
    script = textwrap.dedent("""
        import threading, time
        import shardload.numpy as sn
        def loop():
            while True:
                sn.load({src!r}, threads=4, progress={progress})
        for _ in range(2):
            threading.Thread(target=loop, daemon=True).start()
        time.sleep(0.5)
        print("main ends", flush=True)
        """).format(src=[str(tmp_path / "a.npy")], progress=progress)
    assert "main ends" in ends(script).stdout


@pytest.mark.parametrize("fmt", ["npy", "zarr"])
def test_a_thread_saving_at_the_programs_end(tmp_path, fmt):
    """A background save (a checkpoint writer) in flight at the program's end: the program ends
    with its status (a save's last look at Ctrl-C took the GIL on the saving thread, and the
    process aborted about half the time), and what is at the destination loads whole."""
    import shardload.numpy as sn
    script = textwrap.dedent("""
        import threading, time
        import numpy as np
        import shardload.numpy as sn
        def loop(i=0):
            while True:
                i += 1
                sn.save(np.full((400000, 8), i, "f4"), {dest!r}, num_shards=8, format={fmt!r},
                        overwrite=True)
        threading.Thread(target=loop, daemon=True).start()
        time.sleep(0.6)
        print("main ends", flush=True)
        """).format(dest=str(tmp_path / "out"), fmt=fmt)
    for _ in range(4):
        ends(script)
        if (tmp_path / "out").exists():
            got = sn.load(str(tmp_path / "out"))
            assert got.shape == (400000, 8) and (got == got[0, 0]).all()
