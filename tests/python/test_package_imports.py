"""The package's own modules import each other without a circle: the graph of the imports
between python/shardload/*.py, read with ``ast`` (at module level and inside functions alike),
is acyclic, so each module can be read, imported and tested after the ones it needs. Imports
for type checkers only (``if TYPE_CHECKING:``) do not count; the compiled modules (_core,
_legate) import no Python module of the package but _errors, which imports nothing."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest


def _package_dir() -> Path:
    # The sources, found without importing the package.
    spec = importlib.util.find_spec("shardload")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _imports(tree: ast.Module, modules: set[str]) -> dict[str, int]:
    """The package's modules that ``tree`` imports, each with the line of its first import."""
    found: dict[str, int] = {}

    def add(name: str, line: int) -> None:
        if name in modules:
            found.setdefault(name, line)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            absolute = node.level == 0 and (node.module or "").split(".")[0] == "shardload"
            if node.level == 1 or absolute:
                parts = (node.module or "").split(".")[1 if absolute else 0:]
                if parts and parts[0]:
                    add(parts[0], node.lineno)  # from .X import a, from shardload.X import a
                else:
                    for alias in node.names:  # from . import X, from shardload import X
                        add(alias.name, node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "shardload" and len(parts) > 1:
                    add(parts[1], node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> tuple[dict[str, dict[str, int]], Path]:
    root = _package_dir()
    files = sorted(root.glob("*.py"))
    modules = {f.stem for f in files} - {"__init__"}
    return {f.stem: _imports(ast.parse(f.read_text(), str(f)), modules) for f in files}, root


def _cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle of the graph, as the modules along it (the first repeated at the end)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for after in sorted(graph.get(node, {})):
            if state.get(after) == 1:
                return path[path.index(after):] + [after]
            if after not in state:
                found = walk(after)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def test_the_package_sources_are_found() -> None:
    graph, root = _graph()
    # The graph covers the modules that the split of the public functions made.
    assert {"__init__", "_api", "_args", "_options", "_layout", "_discover", "_legate_start",
            "_manifest", "_readers"} <= set(graph), (root, sorted(graph))
    assert "_options" in graph["_discover"] and "_args" in graph["_options"]


def test_the_import_graph_of_the_package_is_acyclic() -> None:
    graph, root = _graph()
    cycle = _cycle(graph)
    if cycle:
        steps = [f"{a}.py:{graph[a][b]} imports {b}" for a, b in zip(cycle, cycle[1:])]
        pytest.fail(f"the modules of {root} import each other in a circle: " + "; ".join(steps))


def test_the_cycle_finder_finds_a_circle() -> None:
    # The check itself: a circle through an import inside a function is one.
    modules = {"a", "b", "c"}
    a = ast.parse("from . import b\n")
    b = ast.parse("def f():\n    from .c import x\n")
    c = ast.parse("import shardload.a\nif TYPE_CHECKING:\n    from . import b\n")
    graph = {"a": _imports(a, modules), "b": _imports(b, modules), "c": _imports(c, modules)}
    assert graph == {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 1}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": 1}, "b": {}, "c": {"a": 1}}) is None


def test_every_module_of_the_package_says_what_it_holds() -> None:
    root = _package_dir()
    missing = [f.name for f in sorted(root.glob("*.py"))
               if not ast.get_docstring(ast.parse(f.read_text()))]
    assert not missing, f"modules without a docstring: {missing}"


def test_a_layout_pickled_before_the_split_still_loads(tmp_path: Path) -> None:
    # Pickles name the function that rebuilds a Layout by module: those written before the
    # package was split name shardload._api._decode_layout, which must go on resolving.
    import pickle

    import numpy as np

    import shardload

    data = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.save(tmp_path / "shard_0000.npy", data)
    layout = shardload.discover(tmp_path)
    now = pickle.dumps(layout, protocol=2)
    assert b"cshardload._layout\n_decode_layout\n" in now
    before = now.replace(b"cshardload._layout\n_decode_layout\n",
                         b"cshardload._api\n_decode_layout\n")
    old = pickle.loads(before)
    assert old == layout and old.manifest_state is layout.manifest_state
    np.testing.assert_array_equal(old.read(), data)
