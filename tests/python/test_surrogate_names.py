"""A name option whose name is not UTF-8: os.listdir and os.fsdecode give it as a str holding
lone surrogates ('x\\udcff' for the bytes b'x\\xff'). dataset= (an HDF5 dataset, a Zarr
array's directory: bytes on disk) and columns= are encoded with os.fsencode, as paths are, so
the array loads as the command line's --dataset reads it; the other str options (format=,
dtype=, astype=, storage_options=) are no names on disk and are refused naming the option.
Before: pybind11's RuntimeError "Unable to cast Python instance of type <class 'str'> to C++
type '?'" for each of them."""

from __future__ import annotations

import os
import pathlib
import pickle
import re
import subprocess

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shardload
import shardload.numpy as sn
from conftest import BUILD

NAME = b"x\xff"  # an array's name that is not UTF-8


def _zarr_store(path: pathlib.Path, zarr_format: int, data: np.ndarray) -> str:
    """A Zarr group at ``path`` holding ``data`` in an array whose directory is named NAME (the
    bytes; zarr-python writes names as str, so the array is renamed after). Returns the name as
    os.listdir gives it."""
    import zarr

    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    group.create_array("tmp", shape=data.shape, chunks=(3, data.shape[1]),
                       dtype=data.dtype)[...] = data
    os.rename(os.fsencode(path / "tmp"), os.fsencode(path) + b"/" + NAME)
    [name] = [n for n in os.listdir(path) if n != "tmp" and not n.startswith((".", "zarr"))]
    assert name == "x\udcff"
    return name


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_zarr_array_whose_directory_is_not_utf8_loads_by_its_listdir_name(
        tmp_path: pathlib.Path, zarr_format: int) -> None:
    import zarr

    data = np.arange(40, dtype="<i4").reshape(10, 4) * 7 - 3
    store = tmp_path / "s.zarr"
    name = _zarr_store(store, zarr_format, data)
    # The oracle: zarr-python's own read of the array's directory, and what was written.
    expected = zarr.open_array(os.path.join(store, name), mode="r")[...]
    np.testing.assert_array_equal(expected, data)
    # A Zarr v3 group is a store by its zarr.json; a v2 group is given as a list of one store.
    source: object = store if zarr_format == 3 else [store]
    layout = shardload.discover(source, format="zarr", dataset=name)
    assert layout.shape == data.shape
    np.testing.assert_array_equal(layout.read(), expected)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(layout)).read(), expected)
    np.testing.assert_array_equal(sn.load(source, dataset=name), expected)
    np.testing.assert_array_equal(sn.load(source, dataset=name, row_range=(2, 9)), expected[2:9])
    batches = list(shardload.batches(source, 4, dataset=name))
    np.testing.assert_array_equal(np.concatenate([np.asarray(b) for b in batches]), expected)
    if zarr_format == 2:
        return
    # The same array as the command line reads it with --dataset and the bytes.
    cli = subprocess.run([str(BUILD / "shardload"), "inspect", os.fsencode(store), "--dataset",
                          NAME], capture_output=True)
    assert cli.returncode == 0, cli.stderr
    assert re.search(rb"shape:\s+\(10, 4\)", cli.stdout), cli.stdout


def test_an_hdf5_dataset_whose_name_is_not_utf8_loads_equal_to_h5py(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "h5"
    d.mkdir()
    for i in range(3):
        with h5py.File(d / f"shard_{i:04d}.h5", "w") as f:
            # h5py takes bytes names: a group and a dataset whose names are not UTF-8.
            f.create_group(b"g\xfe").create_dataset(
                NAME, data=np.arange(i + 2, dtype="<f8")[:, None] * [1.0, -1.0] + 10 * i)
            f["other"] = np.zeros((1, 2))
    expected = []
    for i in range(3):
        with h5py.File(d / f"shard_{i:04d}.h5", "r") as f:
            expected.append(f[b"g\xfe/" + NAME][()])
    want = np.concatenate(expected)
    name = os.fsdecode(b"g\xfe/" + NAME)
    assert name == "g\udcfe/x\udcff"
    layout = shardload.discover(d, dataset=name)
    np.testing.assert_array_equal(layout.read(), want)
    np.testing.assert_array_equal(sn.load(d, dataset=name), want)
    np.testing.assert_array_equal(sn.load(d / "shard_0001.h5", dataset=name), expected[1])
    # A manifest keeps the name's bytes: a later discovery through it finds the same array.
    shardload.index(d, dataset=name)
    again = shardload.discover(d, dataset=name)
    assert again.manifest_status.startswith("manifest: used"), again.manifest_status
    np.testing.assert_array_equal(again.read(), want)
    # A name that is in no shard is the reader's error naming it with its bytes escaped.
    with pytest.raises(shardload.LayoutError, match=r"x\\xfe"):
        shardload.discover(d, dataset="g\udcfe/x\udcfe")


def test_legate_load_takes_a_name_that_is_not_utf8(tmp_path: pathlib.Path) -> None:
    import cupynumeric  # noqa: F401  a pinned dependency: its absence must fail, not skip

    data = np.arange(30, dtype="<f4").reshape(10, 3)
    store = tmp_path / "s.zarr"
    name = _zarr_store(store, 3, data)
    np.testing.assert_array_equal(np.asarray(shardload.load(store, dataset=name)), data)


def test_a_lone_surrogate_that_names_no_bytes_is_refused_naming_the_option(
        tmp_path: pathlib.Path) -> None:
    """'\\ud800' is no os.fsdecode spelling of a byte: there is no name on disk it could be."""
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["x"] = np.zeros((2, 2))
    pq.write_table(pa.table({"a": [1.0, 2.0]}), tmp_path / "c.parquet")
    with pytest.raises(ValueError, match=r"^dataset: '\\ud800' names no bytes"):
        shardload.discover(tmp_path / "a.h5", dataset="\ud800")
    with pytest.raises(ValueError, match=r"^columns\[1\]: 'b\\ud800' names no bytes"):
        sn.load(tmp_path / "c.parquet", columns=["a", "b\ud800"])


def test_a_column_name_that_is_not_utf8_is_looked_up_as_its_bytes(tmp_path: pathlib.Path) -> None:
    pq.write_table(pa.table({"a": [1.0, 2.0], "b": [3.0, 4.0]}), tmp_path / "c.parquet")
    with pytest.raises(shardload.LayoutError,
                       match=r"c\.parquet: column 'a\\xff' not found \(columns: a: double, "):
        shardload.discover(tmp_path / "c.parquet", columns=["b", "a\udcff"])


@pytest.mark.parametrize("where", ["discover", "numpy.load", "batches"])
@pytest.mark.parametrize("option, value, message", [
    ("format", "npy\udcff", r"^format: 'npy\\udcff' is not UTF-8 text \(it holds '\\udcff', a "
                           r"lone surrogate such as os.fsdecode makes of a byte that is not "
                           r"UTF-8\); no format's name holds one$"),
    ("dtype", "float32\udcff", r"^dtype: 'float32\\udcff' is not UTF-8 text .*; no dtype's name "
                               r"holds one$"),
    ("astype", "f\udcff", r"^astype: 'f\\udcff' is not a numpy dtype$"),
], ids=["format", "dtype", "astype"])
def test_an_option_that_is_no_name_on_disk_is_refused_naming_it(
        tmp_path: pathlib.Path, where: str, option: str, value: str, message: str) -> None:
    np.save(tmp_path / "shard_0000.npy", np.zeros((3, 2)))
    kw: dict[str, object] = {option: value}
    if option == "dtype":
        kw.update(format="raw", trailing_shape=())
    if where == "discover" and option == "astype":
        kw["format"] = "parquet"  # discover's astype= is for parquet and arrow
    call = {"discover": lambda: shardload.discover(tmp_path, **kw),
            "numpy.load": lambda: sn.load(tmp_path, **kw),
            "batches": lambda: next(iter(shardload.batches(tmp_path, 2, **kw)))}[where]
    with pytest.raises(ValueError, match=message) as e:
        call()
    assert not isinstance(e.value, UnicodeError)


def test_a_storage_option_that_is_not_utf8_is_refused_naming_it_and_a_secret_unshown() -> None:
    with pytest.raises(ValueError, match=r"^storage_options\['region'\]: the value 'eu\\udcff' "
                                         r"is not UTF-8 text .*; a URL's query is UTF-8$"):
        shardload.discover("s3://b/d/", storage_options={"region": "eu\udcff"})
    with pytest.raises(ValueError, match=r"^storage_options: the key 'regi\\udcffon' is not "):
        shardload.discover("s3://b/d/", storage_options={"regi\udcffon": "eu"})
    with pytest.raises(ValueError,
                       match=r"^storage_options\['max_attempts'\]: the value '3\\udcff'"):
        shardload.discover("http://127.0.0.1:9/d/", storage_options={"max_attempts": "3\udcff"})
    with pytest.raises(ValueError) as e:
        shardload.discover("s3://b/d/", storage_options={"secret_key": "hunter2\udcff"})
    assert str(e.value).startswith("storage_options['secret_key']: the value (not shown: a "
                                   "secret) is not UTF-8 text"), str(e.value)
    assert "hunter" not in str(e.value) and "udcff" not in str(e.value), str(e.value)
