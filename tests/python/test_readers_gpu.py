"""The Python reader task's GPU variant without a GPU: a stand-in CuPy records on which stream
each write is issued, and a missing CuPy must be a clear error (CuPy is the optional ``gpu``
extra). The variant itself runs only where Legate has GPUs."""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
import types
from typing import Any, Optional

import numpy as np
import pytest

from shardload import _readers
from shardload._errors import ShardReadError

TASK_STREAM = 0x5EED


class FakeCupy(types.ModuleType):
    """The part of CuPy the variant uses; device arrays are numpy arrays here."""

    def __init__(self) -> None:
        super().__init__("cupy")
        self.current: Optional[int] = None  # None: CuPy's own (default) stream
        self.writes: list[Optional[int]] = []  # the current stream at each write
        self.synchronized: list[Optional[int]] = []
        fake = self

        class ExternalStream:
            def __init__(self, ptr: int) -> None:
                self.ptr = ptr

            def __enter__(self) -> "ExternalStream":
                self.saved = fake.current
                fake.current = self.ptr
                return self

            def __exit__(self, *exc: Any) -> None:
                fake.current = self.saved

        class Stream:
            def __init__(self, ptr: Optional[int]) -> None:
                self.ptr = ptr

            def synchronize(self) -> None:
                fake.synchronized.append(self.ptr)

        self.cuda = types.SimpleNamespace(ExternalStream=ExternalStream,
                                          get_current_stream=lambda: Stream(fake.current))

    def from_dlpack(self, dst: np.ndarray) -> "FakeDevice":
        return FakeDevice(self, dst)


class FakeDevice:
    def __init__(self, cupy: FakeCupy, a: np.ndarray) -> None:
        self.cupy, self.a = cupy, a

    def __getitem__(self, key: Any) -> "FakeDevice":
        return FakeDevice(self.cupy, self.a[key])

    def set(self, arr: np.ndarray, stream: Any = None) -> None:
        self.cupy.writes.append(stream if stream is not None else self.cupy.current)
        self.a[...] = arr


@pytest.fixture
def job(tmp_path: pathlib.Path):
    """A job of three files read by a plain numpy reader, tiled in two tiles."""
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((n, 3)).astype(np.float32) for n in (5, 1, 7)]
    paths = []
    for i, a in enumerate(arrays):
        paths.append(str(tmp_path / f"shard_{i}.npy"))
        np.save(paths[-1], a)
    reader = _readers._Reader("gpu-test", lambda p, lo, hi: np.load(p)[lo:hi], lambda p: 0,
                              None, None, None)
    pieces = [[(0, 0, 5, 0), (1, 0, 1, 5)], [(2, 0, 7, 0)]]
    snapshots = [_readers._snapshot(os.stat(p)) for p in paths]
    number = -1  # out of the range the loads number their jobs in
    _readers._JOBS[number] = _readers._Job(reader, paths, [0, 0, 0], snapshots, pieces,
                                           np.dtype(np.float32), (3,))
    yield number, arrays
    del _readers._JOBS[number]


@contextlib.contextmanager
def cupy_module(module: Optional[types.ModuleType]):
    saved = sys.modules.get("cupy", None)
    had = "cupy" in sys.modules
    sys.modules["cupy"] = module  # None: "import cupy" raises ImportError
    try:
        yield
    finally:
        if had:
            sys.modules["cupy"] = saved
        else:
            del sys.modules["cupy"]


def context(tile: int, stream: Optional[int]) -> Any:
    return types.SimpleNamespace(task_index=(tile,), task_stream=stream)


def test_the_gpu_variant_writes_on_the_task_stream(job) -> None:
    number, arrays = job
    fake = FakeCupy()
    with cupy_module(fake):
        tile0 = np.zeros((6, 3), np.float32)
        _readers._run_read_task(context(0, TASK_STREAM), tile0, number, True)
        tile1 = np.zeros((7, 3), np.float32)
        _readers._run_read_task(context(1, TASK_STREAM), tile1, number, True)
    np.testing.assert_array_equal(tile0, np.concatenate(arrays[:2]))
    np.testing.assert_array_equal(tile1, arrays[2])
    assert fake.writes == [TASK_STREAM] * 3
    assert fake.current is None  # CuPy's current stream is restored
    assert fake.synchronized == []  # Legate orders the task's stream; no wait needed


def test_without_a_task_stream_the_variant_waits_for_its_writes(job) -> None:
    number, arrays = job
    fake = FakeCupy()
    with cupy_module(fake):
        tile1 = np.zeros((7, 3), np.float32)
        _readers._run_read_task(context(1, None), tile1, number, True)
    np.testing.assert_array_equal(tile1, arrays[2])
    assert fake.writes == [0]
    assert fake.synchronized == [0]


def test_a_missing_cupy_is_a_clear_error(job) -> None:
    number, _ = job
    with cupy_module(None):
        with pytest.raises(ImportError, match=r"pip install 'shardload\[gpu\]'"):
            _readers._cupy()
        with pytest.raises(ShardReadError, match=r"needs CuPy, which is not installed"):
            _readers._run_read_task(context(0, TASK_STREAM), np.zeros((6, 3), np.float32),
                                    number, True)


def test_the_cpu_variant_needs_no_cupy(job) -> None:
    number, arrays = job
    with cupy_module(None):
        tile1 = np.zeros((7, 3), np.float32)
        _readers._run_read_task(context(1, None), tile1, number, False)
    np.testing.assert_array_equal(tile1, arrays[2])


def test_cupy_is_the_gpu_extra() -> None:
    tomllib = pytest.importorskip("tomllib")
    root = pathlib.Path(__file__).resolve().parents[2]
    meta = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("cupy-cuda13x") for d in meta["optional-dependencies"]["gpu"])
    assert not any(d.startswith("cupy") for d in meta["dependencies"])
