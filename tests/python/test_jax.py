"""shardload.jax.load against numpy: one process with 2 CPU devices (several formats, ragged
shards with empty ones, 3-D rows, astype, row_range, custom and replicated shardings, s3://,
a shard changed after discovery), and 2 processes x 2 CPU devices over loopback, each
process able to open only the files of its own rows, a shard gone on one process reaching
both as an error, and a process that never calls not hanging the other.

JAX needs its device count before it is imported, so every configuration runs in processes of
its own (jax_worker.py); this process never imports jax."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import shutil
import socket
import subprocess
import sys

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

import shardload

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "jax_worker.py"
ROWS = [37, 0, 51, 6, 0, 66, 32]  # 192 rows: 8 | 192, shard edges off every device's edge
TRAILING = (3, 4)


def shards(dtype: str, seed: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((r,) + TRAILING) * 100).astype(dtype) for r in ROWS]


def write(fmt: str, d: pathlib.Path, arrays: list[np.ndarray]) -> pathlib.Path:
    d.mkdir(parents=True)
    for i, a in enumerate(arrays):
        name = d / f"shard_{i:02d}"
        if fmt == "npy":
            np.save(f"{name}.npy", a)
        elif fmt == "hdf5":
            with h5py.File(f"{name}.h5", "w") as f:
                f.create_dataset("x", data=a, chunks=(8,) + TRAILING,
                                 maxshape=(None,) + TRAILING, compression="gzip")
        elif fmt == "zarr":
            z = zarr.create_array(store=f"{name}.zarr", shape=a.shape, dtype=a.dtype,
                                  chunks=(16, 3, 2), zarr_format=3)
            z[:] = a
        elif fmt == "parquet":
            flat = a.reshape(len(a), 12)
            pq.write_table(pa.table({f"c{j}": flat[:, j] for j in range(3)}),
                           f"{name}.parquet", row_group_size=10)
    return d


def run(args: list[str], timeout: float = 120) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parents[1] / "python")] + os.environ.get("PYTHONPATH", "").split(os.pathsep))}
    r = subprocess.run([sys.executable, str(WORKER)] + args, capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr


def test_one_process_two_devices_equals_numpy(tmp_path: pathlib.Path, bucket) -> None:
    f32 = shards("float32")
    expected = np.concatenate(f32)
    npy = write("npy", tmp_path / "npy", f32)
    h5 = write("hdf5", tmp_path / "h5", shards("float64", 6))
    zr = write("zarr", tmp_path / "zarr", shards("int16", 7))
    pqd = write("parquet", tmp_path / "pq", shards("float32", 8))
    for i, a in enumerate(f32):
        bucket.put_npy(f"d/shard_{i:02d}.npy", a)
    # A shard rewritten after discovery with other bytes of the same size.
    changed = write("npy", tmp_path / "changed", f32)
    layout = shardload.discover(changed)
    (tmp_path / "layout.pickle").write_bytes(pickle.dumps(layout))
    np.save(changed / "shard_05.npy", f32[5] + 1)

    cases = [
        ("npy", str(npy), "default", {}),
        ("npy_reversed", str(npy), "reversed", {}),
        ("npy_replicated", str(npy), "replicated", {"row_range": [5, 105], "info": True}),
        ("npy_rows_and_trailing", str(npy), "rows_and_trailing", {"astype": "float16"}),
        ("npy_trailing_only", str(npy), "trailing_only", {"astype": "int32"}),
        ("npy_rows", str(npy), "default", {"row_range": [36, 96]}),
        ("hdf5", str(h5), "default", {}),
        ("zarr", str(zr), "reversed", {"row_range": [40, 160]}),
        ("parquet", str(pqd / "*.parquet"), "default", {}),
        ("s3", bucket.url("d/"), "default", {"storage_options": bucket.options}),
        ("uneven", str(npy), "default", {"row_range": [0, 191]}),
        ("one_row", str(npy), "default", {"row_range": [7, 8]}),
        ("long_double", str(npy), "default", {"astype": "longdouble"}),
        ("bad_sharding", str(npy), "default", {"sharding": "rows"}),
        ("more_axes", str(npy), "more_axes_than_dims", {}),
    ]
    spec = {"devices": 2, "out": str(tmp_path),
            "cases": [{"name": n, "source": s, "sharding": sh, "kwargs": kw}
                      for n, s, sh, kw in cases]}
    spec["cases"].append({"name": "changed", "source": str(tmp_path / "layout.pickle"),
                          "layout": True})
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    run(["single", str(tmp_path / "spec.json")])
    records = json.loads((tmp_path / "records.json").read_text())

    def got(name: str, oracle: np.ndarray) -> None:
        r = records[name]
        assert "error" not in r, (name, r)
        a = np.load(tmp_path / f"{name}.npy")
        assert a.dtype == oracle.dtype and r["dtype"] == str(oracle.dtype), (name, a.dtype)
        np.testing.assert_array_equal(a, oracle, err_msg=name)
        assert r["shards_equal"] and r["sharding_kept"] and len(r["shards"]) == 2, (name, r)

    got("npy", expected)
    got("npy_reversed", expected)
    got("npy_replicated", expected[5:105])
    # Both devices hold rows [5, 105): the process read them once.
    assert records["npy_replicated"]["info"]["total_rows"] == 100, records["npy_replicated"]
    assert records["npy_replicated"]["info"]["bytes"] == expected[5:105].nbytes
    got("npy_rows_and_trailing", expected.astype(np.float16))
    got("npy_trailing_only", expected.astype(np.int32))
    got("npy_rows", expected[36:96])
    # Without jax_enable_x64 JAX has no float64: the array is float32, as jnp.asarray makes it.
    got("hdf5", np.concatenate(shards("float64", 6)).astype(np.float32))
    got("zarr", np.concatenate(shards("int16", 7))[40:160])
    got("parquet", np.concatenate(shards("float32", 8)).reshape(-1, 12)[:, :3])
    got("s3", expected)
    # Which device holds which rows: the reversed mesh gives device 1 the first half.
    assert sorted(records["npy_reversed"]["shards"]) == [
        [0, repr((slice(96, 192, None), slice(None), slice(None)))],
        [1, repr((slice(0, 96, None), slice(None), slice(None)))]]

    uneven = records["uneven"]
    assert uneven["error"] == "ValueError", uneven
    assert "191 rows do not split evenly into the 2 pieces" in uneven["message"], uneven
    assert "row_range of 190 rows" in uneven["message"], uneven
    assert records["one_row"]["error"] == "ValueError", records["one_row"]
    assert "fewer pieces" in records["one_row"]["message"], records["one_row"]
    assert records["long_double"]["error"] == "TypeError", records["long_double"]
    assert records["bad_sharding"]["error"] == "TypeError", records["bad_sharding"]
    assert "sharding: expected a jax.sharding.Sharding" in records["bad_sharding"]["message"]
    # JAX's own IndexError ("list index out of range") named nothing.
    assert records["more_axes"]["error"] == "ValueError", records["more_axes"]
    assert ("the sharding's PartitionSpec(None, None, None, 'b') has 4 entries, and the array "
            "has 3 axes (shape (192, 3, 4))") in records["more_axes"]["message"]
    changed_r = records["changed"]
    assert changed_r["error"] == "ShardReadError", changed_r
    assert str(changed / "shard_05.npy") in changed_r["message"], changed_r


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(tmp_path: pathlib.Path, mode: str, spec: dict, timeout: float) -> list:
    """Runs jax_worker.py's `mode` as the 2 processes of one jax.distributed job (2 CPU devices
    each) and returns the record each wrote to MODE_P.json."""
    spec = {"devices": 2, "processes": 2, "port": _free_port(), "out": str(tmp_path), **spec}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parents[1] / "python")] + os.environ.get("PYTHONPATH", "").split(os.pathsep))}
    procs = [subprocess.Popen([sys.executable, str(WORKER), mode,
                               str(tmp_path / "spec.json"), str(p)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for p in range(2)]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [p.returncode for p in procs] == [0, 0], outputs
    return [json.loads((tmp_path / f"{mode}_{p}.json").read_text()) for p in range(2)]


def test_two_processes_read_their_rows_and_fail_together(tmp_path: pathlib.Path) -> None:
    arrays = shards("float32")
    expected = np.concatenate(arrays)
    source = write("npy", tmp_path / "source", arrays)
    dirs = []
    for p in range(2):  # a copy each (own inodes): what one process deletes the other keeps
        d = tmp_path / f"p{p}"
        shutil.copytree(source, d)
        shardload.index(d)
        dirs.append(str(d))
    r = _two_processes(tmp_path, "multi", {"dirs": dirs}, timeout=120)

    for p in range(2):
        assert r[p]["devices"] == 4 and r[p]["local"] == 2, r[p]
        np.testing.assert_array_equal(np.load(tmp_path / f"gathered_{p}.npy"), expected)
        assert r[p]["sum"] == pytest.approx(float(expected.sum(dtype=np.float64)), rel=1e-5)
        assert r[p]["uneven"]["error"] == "ValueError", r[p]
        assert "191 rows do not split evenly into the 4 pieces" in r[p]["uneven"]["message"]
        # Its own 96 rows of 3 x 4 float32, from "discovered" to "filled", never back.
        progress = r[p]["progress"]
        assert progress[0][0] == "discovered" and progress[-1][0] == "filled"
        assert [b for _, b, _ in progress] == sorted(b for _, b, _ in progress)
        assert progress[-1][1] == 96 * 12 * 4 and {t for *_, t in progress} == {96 * 12 * 4}
    # One bar for the job, on process 0.
    assert "shardload.jax.load" in r[0]["bar"] and "96/96 rows" in r[0]["bar"], r[0]["bar"]
    assert r[1]["bar"] == ""
    # Each process held half the rows, on its two devices, and the shards of the other half
    # were deleted before it loaded: it opened none of them.
    assert r[0]["rows"] == [0, 96] and r[1]["rows"] == [96, 192]
    assert r[0]["shard_rows"] == [[0, 48], [48, 96]]
    assert r[1]["shard_rows"] == [[96, 144], [144, 192]]
    assert r[0]["kept"] == ["shard_00.npy", "shard_02.npy", "shard_03.npy", "shard_05.npy"]
    assert r[1]["kept"] == ["shard_05.npy", "shard_06.npy"]

    # A shard gone on process 1 after discovery: process 1 raises its own error, naming the
    # file; process 0, whose rows were whole, raises the same type naming process 1 and the
    # file, at once rather than at its timeout.
    gone = r[1]["gone"]
    for p in range(2):
        fault = r[p]["fault"]
        assert fault is not None and fault["error"] == "ShardReadError", (p, fault)
        assert gone in fault["message"] and fault["filename"] == gone, (p, fault)
        assert r[p]["fault_s"] < 30, r[p]
    assert "process 1 failed (ShardReadError)" in r[0]["fault"]["message"]
    # The engine counts tile rows within the range read: the message says which range.
    assert r[1]["fault"]["message"].startswith(
        "process 1, reading the array's rows [144, 192) (tile rows count from 144): ")
    # Process 1 never calls the next load: process 0 gives up after its timeout of 1 s.
    assert r[0]["alone"]["error"] == "TimeoutError", r[0]["alone"]
    assert "process(es) [1] did not report" in r[0]["alone"]["message"]
    assert 1.0 <= r[0]["alone_s"] < 10, r[0]["alone_s"]


def test_processes_that_found_different_datasets_raise_a_layout_error(
        tmp_path: pathlib.Path) -> None:
    """Two processes load one path, node-local storage whose copies differ (here a directory
    of each process's own): before, both returned one global array, of two datasets' rows, and
    with a shard more on one they disagreed on its shape. Now every process raises a
    LayoutError naming the first difference; copies that agree load as before."""
    rows = np.arange(96, dtype=np.int32).reshape(48, 2)
    cases = {}
    for name, splits in {"more": ([8, 8], [8, 8, 8]), "split": ([8, 8], [6, 10]),
                         "same": ([16, 32], [16, 32])}.items():
        dirs = []
        for p, split in enumerate(splits):
            d = tmp_path / name / f"p{p}"
            d.mkdir(parents=True)
            edges = np.cumsum([0] + split)
            for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
                np.save(d / f"shard_{i:04d}.npy", rows[lo:hi])
            dirs.append(str(d))
        cases[name] = dirs
    r = _two_processes(tmp_path, "differ", {"cases": cases}, timeout=180)
    for p in range(2):
        for name in ("more", "split"):
            got = r[p][name]
            assert got.get("error") == "LayoutError", (p, name, got)
            assert (f"processes {p} and {1 - p} found different datasets"
                    in got["message"]), got
        assert (f"process {p} found {2 + p} shards, an array of ({16 + 8 * p}, 2), process "
                f"{1 - p} {3 - p} shards, ({24 - 8 * p}, 2)" in r[p]["more"]["message"]), r[p]
        assert (f"shard 0 ({cases['split'][p]}/shard_0000.npy here) has "
                f"{[8, 6][p]} rows" in r[p]["split"]["message"]), r[p]["split"]
        assert r[p]["same"] == {"shape": [48, 2]}, r[p]["same"]


def test_import_shardload_does_not_import_jax() -> None:
    code = ("import sys, shardload, shardload.numpy, shardload.jax; "
            "assert 'jax' not in sys.modules, 'jax imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, cwd=HERE)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("change", ["rewritten, same size", "bytes changed, mtime kept",
                                    "deleted", "truncated", "replaced by a longer one"])
def test_a_shard_changed_between_discovery_and_the_load_is_an_error_naming_it(tmp_path,
                                                                               change):
    """A fifth hostile pass: shardload.jax.load of a Layout whose shard changed after
    discovery raises ShardReadError naming the shard, never the other bytes."""
    code = f"""
import os, numpy as np, shardload, shardload.jax as sj
d = {str(tmp_path)!r}
np.save(d + "/shard_0000.npy", np.arange(100.0)); np.save(d + "/shard_0001.npy", np.arange(100.0, 200.0))
layout = shardload.discover(d)
p = d + "/shard_0001.npy"
st = os.stat(p)
change = {change!r}
if change == "rewritten, same size":
    np.save(d + "/t.npy", np.full(100, -1.0)); os.replace(d + "/t.npy", p)
elif change == "bytes changed, mtime kept":
    with open(p, "r+b") as f:
        f.seek(200); f.write(np.full(10, -1.0).tobytes())
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
elif change == "deleted":
    os.unlink(p)
elif change == "truncated":
    os.truncate(p, 500)
else:
    np.save(p, np.arange(300.0))
try:
    np.asarray(sj.load(layout))
except shardload.ShardReadError as e:
    assert p in str(e), str(e)
    print("refused")
"""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=HERE, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("refused"), r.stdout[-2000:]


def test_progress_reports_this_processs_rows_and_a_raising_callback_stops_the_load(tmp_path):
    """progress= on one process of 2 devices: the default sharding reads two row ranges in
    turn, reported as one count (monotonic, ending at the bytes read, nothing after
    "filled"); a replicated sharding reads its rows once and reports them once; a callback
    that raises stops the load with its exception; True draws one bar on stderr."""
    arrays = shards("float32")
    expected = np.concatenate(arrays)
    d = write("npy", tmp_path / "d", arrays)
    code = f"""
import json, sys, time
import numpy as np, jax, shardload.jax as sj
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def run(**kwargs):
    seen = []
    x = sj.load({str(d)!r}, progress=lambda p: seen.append(p), threads=2, overdecompose=3,
                **kwargs)
    n = len(seen)
    time.sleep(0.2)
    assert len(seen) == n, "a report after the load returned"
    return x, [[p.stage, p.tiles_done, p.tiles, p.bytes_done, p.bytes] for p in seen]

x, default = run()
np.save({str(tmp_path / "x.npy")!r}, np.asarray(x))
rep = NamedSharding(Mesh(np.array(jax.devices()), ("rows",)), P())
_, replicated = run(sharding=rep)

class Stop(Exception):
    pass

calls = []
def stop(p):
    calls.append(p.stage)
    if calls.count("filling") == 2:
        raise Stop("enough")
try:
    sj.load({str(d)!r}, progress=stop, threads=2, overdecompose=3)
    stopped = None
except Stop as e:
    stopped = str(e)
after = len(calls)
time.sleep(0.2)
sys.stderr.write("BAR:")
sj.load({str(d)!r}, progress=True)
print(json.dumps({{"default": default, "replicated": replicated, "stopped": stopped,
                  "calls": calls, "quiet_after_stop": after == len(calls)}}))
"""
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=HERE, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), expected)
    for name in ("default", "replicated"):
        reports = got[name]
        stages = [s for s, *_ in reports]
        assert stages[0] == "discovered" and stages[-1] == "filled", stages
        assert set(stages[1:-1]) == {"filling"} and stages.count("filled") == 1
        done = [b for _, _, _, b, _ in reports]
        assert done == sorted(done) and done[0] == 0
        # Every report counts all this process reads: its 192 rows, each row once.
        assert {total for *_, total in reports} == {expected.nbytes}
        assert done[-1] == expected.nbytes
        tiles_done = [t for _, t, _, _, _ in reports[1:-1]]
        assert tiles_done == list(range(1, len(tiles_done) + 1))
        assert reports[-1][1] == reports[-1][2] == len(tiles_done)
    # Two ranges read in turn: the tiles are known once the last range is planned.
    assert any(t is None for _, _, t, _, _ in got["default"][1:-1])
    assert got["stopped"] == "enough" and got["calls"][-1] == "filling"
    assert got["quiet_after_stop"] and "filled" not in got["calls"]
    bar = r.stderr.split("BAR:", 1)[1]
    assert "shardload.jax.load" in bar and "100%" in bar and "192/192 rows" in bar, bar
