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
