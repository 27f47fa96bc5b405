"""Every Python and shell block of README.md and docs/*.md runs, as a new user would run it,
against data the test makes, so that the documentation cannot drift from the code again.

A block that cannot run here (it installs, needs a server, several ranks or a GPU, or is a
synopsis with placeholders) carries a visible marker on the line before its fence:

    <!-- docs-test skip: the reason -->

and a page of measurements to reproduce (minutes each) one marker for the page:

    <!-- docs-test skip-page: the reason -->

The skipped blocks must stay few, and each must say why. The blocks of a page run in its own
directory, in the order of the page: each shell block in one ``bash -e`` process, the Python
blocks of a page in one interpreter (one namespace, one Legate start), in the environment of
the tests (``source scripts/env.sh``: ``shardload``, ``legate`` and the venv's ``python`` on
PATH). README.md runs first: its command line block writes ``demo-data``, which the other
pages use as the README tells a reader to make it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

BLOCK = re.compile(r"^```(python|sh|bash)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
SKIP = re.compile(r"<!--\s*docs-test skip:(.*?)-->")
SKIP_PAGE = re.compile(r"<!--\s*docs-test skip-page:(.*?)-->")
ANY_MARK = re.compile(r"<!--\s*docs-test\b")

# At most this many blocks (and pages) may be skipped: each is a block a user cannot run on one
# machine without a network (installing, a server, several ranks or nodes, GPUs, the whole test
# suite) or a synopsis. More means the docs are drifting out of reach of this test.
MAX_SKIPPED_BLOCKS = 12
MAX_SKIPPED_PAGES = 1
MIN_REASON = 20  # characters: a reason, not a word


@dataclasses.dataclass
class Block:
    page: pathlib.Path
    line: int
    lang: str
    code: str
    skip: str | None  # the reason, for a skipped block

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def page_skip(page: pathlib.Path) -> str | None:
    found = SKIP_PAGE.search(page.read_text())
    return found.group(1).strip() if found else None


def blocks(page: pathlib.Path) -> list[Block]:
    text = page.read_text()
    out = []
    for m in BLOCK.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = SKIP.fullmatch(before.strip())
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2),
                         mark.group(1).strip() if mark else None))
    return out


def dangling_marks(page: pathlib.Path) -> list[str]:
    """Markers that stand before no runnable block (or are misspelt): each would hide
    nothing, or would be mistaken for a skip."""
    lines = page.read_text().splitlines()
    fences = {b.line for b in blocks(page) if b.skip is not None}
    bad = []
    for number, line in enumerate(lines, 1):
        if not ANY_MARK.match(line.strip()) or SKIP_PAGE.search(line):
            continue
        # The next line that is not blank must open a block (1-based: index + 1).
        following = number
        while following < len(lines) and not lines[following].strip():
            following += 1
        if not SKIP.fullmatch(line.strip()) or following + 1 not in fences:
            bad.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    return bad


def test_skipped_blocks_are_few_and_each_says_why():
    all_blocks = [b for page in PAGES for b in blocks(page)]
    skipped_pages = {page: page_skip(page) for page in PAGES if page_skip(page) is not None}
    skipped = [b for b in all_blocks if b.skip is not None and b.page not in skipped_pages]
    run = [b for b in all_blocks if b.skip is None and b.page not in skipped_pages]
    assert len(run) >= 8, f"only {len(run)} blocks run: the block parser sees too little"
    assert len(skipped) <= MAX_SKIPPED_BLOCKS, (
        f"{len(skipped)} blocks are skipped, more than {MAX_SKIPPED_BLOCKS}:\n"
        + "\n".join(f"  {b.where}: {b.skip}" for b in skipped))
    assert len(skipped_pages) <= MAX_SKIPPED_PAGES, sorted(map(str, skipped_pages))
    short = [f"{b.where}: {b.skip!r}" for b in skipped if len(b.skip) < MIN_REASON]
    short += [f"{p.relative_to(ROOT)}: {r!r}" for p, r in skipped_pages.items()
              if len(r) < MIN_REASON]
    assert not short, "skip markers without a reason:\n  " + "\n  ".join(short)
    dangling = [d for page in PAGES for d in dangling_marks(page)]
    assert not dangling, "docs-test markers before no block:\n  " + "\n  ".join(dangling)


def test_the_block_parser_sees_markers_and_blocks(tmp_path: pathlib.Path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- docs-test skip: needs a server that is not here -->\n"
                    "```sh\ncurl x\n```\n\n```python\nprint(1)\n```\n\n```json\n{}\n```\n")
    found = blocks(page)
    assert [(b.line, b.lang, b.code, b.skip) for b in found] == [
        (4, "sh", "curl x\n", "needs a server that is not here"), (8, "python", "print(1)\n", None)]


# ---- running them ------------------------------------------------------------------------------

# What the pages' blocks read: `data/` (README, the guide), `big-data/` (the guide's batches),
# `in/` (save.md). One array, ragged shards, rows enough for every row range the blocks name.
DATA = np.arange(5003 * 8, dtype=np.float32).reshape(5003, 8) / 7
CUTS = (0, 1700, 1700, 3900, 5003)  # an empty shard among them
ROWS_DIR = "data"  # the guide's made-up ".rows" files go here too: 8 float32 a row, no header


def make_data(directory: pathlib.Path) -> None:
    for name in ("data", "big-data", "in"):
        (directory / name).mkdir()
        for i, (lo, hi) in enumerate(zip(CUTS, CUTS[1:])):
            np.save(directory / name / f"shard_{i:04d}.npy", DATA[lo:hi])
    for i, (lo, hi) in enumerate(zip(CUTS, CUTS[1:])):
        DATA[lo:hi].tofile(directory / ROWS_DIR / f"shard_{i:04d}.rows")


PYTHON_RUNNER = textwrap.dedent("""
    import json, sys, traceback
    blocks = json.load(sys.stdin)
    namespace = {"__name__": "__main__"}
    for where, code in blocks:
        print(f"---- {where}", flush=True)
        try:
            exec(compile(code, where, "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED {where}", flush=True)
            sys.exit(1)
    """)


def run_python(blocks: list[Block], cwd: pathlib.Path) -> str | None:
    r = subprocess.run([sys.executable, "-c", PYTHON_RUNNER], cwd=cwd, capture_output=True,
                       text=True, input=json.dumps([(b.where, b.code) for b in blocks]),
                       timeout=600)
    if r.returncode == 0:
        return None
    failed = re.search(r"^FAILED (.*)$", r.stdout, re.M)
    where = failed.group(1) if failed else ", ".join(b.where for b in blocks)
    return f"{where}: exit {r.returncode}\n{(r.stdout + r.stderr)[-3000:]}"


def run_shell(block: Block, cwd: pathlib.Path) -> str | None:
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=cwd,
                       capture_output=True, text=True, timeout=600)
    if r.returncode == 0:
        return None
    return f"{block.where}: exit {r.returncode}\n{(r.stdout + r.stderr)[-3000:]}"


def test_every_python_and_shell_block_runs(tmp_path: pathlib.Path):
    env_ok = subprocess.run(["bash", "-c", "command -v shardload && command -v legate"],
                            capture_output=True, text=True)
    assert env_ok.returncode == 0, "run the tests after `source scripts/env.sh`"
    failures = []
    demo = None
    for page in PAGES:
        todo = [b for b in blocks(page) if b.skip is None]
        if page_skip(page) is not None or not todo:
            continue
        cwd = tmp_path / page.name
        cwd.mkdir()
        make_data(cwd)
        if demo is not None:
            os.symlink(demo, cwd / "demo-data")
        for block in todo:
            if block.lang in ("sh", "bash"):
                failures.append(run_shell(block, cwd))
        python = [b for b in todo if b.lang == "python"]
        if python:
            failures.append(run_python(python, cwd))
        if page.name == "README.md":
            demo = cwd / "demo-data"
            assert demo.is_dir(), "README.md's command line block no longer writes demo-data"
    failures = [f for f in failures if f]
    assert not failures, "blocks that fail:\n\n" + "\n\n".join(failures)
