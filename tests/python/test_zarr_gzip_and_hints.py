"""Zarr gzip chunks of several members, and the arrays an error names, against zarr-python.

A gzip stream is a series of members (RFC 1952, 2.2), which numcodecs (Python's gzip) reads
one after another, skipping zero padding between and after them; the chunk is what they
decode to together. And when what was named is no array, the error names the store's arrays
as dataset= takes them: nested ones by their path, never a group.
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import warnings

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs as zc

import shardload

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

A = np.arange(40, dtype="<i4").reshape(20, 2)


def gzip_store(root: pathlib.Path, fmt: int) -> pathlib.Path:
    """A store of A in chunks of 10 rows, gzip-compressed by zarr-python; returns the path of
    its first chunk."""
    store = root / "shard_0000.zarr"
    if fmt == 2:
        z = zarr.create_array(store, shape=A.shape, chunks=(10, 2), dtype=A.dtype, zarr_format=2,
                              compressors=numcodecs.GZip(level=1), fill_value=0)
    else:
        z = zarr.create_array(store, shape=A.shape, chunks=(10, 2), dtype=A.dtype, zarr_format=3,
                              compressors=zc.GzipCodec(level=1), fill_value=0)
    z[...] = A
    return store / ("0.0" if fmt == 2 else "c/0/0")


def oracle(store: pathlib.Path) -> np.ndarray | None:
    """What zarr-python reads, or None where it refuses the store."""
    try:
        return zarr.open_array(store, mode="r")[...]
    except Exception:  # noqa: BLE001 - any refusal is the oracle's answer
        return None


first, second = A[:5].tobytes(), A[5:10].tobytes()
VALID = {
    "two members": gzip.compress(first) + gzip.compress(second),
    "one member then zero padding": gzip.compress(first + second) + bytes(8),
    "zero padding between members": gzip.compress(first) + bytes(3) + gzip.compress(second),
    "an empty member first": gzip.compress(b"") + gzip.compress(first + second),
    "one member per row": b"".join(gzip.compress(A[r].tobytes()) for r in range(10)),
}
INVALID = {
    # (chunk bytes, what the message says after "gzip: corrupt chunk (")
    "junk after a member": (gzip.compress(first + second) + b"junk",
                            r"4 bytes after the last gzip member that are neither another "
                            r"member nor zero padding\)"),
    "junk after zero padding": (gzip.compress(first + second) + b"\0\0x",
                                r"1 bytes after the last gzip member"),
    "half a magic number": (gzip.compress(first + second) + b"\x1f",
                            r"1 bytes after the last gzip member"),
    "second member's CRC wrong": (gzip.compress(first) + gzip.compress(second)[:-8] +
                                  (0).to_bytes(4, "little") + len(second).to_bytes(4, "little"),
                                  r"incorrect data check in gzip member 2\)"),
    "second member cut short": (gzip.compress(first) + gzip.compress(second)[:-3],
                                r"the stream ends early in gzip member 2\)"),
    "members decode to more": (gzip.compress(first + second) + gzip.compress(b"\0"),
                               r"decodes to more than the 80 bytes expected\)"),
    "members decode to less": (gzip.compress(first) + gzip.compress(second[:-4]),
                               r"decodes to 76 bytes, expected 80\)"),
}


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("case", list(VALID))
def test_gzip_chunks_of_several_members_read_as_zarr_python_reads_them(
        tmp_path: pathlib.Path, fmt: int, case: str) -> None:
    chunk = gzip_store(tmp_path, fmt)
    chunk.write_bytes(VALID[case])
    expected = oracle(chunk.parents[0 if fmt == 2 else 2])
    assert expected is not None
    np.testing.assert_array_equal(expected, A)
    layout = shardload.discover(tmp_path, format="zarr")
    np.testing.assert_array_equal(layout.read(), expected)
    np.testing.assert_array_equal(layout.read(3, 12), expected[3:12])


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("case", list(INVALID))
def test_gzip_chunks_that_are_no_series_of_members_are_refused_as_zarr_python_refuses_them(
        tmp_path: pathlib.Path, fmt: int, case: str) -> None:
    chunk = gzip_store(tmp_path, fmt)
    data, why = INVALID[case]
    chunk.write_bytes(data)
    assert oracle(chunk.parents[0 if fmt == 2 else 2]) is None
    layout = shardload.discover(tmp_path, format="zarr")
    with pytest.raises(shardload.ShardReadError,
                       match=str(chunk).replace(".", r"\.") + r": gzip: corrupt chunk \(" + why):
        layout.read(0, 10)
    np.testing.assert_array_equal(layout.read(10, 20), A[10:])  # the other chunk still reads


# ---- the arrays a store holds, as an error names them ------------------------------------


def nested_store(path: pathlib.Path, fmt: int) -> None:
    g = zarr.open_group(path, mode="w", zarr_format=fmt)
    grp = g.create_group("grp")
    grp.create_array("inner", shape=(4,), dtype="u1", chunks=(2,))
    grp.create_group("deeper").create_array("x2", shape=(4,), dtype="u1", chunks=(2,))
    g.create_group("emptygrp")
    g.create_array("b", shape=(4,), dtype="u1", chunks=(2,))
    os.makedirs(path / "plain_dir")


def listed_arrays(message: str) -> list[str]:
    tail = message.split("arrays in the store: ")[1]
    return tail.split("; name one with")[0].split(", ")


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("dataset", [None, "grp", "emptygrp", "missing"])
def test_the_arrays_named_are_the_stores_arrays_nested_ones_by_path_and_no_group(
        tmp_path: pathlib.Path, fmt: int, dataset: str | None) -> None:
    store = tmp_path / "shard_0000.zarr"
    nested_store(store, fmt)
    arrays = []
    store_group = zarr.open_group(store, mode="r")
    for name, _ in store_group.arrays():
        arrays.append(name)
    for name, group in store_group.groups():
        arrays += [f"{name}/{a}" for a, _ in group.arrays()]
        for sub, deeper in group.groups():
            arrays += [f"{name}/{sub}/{a}" for a, _ in deeper.arrays()]
    assert sorted(arrays) == ["b", "grp/deeper/x2", "grp/inner"]
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover([store], format="zarr",
                           **({} if dataset is None else {"dataset": dataset}))
    assert listed_arrays(str(e.value)) == sorted(arrays), str(e.value)
    # Each one named is one that loads.
    for name in arrays:
        got = shardload.discover([store], format="zarr", dataset=name).read()
        np.testing.assert_array_equal(got, zarr.open_array(store, path=name, mode="r")[...])


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_store_of_many_arrays_names_ten_in_natural_order_and_counts_the_rest(
        tmp_path: pathlib.Path, fmt: int) -> None:
    store = tmp_path / "shard_0000.zarr"
    g = zarr.open_group(store, mode="w", zarr_format=fmt)
    for i in range(500):
        g.create_array(f"a{i}", shape=(2,), dtype="u1", chunks=(2,))
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover([store], format="zarr")
    names = ", ".join(f"a{i}" for i in range(10))
    assert f"arrays in the store: {names}, ... and 490 more" in str(e.value), str(e.value)
    assert len(str(e.value)) < 600


def test_a_v3_zarr_json_that_cannot_be_read_is_not_named_and_a_fifo_is_not_waited_on(
        tmp_path: pathlib.Path) -> None:
    store = tmp_path / "shard_0000.zarr"
    g = zarr.open_group(store, mode="w", zarr_format=3)
    g.create_array("ok", shape=(2,), dtype="u1", chunks=(2,))
    (store / "fifo").mkdir()
    os.mkfifo(store / "fifo" / "zarr.json")
    (store / "damaged").mkdir()
    (store / "damaged" / "zarr.json").write_text("{not json")
    (store / "no_type").mkdir()
    (store / "no_type" / "zarr.json").write_text(json.dumps({"zarr_format": 3}))
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover([store], format="zarr")
    assert listed_arrays(str(e.value)) == ["ok"], str(e.value)
