"""Shared helpers: the built CLI, a numpy reimplementation of synth, and random
arrays of every dtype shardload supports."""

from __future__ import annotations

import gc
import os
import pathlib

# h5py must be imported before cupynumeric in a process: cuPyNumeric loads
# Legate's own HDF5 into the global symbol scope, and an h5py imported after
# that binds to it and fails ("Not a datatype"). conftest runs first.
import h5py
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The build the tests use: scripts/setup.sh makes build/ in the checkout (scripts/env.sh
# exports its path); nothing outside the checkout is looked for.
BUILD = pathlib.Path(os.environ.get("SHARDLOAD_BUILD", ROOT / "build"))


@pytest.fixture(autouse=True, scope="session")
def _collect_garbage_on_the_main_thread():
    """Legate ends the process when one of its arrays is freed on a thread other than the
    one that runs it. pytest keeps failed calls' tracebacks (and so the arrays in their
    frames) in reference cycles, and the cyclic collector runs on whichever thread happens
    to allocate: a zarr, pyarrow or h5py worker thread among them. The suite collects on
    the main thread only, between tests (see docs/errors.md, "Runtime limits")."""
    gc.disable()
    yield
    gc.enable()


@pytest.fixture(autouse=True)
def _collect_after_each_test():
    yield
    gc.collect()


@pytest.fixture(scope="session")
def cli() -> pathlib.Path:
    path = BUILD / "shardload"
    if not path.exists():
        pytest.fail(f"{path} is not built; run scripts/setup.sh")
    return path


_M = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: np.ndarray) -> np.ndarray:
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _M
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M
    return x ^ (x >> np.uint64(31))


def _real(h: np.ndarray, bits: int) -> np.ndarray:
    v = (h >> np.uint64(64 - bits)).astype(np.int64) - (1 << (bits - 1))
    return v.astype(np.float64) * 2.0**-8


def synth(dtype: str, seed: int, first: int, count: int) -> np.ndarray:
    """The documented value formula, written independently of the C++ one."""
    with np.errstate(over="ignore"):
        key = splitmix64(np.array([seed], dtype=np.uint64))[0]
        h = splitmix64(key + np.arange(first, first + count, dtype=np.uint64))
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return (h >> np.uint64(63)).astype(np.bool_)
    if dt.kind in "iu":
        return h.astype(dt)  # keeps the low bits, two's complement
    if dt.kind == "f":
        bits = {2: 11, 4: 24, 8: 53}[dt.itemsize]
        return _real(h, bits).astype(dt)
    bits = {8: 24, 16: 53}[dt.itemsize]
    with np.errstate(over="ignore"):
        h2 = splitmix64(h)
    return (_real(h, bits) + 1j * _real(h2, bits)).astype(dt)


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random values spanning the whole range of integer types."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)


def dirty_bools(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A bool array whose bytes are anything 0..255 (2 and 255 always among them),
    as a file may hold them: numpy keeps such bytes through views and tobytes."""
    raw = rng.integers(0, 256, size=shape, dtype=np.uint8)
    raw.reshape(-1)[:3] = [2, 255, 0][:raw.size]
    return raw.view(np.bool_)


def assert_bools_normalised(got: np.ndarray, stored: np.ndarray) -> None:
    """numpy's rule for a bool byte: nonzero is True, and True is stored as 1."""
    stored_bytes = np.ascontiguousarray(stored).view(np.uint8)
    assert stored_bytes.size == 0 or stored_bytes.max() > 1  # the data really is dirty
    assert got.dtype == np.bool_ and got.shape == stored.shape
    got_bytes = np.ascontiguousarray(got).view(np.uint8)
    assert got_bytes.size == 0 or got_bytes.max() <= 1
    np.testing.assert_array_equal(got_bytes, (stored_bytes != 0).astype(np.uint8))
    assert int(got_bytes.sum()) == np.count_nonzero(stored_bytes)


def corrupt_hdf5_chunk(path, dataset: str, index: int, keep_tail: int = 4) -> None:
    """Flips the bytes of one stored chunk, keeping its first 2 and last `keep_tail`
    bytes (a compressed stream's header and, with fletcher32, its checksum), so the
    file's metadata stays intact and only reading that chunk can tell."""
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info(index)
    raw = bytearray(pathlib.Path(path).read_bytes())
    for k in range(info.byte_offset + 2, info.byte_offset + info.size - keep_tail):
        raw[k] ^= 0x5A
    pathlib.Path(path).write_bytes(bytes(raw))

