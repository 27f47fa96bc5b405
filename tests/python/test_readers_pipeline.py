"""Python readers through the engine's pipeline: the entry points a built-in format has
(discover, Layout.read, load with info= and progress=, batches, index and the manifest,
discover_once) for a reader registered with shardload.register_reader, against numpy; and the
garbage collector and the GIL around the callbacks, which run on the engine's threads."""

from __future__ import annotations

import itertools
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shardload
from conftest import random_array
from test_readers import read_rows, rows_of, write_rows

import cupynumeric as cn  # noqa: E402

_names = itertools.count()


def register(**kwargs) -> str:
    """A reader under a new name and extension ".pipeN" (its files' in ragged_set)."""
    name = f"pipe{next(_names)}"
    kwargs.setdefault("extension", "." + name)
    kwargs.setdefault("read", read_rows)
    kwargs.setdefault("count_rows", rows_of)
    shardload.register_reader(name, **kwargs)
    return name


def ragged_set(d: pathlib.Path, name: str, seed: int, dtype: str = "float32",
               trailing: tuple[int, ...] = (3,)) -> tuple[list[str], np.ndarray]:
    ext = "." + name
    """Files of uneven rows, one empty, none a multiple of anything the plan uses."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True)
    arrays, paths = [], []
    for i, n in enumerate([7, 0, 13, 1, 29, 5]):
        arrays.append(random_array(rng, (n, *trailing), np.dtype(dtype)))
        paths.append(str(d / f"shard_{i:04d}{ext}"))
        write_rows(paths[-1], arrays[-1])
    return paths, np.concatenate(arrays)


@pytest.mark.parametrize("k", [1, 3])
def test_load_ragged_with_row_range_info_and_progress(tmp_path: pathlib.Path, k: int) -> None:
    name = register()
    paths, expected = ragged_set(tmp_path / "d", name, 20 + k, "int32", (2, 2))
    stages = []
    out, info = shardload.load(tmp_path / "d", reader=name, overdecompose=k, info=True,
                               progress=lambda p: stages.append((p.stage, p.bytes)))
    assert isinstance(out, cn.ndarray) and out.dtype == expected.dtype
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert isinstance(info, shardload.LoadInfo)
    assert (info.total_rows, info.bytes, info.overdecompose) == (len(expected), expected.nbytes, k)
    assert info.tiles >= 1 and info.tile_rows * info.tiles >= len(expected)
    assert [s for s, _ in stages] == ["discovered", "started", "launching", "filled"]
    assert {b for _, b in stages} == {expected.nbytes}
    # format=NAME is the same reader; a row range reads only the files it covers.
    part = shardload.load(paths, format=name, row_range=(6, 49), overdecompose=k)
    np.testing.assert_array_equal(np.asarray(part), expected[6:49])


def test_discover_layout_read_index_manifest_and_discover_once(tmp_path: pathlib.Path) -> None:
    counted = []

    def count(path: str) -> int:
        counted.append(path)
        return rows_of(path)

    name = register(count_rows=count, dtype="float64", trailing_shape=())
    _, expected = ragged_set(tmp_path / "d", name, 31, "float64", ())
    layout = shardload.discover(tmp_path / "d", format=name)
    assert layout.format == "custom" and layout.shard_rows == [7, 0, 13, 1, 29, 5]
    np.testing.assert_array_equal(layout.read(), expected)
    np.testing.assert_array_equal(layout.read(3, 40), expected[3:40])
    # By extension, with no format named: the registered extension selects the reader.
    np.testing.assert_array_equal(shardload.discover(tmp_path / "d").read(), expected)
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), expected)

    manifest = shardload.index(tmp_path / "d", format=name)
    assert os.path.exists(manifest)
    counted.clear()
    again = shardload.discover(tmp_path / "d", format=name)
    assert again.manifest_state is shardload.ManifestState.USED
    assert counted == []  # from the manifest: count_rows is not called
    np.testing.assert_array_equal(again.read(), expected)
    once = shardload.discover_once(tmp_path / "d", format=name)
    assert once.shard_rows == layout.shard_rows
    np.testing.assert_array_equal(np.asarray(shardload.load(once, overdecompose=2)), expected)


def test_batches_give_the_whole_epoch(tmp_path: pathlib.Path) -> None:
    name = register()
    _, expected = ragged_set(tmp_path / "d", name, 41, "uint16", (5,))
    got = [np.asarray(b) for b in shardload.batches(tmp_path / "d", 8, format=name, prefetch=2,
                                                     overdecompose=2)]
    assert [len(b) for b in got] == [8] * 6 + [7]
    np.testing.assert_array_equal(np.concatenate(got), expected)


def test_a_reader_raising_mid_epoch_ends_batches_with_the_file(tmp_path: pathlib.Path) -> None:
    paths: list[str] = []

    def read(path: str, lo: int, hi: int):
        if path == paths[4] and hi > lo:
            raise OSError("bad sector")
        return read_rows(path, lo, hi)

    name = register(read=read, dtype="float32", trailing_shape=(3,))
    paths[:], expected = ragged_set(tmp_path / "d", name, 42)
    seen = []
    with pytest.raises(shardload.ShardReadError) as e:
        for b in shardload.batches(tmp_path / "d", 7, format=name, prefetch=1):
            seen.append(np.asarray(b))
    assert e.value.filename == paths[4]
    assert "raised OSError: bad sector" in str(e.value)
    # Rows 0-20 are before shard 4 (which starts at row 21): those batches came out whole.
    assert len(seen) == 3
    np.testing.assert_array_equal(np.concatenate(seen), expected[:21])


def test_a_file_changed_between_discover_and_load_is_an_error(tmp_path: pathlib.Path) -> None:
    name = register()
    paths, expected = ragged_set(tmp_path / "d", name, 43)
    layout = shardload.discover(tmp_path / "d", format=name)
    # The same size, other rows: only the snapshot (mtime, ctime) tells.
    write_rows(paths[2], np.asarray(expected[8:21]) + 1)
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(layout)
    assert e.value.filename == paths[2]
    assert "changed since discovery" in str(e.value)


# A program that frees Legate objects in cycles while Python readers run on task threads:
# a collection there would end the process. Every entry point runs with the collector at its
# most eager; a wait that held the GIL would hang, and the bound fails the test then.
_STRESS = """
import gc, os, sys
import numpy as np
import cupynumeric as cn
import shardload

d = sys.argv[1]
os.mkdir(os.path.join(d, "s"))
arrays = [np.arange(n * 3, dtype=np.float32).reshape(n, 3) + i for i, n in enumerate([9, 0, 17, 4, 30])]
for i, a in enumerate(arrays):
    with open(os.path.join(d, "s", f"shard_{i:04d}.gcrows"), "wb") as f:
        f.write(f"ROWS {a.dtype.str} {' '.join(map(str, a.shape))}\\n".encode() + a.tobytes())
expected = np.concatenate(arrays)
src = os.path.join(d, "s")


def header(path):
    with open(path, "rb") as f:
        line = f.readline(257)
    w = line.split()
    return np.dtype(w[1].decode()), [int(x) for x in w[2:]], len(line)


class Junk:
    pass


collector_on_in_callbacks = []


def cyclic_garbage():
    for _ in range(50):
        j = Junk()
        j.me = j
        j.data = [j, {"j": j}]
    collector_on_in_callbacks.append(gc.isenabled())


def rows(path):
    cyclic_garbage()
    return header(path)[1][0]


def read(path, lo, hi):
    cyclic_garbage()
    dt, shape, off = header(path)
    return np.array(np.memmap(path, dtype=dt, mode="r", offset=off, shape=tuple(shape))[lo:hi])


shardload.register_reader("gcrows", count_rows=rows, read=read, extension=".gcrows")


class Holder:  # cyclic Legate objects, freed by the collector
    def __init__(self, a):
        self.me = self
        self.a = a


gc.enable()
gc.set_threshold(1)
for epoch in range(3):
    for k in (1, 3):
        keep = [Holder(cn.arange(10 + i)) for i in range(5)]
        out = shardload.load(src, reader="gcrows", overdecompose=k)
        assert np.array_equal(np.asarray(out), expected)
        del keep, out
        got = []
        for b in shardload.batches(src, 6, format="gcrows", prefetch=2, overdecompose=k):
            Holder(b)
            got.append(np.asarray(b))
        assert np.array_equal(np.concatenate(got), expected)
        # Dropped mid-epoch with launches in flight: the drop must not wait holding the GIL.
        it = shardload.batches(src, 3, format="gcrows", prefetch=4, overdecompose=k)
        next(it)
        it.close()
        del it
    layout = shardload.discover(src, format="gcrows")
    assert np.array_equal(layout.read(), expected)
    shardload.index(src, format="gcrows")
    once = shardload.discover_once(src, format="gcrows")
    assert np.array_equal(np.asarray(shardload.load(once)), expected)
    os.remove(os.path.join(src, "shardload.manifest"))
assert collector_on_in_callbacks and not any(collector_on_in_callbacks), "collector on"
assert gc.isenabled() and gc.get_threshold()[0] == 1
print("STRESS OK", len(collector_on_in_callbacks), flush=True)
"""


def test_gc_stress_and_every_entry_point_without_a_hang(tmp_path: pathlib.Path) -> None:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_STRESS), str(tmp_path)],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "STRESS OK" in r.stdout


def test_an_extension_already_taken_still_names_the_readers_files(tmp_path: pathlib.Path) -> None:
    first = register()
    doubled = []
    second = register(extension="." + first,
                      read=lambda p, lo, hi: doubled.append(p) or read_rows(p, lo, hi) * 2)
    npy = register(extension=".npy")  # a built-in format's: not selected by it
    _, expected = ragged_set(tmp_path / "d", first, 44)
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / "d", reader=second)),
                                  expected * 2)
    assert doubled
    # Discovery by extension gives the files to the reader registered first for it.
    np.testing.assert_array_equal(shardload.discover(tmp_path / "d").read(), expected)
    assert npy in shardload.registered_readers()


# One entry point per child, its callbacks on the engine's threads: a wait that held the GIL
# would hang it, and the bound fails the test then, naming the entry point.
_ENTRY = """
import gc, os, signal, sys
import numpy as np
import shardload

# Python's own Ctrl-C handler, as an interactive program has it: a job started in the
# background by a shell without job control inherits SIGINT ignored, and a Ctrl-C made
# pending again (PyErr_SetInterrupt) is then no signal at all.
signal.signal(signal.SIGINT, signal.default_int_handler)

d, entry = sys.argv[1], sys.argv[2]
src = os.path.join(d, "s")
os.mkdir(src)
arrays = [np.full((n, 2), i, np.int64) for i, n in enumerate([5, 0, 11, 3])]
for i, a in enumerate(arrays):
    np.save(os.path.join(src, f"shard_{i:04d}.npyish"), a)
    os.rename(os.path.join(src, f"shard_{i:04d}.npyish.npy"), os.path.join(src, f"shard_{i:04d}.npyish"))
expected = np.concatenate(arrays)
threads = set()


def rows(p):
    threads.add(__import__("threading").get_ident())
    return np.load(p, mmap_mode="r").shape[0]


def read(p, lo, hi):
    threads.add(__import__("threading").get_ident())
    return np.array(np.load(p, mmap_mode="r")[lo:hi])


shardload.register_reader("entry", count_rows=rows, read=read, extension=".npyish")
gc.enable()
gc.set_threshold(1)
if entry == "discover":
    assert shardload.discover(src, format="entry").shard_rows == [5, 0, 11, 3]
elif entry == "layout_read":
    assert np.array_equal(shardload.discover(src, format="entry").read(2, 17), expected[2:17])
elif entry == "load":
    assert np.array_equal(np.asarray(shardload.load(src, reader="entry", overdecompose=3)), expected)
elif entry == "batches":
    got = [np.asarray(b) for b in shardload.batches(src, 4, format="entry", prefetch=3)]
    assert np.array_equal(np.concatenate(got), expected)
elif entry == "index":
    shardload.index(src, format="entry")
    assert shardload.discover(src, format="entry").manifest_state.value == "used"
elif entry == "discover_once":
    layout = shardload.discover_once(src, format="entry")
    assert np.array_equal(np.asarray(shardload.load(layout)), expected)
elif entry == "interrupt":
    def interrupted(p):
        raise KeyboardInterrupt  # as a Ctrl-C during count_rows would
    shardload.register_reader("ctrl-c", count_rows=interrupted, read=read)
    try:
        try:
            shardload.discover(src + "/shard_{:04d}.npyish", format="ctrl-c")
        except shardload.LayoutError:
            for _ in range(100000):
                pass
            print("INTERRUPT LOST", flush=True)
    except KeyboardInterrupt:
        print("KEYBOARD INTERRUPT", flush=True)
elif entry in ("interrupt_read", "exit_read", "interrupt_count", "exit_count"):
    # A Ctrl-C (or a sys.exit()) inside read() or count_rows(), while Layout.read or a load
    # runs: the caller gets KeyboardInterrupt, never a read error that a loop skipping
    # unreadable data would swallow.
    raised = KeyboardInterrupt if entry.startswith("interrupt") else SystemExit

    def stopped_rows(p):
        if entry.endswith("count"):
            raise raised
        return rows(p)

    def stopped_read(p, lo, hi):
        if entry.endswith("read"):
            raise raised
        return read(p, lo, hi)

    shardload.register_reader("stop", count_rows=stopped_rows, read=stopped_read,
                              dtype="int64", trailing_shape=(2,))
    try:
        try:
            shardload.discover(src + "/shard_{:04d}.npyish", format="stop").read(0, 19)
        except (shardload.ShardReadError, shardload.LayoutError) as e:
            for _ in range(100000):
                pass
            print("INTERRUPT LOST", type(e).__name__, e, flush=True)
    except KeyboardInterrupt:
        print("KEYBOARD INTERRUPT", flush=True)
print("ENTRY OK", entry, len(threads), flush=True)
"""


@pytest.mark.parametrize("entry", ["discover", "layout_read", "load", "batches", "index",
                                   "discover_once"])
def test_each_entry_point_releases_the_gil_while_it_waits(tmp_path: pathlib.Path,
                                                          entry: str) -> None:
    r = subprocess.run([sys.executable, "-c", _ENTRY, str(tmp_path), entry],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert f"ENTRY OK {entry}" in r.stdout


def test_a_ctrl_c_inside_a_callback_is_not_lost(tmp_path: pathlib.Path) -> None:
    r = subprocess.run([sys.executable, "-c", _ENTRY, str(tmp_path), "interrupt"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "KEYBOARD INTERRUPT" in r.stdout and "INTERRUPT LOST" not in r.stdout


@pytest.mark.parametrize("entry", ["interrupt_read", "exit_read", "interrupt_count",
                                   "exit_count"])
def test_a_ctrl_c_or_exit_inside_read_or_count_rows_is_a_keyboard_interrupt(
        tmp_path: pathlib.Path, entry: str) -> None:
    r = subprocess.run([sys.executable, "-c", _ENTRY, str(tmp_path), entry],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "KEYBOARD INTERRUPT" in r.stdout and "INTERRUPT LOST" not in r.stdout, r.stdout
