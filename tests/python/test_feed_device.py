"""The training feed's device batches (``Feed(device="cuda")``): without a CUDA device the
refusal naming what is missing; with one, batches in device memory equal to the host feed's bit
for bit, handed over by DLPack (kDLCUDA) without a copy. The tests that need a device skip
here, saying so; bench/device_check runs the engine's side of them on a lent GPU (cuda_tests'
DeviceBatchTest)."""

from __future__ import annotations

import ctypes
import pathlib

import numpy as np
import pytest

import shardload.feed as sf


def write_rows(d: pathlib.Path, shard_rows=(7, 0, 13, 1, 22, 5, 19), cols: int = 3) -> int:
    """Shards whose row i holds i in every column (int64)."""
    d.mkdir(parents=True, exist_ok=True)
    at = 0
    for i, r in enumerate(shard_rows):
        np.save(d / f"shard_{i:04d}.npy",
                np.repeat(np.arange(at, at + r, dtype=np.int64)[:, None], cols, axis=1))
        at += r
    return at


def no_device() -> str | None:
    """Why Feed(device="cuda") is refused here, or None where a CUDA device is usable."""
    try:
        from shardload import _feed_cuda
    except ImportError as e:
        return f"this build has no CUDA backend ({e})"
    return _feed_cuda.device_status() or None


def test_a_device_feed_without_a_cuda_device_is_refused_naming_what_is_missing(tmp_path):
    """Refused at construction, before discovery (a missing source is not looked at), with a
    RuntimeError that names the device asked for and what is missing; host batches as ever."""
    why = no_device()
    if why is None:
        pytest.skip("a CUDA device is present here: the refusal cannot happen")
    for device in ("cuda", "cuda:1"):
        with pytest.raises(RuntimeError, match=(
                rf"Feed\(device='{device}'\): batches on a CUDA device need (one, and the CUDA "
                r"runtime finds none \(no CUDA device \(cudaGetDeviceCount: .*\)\)|shardload "
                r"built with its CUDA backend).*; pass device=None for host batches")):
            sf.Feed(tmp_path / "missing", 4, device=device)
    n = write_rows(tmp_path / "d")
    for device in (None, "cpu"):
        got = [b.copy() for b in sf.Feed(tmp_path / "d", 4, shuffle="none", device=device)]
        assert all(isinstance(b, np.ndarray) for b in got)
        assert np.concatenate(got)[:, 0].tolist() == list(range(n // 4 * 4))


@pytest.mark.parametrize("device,err", [("tpu", ValueError), ("cuda:x", ValueError),
                                        ("cuda:-1", ValueError), ("cuda:", ValueError),
                                        (0, TypeError), (b"cuda", TypeError)])
def test_a_malformed_device_is_refused(tmp_path, device, err):
    write_rows(tmp_path / "d")
    with pytest.raises(err, match=r"device: expected None, 'cpu', 'cuda' or 'cuda:N'"):
        sf.Feed(tmp_path / "d", 4, device=device)


def capsule_tensor(capsule) -> tuple[int, int, int]:
    """(data pointer, device type, device id) of the DLManagedTensor in a "dltensor" capsule,
    read from the capsule itself (DLPack's layout: void* data, then int32 type and id)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    at = get(capsule, b"dltensor")
    data = ctypes.c_void_p.from_address(at).value
    kind = ctypes.c_int32.from_address(at + 8).value
    index = ctypes.c_int32.from_address(at + 12).value
    return data, kind, index


@pytest.mark.parametrize("mode", ["none", "block", "row"])
@pytest.mark.parametrize("astype", [None, "float32"])
def test_device_batches_equal_the_host_feeds_bit_for_bit(tmp_path, mode, astype):
    """On a CUDA device: every batch, of every order, on rank 1 of 2 with padding, equals the
    host feed's bit for bit (copied back), lies in device memory (cudaPointerGetAttributes) at
    the pointer its DLPack capsule carries, with kDLCUDA, and torch takes it without a copy;
    batches kept to the end stay valid, and the state moves as the host feed's."""
    why = no_device()
    if why is not None:
        pytest.skip(f"no CUDA device here ({why}): the device path runs where one is lent")
    from shardload import _feed_cuda

    d = tmp_path / "d"
    write_rows(d, cols=5)
    kw = dict(rank=1, world_size=2, shuffle=mode, seed=9, block_rows=4, window_blocks=3,
              drop_last=False, astype=astype)
    host = [b.copy() for b in sf.Feed(d, 6, **kw)]
    feed = sf.Feed(d, 6, device="cuda", **kw)
    got = list(feed)
    assert len(got) == len(host) and feed.state_dict() == {**feed.state_dict(), "epoch": 1,
                                                           "position": 0}
    for g, h in zip(got, host):
        assert g.shape == h.shape and g.dtype == h.dtype
        assert g.numpy().tobytes() == h.tobytes()
        assert g.__dlpack_device__() == (2, 0)  # kDLCUDA, device 0
        assert _feed_cuda.pointer_device(g.ptr) == 0
        assert capsule_tensor(g.__dlpack__()) == (g.ptr, 2, 0)
    try:
        import torch
    except ImportError:
        return
    t = torch.from_dlpack(got[0])
    assert t.is_cuda and t.data_ptr() == got[0].ptr
    assert torch.equal(t.cpu(), torch.from_numpy(host[0]))
