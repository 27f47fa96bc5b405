"""Lists of formats, written by people, name every format of the format table.

The format table (src/readers/formats.cc, ``shardload._core.format_rows()``) is the one place
that says which formats exist; code that needs a list of them takes it from there (the CLI's
``--format`` help, the package's extension lists, ``save``'s formats). Documents and
docstrings cannot be generated, so these tests find every enumeration of formats in README.md,
docs/*.md and the package's docstrings and hold it to the table: an enumeration of five or
more formats, or a table whose first column names five or more, is a list of "every format"
and must name all of them (a shorter one is a subset by a property: what save writes, what a
manifest checks by its header). The places that list where sources live name every scheme.
"""

from __future__ import annotations

import inspect
import pathlib
import re
import subprocess

import pytest

import shardload
from shardload import _core, _options, _save

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Measurements of the formats that were measured, not a statement of what shardload reads.
NOT_LISTS = {"benchmarks.md"}

ROWS = _core.format_rows()
FORMATS = [row["name"] for row in ROWS]
# Every word prose names a format by: its name, its aliases, its extensions without the dot.
WORD = {w.lower(): row["name"] for row in ROWS
        for w in [row["name"], *row["aliases"], *(e.lstrip(".") for e in row["extensions"])]}
_WORDS = "|".join(sorted(map(re.escape, WORD), key=len, reverse=True))
# One item of an enumeration: a name with its decorations (`.npy`, "raw binary", "Arrow IPC").
_ITEM = (rf"[`'\"]*\.?(?:{_WORDS})[`'\"]*"
         r"(?:\s+(?:raw|binary|IPC|shards?|stores?|archives?|files?|v2|v3)){0,2}")
_SEP = r"(?:\s*[,/]\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+)"
ENUMERATION = re.compile(rf"(?<![\w.-]){_ITEM}(?:{_SEP}{_ITEM})+(?![\w-])", re.I)
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
TABLE = re.compile(r"(?:^\|.*\n?)+", re.M)
LIST_MIN = 5


def named(text: str) -> set[str]:
    """The formats a text names."""
    return {WORD[w.lower()] for w in re.findall(rf"(?<![\w-])\.?({_WORDS})(?![\w-])", text, re.I)}


# docs/architecture.md's table of capabilities lists the formats that have each: subsets, held
# to the format table exactly by test_the_architecture_capability_table_is_the_format_table.
CAPABILITY_TABLE = re.compile(r"^\| capability \| used by \| formats \|\n(?:^\|.*\n)+", re.M)


def format_lists(text: str) -> list[tuple[str, set[str]]]:
    """Every list of formats in a text (code blocks and the capability table left out):
    enumerations, and tables whose header's first cell is "format"/"formats"."""
    text = CAPABILITY_TABLE.sub("", FENCE.sub("\n\n", text))
    found = []
    for m in ENUMERATION.finditer(text):
        if len(named(m.group(0))) >= LIST_MIN:
            found.append((m.group(0), named(m.group(0))))
    for table in TABLE.findall(text):
        rows = table.splitlines()
        if not re.match(r"^\|\s*formats?\s*\|", rows[0], re.I):
            continue
        first = " ".join(row.split("|")[1] for row in rows[2:] if row.count("|") > 2)
        if len(named(first)) >= LIST_MIN:
            found.append((rows[0] + " ...", named(first)))
    return found


def docstrings() -> list[tuple[str, str]]:
    """(where, text) of the package's docstrings: its modules, every public name, and the
    members of the public classes (Layout's properties included)."""
    out = []
    for module in (shardload, *(getattr(shardload, n) for n in dir(shardload)
                                if n.startswith("_") and inspect.ismodule(getattr(shardload, n)))):
        if module.__doc__:
            out.append((module.__name__, module.__doc__))
    for name in shardload.__all__:
        obj = getattr(shardload, name)
        doc = inspect.getdoc(obj)
        if doc and (inspect.isfunction(obj) or inspect.isclass(obj) or callable(obj)):
            out.append((f"shardload.{name}", doc))
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                doc = inspect.getdoc(value) if not member.startswith("__") else None
                if doc:
                    out.append((f"shardload.{name}.{member}", doc))
    return out


def test_the_list_finder_sees_enumerations_and_format_tables():
    text = ("It reads `.npy`, raw binary, HDF5, Parquet, Arrow IPC and Zarr stores.\n"
            "save writes npy, raw or zarr.\n\n"
            "| format | what |\n| --- | --- |\n| npy | a |\n| raw | b |\n| hdf5 | c |\n"
            "| parquet, arrow | d |\n")
    lists = format_lists(text)
    assert [sorted(n) for _, n in lists] == [
        sorted({"npy", "raw", "hdf5", "parquet", "arrow", "zarr"}),
        sorted({"npy", "raw", "hdf5", "parquet", "arrow"})]
    assert len(FORMATS) >= 7 and "npz" in FORMATS  # the table was read


@pytest.mark.parametrize("page", [p for p in PAGES if p.name not in NOT_LISTS],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_list_of_formats_in_the_docs_names_every_format(page: pathlib.Path):
    short = [f"{text!r} lacks {', '.join(f for f in FORMATS if f not in n)}"
             for text, n in format_lists(page.read_text()) if len(n) < len(FORMATS)]
    assert not short, f"{page.relative_to(ROOT)}: lists of formats that miss some:\n  " + \
        "\n  ".join(short)


def test_every_list_of_formats_in_the_docstrings_names_every_format():
    docs = docstrings()
    assert any(where == "shardload.discover" for where, _ in docs)
    short = [f"{where}: {text!r} lacks {', '.join(f for f in FORMATS if f not in n)}"
             for where, doc in docs for text, n in format_lists(doc) if len(n) < len(FORMATS)]
    assert not short, "docstrings whose lists of formats miss some:\n  " + "\n  ".join(short)


# The places that say where a source may live; each names both kinds of URL.
SOURCE_PLACES = [
    (ROOT / "README.md", r"shardload loads a dataset"),
    (ROOT / "docs" / "guide.md", r"Each path may be local or a URL"),
    (ROOT / "docs" / "cli.md", r"SOURCE is a directory, numbered pattern"),
]


def _paragraph(text: str, start: str) -> str:
    m = re.search(start, text)
    assert m, f"no paragraph starting {start!r}"
    return re.split(r"\n\s*\n", text[m.start():], maxsplit=1)[0]


@pytest.mark.parametrize("page, start", SOURCE_PLACES,
                         ids=[f"{p.name}:{s}" for p, s in SOURCE_PLACES])
def test_every_list_of_sources_names_s3_and_http(page: pathlib.Path, start: str):
    paragraph = _paragraph(page.read_text(), start)
    for scheme in ("s3://", "http(s)://"):
        assert scheme in paragraph, f"{page.name}: {paragraph!r} does not name {scheme}"


def test_the_discover_docstring_names_every_source_scheme():
    source = inspect.getdoc(shardload.discover).split("source:", 1)[1].split("pattern:", 1)[0]
    assert "s3://" in source and "http(s)://" in source, source


def test_the_architecture_capability_table_is_the_format_table():
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = CAPABILITY_TABLE.search(text)
    assert table, "docs/architecture.md: the capability table is gone"
    listed = {}
    for row in table.group(0).splitlines()[2:]:
        capability = re.match(r"\|\s*`(\w+)`", row)
        if capability and capability.group(1) != "freshness":
            formats = row.rsplit("|", 2)[-2]
            while re.search(r"\([^()]*\)", formats):  # the prose in parentheses
                formats = re.sub(r"\([^()]*\)", "", formats)
            listed[capability.group(1)] = named(formats)
    actual = {c: {row["name"] for row in ROWS if c in row["capabilities"]}
              for c in {c for row in ROWS for c in row["capabilities"]}}
    assert listed == actual


def test_code_takes_its_lists_of_formats_from_the_table(cli: pathlib.Path):
    # The package tells formats by discovery, never by extensions of its own.
    assert not any(name.endswith("_EXTENSIONS") for name in vars(_options))
    assert set(_save._FORMATS) == {row["name"] for row in ROWS if row["writable"]}
    help_text = subprocess.run([str(cli), "inspect", "--help"], capture_output=True,
                               text=True, check=True).stdout
    line = next(line for line in help_text.splitlines() if "--format" in line)
    assert named(line) == set(FORMATS), line


def test_astype_on_npz_shards_beside_a_parquet_file_says_they_are_npz(tmp_path: pathlib.Path):
    # The package's own extension lists once missed .npz, so a directory of .npz shards with a
    # stray .parquet file looked columnar, and astype= reached the npz reader as a dtype.
    import numpy as np

    for i in range(2):
        np.savez(tmp_path / f"shard_{i:04d}.npz", x=np.arange(6, dtype=np.float32).reshape(3, 2))
    (tmp_path / "notes.parquet").write_bytes(b"not a shard")
    with pytest.raises(ValueError, match=r"these are npz files, which give their own dtype"):
        shardload.discover(tmp_path, astype="float64")
