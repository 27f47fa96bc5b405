"""The raw binary reader against numpy as the oracle (ndarray.tofile)."""

from __future__ import annotations

import json
import os
import pathlib
import re

import numpy as np
import pytest

import shardload
from conftest import DTYPES, assert_bools_normalised, dirty_bools, random_array

ROWS = [13, 0, 5, 29]


def write_raw(directory: pathlib.Path, arrays: list[np.ndarray], *, header: bytes = b"",
              name: str = "shard_{:04d}.bin", sidecar: dict | None = None) -> list[pathlib.Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, a in enumerate(arrays):
        p = directory / name.format(i)
        p.write_bytes(header + np.ascontiguousarray(a).tobytes())
        paths.append(p)
    if sidecar is not None:
        (directory / "shardload.json").write_text(json.dumps(sidecar))
    return paths


def check_ranges(layout, expected):
    n = expected.shape[0]
    assert layout.shape == expected.shape and layout.dtype == expected.dtype
    for lo, hi in [(0, n), (1, n - 1), (n // 2, n // 2 + 1), (n - 3, n), (4, 4)]:
        np.testing.assert_array_equal(layout.read(lo, hi), expected[lo:hi])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("big", [False, True])
def test_sidecar_every_dtype_both_byte_orders(tmp_path, dtype, big):
    rng = np.random.default_rng(len(dtype))
    arrays = [random_array(rng, (r, 3, 2), dtype) for r in ROWS]
    order = ">" if big else "<"
    stored = [a.astype(a.dtype.newbyteorder(order)) for a in arrays]
    code = np.dtype(dtype).newbyteorder(order).str
    write_raw(tmp_path, stored, sidecar={"dtype": code, "shape": [3, 2]})
    layout = shardload.discover(tmp_path, format="raw")
    assert layout.shard_rows == ROWS
    check_ranges(layout, np.concatenate(arrays))


@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4)])
def test_options_only(tmp_path, shape):
    rng = np.random.default_rng(3)
    arrays = [random_array(rng, (r, *shape), "float32") for r in ROWS]
    write_raw(tmp_path, arrays)
    layout = shardload.discover(tmp_path, format="raw", dtype="float32", trailing_shape=shape)
    check_ranges(layout, np.concatenate(arrays))


def test_extension_selects_raw_and_glob(tmp_path):
    arrays = [np.arange(r * 2, dtype="int64").reshape(r, 2) for r in (3, 4)]
    write_raw(tmp_path, arrays, name="part_{}.dat", sidecar={"dtype": "int64", "shape": [2]})
    layout = shardload.discover(str(tmp_path / "part_*.dat"))
    assert layout.format == "raw"
    check_ranges(layout, np.concatenate(arrays))


def test_header_bytes_and_rows(tmp_path):
    rng = np.random.default_rng(4)
    arrays = [random_array(rng, (r, 5), "uint16") for r in ROWS]
    write_raw(tmp_path, arrays, header=b"H" * 24,
              sidecar={"dtype": "<u2", "shape": [5], "header_bytes": 24, "rows": ROWS})
    check_ranges(shardload.discover(tmp_path, format="raw"), np.concatenate(arrays))
    # The rows may also be keyed by file name, and options may repeat the sidecar.
    (tmp_path / "shardload.json").write_text(json.dumps({
        "dtype": "uint16", "shape": [5], "header_bytes": 24,
        "rows": {f"shard_{i:04d}.bin": r for i, r in enumerate(ROWS)}}))
    layout = shardload.discover(tmp_path, format="raw", dtype="uint16", trailing_shape=(5,),
                                header_bytes=24)
    check_ranges(layout, np.concatenate(arrays))


def test_options_complete_a_partial_sidecar(tmp_path):
    arrays = [np.arange(r * 3, dtype=">f8").reshape(r, 3) for r in (4, 6)]
    write_raw(tmp_path, arrays, sidecar={"dtype": ">f8"})
    layout = shardload.discover(tmp_path, format="raw", trailing_shape=(3,))
    check_ranges(layout, np.concatenate(arrays).astype("float64"))


# ---- errors ------------------------------------------------------------------------------


def test_truncated_file(tmp_path):
    paths = write_raw(tmp_path, [np.zeros((10, 3), "float32")] * 2,
                      sidecar={"dtype": "float32", "shape": [3], "header_bytes": 8},
                      header=b"\0" * 8)
    paths[1].write_bytes(paths[1].read_bytes()[:-5])
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0001\.bin: size: 123 bytes is not header 8 \+ rows of 12 "
                             r"bytes .*: 9 whole rows and 7 bytes left over"):
        shardload.discover(tmp_path, format="raw")


def test_trailing_bytes(tmp_path):
    paths = write_raw(tmp_path, [np.zeros((4, 2), "int32")], sidecar={"dtype": "i4", "shape": [2]})
    with open(paths[0], "ab") as f:
        f.write(b"xyz")
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0000\.bin: size: 35 bytes .* 4 whole rows and 3 bytes left"):
        shardload.discover(tmp_path, format="raw")


def test_file_shorter_than_header(tmp_path):
    write_raw(tmp_path, [np.zeros((0, 2), "int32")], sidecar={"dtype": "i4", "shape": [2],
                                                               "header_bytes": 100})
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0000\.bin: size: 0 bytes is shorter than the header of 100"):
        shardload.discover(tmp_path, format="raw")


@pytest.mark.parametrize("text,message", [
    ('{"dtype": "float32", "shape": [3],', r"not valid JSON"),
    ('[1, 2]', r"expected a JSON object"),
    ('{"dtype": 4, "shape": [3]}', r"dtype: expected a string, found 4"),
    ('{"dtype": "float31", "shape": [3]}', r"dtype: unsupported dtype 'float31'"),
    ('{"dtype": "f4", "shape": [3, -1]}', r"shape\[1\]: expected a non-negative integer"),
    ('{"dtype": "f4", "shape": [3], "header_bytes": 1.5}', r"header_bytes: expected a non-neg"),
    ('{"dtype": "f4", "shape": [3], "rows": "many"}', r"rows: expected a list"),
    ('{"dtype": "f4", "shape": [3], "header_byte": 4}', r"unknown field 'header_byte'"),
    ('{"dtype": "f4", "shape": [3], "shape": [4]}', r"duplicate key 'shape'"),
])
def test_malformed_sidecar(tmp_path, text, message):
    write_raw(tmp_path, [np.zeros((2, 3), "float32")])
    (tmp_path / "shardload.json").write_text(text)
    with pytest.raises(shardload.LayoutError, match=r"shardload\.json: " + message):
        shardload.discover(tmp_path, format="raw")


@pytest.mark.parametrize("trailer", ["\0", "\0\n", "\0{\"dtype\": \"float64\"}", " \0 ", "x",
                                     "\n}"])
def test_a_sidecar_with_bytes_after_its_object_is_refused_naming_it(tmp_path, trailer):
    # The JSON parser ended its input at a NUL: "{...}\0" and whatever followed it was
    # read as the object alone. Only white space may follow the object.
    write_raw(tmp_path, [np.zeros((2, 3), "float32")])
    text = '{"dtype": "float32", "shape": [3]}'
    (tmp_path / "shardload.json").write_text(text + trailer)
    message = (rf"not valid JSON \(a NUL byte at offset {len(text) + trailer.index(chr(0))}\)"
               if "\0" in trailer else "not valid JSON")
    with pytest.raises(shardload.LayoutError,
                       match=re.escape(str(tmp_path / "shardload.json")) + ": " + message):
        shardload.discover(tmp_path, format="raw")
    (tmp_path / "shardload.json").write_text(text + " \n\t\r\n")
    assert shardload.discover(tmp_path, format="raw").shape == (2, 3)


@pytest.mark.parametrize("kwargs,message", [
    ({"dtype": "float64"}, r"dtype: float32 differs from dtype=float64"),
    ({"trailing_shape": (4,)}, r"shape: \(3,\) differs from trailing_shape=\(4,\)"),
    ({"header_bytes": 0}, r"header_bytes: 8 differs from header_bytes=0"),
])
def test_sidecar_disagrees_with_options(tmp_path, kwargs, message):
    write_raw(tmp_path, [np.zeros((2, 3), "float32")], header=b"\0" * 8,
              sidecar={"dtype": "<f4", "shape": [3], "header_bytes": 8})
    with pytest.raises(shardload.LayoutError, match=r"shardload\.json: " + message):
        shardload.discover(tmp_path, format="raw", **kwargs)


def test_sidecar_rows_disagree_with_size(tmp_path):
    write_raw(tmp_path, [np.zeros((2, 3), "float32"), np.zeros((5, 3), "float32")],
              sidecar={"dtype": "f4", "shape": [3], "rows": [2, 4]})
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0001\.bin: rows: .*shardload\.json says 4 rows, but the "
                             r"file's size 60 holds 5"):
        shardload.discover(tmp_path, format="raw")


def test_sidecar_rows_too_short_or_missing_name(tmp_path):
    write_raw(tmp_path, [np.zeros((2, 3), "float32")] * 3,
              sidecar={"dtype": "f4", "shape": [3], "rows": [2, 2]})
    with pytest.raises(shardload.LayoutError, match=r"rows: lists 2 shards, but .*shard_0002\.bin"):
        shardload.discover(tmp_path, format="raw")
    (tmp_path / "shardload.json").write_text(json.dumps(
        {"dtype": "f4", "shape": [3], "rows": {"shard_0000.bin": 2}}))
    with pytest.raises(shardload.LayoutError, match=r"rows: no entry for 'shard_0001\.bin'"):
        shardload.discover(tmp_path, format="raw")


@pytest.mark.parametrize("threads", [1, 8])
def test_sidecar_rows_by_position_on_several_probe_threads(tmp_path, threads):
    # Rows of 0 bytes: only the sidecar's list, by position, says each shard's rows, so each
    # probe must know its shard's position whichever thread's reader probes it.
    rows = [(7 * i) % 11 for i in range(40)]
    write_raw(tmp_path, [np.zeros((r, 0), "float32") for r in rows],
              sidecar={"dtype": "f4", "shape": [0], "rows": rows})
    layout = shardload.discover(tmp_path, format="raw", probe_threads=threads)
    assert list(layout.shard_rows) == rows
    # A wrong entry is reported for its own shard (the first in order when several are).
    write_raw(tmp_path / "w", [np.zeros((r, 2), "float32") for r in rows],
              sidecar={"dtype": "f4", "shape": [2],
                       "rows": [r + (1 if i in (17, 30) else 0) for i, r in enumerate(rows)]})
    with pytest.raises(shardload.LayoutError,
                       match=rf"shard_0017\.bin: rows: .*says {rows[17] + 1} rows"):
        shardload.discover(tmp_path / "w", format="raw", probe_threads=threads)


@pytest.mark.parametrize("threads", [1, 4])
def test_sidecar_rows_count_one_directory_however_it_is_spelled(tmp_path: pathlib.Path,
                                                                threads: int) -> None:
    # "rows" lists the shards of one directory in the source's order: the directory the kernel
    # resolves, so D/a.bin and E/../D/b.bin (or a link to D) are shards 0 and 1 of D.
    d, e = tmp_path / "D", tmp_path / "E"
    e.mkdir()
    a = np.full((2, 2), 1, "<i4")
    b = np.full((5, 2), 2, "<i4")
    d.mkdir()
    a.tofile(d / "a.bin")
    b.tofile(d / "b.bin")
    (d / "shardload.json").write_text(json.dumps({"dtype": "<i4", "shape": [2], "rows": [2, 5]}))
    (tmp_path / "L").symlink_to(d)
    expected = np.concatenate([a, b])
    for other in [f"{e}/../D/b.bin", f"{tmp_path}/L/b.bin", f"{d}/./b.bin"]:
        layout = shardload.discover([str(d / "a.bin"), other], format="raw",
                                    probe_threads=threads)
        assert list(layout.shard_rows) == [2, 5], other
        np.testing.assert_array_equal(layout.read(), expected)
    # Counted together, a wrong entry is still refused for its own shard, and one file listed
    # twice by two spellings is two shards of D (a list of one entry is too short).
    (d / "shardload.json").write_text(json.dumps({"dtype": "<i4", "shape": [2], "rows": [2, 3]}))
    with pytest.raises(shardload.LayoutError,
                       match=r"E/\.\./D/b\.bin: rows: .*says 3 rows, but the file's size 40 "
                             r"holds 5"):
        shardload.discover([str(d / "a.bin"), f"{e}/../D/b.bin"], format="raw",
                           probe_threads=threads)
    (d / "shardload.json").write_text(json.dumps({"dtype": "<i4", "shape": [2], "rows": [2]}))
    with pytest.raises(shardload.LayoutError, match=r"rows: lists 1 shards?, but .*L/a\.bin"):
        shardload.discover([str(d / "a.bin"), f"{tmp_path}/L/a.bin"], format="raw",
                           probe_threads=threads)


def test_no_dtype_or_no_shape(tmp_path):
    write_raw(tmp_path, [np.zeros((2, 3), "float32")])
    with pytest.raises(shardload.LayoutError, match=r"shard_0000\.bin: raw files need a dtype"):
        shardload.discover(tmp_path, format="raw")
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0000\.bin: raw files need the trailing shape"):
        shardload.discover(tmp_path, format="raw", dtype="float32")


def test_changed_after_discovery(tmp_path):
    paths = write_raw(tmp_path, [np.zeros((4, 3), "float32")],
                      sidecar={"dtype": "f4", "shape": [3]})
    layout = shardload.discover(tmp_path, format="raw")
    paths[0].write_bytes(b"\0" * 24)
    with pytest.raises(shardload.ShardReadError, match=r"shard_0000\.bin: changed since discovery"):
        layout.read(0, 2)


def test_not_a_regular_file(tmp_path):
    (tmp_path / "shard_0000.bin").mkdir()
    with pytest.raises(shardload.LayoutError, match=r"shard_0000\.bin: not a regular file"):
        shardload.discover(tmp_path, format="raw", dtype="float32", trailing_shape=())


def test_dtype_option_byte_order(tmp_path) -> None:
    a = np.arange(24, dtype=">f4").reshape(8, 3)
    a.tofile(tmp_path / "shard_0000.bin")
    layout = shardload.discover(tmp_path, format="raw", dtype=">f4", trailing_shape=(3,))
    np.testing.assert_array_equal(layout.read(), a.astype("<f4"))
    # "float32" names no order: native, which is not what the file holds.
    native = shardload.discover(tmp_path, format="raw", dtype="float32", trailing_shape=(3,)).read()
    assert not np.array_equal(native, a.astype("<f4"))
    (tmp_path / "shardload.json").write_text('{"dtype": "<f4", "shape": [3]}')
    with pytest.raises(shardload.LayoutError, match="byte order little-endian differs"):
        shardload.discover(tmp_path, format="raw", dtype=">f4")


def test_bool_bytes_other_than_0_and_1_read_as_numpy_does(tmp_path):
    rng = np.random.default_rng(13)
    arrays = [dirty_bools(rng, (r, 3)) for r in ROWS]
    write_raw(tmp_path, arrays, sidecar={"dtype": "bool", "shape": [3]})
    layout = shardload.discover(tmp_path, format="raw")
    stored = np.concatenate(arrays)
    assert_bools_normalised(layout.read(), stored)
    assert_bools_normalised(layout.read(3, 20), stored[3:20])


def test_deeply_nested_sidecar_is_a_layout_error(tmp_path):
    write_raw(tmp_path, [np.zeros((4, 3), np.int16)])
    (tmp_path / "shardload.json").write_text('{"dtype": "int16", "x": ' + "[" * 100_000
                                            + "]" * 100_000 + "}")
    with pytest.raises(shardload.LayoutError,
                       match="shardload.json: JSON nesting deeper than 64 levels"):
        shardload.discover(tmp_path, format="raw")


def write_fortran_records(directory: pathlib.Path, arrays: list[np.ndarray]) -> None:
    """One record per file as Fortran's unformatted sequential write makes it: the record's
    byte length as int32 before and after the data (the oracle of footer_bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(arrays):
        data = np.ascontiguousarray(a).tobytes()
        marker = np.int32(len(data)).tobytes()
        (directory / f"shard_{i:04d}.bin").write_bytes(marker + data + marker)


@pytest.mark.parametrize("entry", ["discover", "load", "batches", "index", "discover_once"])
def test_footer_bytes_reads_fortran_records_through_every_entry_point(tmp_path, entry):
    rng = np.random.default_rng(20)
    arrays = [rng.standard_normal((r, 3)).astype("<f8") for r in [7, 0, 12, 1]]
    d = tmp_path / "records"
    write_fortran_records(d, arrays)
    expected = np.concatenate(arrays)
    kw = dict(format="raw", dtype="<f8", trailing_shape=(3,), header_bytes=4, footer_bytes=4)
    if entry == "discover":
        layout = shardload.discover(d, **kw)
        assert layout.shard_rows == [7, 0, 12, 1]
        check_ranges(layout, expected)
    elif entry == "load":
        np.testing.assert_array_equal(np.asarray(shardload.load(d, **kw)), expected)
    elif entry == "batches":
        got = [np.asarray(b) for b in shardload.batches(d, 5, **kw)]
        np.testing.assert_array_equal(np.concatenate(got), expected)
    elif entry == "index":
        shardload.index(d, **kw)
        # The manifest holds the options: the same ones use it, another footer does not.
        assert shardload.discover(d, **kw).manifest_status.startswith("manifest: used")
        status = shardload.discover(d, **dict(kw, footer_bytes=0, header_bytes=8)).manifest_status
        assert "other format options" in status and "footer bytes 4" in status, status
    else:
        layout = shardload.discover_once(d, **kw)
        assert layout == shardload.discover(d, **kw)
        check_ranges(layout, expected)


def test_footer_bytes_is_checked_and_for_raw_only(tmp_path):
    d = tmp_path / "records"
    write_fortran_records(d, [np.arange(6, dtype="<i4").reshape(2, 3)])
    kw = dict(format="raw", dtype="<i4", trailing_shape=(3,), header_bytes=4)
    with pytest.raises(TypeError, match=r"^footer_bytes: expected an int, found float 4.0$"):
        shardload.discover(d, footer_bytes=4.0, **kw)
    with pytest.raises(ValueError, match=r"^footer_bytes: expected an int in \[0, 2\*\*63\)"):
        shardload.discover(d, footer_bytes=-1, **kw)
    # Without it the trailing record length is bytes left over, never dropped.
    with pytest.raises(shardload.LayoutError, match="4 bytes left over"):
        shardload.discover(d, **kw)
    with pytest.raises(shardload.LayoutError, match=r"shorter than the header of 4 bytes and "
                                                    r"the footer of 40 bytes"):
        shardload.discover(d, footer_bytes=40, **kw)
    npy = tmp_path / "npy"
    npy.mkdir()
    np.save(npy / "shard_0000.npy", np.zeros(3))
    with pytest.raises(ValueError, match=r"npy: footer_bytes= does not apply "
                                         r"\(it is for raw\)"):
        shardload.discover(npy, footer_bytes=4)


# ---- a seventh hostile pass: number spellings and sizes at their edges ------------------------

@pytest.mark.parametrize("field", [
    '"header_bytes": 8.0', '"header_bytes": 8E0', '"header_bytes": true', '"header_bytes": -8',
    '"header_bytes": 9223372036854775808', '"header_bytes": 18446744073709551624',
    '"shape": [2.0]', '"shape": [true]', '"shape": [18446744073709551618]',
    '"rows": [8, 18446744073709551624]', '"rows": {"shard_0000.bin": 8.0}',
])
def test_a_sidecar_number_that_is_no_size_is_refused_naming_its_field(tmp_path, field):
    write_raw(tmp_path, [np.zeros((2, 2), "float32")], header=b"H" * 8)
    fields = {"dtype": '"float32"', "shape": "[2]", "header_bytes": "8"}
    key = field.split(":")[0].strip('"')
    fields[key] = field.split(":", 1)[1].strip()
    (tmp_path / "shardload.json").write_text(
        "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}")
    with pytest.raises(shardload.LayoutError,
                       match=rf"shardload\.json: {key}(\[\d\]|\.shard_0000\.bin)?: expected a "
                             r"non-negative integer"):
        shardload.discover(tmp_path, format="raw")


@pytest.mark.parametrize("kwargs, message", [
    (dict(header_bytes=10**6), r"172 bytes is shorter than the header of 1000000 bytes"),
    (dict(header_bytes=100, footer_bytes=100),
     r"shorter than the header of 100 bytes and the footer of 100 bytes"),
    (dict(header_bytes=8, footer_bytes=2**63 - 1), r"the footer of 9223372036854775807 bytes"),
    (dict(header_bytes=2**63 - 1, footer_bytes=2**63 - 1), r"the header of 9223372036854775807"),
    (dict(header_bytes=8, footer_bytes=4, trailing_shape=(2**40, 2**40)), r"overflows 64 bits"),
    (dict(header_bytes=8, footer_bytes=4, trailing_shape=(0,)), r"rows of 0 bytes leave no room"),
    (dict(header_bytes=8, footer_bytes=4, trailing_shape=(3,)), r"4 bytes left over"),
])
def test_header_footer_and_row_sizes_at_their_edges_are_refused_naming_the_file(
        tmp_path, kwargs, message):
    a = np.arange(40, dtype="<f4")
    for i in range(2):
        (tmp_path / f"shard_{i:04d}.bin").write_bytes(b"H" * 8 + a.tobytes() + b"F" * 4)
    kwargs = {"dtype": "float32", "trailing_shape": (), **kwargs}
    with pytest.raises(shardload.LayoutError, match=r"shard_0000\.bin: .*" + message):
        shardload.discover(tmp_path, format="raw", **kwargs)
    got = shardload.discover(tmp_path, format="raw", dtype=">f4", trailing_shape=(4,),
                             header_bytes=8, footer_bytes=4).read()
    # The same files taken as big-endian rows of 4: numpy's reading of the bytes.
    want = np.tile(np.frombuffer(a.tobytes(), ">f4"), 2).reshape(20, 4)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["shardload.json", "shard_meta.json"])
def test_a_sidecar_link_whose_target_is_gone_is_refused_not_taken_for_none(
        tmp_path: pathlib.Path, name: str) -> None:
    """A sidecar kept elsewhere and linked into the directory: once its target moves, the
    directory is not one without a sidecar (its header_bytes would be lost and each file's
    header read as rows, with dtype and trailing_shape given); it is refused naming the link."""
    d = tmp_path / "d"
    meta = tmp_path / "meta"
    d.mkdir()
    meta.mkdir()
    rows = np.arange(8, dtype="<f4")
    # The seed's sidecar has no header_bytes: its shards are rows alone.
    header = b"" if name == "shard_meta.json" else b"HDR!" * 4
    for i in range(2):
        (d / f"shard_{i:04d}.bin").write_bytes(header + rows.tobytes())
    text = ({"dtype": "float32", "trailing_shape": []} if name == "shard_meta.json"
            else {"dtype": "<f4", "shape": [], "header_bytes": 16})
    (meta / name).write_text(json.dumps(text))
    os.symlink(meta / name, d / name)
    np.testing.assert_array_equal(
        shardload.discover(str(d), dtype="float32", trailing_shape=()).read(0, 16),
        np.concatenate([rows, rows]))
    meta.rename(tmp_path / "moved")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(str(d), dtype="float32", trailing_shape=())
    assert f"{d / name}: the sidecar is a symbolic link whose target does not exist" in str(
        e.value), str(e.value)
