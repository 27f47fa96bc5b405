"""docs/errors.md stays true: every test its "tests" column names exists in tests/.

A cell reads like ``py: test_core::test_a, test_b; test_raw::test_c; C++: Suite.Name``: a
``file::name`` sets the file for the bare names after it, up to the next ``;``; a segment without
a ``py:`` / ``C++:`` / ``fuzz:`` head keeps the previous one's kind; text in parentheses is prose.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
ERRORS = ROOT / "docs" / "errors.md"
PY_DIRS = [ROOT / "tests" / "python", ROOT / "tests" / "multirank"]
CPP_SUFFIXES = {".cc", ".cpp", ".cu", ".hpp", ".h"}


def _without_parentheses(text: str) -> str:
    while True:
        stripped = re.sub(r"\([^()]*\)", "", text)
        if stripped == text:
            return text
        text = stripped


def table_cells() -> list[tuple[int, str]]:
    """The "tests" cell of every table row of docs/errors.md, with its line number."""
    cells = []
    for number, line in enumerate(ERRORS.read_text().splitlines(), 1):
        if not line.startswith("|") or re.fullmatch(r"[|\s:-]+", line):
            continue
        cell = line.rstrip().rstrip("|").rsplit("|", 1)[-1].strip()
        if cell not in ("tests", ""):
            cells.append((number, cell))
    return cells


def named_tests(cell: str) -> list[tuple[str, str]]:
    """(kind, name) of each test a cell names: ("py", "file::function"), ("C++", "Suite.Name"),
    ("fuzz", "target")."""
    found = []
    kind = None
    for segment in _without_parentheses(cell).split(";"):
        segment = segment.strip()
        head = re.match(r"(py|C\+\+|fuzz):\s*", segment)
        if head:
            kind = head.group(1)
            segment = segment[head.end():]
        if kind == "py":
            current = None
            for token in re.findall(r"[\w.]+(?:::[\w.]+)?", segment):
                if "::" in token:
                    current, token = token.split("::")
                    current = current.removesuffix(".py")
                if token.startswith("test_") and current is not None:
                    found.append(("py", f"{current}::{token}"))
        elif kind == "C++":
            for suite, name in re.findall(r"(?:\w+/)?([A-Z]\w*)\.([A-Z]\w*)(?:/\w+)?", segment):
                found.append(("C++", f"{suite}.{name}"))
        elif kind == "fuzz":
            found.extend(("fuzz", t) for t in re.findall(r"\bfuzz_\w+", segment))
    return found


def _python_functions() -> set[str]:
    functions = set()
    for directory in PY_DIRS:
        for path in directory.glob("test_*.py"):
            for name in re.findall(r"^\s*(?:async\s+)?def (test_\w+)\(", path.read_text(), re.M):
                functions.add(f"{path.stem}::{name}")
    return functions


def _cpp_tests() -> set[str]:
    tests = set()
    for path in (ROOT / "tests").rglob("*"):
        if path.suffix in CPP_SUFFIXES and path.is_file():
            text = path.read_text(errors="replace")
            for suite, name in re.findall(r"\b\w*TEST\w*\(\s*(\w+)\s*,\s*(\w+)\s*\)", text):
                tests.add(f"{suite}.{name}")
    return tests


def _fuzz_targets() -> set[str]:
    return {f"fuzz_{p.stem.removesuffix('_fuzz')}" for p in (ROOT / "fuzz").glob("*_fuzz.cc")}


def test_the_parser_reads_each_kind_of_cell():
    cell = ("py: test_core::test_a, test_b (and test_not_this); test_raw.py::test_c; "
            "C++: SuiteA.NameA, Formats/ArrowFormats.Wide/parquet; fuzz: fuzz_npy_header")
    assert named_tests(cell) == [
        ("py", "test_core::test_a"), ("py", "test_core::test_b"), ("py", "test_raw::test_c"),
        ("C++", "SuiteA.NameA"), ("C++", "ArrowFormats.Wide"), ("fuzz", "fuzz_npy_header")]


def test_every_test_docs_errors_md_names_exists():
    py, cpp, fuzz = _python_functions(), _cpp_tests(), _fuzz_targets()
    known = {"py": py, "C++": cpp, "fuzz": fuzz}
    cells = table_cells()
    assert len(cells) > 100  # the table really was read
    missing = [f"docs/errors.md:{number}: {kind} {name}"
               for number, cell in cells for kind, name in named_tests(cell)
               if name not in known[kind]]
    assert not missing, "tests named in docs/errors.md that do not exist:\n" + "\n".join(missing)
