"""The documentation stays navigable and in step with the tree: the README is short, every
relative link in README.md and docs/*.md leads to a file (and heading) that exists, the list of
public headers matches src/, and Python examples use the 1.0 names. Plain file checks: no
build, no Legate."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_LINES = 150

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    anchors: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        slug, n = _slug(heading), 1
        candidate = slug
        while candidate in anchors:  # repeated headings get -1, -2, ...
            candidate, n = f"{slug}-{n}", n + 1
        anchors.add(candidate)
    return anchors


def _relative_links(page: pathlib.Path) -> list[str]:
    return [target for target in LINK.findall(_prose(page.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto:


def test_readme_is_at_most_150_lines():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md: {lines} lines, more than {README_MAX_LINES}; move detail to docs/")


def test_readme_keeps_the_quick_start_commands():
    text = README.read_text()
    for command in ("scripts/demo.sh", "scripts/test.sh"):
        assert re.search(rf"^{re.escape(command)}\b", text, re.M), (
            f"README.md: the quick start's `{command}` line is gone")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file(page: pathlib.Path):
    broken = []
    for target in _relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading '#{anchor}' in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n  " + "\n  ".join(broken)


# Paths named in code spans rather than linked: the repository's own docs, scripts, examples.
NAMED_PATH = re.compile(r"`((?:docs|examples|scripts|tools|bench|tests)/[\w./-]*\w)`")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_in_code_spans_exists(page: pathlib.Path):
    text = FENCE.sub("", page.read_text())
    missing = sorted({p for p in NAMED_PATH.findall(text)
                      if not any(c in p for c in "*{<") and not (ROOT / p).exists()})
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_link_check_sees_links_and_refuses_broken_ones(tmp_path: pathlib.Path):
    (tmp_path / "there.md").write_text("# A title: with (punctuation)\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [anchor](there.md#a-title-with-punctuation) "
                    "[web](https://example.com) `[code](nowhere.md)`\n"
                    "```\n[fenced](nowhere.md)\n```\n[gone](missing.md)\n")
    assert _relative_links(page) == ["there.md", "there.md#a-title-with-punctuation",
                                     "missing.md"]
    assert "a-title-with-punctuation" in _anchors(tmp_path / "there.md")


def test_readme_links_every_doc():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _relative_links(README)}
    missing = [d.name for d in DOCS if d.resolve() not in linked]
    assert not missing, f"README.md does not link docs/{', docs/'.join(missing)}"


def test_architecture_lists_every_public_header_and_no_other():
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Public headers", 1)[1].split("\n## ", 1)[0]
    listed = {}
    for layer, names in re.findall(r"^- (\w+)[^:]*: (.*)$", section, re.M):
        listed[layer] = set(re.findall(r"`([\w.]+\.hpp)`", names))
    actual = {d.parts[-3]: {h.name for h in d.glob("*.hpp")}
              for d in (ROOT / "src").glob("*/include/shardload")}
    assert listed == actual


# The spellings renamed for 1.0 (still accepted, deprecated): examples must not teach them.
OLD_PYTHON = [
    (re.compile(r"[(,]\s*shape\s*="), "shape= (now trailing_shape=)"),
    (re.compile(r"[(,]\s*rows\s*="), "rows= (now row_range= / count_rows=)"),
    (re.compile(r"\b(?:layout|info)\.rows\b"), ".rows (now shard_rows / total_rows)"),
    (re.compile(r"\.shards\b"), "SaveInfo.shards (now num_shards)"),
]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_examples_use_the_new_names(page: pathlib.Path):
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.M | re.S)
    found = [f"{why}: {line.strip()}" for block in blocks for line in block.splitlines()
             for pattern, why in OLD_PYTHON if pattern.search(line)]
    assert not found, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(found)
