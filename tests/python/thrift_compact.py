"""A walker of Thrift's compact protocol (what Parquet's footer and page headers are written
in): every integer field's place, so that a test can rewrite one in place."""
from __future__ import annotations


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        s += 7
        if not x & 0x80:
            return v, i


def _unzigzag(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


def _zigzag(v: int) -> int:
    return (v << 1) ^ (v >> 63)


def _value(b, i, t, path, out):
    if t in (1, 2):
        return i
    if t == 3:
        return i + 1
    if t in (4, 5, 6):
        start = i
        v, i = _varint(b, i)
        out.append((tuple(path), start, i, _unzigzag(v)))
        return i
    if t == 7:
        return i + 8
    if t == 8:
        n, i = _varint(b, i)
        return i + n
    if t in (9, 10):
        h = b[i]
        i += 1
        n, et = h >> 4, h & 0x0F
        if n == 15:
            n, i = _varint(b, i)
        for k in range(n):
            i = _value(b, i, et, path + [k], out) if et not in (1, 2) else i + 1
        return i
    if t == 11:
        n, i = _varint(b, i)
        if n:
            kv = b[i]
            i += 1
            for k in range(n):
                i = _value(b, i, kv >> 4, path + [k, "k"], out)
                i = _value(b, i, kv & 0x0F, path + [k, "v"], out)
        return i
    if t == 12:
        return struct_at(b, i, path, out)
    raise ValueError(f"thrift type {t} at {i}")


def struct_at(b: bytes, i: int, path: list | None = None, out: list | None = None) -> int:
    """Walks the struct at b[i:]; appends (field path, start, end, value) of every integer to
    `out`; returns where the struct ends."""
    path = [] if path is None else path
    out = [] if out is None else out
    fid = 0
    while True:
        h = b[i]
        i += 1
        if h == 0:
            return i
        delta, t = h >> 4, h & 0x0F
        if delta:
            fid += delta
        else:
            v, i = _varint(b, i)
            fid = _unzigzag(v)
        i = _value(b, i, t, path + [fid], out)


def integers(b: bytes, i: int = 0) -> tuple[list, int]:
    out: list = []
    end = struct_at(b, i, [], out)
    return out, end


def rewrite(b: bytearray, start: int, end: int, value: int) -> None:
    """Rewrites the varint at b[start:end] to `value`, in as many bytes."""
    v = _zigzag(value)
    enc = bytearray()
    while True:
        x = v & 0x7F
        v >>= 7
        if v:
            enc.append(x | 0x80)
        else:
            enc.append(x)
            break
    if len(enc) != end - start:
        raise ValueError(f"{value} takes {len(enc)} bytes, the field {end - start}")
    b[start:end] = enc
