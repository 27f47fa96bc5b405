"""Discovery tells a dataset's format the same way whatever store holds it: shards named without
an extension (so their first bytes decide), Zarr arrays in directories not named .zarr (so their
metadata keys decide), and raw shards beside their sidecar, on a local directory, an s3:// bucket
(moto, its options given as storage_options), an http(s):// server and a store driver registered
under a scheme. numpy, h5py, pyarrow and zarr write the data and are the oracles."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import numpy as np
import pytest

import shardload.numpy

h5py = pytest.importorskip("h5py")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
ipc = pytest.importorskip("pyarrow.ipc")
zarr = pytest.importorskip("zarr")

SCHEME = b"sniffmem"
SHARDS = ("shard_0000", "shard_0001")


def _columns(table) -> np.ndarray:
    return np.stack([table.column(i).to_numpy() for i in range(table.num_columns)], axis=1)


def write_datasets(root: pathlib.Path) -> dict[str, tuple[np.ndarray, dict]]:
    """Each format's dataset under root/<name>/ (shards with no extension), with the array the
    oracle reads back from the files written and the options a load needs beyond the source."""
    rng = np.random.default_rng(42)
    out: dict[str, tuple[np.ndarray, dict]] = {}

    d = root / "npy"
    d.mkdir()
    for name, rows in zip(SHARDS, (7, 12)):
        with open(d / name, "wb") as f:
            np.save(f, rng.standard_normal((rows, 3)).astype(np.float32))
    out["npy"] = (np.concatenate([np.load(d / n) for n in SHARDS]), {})

    d = root / "npz"
    d.mkdir()
    for name, rows in zip(SHARDS, (5, 9)):
        with open(d / name, "wb") as f:
            np.savez(f, rng.integers(-1000, 1000, size=(rows, 2)).astype(np.int32))
    out["npz"] = (np.concatenate([np.load(d / n)["arr_0"] for n in SHARDS]), {})

    d = root / "hdf5"
    d.mkdir()
    for name, rows in zip(SHARDS, (11, 6)):
        with h5py.File(d / name, "w") as f:
            f.create_dataset("data", data=rng.standard_normal((rows, 4)), chunks=(4, 4),
                             compression="gzip")
    parts = []
    for name in SHARDS:
        with h5py.File(d / name, "r") as f:
            parts.append(f["data"][...])
    out["hdf5"] = (np.concatenate(parts), {})

    for fmt in ("parquet", "arrow"):
        d = root / fmt
        d.mkdir()
        for name, rows in zip(SHARDS, (13, 8)):
            t = pa.table({f"c{c}": rng.standard_normal(rows) for c in range(3)})
            if fmt == "parquet":
                pq.write_table(t, d / name, row_group_size=5)
            else:
                with ipc.new_file(d / name, t.schema) as w:
                    w.write_table(t, max_chunksize=4)
        if fmt == "parquet":
            parts = [_columns(pq.read_table(d / n)) for n in SHARDS]
        else:
            parts = [_columns(ipc.open_file(d / n).read_all()) for n in SHARDS]
        out[fmt] = (np.concatenate(parts), {})

    for version in (2, 3):
        name = f"zarr{version}"
        z = zarr.create_array(store=str(root / name), shape=(23, 3), chunks=(5, 3),
                              dtype="int16", zarr_format=version)
        z[:] = rng.integers(-3000, 3000, size=(23, 3)).astype(np.int16)
        out[name] = (zarr.open_array(str(root / name), mode="r")[...], {})

    # raw has no magic to sniff: its format is named, its dtype and shape are its sidecar's.
    d = root / "raw"
    d.mkdir()
    for name, rows in zip(SHARDS, (4, 10)):
        rng.integers(-(2**31), 2**31 - 1, size=(rows, 3), dtype=np.int64).astype("<i4").tofile(
            d / name)
    (d / "shardload.json").write_text(json.dumps({"dtype": "<i4", "shape": [3]}))
    out["raw"] = (np.concatenate([np.fromfile(d / n, dtype="<i4").reshape(-1, 3)
                                  for n in SHARDS]), {"format": "raw"})
    return out


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> tuple[pathlib.Path, dict]:
    root = tmp_path_factory.mktemp("sniff")
    return root, write_datasets(root)


def _files(root: pathlib.Path) -> Iterator[tuple[str, bytes]]:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            yield p.relative_to(root).as_posix(), p.read_bytes()


@pytest.fixture(scope="module")
def s3_store(server, datasets):
    import s3_server

    root, _ = datasets
    bucket = s3_server.Bucket(server)
    for key, data in _files(root):
        bucket.put("ds/" + key, data)
    return lambda key: bucket.url("ds/" + key), {"storage_options": bucket.options}


@pytest.fixture(scope="module")
def http_store(datasets):
    from test_http import serving

    root, _ = datasets
    with serving() as (web, base):
        for key, data in _files(root):
            web.put("/ds/" + key, data)
        yield lambda key: f"{base}/ds/{key}", {}


@pytest.fixture(scope="module")
def scheme_store(datasets):
    from test_store_schemes import memory_store_library

    lib = memory_store_library()
    assert lib.shardload_test_memory_register(SCHEME, 0) == 1
    root, _ = datasets
    for key, data in _files(root):
        assert lib.shardload_test_memory_write(SCHEME, ("ds/" + key).encode(), data,
                                               len(data)) == 1
    yield lambda key: f"{SCHEME.decode()}://bucket/ds/{key}", {}
    lib.shardload_test_memory_unregister(SCHEME)


@pytest.fixture(params=["local", "s3", "http", "scheme"])
def store(request, datasets):
    """(kind, url of a key under the store's copy of the datasets, load options it needs)."""
    kind = request.param
    if kind == "local":
        root, _ = datasets
        return kind, lambda key: str(root / key) + ("/" if key.endswith("/") else ""), {}
    url, options = request.getfixturevalue(
        {"s3": "s3_store", "http": "http_store", "scheme": "scheme_store"}[kind])
    return kind, url, options


FILE_FORMATS = ["npy", "npz", "hdf5", "parquet", "arrow", "raw"]


@pytest.mark.parametrize("fmt", FILE_FORMATS)
def test_shards_without_an_extension_are_sniffed_through_any_store(store, datasets, fmt) -> None:
    kind, url, options = store
    _, expected = datasets
    want, extra = expected[fmt]
    sources: list = [[url(f"{fmt}/{n}") for n in SHARDS]]
    if kind != "http":  # HTTP has no listing: its objects are named one by one
        sources += [url(f"{fmt}/shard_*")]
        if fmt != "raw":  # a named format takes a directory's default naming (.bin for raw)
            sources += [url(f"{fmt}/")]
    for source in sources:
        got = shardload.numpy.load(source, threads=2, **options, **extra)
        np.testing.assert_array_equal(got, want, err_msg=f"{kind} {source}")
    first = shardload.numpy.load(url(f"{fmt}/{SHARDS[0]}"), **options, **extra)
    np.testing.assert_array_equal(first, want[:len(first)], err_msg=f"{kind} {fmt} one shard")


@pytest.mark.parametrize("fmt", ["zarr2", "zarr3"])
def test_a_zarr_array_not_named_zarr_is_found_through_any_store(store, datasets, fmt) -> None:
    kind, url, options = store
    _, expected = datasets
    want, _ = expected[fmt]
    for source in (url(fmt), url(fmt + "/")):
        got = shardload.numpy.load(source, threads=2, **options)
        np.testing.assert_array_equal(got, want, err_msg=f"{kind} {source}")
        layout = shardload.discover(source, **options)
        assert layout.format == "zarr", (kind, source, layout.format)
