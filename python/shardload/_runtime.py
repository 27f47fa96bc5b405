"""What the Legate wheels need to start on this machine, arranged before Legate loads.

The legate and cupynumeric wheels are CUDA builds: liblegate.so lists ``libcuda.so.1`` (the
NVIDIA driver) as a needed library, so without a driver ``import cupynumeric`` fails with
"libcuda.so.1: cannot open shared object file". An installed shardload carries the stand-in
driver of tools/nocuda (``_nocuda/libcuda.so.1``, whose every entry point answers "no device")
and loads it only where the dynamic linker finds no ``libcuda.so.1`` of its own; Legate then
runs on CPUs. Its automatic configuration fails without GPUs on small machines, so a CPU
configuration is chosen too, unless the user set ``LEGATE_CONFIG``.

``SHARDLOAD_NO_STANDIN=1`` turns all of this off.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import logging
import os
import re
import sys
import threading
from typing import Iterator, MutableMapping, Optional


def _product_dir() -> str:
    """Where CMake installed the products: beside the extension modules, which in an editable
    install (pip install -e .) is site-packages/shardload/ while this file is in the source tree."""
    spec = importlib.util.find_spec("shardload._core")
    if spec is not None and spec.origin:
        return os.path.dirname(os.path.abspath(spec.origin))
    return os.path.dirname(os.path.abspath(__file__))


PRODUCT_DIR = _product_dir()
PROGRAM = os.path.join(PRODUCT_DIR, "bin", "shardload")
# The same program built without Legate: what the command runs where the legate extra is absent.
CORE_PROGRAM = os.path.join(PRODUCT_DIR, "bin", "shardload-core")


def legate_installed() -> bool:
    """Whether the legate package (the ``legate`` extra) is installed: only then does anything
    here load a driver, a CUDA runtime or set a Legate configuration."""
    return importlib.util.find_spec("legate") is not None


LEGATE_MISSING = ("needs Legate and cuPyNumeric, which are not installed: pip install "
                  "'shardload[legate]' (shardload.numpy, shardload.jax and shardload.dask read "
                  "without them)")
STANDIN_DIR = os.path.join(PRODUCT_DIR, "_nocuda")
STANDIN = os.path.join(STANDIN_DIR, "libcuda.so.1")

_log = logging.getLogger("shardload")

# What this process arranged, for the user who wants to know (and for the tests).
standin_loaded = False
legate_config_default: Optional[str] = None


# The CUDA runtime of the nvidia-cuda-runtime wheel: Legate's libhdf5_vfd_gds.so.1 needs
# libcudart.so.13 and no RPATH of the legate wheel names a folder that has it, so a machine
# without the CUDA toolkit cannot load liblegate.so unless someone loads it first.
CUDART = os.path.join(os.path.dirname(PRODUCT_DIR), "nvidia", "cu13", "lib", "libcudart.so.13")

_found: dict = {}


def library_found(soname: str) -> bool:
    """Whether the dynamic linker finds ``soname`` on its own; decided once per process, before
    this module loads anything by that name."""
    if soname not in _found:
        try:
            ctypes.CDLL(soname)
            _found[soname] = True
        except OSError:
            _found[soname] = False
    return _found[soname]


def driver_found() -> bool:
    """Whether the dynamic linker finds a ``libcuda.so.1`` (what liblegate.so asks it for)."""
    return library_found("libcuda.so.1")


# What the stand-in's cuGetErrorString says for CUDA_ERROR_NO_DEVICE (tools/nocuda/nocuda.c).
_STANDIN_MARK = b"nocuda stand-in driver"


def standin_is_the_driver() -> bool:
    """Whether the ``libcuda.so.1`` the dynamic linker finds is the stand-in of tools/nocuda (a
    development tree's scripts/env.sh puts it on LD_LIBRARY_PATH): then there is no driver and
    Legate needs a CPU configuration as much as where shardload loads the stand-in itself. Asks
    its cuGetErrorString, which needs no cuInit and which a real driver answers without it too."""
    if "standin" not in _found:
        is_standin = False
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            describe = lib.cuGetErrorString
            describe.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
            describe.restype = ctypes.c_int
            text = ctypes.c_char_p()
            is_standin = (describe(100, ctypes.byref(text)) == 0 and text.value is not None
                          and _STANDIN_MARK in text.value)
        except (OSError, AttributeError):
            pass
        _found["standin"] = is_standin
    return bool(_found["standin"])


def needs_cudart() -> bool:
    return os.path.exists(CUDART) and not library_found("libcudart.so.13")


_needs_standin: Optional[bool] = None


def needs_standin() -> bool:
    # Decided once: after the stand-in is loaded, libcuda.so.1 is found by its SONAME.
    global _needs_standin
    if _needs_standin is None:
        if os.environ.get("SHARDLOAD_NO_STANDIN") == "1" or not os.path.exists(STANDIN):
            _needs_standin = False  # turned off, or a development tree (scripts/env.sh does it)
        else:
            _needs_standin = not driver_found()
    return _needs_standin


def cpu_config() -> str:
    """A LEGATE_CONFIG for CPUs only: the cores this process may use, one of them left to the
    utility processor and Python where there are more than two (16 at most), and half of the
    memory available now for Legate's system memory."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    cpus = cores if cores <= 2 else min(cores - 1, 16)
    sysmem_mib = 4000
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    sysmem_mib = max(256, int(line.split()[1]) // 1024 // 2)
                    break
    except OSError:
        pass
    # gpu=6,threads=5: the CUDA module's "no device found" and Realm's thread-pinning warnings
    # are expected here and say nothing to the user.
    return f"--cpus {cpus} --utility 1 --gpus 0 --sysmem {sysmem_mib} --logging gpu=6,threads=5"


def default_legate_config(env: MutableMapping[str, str]) -> Optional[str]:
    """Sets LEGATE_CONFIG in ``env`` to a CPU configuration where the user set none."""
    if env.get("LEGATE_CONFIG"):
        return None
    env["LEGATE_CONFIG"] = cpu_config()
    return env["LEGATE_CONFIG"]


def prepare_process() -> None:
    """At ``import shardload``: preload the stand-in where no driver exists, so that liblegate's
    needed ``libcuda.so.1`` is satisfied by its SONAME, and give Legate a CPU configuration."""
    global standin_loaded, legate_config_default
    if not legate_installed():
        return
    if needs_cudart():
        ctypes.CDLL(CUDART, mode=ctypes.RTLD_GLOBAL)
    if not needs_standin():
        if os.environ.get("SHARDLOAD_NO_STANDIN") != "1" and standin_is_the_driver():
            legate_config_default = default_legate_config(os.environ)
        return
    ctypes.CDLL(STANDIN, mode=ctypes.RTLD_GLOBAL)
    standin_loaded = True
    if os.path.exists("/dev/nvidiactl"):
        _log.warning(
            "shardload: /dev/nvidiactl exists but no libcuda.so.1 is on the library path; "
            "Legate runs on CPUs. Install the NVIDIA driver's libraries to use the GPUs."
        )
    legate_config_default = default_legate_config(os.environ)
    _log.info(
        "shardload: no NVIDIA driver found; loaded the stand-in %s so that Legate runs on CPUs%s",
        STANDIN,
        f", with LEGATE_CONFIG={legate_config_default!r} (set LEGATE_CONFIG to choose another)"
        if legate_config_default
        else "",
    )


def program_environment(env: MutableMapping[str, str]) -> None:
    """The same for the ``shardload`` program, which the dynamic linker loads before any code
    runs: the stand-in's folder goes on LD_LIBRARY_PATH (after the user's entries, so a driver
    there wins); so does the CUDA runtime's where the toolkit's is not found. NCCL needs
    nothing: the program's RPATH names the nvidia-nccl wheel's folder."""
    dirs = []
    if needs_cudart():
        dirs.append(os.path.dirname(CUDART))
    if needs_standin():
        dirs.append(STANDIN_DIR)
        default_legate_config(env)
    if dirs:
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = ":".join(([old] if old else []) + dirs)


def _legate_first_line(text: str) -> str:
    """The line of Legate's start-up report that says what went wrong: the bottom-most
    exception of its "Exception stack", without the C++ type; else the first line that is not
    part of the banner (an ImportError's own message, say)."""
    lines = [re.sub(r"^LEGATE ERROR:\s?", "", line).strip() for line in text.splitlines()]
    for line in lines:
        found = re.match(r"#0 [\w:<>]+: (.+)", line)
        if found:
            return found.group(1)
    banner = ("System:", "Legate version:", "Legion version:", "Configure options:",
              "LEGATE_CONFIG:", "Exception stack", "Stack trace")
    for line in lines:
        if line and not re.fullmatch(r"[=-]+", line) and not line.startswith(banner):
            return line
    return "no reason given"


def start_failure(error: BaseException) -> str:
    """A few lines for a Legate that did not start: Legate's own first line, the
    configuration it was given and what to do, instead of its 130-line report."""
    config = os.environ.get("LEGATE_CONFIG")
    given = f"LEGATE_CONFIG={config!r}" if config else "no LEGATE_CONFIG (automatic configuration)"
    return (
        f"Legate could not start: {_legate_first_line(str(error))}\n"
        f"It was given {given}. Set LEGATE_CONFIG to what this machine has, e.g. "
        f"LEGATE_CONFIG={cpu_config()!r} for its CPUs only "
        "(see docs/install.md, \"Running without a GPU\")."
    )


# ---- what Legate writes while it starts ---------------------------------------------------------
# An unknown flag in LEGATE_CONFIG makes Legate print its whole usage (over 160 lines) to stderr
# and call exit(1) from inside its start: no exception reaches Python, and Python's own exit
# handlers do not run. So while the runtime starts, stderr is a pipe read by a thread (whole
# lines go on at once, until Legate's error report begins, which is held), and a C exit handler
# (__cxa_atexit, which exit() runs) prints start_failure's two lines instead of that usage.
_REPORT = b"== LEGATE ERROR:"


class _Held:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.text = b""
        self.holding = False
        self.active = False
        self.done = threading.Event()
        self.stderr = -1


_held = _Held()
_EXIT_HOOK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except InterruptedError:
            continue
        except OSError:
            return


def _read_pipe(fd: int) -> None:
    h = _held
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                break
            with h.lock:
                h.text += chunk
                while h.active and not h.holding and b"\n" in h.text:
                    line, _, rest = h.text.partition(b"\n")
                    if line.startswith(_REPORT):
                        h.holding = True
                        break
                    _write_all(h.stderr, line + b"\n")
                    h.text = rest
                if not h.active:  # after the start: a copy of the pipe Legate kept
                    _write_all(h.stderr, h.text)
                    h.text = b""
    finally:
        os.close(fd)
        h.done.set()


def _end_hold() -> bytes:
    """stderr again, and what the reader held."""
    h = _held
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(h.stderr, 2)  # the pipe's last write end: the reader sees its end
    h.done.wait(2)  # a write end Legate duplicated would keep it open: no longer
    with h.lock:
        h.active = False
        held, h.text = h.text, b""
    return held


def _first_report_line(held: bytes) -> str:
    for line in held.splitlines():
        if line.startswith(_REPORT) and line[len(_REPORT):].strip():
            return line[len(_REPORT):].strip().decode(errors="replace")
    return ""


@_EXIT_HOOK
def _exit_during_start(_arg: object) -> None:
    if not _held.active:
        return
    held = _end_hold()
    first = _first_report_line(held)
    if b"Usage: LEGATE_CONFIG" in held and first:
        _write_all(2, (start_failure(RuntimeError(first)) + "\n").encode())
    else:
        _write_all(2, held)


# The exit handler is registered under a handle of its own (a DSO handle, to glibc) so that
# __cxa_finalize can run and remove it once the start is over: called after the interpreter
# has finalized, at the process's normal exit, a Python callback would crash it.
_exit_hook_handle = ctypes.c_char()


@contextlib.contextmanager
def held_start_output() -> Iterator[None]:
    """Holds what the runtime's start writes to stderr (see above) while the block runs, then
    passes it on as it was; an exit during the block prints start_failure's lines instead of
    Legate's usage."""
    h = _held
    if h.stderr >= 0:  # the runtime starts once; a second call holds nothing
        yield
        return
    try:
        libc = ctypes.CDLL(None)
        register, finalize = libc.__cxa_atexit, libc.__cxa_finalize
        sys.stderr.flush()
        saved = os.dup(2)  # fails where no stderr is open: nothing to hold then
    except (AttributeError, OSError, ValueError):
        yield  # no C exit handler to be had (not glibc), or no stderr: Legate's own output
        return
    try:
        read_end, write_end = os.pipe()
    except OSError:  # no descriptor left: Legate's own output
        os.close(saved)
        yield
        return
    h.stderr = saved
    handle = ctypes.c_void_p(ctypes.addressof(_exit_hook_handle))
    register(_exit_during_start, None, handle)
    h.active = True
    threading.Thread(target=_read_pipe, args=(read_end,), name="shardload-start-output",
                     daemon=True).start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        _write_all(2, _end_hold())
        finalize(handle)  # runs the handler now (inactive: it does nothing) and drops it
