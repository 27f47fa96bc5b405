#!/usr/bin/env python3
"""Checks that the project's #include lines point only down the layers.

Each folder under src/ is one layer; LAYERS below lists them bottom up. A file may include
the headers of its own layer and of the layers below it, never of a layer above. Headers are
found where the build finds them: public ones as "shardload/NAME.hpp" in
src/<layer>/include/shardload/, internal ones as "<layer>/detail/NAME.hpp" under src/.
Front ends (src/cli, python, tests, fuzz, bench) sit above every layer.

Also refused anywhere: a quoted include that climbs out of its folder ("../"), a
"shardload/..." or "<layer>/..." include that names no header of the project, and, in the
product layers and the Python modules, any include of the test doubles and demo data
(src/testing).

Also refused outside the storage layer: a call of a scheme predicate (is_remote_url,
is_http_url), which asks "is this path remote?" where the question is a more specific one
(what a request costs, how keys join, whether a directory lists): shardload/location.hpp
answers those in storage. Only storage itself, the command line's argument parsing
(src/cli/args.cc) and the tests of storage may call them.

Likewise refused there: the same question asked of the text, a test of a path against a
served scheme's literal prefix ('p.starts_with("s3://")', 'p.rfind("s3://", 0) == 0',
'p.substr(0, 5) == "s3://"'), which a store driver's scheme would not pass. A literal inside a
message is no test and is not refused.

In the Python package (python/shardload/) the same questions are refused outside its argument
parsing (_args.py): a path tested against a served scheme's prefix ('p.startswith("s3://")',
'p.startswith((b"http://", b"https://"))', 'p[:5] == "s3://"') or for any scheme ('"://" in
p'). The binding answers them from storage: _core.path_traits(p) (kernel_files, listable,
writable, storage_options, ...), _core.split_options, _core.join_key.

Also refused outside the storage layer (and its tests): an include of a transport's header
(object storage's writer, the S3 and HTTP clients, signing, credentials, the transport table)
and a use of object storage's writing vocabulary (ObjectStore, ObjectWriter,
writable_object_store, ...). The readers, the engine's save and the front ends reach bytes
through a Store (shardload/storage.hpp) and name no transport.

Prints each violation as FILE:LINE: message and exits 1 if there is any. --root DIR checks
another tree laid out the same way (the tests use it on a small one).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Bottom up. storage (where bytes live: local files, s3://, http(s)://) sits between base and
# the format readers, so it may include base only and the readers may include it; no format
# knowledge reaches down into it. testing sits above the product layers, and no product layer
# may include it.
LAYERS = ["base", "storage", "readers", "engine", "cuda", "errors", "legate", "testing"]
PRODUCT = {"base", "storage", "readers", "engine", "cuda", "errors", "legate"}
FRONT_ENDS = ["src/cli", "python", "tests", "fuzz", "bench"]
SOURCES = (".cc", ".hpp", ".cu", ".h", ".cuh")

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
# Scheme predicates: storage's to ask. A declaration or a call, outside a // comment.
SCHEME_PREDICATE = re.compile(r"\b(is_remote_url|is_http_url)\s*\(")
# The same question asked of the text: a served scheme's literal prefix compared with a path.
SCHEME_LITERAL = r'"(?:s3|https?)://"'
SCHEME_TEST = re.compile(r"\b(?:starts_with|rfind|find|compare)\s*\(\s*" + SCHEME_LITERAL +
                         r"|[=!]=\s*" + SCHEME_LITERAL + r"|" + SCHEME_LITERAL + r"\s*[=!]=")
# Where they may be called: storage, the argument parsers of the front ends, the tests.
SCHEME_ALLOWED = ("src/storage/", "src/cli/args.cc", "tests/")
# The same in the Python package: a served scheme's literal (str or bytes) in a prefix test or
# compared with a path, or "://" looked for in one; its argument parsing may.
PY_SCHEME_LITERAL = r"""b?(?:"(?:s3|https?)://"|'(?:s3|https?)://')"""
PY_SCHEME_TEST = re.compile(
    r"\.(?:startswith|find|rfind|index|rindex)\s*\([^)]*" + PY_SCHEME_LITERAL +
    r"|[=!]=\s*" + PY_SCHEME_LITERAL + r"|" + PY_SCHEME_LITERAL + r"\s*[=!]=" +
    r"""|b?(?:"://"|'://')\s+(?:not\s+)?in\b""")
PY_PACKAGE = "python/shardload/"
PY_SCHEME_ALLOWED = ("python/shardload/_args.py",)
# Storage's transports: their headers and their names, storage's (and its tests') alone.
TRANSPORT_HEADERS = {
    f"storage/detail/{name}.hpp"
    for name in ("object_store", "s3_io", "s3_signed", "sigv4", "aws_credentials", "curl_get",
                 "http_io", "transports")
}
TRANSPORT_NAME = re.compile(
    r"\b(ObjectStore|ObjectWriter|ObjectEntry|writable_object_store|object_store_for|"
    r"set_object_store|check_object_key)\b")
TRANSPORT_ALLOWED = ("src/storage/", "tests/")


def layer_of_file(path: pathlib.Path) -> str | None:
    rel = path.relative_to(ROOT).parts
    if rel[0] == "src" and len(rel) > 1 and rel[1] in LAYERS:
        return rel[1]
    return None  # a front end


def public_headers() -> dict[str, str]:
    """'shardload/NAME.hpp' -> the layer whose include/ folder holds it."""
    found: dict[str, str] = {}
    for layer in LAYERS:
        for h in (ROOT / "src" / layer / "include").rglob("*.hpp"):
            name = h.relative_to(ROOT / "src" / layer / "include").as_posix()
            if name in found:
                raise SystemExit(f"{name} is in both {found[name]} and {layer}")
            found[name] = layer
    return found


def check(path: pathlib.Path, public: dict[str, str]) -> list[str]:
    problems = []
    own = layer_of_file(path)
    rank = LAYERS.index(own) if own else len(LAYERS)
    # The Python modules are product too: they ship without the test doubles.
    in_python = path.relative_to(ROOT).parts[0] == "python"
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        target = m.group(1)
        where = f"{path.relative_to(ROOT)}:{n}"
        if ".." in pathlib.PurePosixPath(target).parts:
            problems.append(f'{where}: "{target}" climbs out of its folder; include project '
                            'headers as "shardload/NAME.hpp" or "<layer>/detail/NAME.hpp"')
            continue
        first = target.split("/", 1)[0]
        if target in public:
            layer = public[target]
        elif first in LAYERS:
            if not (ROOT / "src" / target).is_file():
                problems.append(f'{where}: "{target}" is no header of layer {first}')
                continue
            layer = first
        elif first == "shardload":
            problems.append(f'{where}: "{target}" is no public header of any layer')
            continue
        else:
            # A header of the file's own folder ("cli/commands.hpp", "bench_util.hpp", a
            # third-party one): not a layer's, nothing to order.
            continue
        if LAYERS.index(layer) > rank:
            problems.append(f'{where}: layer {own} includes "{target}" of layer {layer}, '
                            f"which is above it ({' < '.join(LAYERS)})")
        elif (own in PRODUCT or in_python) and layer == "testing":
            problems.append(f'{where}: {own or "the Python binding"} includes "{target}", a test double '
                            "or demo data")
    return problems


def digit_separator(line: str, i: int) -> bool:
    """Whether the ' at `i` separates digits of a number (C++14: 1'024, 0xFF'FF), which
    begins no character literal: the token it sits in starts with a digit."""
    start = i
    while start > 0 and (line[start - 1].isalnum() or line[start - 1] in "_'"):
        start -= 1
    return line[start].isdigit() and i + 1 < len(line) and line[i + 1].isalnum()


def code_of(line: str, comment: str = "//") -> str:
    """`line` without its comment (C++ "//", Python "#"); a comment mark inside a string or
    character literal is code, and so is a C++14 digit separator's quote."""
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c == "'" and comment == "//" and digit_separator(line, i):
            pass
        elif c in "\"'":
            quote = c
        elif line.startswith(comment, i):
            return line[:i]
        i += 1
    return line


def check_scheme_predicates(path: pathlib.Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    if rel.startswith(SCHEME_ALLOWED):
        return []
    problems = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code = line.split("//", 1)[0]
        m = SCHEME_PREDICATE.search(code)
        if m:
            problems.append(f"{rel}:{n}: {m.group(1)}() outside the storage layer; ask the store "
                            "what you need to know instead (shardload/location.hpp: path_traits, "
                            "split_options, join_key)")
        elif SCHEME_TEST.search(code_of(line)):
            problems.append(f"{rel}:{n}: a path tested against a scheme's prefix outside the "
                            "storage layer; ask the store what you need to know instead "
                            "(shardload/location.hpp: path_traits)")
    return problems


def check_python_scheme_tests(path: pathlib.Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    if not rel.startswith(PY_PACKAGE) or rel.startswith(PY_SCHEME_ALLOWED):
        return []
    problems = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if PY_SCHEME_TEST.search(code_of(line, "#")):
            problems.append(f"{rel}:{n}: a path tested against a scheme's prefix outside the "
                            "argument parsing; ask the store what you need to know instead "
                            "(_core.path_traits, split_options, join_key)")
    return problems


def check_transports(path: pathlib.Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    if rel.startswith(TRANSPORT_ALLOWED):
        return []
    problems = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = INCLUDE.match(line)
        if m and m.group(1) in TRANSPORT_HEADERS:
            problems.append(f'{rel}:{n}: "{m.group(1)}" is a transport of the storage layer; '
                            "reach the bytes through a Store (shardload/storage.hpp)")
            continue
        code = line.split("//", 1)[0]
        m = TRANSPORT_NAME.search(code)
        if m:
            problems.append(f"{rel}:{n}: {m.group(1)} outside the storage layer; write, list and "
                            "delete through a Store (shardload/storage.hpp)")
    return problems


def main(argv: list[str] | None = None) -> int:
    global ROOT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=ROOT,
                        help="the tree to check (default: this checkout)")
    ROOT = parser.parse_args(argv).root.resolve()
    public = public_headers()
    files = []
    for folder in ["src"] + FRONT_ENDS:
        for p in sorted((ROOT / folder).rglob("*")):
            # src/cli is both under src/ and a front end: each file once.
            if p.suffix in SOURCES and p.is_file() and p not in files:
                files.append(p)
    problems = [msg for p in files
                for msg in check(p, public) + check_scheme_predicates(p) + check_transports(p)]
    modules = sorted(p for p in (ROOT / PY_PACKAGE).rglob("*.py") if p.is_file())
    problems += [msg for p in modules for msg in check_python_scheme_tests(p)]
    files += modules
    for msg in problems:
        print(msg)
    if problems:
        print(f"check_includes: {len(problems)} include(s) point up the layers or outside them")
        return 1
    print(f"check_includes: {len(files)} files, every include points down the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
