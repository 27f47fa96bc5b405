"""tools/check_includes.py keeps every #include pointing down the layers: run on a small tree
laid out like src/, it refuses a storage file that includes a reader's header (storage sits
below the readers and knows no format) and accepts storage including base and readers
including storage; run on this checkout, it finds nothing."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "check_includes.py"


def _run(root: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), "--root", str(root)], capture_output=True,
                          text=True, check=False)


def _tree(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


_HEADERS = {
    "src/base/include/shardload/status.hpp": "#pragma once\n",
    "src/storage/detail/object_store.hpp": '#pragma once\n#include "shardload/status.hpp"\n',
    "src/storage/detail/read_ranges.hpp": '#pragma once\n#include "shardload/status.hpp"\n',
    "src/readers/include/shardload/formats.hpp": "#pragma once\n",
    "src/readers/detail/zarr.hpp": '#pragma once\n#include "storage/detail/read_ranges.hpp"\n',
}


def test_storage_including_a_reader_header_is_refused(tmp_path: pathlib.Path) -> None:
    root = _tree(tmp_path, {
        **_HEADERS,
        "src/storage/s3_io.cc": '#include "storage/detail/object_store.hpp"\n'
                                '#include "readers/detail/zarr.hpp"\n',
        "src/storage/detail/store_options.hpp": '#include "shardload/formats.hpp"\n',
    })
    got = _run(root)
    assert got.returncode == 1, got.stdout
    lines = got.stdout.splitlines()
    assert ('src/storage/s3_io.cc:2: layer storage includes "readers/detail/zarr.hpp" of layer '
            "readers, which is above it") in got.stdout, lines
    assert ('src/storage/detail/store_options.hpp:1: layer storage includes '
            '"shardload/formats.hpp" of layer readers') in got.stdout, lines
    assert lines[-1] == "check_includes: 2 include(s) point up the layers or outside them"


def test_storage_over_base_and_readers_over_storage_pass(tmp_path: pathlib.Path) -> None:
    root = _tree(tmp_path, {
        **_HEADERS,
        "src/storage/s3_io.cc": '#include "storage/detail/object_store.hpp"\n'
                                '#include "shardload/status.hpp"\n',
        "src/readers/zarr_reader.cc": '#include "readers/detail/zarr.hpp"\n'
                                      '#include "storage/detail/read_ranges.hpp"\n',
    })
    got = _run(root)
    assert got.returncode == 0, got.stdout


def test_base_including_storage_is_refused(tmp_path: pathlib.Path) -> None:
    root = _tree(tmp_path, {
        **_HEADERS,
        "src/base/io.cc": '#include "storage/detail/object_store.hpp"\n',
    })
    got = _run(root)
    assert got.returncode == 1
    assert 'src/base/io.cc:1: layer base includes "storage/detail/object_store.hpp" of layer storage' \
        in got.stdout


def test_this_checkout_points_down() -> None:
    got = _run(ROOT)
    assert got.returncode == 0, got.stdout
    assert not list((ROOT / "src" / "readers").glob("**/s3_*")), "object storage left in readers"


def _flagged(got) -> list[str]:
    """The FILE:LINE of each problem the check printed (its last line is the summary)."""
    return sorted(line.split(": ", 1)[0] for line in got.stdout.splitlines()[:-1])


def test_a_scheme_predicate_outside_storage_is_refused(tmp_path: pathlib.Path) -> None:
    # "Is it remote?" is storage's question: a reader, the engine or a front end asks
    # shardload/location.hpp what it needs to know. Storage itself, the command line's argument
    # parsing and the tests may call the predicates; a comment may name them.
    root = _tree(tmp_path, {
        **_HEADERS,
        "src/readers/zarr_reader.cc": "bool f(const char* p) { return is_remote_url(p); }\n",
        "src/engine/manifest.cc": "// is_http_url(p) is not asked here\n"
                                  "bool g(const char* p) { return !is_http_url (p); }\n",
        "src/base/io.cc": "bool is_remote_url(const char* path);\n",
        "src/storage/location.cc": "bool is_remote_url(const char* p) { return is_http_url(p); }\n",
        "src/cli/args.cc": "bool h(const char* p) { return is_remote_url(p); }\n",
        "src/cli/read.cc": "bool k(const char* p) { return is_remote_url(p); }\n",
        "tests/cpp/test_source.cc": "bool t(const char* p) { return is_remote_url(p); }\n",
    })
    got = _run(root)
    assert got.returncode == 1, got.stdout
    flagged = _flagged(got)
    assert flagged == ["src/base/io.cc:1", "src/cli/read.cc:1", "src/engine/manifest.cc:2",
                       "src/readers/zarr_reader.cc:1"], got.stdout
    assert ("src/readers/zarr_reader.cc:1: is_remote_url() outside the storage layer; ask the "
            "store what you need to know instead") in got.stdout
    assert "src/engine/manifest.cc:2: is_http_url() outside the storage layer" in got.stdout


def test_a_path_tested_against_a_schemes_prefix_outside_storage_is_refused(
        tmp_path: pathlib.Path) -> None:
    # The predicates' question asked of the text ("is it s3://?") is refused as they are: a
    # registered store driver's scheme would not pass it. A literal in a message, or in a
    # comment, is no test; storage, the argument parsing and the tests may test.
    root = _tree(tmp_path, {
        **_HEADERS,
        "src/engine/layout.cc": 'bool f(const std::string& p) { return p.rfind("s3://", 0) == 0; }\n',
        "src/engine/save_options.cc": 'bool g(std::string_view p) { return p.starts_with("https://"); }\n'
                                      'bool h(const std::string& p) { return p.substr(0, 5) == "s3://"; }\n'
                                      'bool k(const std::string& p) { return "http://" != p; }\n',
        "src/readers/zarr_reader.cc": 'std::string m() { return "s3:// keys hold no \'?\'"; }\n'
                                      '// p.starts_with("s3://") is not asked here\n'
                                      'int n(const std::string& p) { return p.find("//"); }'
                                      '  // p.find("s3://")\n',
        "src/storage/location.cc": 'bool s(std::string_view p) { return p.starts_with("s3://"); }\n',
        "src/cli/args.cc": 'bool a(std::string_view p) { return p.starts_with("s3://"); }\n',
        "tests/cpp/test_source.cc": 'bool t(std::string_view p) { return p.starts_with("s3://"); }\n',
    })
    got = _run(root)
    assert got.returncode == 1, got.stdout
    flagged = _flagged(got)
    assert flagged == ["src/engine/layout.cc:1", "src/engine/save_options.cc:1",
                       "src/engine/save_options.cc:2", "src/engine/save_options.cc:3"], got.stdout
    assert ("src/engine/layout.cc:1: a path tested against a scheme's prefix outside the storage "
            "layer; ask the store what you need to know instead") in got.stdout


def test_a_digit_separator_begins_no_character_literal(tmp_path: pathlib.Path) -> None:
    # C++14's 1'024 and 0xFF'FF: the ' was taken for a character literal's, so the comment
    # after it was read as code (a scheme test in it refused) until the line's end.
    root = _tree(tmp_path, {
        **_HEADERS,
        "src/engine/layout.cc": "constexpr int kN = 1'024;  // not p.starts_with(\"s3://\")\n"
                                "int m = 0xFF'FF; bool f(const S& p) { return p.rfind(\"s3://\", 0) "
                                "== 0; }\n"
                                "char q = '\\''; char u = u8'a';  // p.find(\"s3://\")\n",
    })
    got = _run(root)
    flagged = _flagged(got)
    assert flagged == ["src/engine/layout.cc:2"], got.stdout


def test_a_python_module_testing_a_paths_scheme_outside_argument_parsing_is_refused(
        tmp_path: pathlib.Path) -> None:
    # The Python package asks the binding (_core.path_traits, split_options, join_key) as C++
    # asks shardload/location.hpp: a prefix test of a served scheme (str or bytes, alone or in
    # a tuple, or compared), and a "://" looked for in a path, are refused outside _args.py. A
    # literal in a message or a comment is no test; the tests may test.
    root = _tree(tmp_path, {
        **_HEADERS,
        "python/shardload/_manifest.py":
            'def a(p):\n    return p.startswith(("http://", "https://"))\n'
            'def b(p):\n    return p.startswith((b"s3://", b"http://"))\n',
        "python/shardload/_frontend.py":
            "def c(p):\n    return '://' in p\n"
            'def d(p):\n    return p[:5] == "s3://" or "://" not in p\n',
        "python/shardload/_discover.py":
            'def e(p):\n    raise ValueError(f"{p}: applies to s3:// URLs only")\n'
            '# p.startswith("s3://") is not asked here\n'
            'def f(p):\n    return p.startswith("s3") and p.find("#") < 0  # "://" in p\n',
        "python/shardload/_args.py": 'def g(p):\n    return p.startswith("s3://")\n',
        "tests/python/test_x.py": 'def h(p):\n    return p.startswith("s3://")\n',
    })
    got = _run(root)
    assert got.returncode == 1, got.stdout
    flagged = _flagged(got)
    assert flagged == ["python/shardload/_frontend.py:2", "python/shardload/_frontend.py:4",
                       "python/shardload/_manifest.py:2", "python/shardload/_manifest.py:4"], \
        got.stdout
    assert ("python/shardload/_manifest.py:2: a path tested against a scheme's prefix outside "
            "the argument parsing; ask the store what you need to know instead") in got.stdout


def test_no_scheme_predicate_outside_storage_in_this_checkout() -> None:
    got = _run(ROOT)
    assert "outside the storage layer" not in got.stdout, got.stdout


def test_a_transport_outside_storage_is_refused(tmp_path: pathlib.Path) -> None:
    # A save reaches its destination through a Store (shardload/storage.hpp): the engine, the
    # Legate layer, the readers and the front ends neither include a transport's header nor
    # name object storage's writer. Storage and its tests may; a comment may name them.
    root = _tree(tmp_path, {
        **_HEADERS,
        "src/storage/detail/s3_io.hpp": '#pragma once\n',
        "src/storage/remote_store.cc": '#include "storage/detail/object_store.hpp"\n'
                                       "ObjectStore* s = object_store_for(u);\n",
        "src/engine/detail/save_remote.hpp": '#include "storage/detail/object_store.hpp"\n'
                                             "// was an ObjectStore* once\n",
        "src/engine/save_remote.cc": "auto s = writable_object_store(dest);\n",
        "src/legate/save_once.cc": "std::vector<ObjectEntry> e;\n",
        "src/readers/zarr_reader.cc": '#include "storage/detail/s3_io.hpp"\n',
        "python/src/core_module.cc": "Result<ObjectStore*> s;\n",
        "tests/cpp/test_store_sinks.cc": '#include "storage/detail/object_store.hpp"\n'
                                         "class Fake : public ObjectStore {};\n",
    })
    got = _run(root)
    assert got.returncode == 1, got.stdout
    flagged = _flagged(got)
    assert flagged == ["python/src/core_module.cc:1", "src/engine/detail/save_remote.hpp:1",
                       "src/engine/save_remote.cc:1", "src/legate/save_once.cc:1",
                       "src/readers/zarr_reader.cc:1"], got.stdout
    assert ('src/engine/detail/save_remote.hpp:1: "storage/detail/object_store.hpp" is a '
            "transport of the storage layer") in got.stdout
    assert ("src/engine/save_remote.cc:1: writable_object_store outside the storage layer; "
            "write, list and delete through a Store") in got.stdout


def test_no_transport_outside_storage_in_this_checkout() -> None:
    got = _run(ROOT)
    assert "transport of the storage layer" not in got.stdout, got.stdout
    assert "through a Store" not in got.stdout, got.stdout
