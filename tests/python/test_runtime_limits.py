"""What the Legate runtime allows around shardload.load: the main thread only (elsewhere
Legion aborts the process, so load raises RuntimeError first), and Ctrl-C as a
KeyboardInterrupt (Realm's SIGINT handler would abort). Each case runs in a fresh
Python process, since the point is what happens to the process."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import shardload
from test_core import write_shards

PACKAGE_ROOT = str(pathlib.Path(shardload.__file__).resolve().parents[1])


def child(script: str, *args: str, stderr) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    # A shell's background job starts with SIGINT ignored, and Python then keeps it ignored:
    # the child gets Ctrl-C's default, as a program started from a terminal has it.
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            text=True, env=env, preexec_fn=_ctrl_c_default)


def _ctrl_c_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(script: str, *args: str, interrupt_at: str | None = None,
        tmp: pathlib.Path) -> tuple[int, str, str]:
    """Runs the script; with interrupt_at, sends SIGINT once the child prints that line.
    stderr goes to a file (Legate may write much there) and a watchdog bounds the run."""
    with open(tmp / "stderr.txt", "w+") as err_file:
        p = child(script, *args, stderr=err_file)
        watchdog = threading.Timer(300, p.kill)
        watchdog.start()
        try:
            lines = []
            while interrupt_at is not None:
                line = p.stdout.readline()
                if not line:
                    break
                lines.append(line)
                if line.strip() == interrupt_at:
                    p.send_signal(signal.SIGINT)
                    break
            out = "".join(lines) + p.stdout.read()
            p.stdin.close()
            rc = p.wait()
        finally:
            watchdog.cancel()
        err_file.seek(0)
        err = err_file.read()
    assert rc != -signal.SIGKILL, f"the child did not finish\n{out}\n{err[-3000:]}"
    return rc, out, err


@pytest.fixture
def dataset(tmp_path: pathlib.Path) -> pathlib.Path:
    rng = np.random.default_rng(5)
    write_shards(tmp_path / "data", [rng.standard_normal((r, 64)).astype(np.float32)
                            for r in (3000, 0, 2500, 4100)])
    return tmp_path / "data"


@pytest.fixture
def big_dataset(tmp_path: pathlib.Path) -> pathlib.Path:
    # About 100 MB, so that a load lasts long enough for the signal to arrive during one.
    d = tmp_path / "big"
    write_shards(d, [np.full((24_000, 128), i, np.float32) for i in range(8)])
    return d


LOAD_IN_A_THREAD = """
    import sys, threading
    import numpy as np
    import shardload

    mode, source = sys.argv[1], sys.argv[2]
    expected = shardload.discover(source).read()

    def check(a):
        np.testing.assert_array_equal(np.asarray(a), expected)

    if mode == "runtime started in the main thread":
        check(shardload.load(source))
    errors = []

    def work():
        try:
            shardload.load(source)
        except RuntimeError as e:
            errors.append(str(e))
        # Discovery and host reads need no runtime and work in any thread.
        np.testing.assert_array_equal(shardload.discover(source).read(), expected)

    t = threading.Thread(target=work, name="worker")
    t.start()
    t.join()
    print("error:", errors)
    check(shardload.load(source, overdecompose=2))  # the main thread goes on loading
    print("done")
"""


@pytest.mark.parametrize("mode", ["runtime started in the main thread",
                                  "first load in the thread"])
def test_load_off_the_main_thread_raises_runtime_error(dataset: pathlib.Path, mode: str) -> None:
    # Before: Legion aborted the process ("Invalid task context", SIGABRT) at the thread's
    # load when the runtime had started in the main thread; when it started in the thread,
    # the main thread's next load aborted the same way (or, without one, exit crashed with
    # SIGSEGV in the runtime's shutdown).
    rc, out, err = run(LOAD_IN_A_THREAD, mode, str(dataset), tmp=dataset.parent)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err[-3000:]}"
    assert ("shardload.load was called from thread 'worker'; it works only in the main thread"
            in out)
    assert out.rstrip().endswith("done")


def test_discover_and_read_work_in_many_threads(dataset: pathlib.Path) -> None:
    expected = shardload.discover(dataset).read()
    results: list[bool] = []

    def work(i: int) -> None:
        layout = shardload.discover(dataset)
        lo = (i * 977) % layout.total_rows
        results.append(np.array_equal(layout.read(lo), expected[lo:]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 8


CTRL_C = """
    import sys
    import numpy as np
    import shardload

    mode, source = sys.argv[1], sys.argv[2]
    expected = shardload.discover(source).read()
    a = shardload.load(source)
    loads = 1
    try:
        if mode == "idle":
            print("idle", flush=True)
            sys.stdin.readline()  # blocks until the signal (the parent never writes)
        else:
            for i in range(1000):
                print("loading", flush=True)
                a = shardload.load(source, overdecompose=2)
                loads += 1
        print("not interrupted")
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
    # The runtime and the process go on.
    np.testing.assert_array_equal(np.asarray(shardload.load(source)), expected)
    print("loaded again")
"""


def test_ctrl_c_while_idle_after_a_load_is_a_keyboard_interrupt(dataset: pathlib.Path) -> None:
    # Before: Realm's handler printed "Signal 2 received ... obtaining backtrace" and the
    # process died of SIGINT.
    rc, out, err = run(CTRL_C, "idle", str(dataset), interrupt_at="idle", tmp=dataset.parent)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err[-3000:]}"
    assert "KeyboardInterrupt\nloaded again" in out
    assert "Signal 2 received" not in err


def test_ctrl_c_during_loads_is_a_keyboard_interrupt_after_the_load(
        big_dataset: pathlib.Path) -> None:
    # The signal arrives during a load or between two: either way Python raises
    # KeyboardInterrupt once the load has returned, and the next load works.
    rc, out, err = run(CTRL_C, "loads", str(big_dataset), interrupt_at="loading",
                       tmp=big_dataset.parent)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err[-3000:]}"
    assert "KeyboardInterrupt\nloaded again" in out
    assert "not interrupted" not in out
    assert "Signal 2 received" not in err


def test_an_unhandled_ctrl_c_ends_the_process_as_python_does(dataset: pathlib.Path) -> None:
    script = """
        import sys
        import shardload
        shardload.load(sys.argv[1])
        print("idle", flush=True)
        sys.stdin.readline()
    """
    rc, out, err = run(script, str(dataset), interrupt_at="idle", tmp=dataset.parent)
    # Python re-raises an unhandled KeyboardInterrupt as SIGINT to report it to the shell.
    assert rc == -signal.SIGINT
    assert "KeyboardInterrupt" in err and "Signal 2 received" not in err


def test_every_legate_call_off_the_main_thread_names_itself(dataset: pathlib.Path,
                                                            tmp_path: pathlib.Path) -> None:
    # Before, verify, discover_once and batches (and the batches iterator's next()) all said
    # "shardload.load was called ...". Each is refused before it touches the runtime, so this
    # runs in the test's own process.
    shardload.index(dataset, checksum="xxh3")
    it = shardload.batches(dataset, 2000)  # made in the main thread, used from the worker
    calls = {
        "shardload.load": lambda: shardload.load(dataset),
        "shardload.batches": lambda: shardload.batches(dataset, 100),
        "next() of a shardload.batches iterator": lambda: next(it),
        "shardload.verify": lambda: shardload.verify(dataset),
        "shardload.discover_once": lambda: shardload.discover_once(dataset),
        "shardload.save": lambda: shardload.save(np.zeros(3), tmp_path / "saved"),
    }
    messages: dict[str, str] = {}

    def work() -> None:
        for name, call in calls.items():
            try:
                call()
                messages[name] = "no error"
            except RuntimeError as e:
                messages[name] = str(e)

    t = threading.Thread(target=work, name="worker")
    t.start()
    t.join()
    for name in calls:
        assert messages[name].startswith(f"{name} was called from thread 'worker'; it works "
                                         "only in the main thread"), (name, messages[name])
    # The iterator goes on in the main thread, whole.
    expected = shardload.discover(dataset).read()
    np.testing.assert_array_equal(np.concatenate([np.asarray(b) for b in it]), expected)
    assert not (tmp_path / "saved").exists()


MORE_DIMENSIONS = """
    import sys
    import numpy as np
    import shardload
    from shardload import _legate_start

    shardload.register_reader("seven", read=lambda p, lo, hi: np.zeros((hi - lo,) + (2,) * 6),
                              count_rows=lambda p: 3, dtype="float64", trailing_shape=(2,) * 6,
                              extension=".seven")
    for source in sys.argv[1:3]:
        layout = shardload.discover(source)
        calls = {
            "load": lambda: shardload.load(source),
            "load of a Layout": lambda: shardload.load(layout),
            "load rows": lambda: shardload.load(source, row_range=(0, 1)),
            "batches": lambda: shardload.batches(source, 2),
            "save": lambda: shardload.save(np.zeros(layout.shape, np.float32), sys.argv[4]),
        }
        for name, call in calls.items():
            try:
                call()
                print(name, "no error")
            except ValueError as e:
                print(name, type(e).__name__, "|", e)
    try:
        shardload.load(sys.argv[3], reader="seven")
        print("reader no error")
    except ValueError as e:
        print("reader", type(e).__name__, "|", e)
    print("runtime started:", _legate_start._runtime_ready)
"""


def test_more_dimensions_than_legate_has_are_refused_before_the_runtime_starts(
        tmp_path: pathlib.Path) -> None:
    # The Legate wheels hold arrays of at most 6 dimensions. Before, a load, batches or save
    # of 7-D or 8-D data raised IndexError with Legate's error report inside, after starting
    # the runtime; now each is refused first, by the launchers' own check, naming the limit.
    from legate import install_info  # the wheels' LEGATE_MAX_DIM, without starting Legate

    assert install_info.max_dim == 6
    rng = np.random.default_rng(7)
    sources = []
    for n in (7, 8):
        parts = [rng.standard_normal((r,) + (2,) * (n - 1)).astype(np.float32) for r in (3, 2)]
        write_shards(tmp_path / f"d{n}", parts)
        sources.append(tmp_path / f"d{n}")
        # Host reads take any number of dimensions.
        layout = shardload.discover(tmp_path / f"d{n}")
        assert layout.shape == (5,) + (2,) * (n - 1)
        np.testing.assert_array_equal(layout.read(), np.concatenate(parts))
        np.testing.assert_array_equal(layout.read(1, 4), np.concatenate(parts)[1:4])
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "shard_0000.seven").write_bytes(b"")
    rc, out, err = run(MORE_DIMENSIONS, *map(str, sources), str(tmp_path / "r"),
                       str(tmp_path / "saved"), tmp=tmp_path)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err[-3000:]}"
    lines = out.splitlines()
    assert lines[-1] == "runtime started: False", out
    assert "LEGATE ERROR" not in out + err and "IndexError" not in out + err
    for n, source in zip((7, 8), sources):
        shape = "(5, " + ", ".join(["2"] * (n - 1)) + ")"
        refused = (f"the dataset of {source}/shard_0000.npy and 1 more shard has {n} "
                   f"dimensions, shape {shape}, and a Legate array has at most 6 "
                   "(LEGATE_MAX_DIM of this Legate build); it cannot be loaded through Legate, "
                   "but it can be read on the host (Python Layout.read, C++ fill_rows)")
        for name in ("load", "load of a Layout", "batches"):
            assert f"{name} LayoutError | {refused}" in lines, (name, out)
        assert (f"load rows LayoutError | {refused.replace('(5, ', '(1, ')}"
                .replace(" and 1 more shard", "") in lines), out
        assert (f"save ValueError | save: the array has {n} dimensions, shape {shape}, and a "
                "Legate array has at most 6 (LEGATE_MAX_DIM of this Legate build); reshape it "
                "to fewer dimensions to save it") in lines, out
    # A Python reader's dataset is named by its files, as any format's.
    assert re.search(r"reader LayoutError \| the dataset of \S+/shard_0000\.seven has 7 "
                     r"dimensions, shape \(3, 2, 2, 2, 2, 2, 2\), and a Legate array has at most 6",
                     out), out
    assert not (tmp_path / "saved").exists()
    from shardload import _legate

    assert _legate.MAX_DIMS == install_info.max_dim  # the limit shardload was built with


def test_the_launchers_refuse_more_dimensions_themselves(tmp_path: pathlib.Path) -> None:
    # Past the Python checks, the C++ launchers (load, Batches) refuse such a layout before
    # creating anything (Legate ended the process on the store), and the runtime goes on.
    from shardload import _legate, _legate_start

    data = np.arange(2 * 2 ** 6, dtype=np.int16).reshape((2,) + (2,) * 6)
    write_shards(tmp_path / "d7", [data])
    layout = shardload.discover(tmp_path / "d7")
    _legate_start._start_runtime()
    with pytest.raises(shardload.LayoutError, match=r"shard_0000.npy has 7 dimensions, shape "
                       r"\(2, 2, 2, 2, 2, 2, 2\), and a Legate array has at most 6"):
        _legate.load(layout, 1)
    with pytest.raises(shardload.LayoutError, match=r"shard_0000.npy has 7 dimensions"):
        _legate.Batches(layout, 1, 1, 1)
    six = data.reshape((4,) + (2,) * 5)
    write_shards(tmp_path / "d6", [six[:3], six[3:]])
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / "d6")), six)
    batches = [np.asarray(b) for b in shardload.batches(tmp_path / "d6", 3)]
    np.testing.assert_array_equal(np.concatenate(batches), six)
