"""The command line names options as it spells them (``--fill-value``), in every message the
core makes, the readers' included; Python's spelling (``fill_value=``) stays Python's."""

from __future__ import annotations

import pathlib
import subprocess

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import shardload


def write(path: pathlib.Path, fmt: str) -> None:
    table = pa.table({"v": pa.array([1, None], pa.uint8())})
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        feather.write_feather(table, path, compression="uncompressed")


@pytest.mark.parametrize("fmt, ext", [("parquet", "parquet"), ("arrow", "arrow")])
def test_a_fill_value_the_column_cannot_hold_is_named_as_each_front_end_spells_it(
        cli: pathlib.Path, tmp_path: pathlib.Path, fmt: str, ext: str):
    write(tmp_path / f"shard_0000.{ext}", fmt)
    r = subprocess.run([str(cli), "inspect", str(tmp_path), "--fill-value", "-1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "--fill-value=-1" in r.stderr and "is not representable as uint8" in r.stderr, r.stderr
    assert "fill_value=" not in r.stderr and "fill_value " not in r.stderr, r.stderr
    with pytest.raises(shardload.LayoutError, match=r"fill_value=-1\S* is not representable"):
        shardload.discover(tmp_path, fill_value=-1)


@pytest.mark.parametrize("stored,text,shown", [
    ("float64", "1e400", "--fill-value: expected a number a float64 holds, found '1e400' "
                         "(it overflows to inf; write inf for infinity)"),
    ("float32", "-1e400", "--fill-value: expected a number a float64 holds, found '-1e400'"),
    ("int64", "9007199254740993", "--fill-value: 9007199254740993 cannot be passed exactly (it "
                                  "travels as a float64, which holds every int only up to "
                                  "2**53)"),
    ("int64", "9223372036854775807", "9223372036854775807 cannot be passed exactly"),
    ("uint64", "18446744073709551615", "18446744073709551615 cannot be passed exactly"),
    # Python's int literal in hex: 2**53 + 1 was taken as 2**53 (strtod reads hex).
    ("int64", "0x20000000000001", "0x20000000000001 cannot be passed exactly"),
    ("int64", "-0X1fffffffffffffF", "-0X1fffffffffffffF cannot be passed exactly"),
])
def test_a_fill_value_text_that_a_float64_cannot_carry_is_refused(
        cli: pathlib.Path, tmp_path: pathlib.Path, stored: str, text: str, shown: str):
    """--fill-value is parsed into a float64, as Python's fill_value= travels: a finite number
    that overflows it filled nulls with inf (1e400, where 1e300 for float32 is refused), and an
    integer past 2**53 with its rounding (9007199254740993 filled ...992), where Python refuses
    both. Exit 2, the usage error's status."""
    pq.write_table(pa.table({"v": pa.array([1, None, 3], pa.from_numpy_dtype(stored))}),
                   tmp_path / "shard_0000.parquet")
    r = subprocess.run([str(cli), "inspect", str(tmp_path), f"--fill-value={text}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and shown in r.stderr, (r.returncode, r.stderr)


@pytest.mark.parametrize("stored,text", [
    ("float64", "inf"), ("float64", "-Infinity"), ("float64", "1e-400"), ("float64", "-0"),
    ("float64", "0x1p-1074"), ("int64", "9007199254740992"), ("int64", "-9223372036854775808"),
    ("uint64", "18446744073709551616"), ("int8", "127"), ("float64", "1e308"),
    ("int64", "0x20000000000000"), ("int64", "-0x1FFFFFFFFFFFFF"), ("int64", "0x7FFFFFFFFFFFFC00"),
])
def test_a_fill_value_text_a_float64_carries_is_taken(cli: pathlib.Path, tmp_path: pathlib.Path,
                                                      stored: str, text: str):
    """Infinity written as such, an underflow that rounds to 0 (as numpy rounds it), integers
    a float64 holds exactly (2**64 among them: the column then refuses it, as Python does)."""
    pq.write_table(pa.table({"v": pa.array([1, None, 3], pa.from_numpy_dtype(stored))}),
                   tmp_path / "shard_0000.parquet")
    r = subprocess.run([str(cli), "inspect", str(tmp_path), f"--fill-value={text}"],
                       capture_output=True, text=True, timeout=120)
    assert "--fill-value:" not in r.stderr, r.stderr
    if stored == "uint64":
        assert r.returncode == 1 and "is not representable as uint64" in r.stderr, r.stderr
    else:
        assert r.returncode == 0, r.stderr
