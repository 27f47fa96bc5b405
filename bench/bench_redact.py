#!/usr/bin/env python
"""Redaction's cost against its text's size: each crafted shape at 0.5, 1 and 2 MB, one run.

    python bench/bench_redact.py [--sizes 524288,1048576,2097152] [--reps 3]

Each shape is one mark followed by many others (an '@' spelling and then scheme marks, a query
key that ';' does not end, a long secret whose start the text repeats), the inputs that once cost
the square of their length. Prints the best of --reps per size and the ratio of each time to the
one at the first size: linear work doubles with the size.
"""
import argparse
import time

import shardload

SHAPES = {
    "'@' then 'http:' x k": ("@", "http:", ""),
    "'%40' then 'https:' x k": ("%40", "https:", ""),
    "U+FF20 then 's3:' x k": ("\uff20", "s3:", "="),
    "'x@' then 'http:\\' x k": ("x@", "http:\\", ""),
    "'x@' then 'http: ' x k": ("x@", "http: ", "@"),
    "'x@' then 'http;' x k": ("x@", "http;", "="),
    "'?' then 'a;' x k, '=v'": ("?", "a;", "=v"),
    "'@=' then ';a' x k, '='": ("@=", ";a", "="),
    "long token, then its start": ("http://", "a", "b@h " + "a" * 1000),
    "long query secret, then its start": ("http://h/?token=", "a", "b " + "a" * 1000),
    "'http://u:pw@h/ ' x k": ("", "http://u:Pw9secretZQ@h/ ", ""),
    "'?' then '%26a' x k, '=v'": ("?", "%26a", "=v"),
    "'?u=' then '%253Fa%253B' x k, '%253Dv'": ("?u=", "%253Fa%253B", "%253Dv"),
    "'?u=' then '\\u0026a' x k, '=v'": ("?u=", "\\u0026a", "=v"),
}


def text(shape, size):
    head, unit, tail = shape
    return (head + unit * ((size - len(head)) // len(unit) + 1))[:size] + tail


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="524288,1048576,2097152")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("| shape | " + " | ".join(f"{s / 2**20:g} MB" for s in sizes) + " | ratios |")
    print("| --- |" + " --- |" * (len(sizes) + 1))
    for name, shape in SHAPES.items():
        best = []
        for size in sizes:
            t = text(shape, size)
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                shardload.redact_secrets(t)
                times.append(time.perf_counter() - t0)
            best.append(min(times))
        ratios = " / ".join(f"{b / best[0]:.1f}" for b in best)
        print(f"| {name} | " + " | ".join(f"{b:.3f} s" for b in best) + f" | {ratios} |", flush=True)


if __name__ == "__main__":
    main()
