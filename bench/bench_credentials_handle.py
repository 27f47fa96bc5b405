#!/usr/bin/env python
"""Sealing's cost now that a credentials handle is keyed by scrypt (16 MiB, N=2^14, r=8).

    python bench/bench_credentials_handle.py [--n 20] [--reps 2000]

Prints, in milliseconds a seal (`shardload._core.seal_store_url`):
  - first: credentials this process never sealed (each pays scrypt once);
  - again: the same URL sealed again (scrypt's key kept: a look-up and an HMAC);
  - presigned: URLs that differ only in their signature (64 hex digits, left out of scrypt's
    input, so they share one key) with a password and a short token each;
  - signed: CloudFront-style URLs, each its own short-run signature (base64 cut by '~' and
    '%2B'), left out of scrypt's input as a signature, so they share one key too;
  - no secret: a URL with nothing to seal, for scale;
and the scrypt of one guess alone (Python's hashlib, the same parameters): what an attacker pays
per guess of a password from a handle, per core.
"""
import argparse
import hashlib
import time

from shardload import _core


def per_seal_ms(urls):
    t = time.perf_counter()
    for u in urls:
        _core.seal_store_url(u)
    return (time.perf_counter() - t) * 1000 / len(urls)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="distinct credentials sealed first")
    ap.add_argument("--reps", type=int, default=2000, help="seals of the cheap cases")
    a = ap.parse_args()
    run = time.time_ns()
    first = [f"https://u:pw{run}x{i}@h.example/d/x.npy" for i in range(a.n)]
    s3_first = [f"s3://b/x.npy?endpoint_override=h:9000&scheme=http&access_key=AK"
                f"&secret_key=sk{run}x{i}" for i in range(a.n)]
    print(f"first (https user:password)  {per_seal_ms(first):8.3f} ms")
    print(f"first (s3 secret_key)        {per_seal_ms(s3_first):8.3f} ms")
    print(f"again (the same URL)         {per_seal_ms([first[0]] * a.reps):8.3f} ms")
    signed = [f"https://u:pw{run}@h.example/d/{i}.npy?token=short&X-Amz-Signature={i:064x}"
              for i in range(a.reps)]
    print(f"presigned (one password)     {per_seal_ms(signed):8.3f} ms")
    cut = [f"https://h.example/d/{i}.npy?Expires=1&Signature={run}~a%2B{i:x}~b&Key-Pair-Id=K"
           for i in range(a.reps)]
    print(f"signed (short-run signatures) {per_seal_ms(cut):7.3f} ms")
    print(f"no secret                    {per_seal_ms(['https://h.example/x.npy'] * a.reps):8.3f} ms")
    t = time.perf_counter()
    for i in range(a.n):
        hashlib.scrypt(f"guess{i}".encode(), salt=b"s", n=1 << 14, r=8, p=1, maxmem=64 << 20,
                       dklen=32)
    print(f"one guess (hashlib.scrypt)   {(time.perf_counter() - t) * 1000 / a.n:8.3f} ms")


if __name__ == "__main__":
    main()
