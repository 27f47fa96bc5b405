"""Memory: a dataset larger than the memory Legate has is refused before anything is
allocated, and an allocation that fails inside a load task is a ShardReadError. Each case runs
in its own process with a small --sysmem, since before these checks the process died."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

SUPPORT = pathlib.Path(__file__).resolve().parent / "support"
SYSMEM_MIB = 256

RUNNER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import h5py  # before cupynumeric (see conftest)
    import shardload
    out = {}
    for name, source, kwargs in json.loads(sys.argv[1]):
        try:
            a = shardload.load(source, **kwargs)
            out[name] = ["loaded", str(a.shape)]
        except Exception as e:
            out[name] = [type(e).__name__, str(e), isinstance(e, MemoryError),
                         isinstance(e, shardload.ShardReadError)]
    # The process and the runtime go on: a good load right after.
    out["after"] = int(shardload.load(sys.argv[2]).sum())
    print("RESULT " + json.dumps(out))
    """
)


def run_loads(tmp_path: pathlib.Path, cases: list, env_extra: dict | None = None) -> dict:
    good = tmp_path / "good"
    good.mkdir()
    np.save(good / "shard_0000.npy", np.arange(100, dtype=np.int64))
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    env = dict(os.environ)
    env["LEGATE_CONFIG"] = f"--cpus 2 --utility 1 --gpus 0 --sysmem {SYSMEM_MIB}"
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, str(script), json.dumps(cases), str(good)], env=env,
                       capture_output=True, text=True, timeout=300)
    lines = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"the process died (rc {r.returncode}):\n" + \
        r.stdout[-3000:] + r.stderr[-3000:]
    out = json.loads(lines[0][len("RESULT "):])
    assert out.pop("after") == 4950
    return out


def sparse_npy(path: pathlib.Path, shape: tuple[int, ...], dtype: str) -> None:
    """A .npy whose header declares `shape`; the data is a hole, so the file costs nothing."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
        header = f.tell()
    os.truncate(path, header + int(np.prod(shape)) * np.dtype(dtype).itemsize)


def test_declared_sizes_beyond_legate_memory_are_refused(tmp_path: pathlib.Path) -> None:
    big = (SYSMEM_MIB + 64) << 20  # bytes each dataset declares
    npy = tmp_path / "npy"
    npy.mkdir()
    sparse_npy(npy / "shard_0000.npy", (big // 8,), "<f8")
    sparse_npy(npy / "shard_0001.npy", (10**9,), "<f8")  # 8 GB more, also a hole
    zarr_dir = tmp_path / "z" / "shard_0000.zarr"
    zarr_dir.mkdir(parents=True)
    (zarr_dir / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [10**12, 4], "chunks": [1000, 4], "dtype": "<f4",
        "compressor": None, "fill_value": 0, "filters": None, "order": "C"}))
    h5 = tmp_path / "h5"
    h5.mkdir()
    with h5py.File(h5 / "shard_0000.h5", "w") as f:  # chunks never written: a tiny file
        f.create_dataset("x", shape=(big,), dtype="u1", chunks=(1 << 20,))
    pqd = tmp_path / "pq"
    pqd.mkdir()
    pq.write_table(pa.table({"v": np.zeros(big // 8, dtype=np.int64)}),
                   pqd / "shard_0000.parquet", compression="zstd")
    assert (pqd / "shard_0000.parquet").stat().st_size < 1 << 20
    out = run_loads(tmp_path, [
        ["npy", str(npy), {}],
        ["zarr", [str(zarr_dir)], {"format": "zarr"}],
        ["hdf5", str(h5), {"format": "hdf5", "pattern": "shard_{:04d}.h5"}],
        ["parquet", str(pqd), {"format": "parquet", "pattern": "shard_{:04d}.parquet"}],
    ])
    for name, (kind, message, is_memory_error, _) in out.items():
        assert kind == "OutOfMemoryError" and is_memory_error, (name, message)
        assert "the dataset needs" in message and "Legate has" in message, message
        assert "--sysmem" in message, message
    assert "8.34 GB" in out["npy"][1]  # what the two declared shards need together


def test_an_allocation_that_fails_in_a_task_is_a_read_error(tmp_path: pathlib.Path) -> None:
    shim = tmp_path / "failmalloc.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", shim, SUPPORT / "failmalloc.c"],
                   check=True)
    # A Zarr array of 10 rows whose chunk declares 2**28 rows: decoding it needs a 1 GiB buffer,
    # and the shim makes every allocation between 512 MiB and 2 GiB fail.
    store = tmp_path / "z" / "shard_0000.zarr"
    store.mkdir(parents=True)
    (store / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [10, 1], "chunks": [1 << 28, 1], "dtype": "<f4",
        "compressor": {"id": "zlib", "level": 1}, "fill_value": 0, "filters": None,
        "order": "C"}))
    (store / "0.0").write_bytes(b"\x78\x01" + b"\x00" * 16)
    out = run_loads(tmp_path, [["zarr", [str(store)], {"format": "zarr"}]],
                    {"LD_PRELOAD": str(shim), "FAILMALLOC_MIN": str(512 << 20),
                     "FAILMALLOC_MAX": str(2 << 30)})
    kind, message, _, is_read_error = out["zarr"]
    assert kind == "ShardReadError" and is_read_error, out
    assert "out of memory" in message and str(store) in message, message
