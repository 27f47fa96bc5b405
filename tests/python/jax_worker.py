"""One JAX process of test_jax.py (and bench/bench_jax.py's peers): JAX needs its device count
before it is imported, so each configuration runs in a process of its own.

    python jax_worker.py single SPEC.json      # one process, SPEC["devices"] CPU devices
    python jax_worker.py multi SPEC.json ID    # process ID of SPEC["processes"]
    python jax_worker.py differ SPEC.json ID   # each process loads its own copy, which differ

Results go to SPEC["out"] as .npy arrays and one JSON record per case; the test compares them
with numpy.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import sys
import time
import traceback


def _start(spec: dict, process_id: int | None = None):
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={spec['devices']}"
    import jax

    if process_id is not None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{spec['port']}",
                                   num_processes=spec["processes"], process_id=process_id,
                                   initialization_timeout=30)
    return jax


def _sharding(jax, name: str):
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = np.array(jax.devices())
    if name == "default":
        return None
    if name == "reversed":  # rows in the other device order
        return NamedSharding(Mesh(devices[::-1], ("rows",)), P("rows"))
    if name == "replicated":
        return NamedSharding(Mesh(devices, ("rows",)), P())
    if name == "rows_and_trailing":  # axis 0 over one mesh axis, the last axis over the other
        return NamedSharding(Mesh(devices.reshape(1, -1), ("a", "b")), P("a", None, "b"))
    if name == "trailing_only":  # every device holds every row, half of the last axis
        return NamedSharding(Mesh(devices, ("b",)), P(None, None, "b"))
    if name == "more_axes_than_dims":  # a spec of 4 entries for a 3-D array
        return NamedSharding(Mesh(devices, ("b",)), P(None, None, None, "b"))
    raise ValueError(name)


def _error(e: BaseException) -> dict:
    return {"error": type(e).__name__, "message": str(e),
            "filename": getattr(e, "filename", None)}


def single(spec: dict) -> None:
    jax = _start(spec)
    import numpy as np

    import shardload.jax as sj

    out = pathlib.Path(spec["out"])
    records = {}
    for case in spec["cases"]:
        kwargs = dict(case.get("kwargs", {}))
        if "row_range" in kwargs:
            kwargs["row_range"] = tuple(kwargs["row_range"])
        source = case["source"]
        if case.get("layout"):  # a pickled Layout, discovered before the test changed a file
            import pickle

            source = pickle.loads(pathlib.Path(source).read_bytes())
        sharding = (kwargs.pop("sharding") if "sharding" in kwargs
                    else _sharding(jax, case.get("sharding", "default")))
        try:
            x = sj.load(source, sharding=sharding, **kwargs)
        except Exception as e:
            records[case["name"]] = _error(e)
            continue
        info = None
        if isinstance(x, tuple):  # info=True
            x, info = x
            info = {"total_rows": info.total_rows, "bytes": info.bytes, "tiles": info.tiles,
                    "target": info.target}
        full = np.asarray(x)
        np.save(out / f"{case['name']}.npy", full)
        records[case["name"]] = {
            "info": info,
            "dtype": str(x.dtype),
            "shards": [[s.device.id, repr(s.index)] for s in x.addressable_shards],
            "shards_equal": all(np.array_equal(np.asarray(s.data), full[s.index])
                                for s in x.addressable_shards),
            "sharding_kept": x.sharding == (sj.default_sharding() if case.get("sharding",
                                            "default") == "default"
                                            else _sharding(jax, case["sharding"])),
        }
    (out / "records.json").write_text(json.dumps(records))


def multi(spec: dict, me: int) -> None:
    """Each process discovers its own copy of the dataset, deletes the shards outside its rows
    (opening one would fail, naming it), loads, and checks the whole through an all-gather;
    then a shard of its rows gone on process 1 only, and process 1 not calling at all."""
    jax = _start(spec, me)
    import numpy as np
    from jax.experimental import multihost_utils

    import shardload
    import shardload.jax as sj

    out = pathlib.Path(spec["out"])
    mine = pathlib.Path(spec["dirs"][me])
    record: dict = {"devices": len(jax.devices()), "local": len(jax.local_devices())}

    layout = shardload.discover(mine)  # from the manifest: opens no shard
    rows = [(ix[0].indices(layout.total_rows)) for ix in
            sj.default_sharding().addressable_devices_indices_map(layout.shape).values()]
    lo, hi = min(r[0] for r in rows), max(r[1] for r in rows)
    kept = []
    for path, start, count in zip(layout.paths, layout.offsets, layout.shard_rows):
        if count and start < hi and start + count > lo:
            kept.append(pathlib.Path(path).name)
        else:
            os.unlink(path)
    record["rows"] = [lo, hi]
    record["kept"] = kept

    x = sj.load(layout)
    record["dtype"] = str(x.dtype)
    record["shard_rows"] = sorted(s.index[0].indices(x.shape[0])[:2]
                                  for s in x.addressable_shards)
    np.save(out / f"gathered_{me}.npy", multihost_utils.process_allgather(x, tiled=True))
    record["sum"] = float(jax.numpy.sum(x))

    # progress=: each process reports its own reads; True draws one bar, on process 0.
    reports: list = []
    sj.load(layout, progress=reports.append)
    record["progress"] = [[p.stage, p.bytes_done, p.bytes] for p in reports]
    bar = io.StringIO()
    with contextlib.redirect_stderr(bar):
        sj.load(layout, progress=True)
    record["bar"] = bar.getvalue()

    try:  # a row count the 4 devices do not divide: refused alike on both, before reading
        sj.load(layout, row_range=(0, layout.total_rows - 1))
    except Exception as e:
        record["uneven"] = _error(e)

    if me == 1:  # one of process 1's shards is gone after discovery, on process 1 only
        gone = pathlib.Path(mine / kept[-1])
        os.unlink(gone)
        record["gone"] = str(gone)
    t = time.monotonic()
    try:
        sj.load(layout)
        record["fault"] = None
    except Exception as e:
        record["fault"] = _error(e)
    record["fault_s"] = time.monotonic() - t

    if me == 0:  # process 1 never calls: process 0 must not wait past its timeout
        t = time.monotonic()
        try:
            sj.load(layout, row_range=(0, hi), sharding=sj.default_sharding(), timeout=1.0)
            record["alone"] = None
        except Exception as e:
            record["alone"] = _error(e)
        record["alone_s"] = time.monotonic() - t
    (out / f"multi_{me}.json").write_text(json.dumps(record))
    jax.distributed.shutdown()


def differ(spec: dict, me: int) -> None:
    """Each case names a directory per process (a node-local path whose copies differ): both
    processes load their own, with the same arguments otherwise."""
    jax = _start(spec, me)
    import shardload.jax as sj

    records = {}
    for name, dirs in spec["cases"].items():
        try:
            x = sj.load(dirs[me], timeout=60)
            records[name] = {"shape": list(x.shape)}
        except Exception as e:
            records[name] = _error(e)
    pathlib.Path(spec["out"], f"differ_{me}.json").write_text(json.dumps(records))
    jax.distributed.shutdown()


if __name__ == "__main__":
    try:
        spec = json.loads(pathlib.Path(sys.argv[2]).read_text())
        if sys.argv[1] == "single":
            single(spec)
        elif sys.argv[1] == "differ":
            differ(spec, int(sys.argv[3]))
        else:
            multi(spec, int(sys.argv[3]))
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
