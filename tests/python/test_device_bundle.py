"""The device check's bundle (bench/device_check) is built from the CMake targets, so a source
file moved or added in a layer reaches it with nothing kept by hand: bundle.sh and the bundle's
CMakeLists.txt name no source of the engine and there are no stubs; and, in the tree bundle.sh
configures, device_check and cuda_tests link every object and library that libshardload.so
links, plus the CUDA backend's and the test doubles' objects. The link lines are the ones the
generated build runs (`ninja -t commands`), read without compiling anything.

Before, bundle.sh compiled a hand-kept list of sources beside stubs.cc; six of its ten commits
were link fixes after a file moved (src/engine/lanes.cc, src/base/bytes.cc, ...)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bench" / "device_check"

# bundle.sh's configure: the options that leave out the libraries that do not link statically.
OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DSHARDLOAD_DEVICE_BUNDLE=ON", "-DSHARDLOAD_WITH_CUDA=ON",
           "-DSHARDLOAD_WITH_ARROW=OFF", "-DSHARDLOAD_WITH_HTTP=OFF", "-DSHARDLOAD_WITH_HDF5=OFF",
           "-DSHARDLOAD_WITH_LEGATE=OFF", "-DSHARDLOAD_PYTHON=OFF", "-DSHARDLOAD_TESTS=OFF",
           "-DSHARDLOAD_BENCH=OFF"]


def test_the_bundle_keeps_no_list_of_sources_and_no_stubs() -> None:
    named = {}
    for path in sorted(BUNDLE.iterdir()):
        if path.suffix in {".sh", ".txt", ".cc", ".cu"}:
            found = re.findall(r"\bsrc/[\w/]+\.(?:cc|cu)\b", path.read_text(encoding="utf-8"))
            if found:
                named[path.name] = found
    assert not named, f"sources named by hand (CMake's targets list them): {named}"
    assert not (BUNDLE / "stubs.cc").exists(), "stubs.cc stands in for code the bundle leaves out"
    # The options above are bundle.sh's own.
    script = (BUNDLE / "bundle.sh").read_text(encoding="utf-8")
    for option in OPTIONS[1:]:
        assert option.split("=")[0] in script, option


def _cmake() -> str | None:
    for candidate in (ROOT / ".venv" / "bin" / "cmake", shutil.which("cmake")):
        if candidate and os.access(candidate, os.X_OK):
            out = subprocess.run([str(candidate), "--version"], capture_output=True, text=True,
                                 check=False).stdout
            m = re.search(r"version (\d+)\.(\d+)", out)
            if m and (int(m[1]), int(m[2])) >= (3, 26):
                return str(candidate)
    return None


def _nvcc() -> str | None:
    for candidate in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _link_inputs(tree: pathlib.Path, target: str) -> set[str]:
    """The objects and libraries on the link line ninja runs for `target`."""
    out = subprocess.run(["ninja", "-C", str(tree), "-t", "commands", target], capture_output=True,
                         text=True, check=True).stdout
    words = out.strip().splitlines()[-1].split()
    output = words[words.index("-o") + 1]
    return {w for w in words if not w.startswith("-")
            and (w.endswith((".o", ".a", ".so")) or ".so." in w)} - {output}


def test_the_bundle_links_everything_libshardload_links(tmp_path: pathlib.Path) -> None:
    cmake, nvcc = _cmake(), _nvcc()
    if cmake is None or nvcc is None or shutil.which("ninja") is None:
        pytest.skip("needs CMake 3.26 or later, nvcc and ninja (as bundle.sh does)")
    tree = tmp_path / "tree"
    configured = subprocess.run(
        [cmake, "-S", str(ROOT), "-B", str(tree), "-G", "Ninja", f"-DCMAKE_CUDA_COMPILER={nvcc}",
         *OPTIONS], capture_output=True, text=True, check=False)
    assert configured.returncode == 0, configured.stdout[-3000:] + configured.stderr[-3000:]
    library = _link_inputs(tree, "shardload_lib")
    # The library's own objects, by the folder of the layer they come from.
    layers = {m[1] for word in library if (m := re.match(r"src/(\w+)/CMakeFiles/", word))}
    assert {"base", "storage", "readers", "engine"} <= layers, sorted(library)
    # What the check adds: the CUDA backend and synth, compiled in the bundle's own targets.
    upper = {"cuda_backend.cu.o", "cufile.cc.o", "synth.cc.o"}
    listed = (tree / "device_bundle" / "sources.txt").read_text(encoding="utf-8").split()
    for program in ("device_check", "cuda_tests"):
        inputs = _link_inputs(tree, program)
        static = {pathlib.Path(w).name for w in inputs if w.endswith(".a")}
        missing = {w for w in library if w not in inputs and
                   not (w.endswith(".a") and pathlib.Path(w).name in static)}
        assert not missing, f"{program} does not link what libshardload.so links: {sorted(missing)}"
        names = {pathlib.Path(w).name for w in inputs}
        assert upper <= names, f"{program}: {sorted(upper - names)} not linked"
        shared = sorted(w for w in inputs if ".so" in pathlib.Path(w).name)
        assert not shared, f"{program} links shared libraries the GPU image need not have: {shared}"
    # sources.txt (what bundle.sh reports) names the source of every object linked.
    objects = {re.sub(r"\.o$", "", pathlib.Path(w).name) for w in library if w.endswith(".o")}
    sources = {pathlib.Path(p).name for p in listed if p.startswith("/")}
    assert objects <= sources, sorted(objects - sources)
