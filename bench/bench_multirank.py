"""2 ranks x 1 CPU against 1 rank x 2 CPUs, and discover_once against every rank discovering.

Run with the networked build (scripts/setup_multirank.sh), from the repository root:

    .venv-mr/bin/python bench/bench_multirank.py [--gb 2] [--small 10000]
    .venv-mr/bin/python bench/bench_multirank.py --threads-cpu [--realm-args ARGS] [--bind none]
                                                 [--idle-poller]

Writes two datasets under bench-data/multirank/ (once): N_BIG .npy shards of float32 summing to
--gb GB, and --small shards of 100 KB. Then runs two jobs with scripts/multirank.sh, each rank
with SHARDLOAD_MR_SYSMEM MiB: 1 rank with 2 CPUs and 2 ranks with 1 CPU each. In each job every
load is timed (launch + fill, LoadInfo; the layout from discover_once, so discovery is not
counted) --reps times after a warm-up, the best kept; the 2-rank job also times discover_once of
the small set against discover on every rank. Prints one table, ratios included.

--threads-cpu reports where each job's time goes instead of the discovery: for each rank, the
CPU seconds of each of its threads (utime + stime, /proc/PID/task/*/stat; Realm leaves its
threads unnamed, see label_threads) and their context switches, over the timed loads and over
one second in which the rank does nothing; each load's split into launch_s and fill_s; and, in
a plain process without Legate, the engine's fill of the same rows (shardload.numpy.load into
memory touched before) on 1 read thread for the rows of one of 2 ranks against 2 read threads
for all of them. Knobs, to try with the same command: --realm-args adds Realm flags to every
rank (REALM_DEFAULT_ARGS, after scripts/multirank.sh's own), --bind none runs the ranks unbound
(SHARDLOAD_MR_BIND) and --idle-poller runs the thread that spins in an idle rank (Realm's
background worker polling UCX) under SCHED_IDLE, from inside each rank.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "bench-data" / "multirank"
N_BIG = 16
TICK = os.sysconf("SC_CLK_TCK")


def make_data(gb: float, small: int) -> tuple[pathlib.Path, pathlib.Path]:
    import numpy as np

    big = DATA / f"big-{gb:g}gb"
    if not (big / "done").exists():
        big.mkdir(parents=True, exist_ok=True)
        rows = int(gb * 1e9 / 4 / 256 / N_BIG)
        for i in range(N_BIG):
            np.save(big / f"shard_{i:04d}.npy", np.full((rows, 256), i, dtype=np.float32))
        (big / "done").write_text("")
    many = DATA / f"small-{small}"
    if not (many / "done").exists():
        many.mkdir(parents=True, exist_ok=True)
        part = np.arange(100 * 1024 // 8, dtype=np.float64).reshape(-1, 16)  # 100 KiB
        for i in range(small):
            np.save(many / f"shard_{i:04d}.npy", part)
        (many / "done").write_text("")
    return big, many


def thread_sample() -> dict[str, dict]:
    """This process's threads: name, CPU seconds (user + system), context switches, cores."""
    threads = {}
    for task in pathlib.Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            status = (task / "status").read_text()
            idle_policy = os.sched_getscheduler(int(task.name)) == os.SCHED_IDLE
        except OSError:  # the thread ended meanwhile
            continue
        # The name sits in parentheses and may hold spaces or parentheses itself.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        values = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        threads[task.name] = {
            "name": name,
            "cpu_s": (int(fields[11]) + int(fields[12])) / TICK,  # utime, stime (fields 14, 15)
            "voluntary": int(values["voluntary_ctxt_switches"]),
            "involuntary": int(values["nonvoluntary_ctxt_switches"]),
            "cores": values["Cpus_allowed_list"].strip(),
            "idle_policy": idle_policy,
        }
    return threads


def thread_delta(before: dict, after: dict, wall: float) -> list[dict]:
    """Each thread's use between two samples, busiest first; threads that started meanwhile
    count from zero."""
    rows = []
    for tid, a in after.items():
        b = before.get(tid, {"cpu_s": 0.0, "voluntary": 0, "involuntary": 0})
        rows.append({"tid": int(tid), "name": a["name"], "cores": a["cores"],
                     "idle_policy": a["idle_policy"],
                     "cpu_s": a["cpu_s"] - b["cpu_s"],
                     "voluntary": a["voluntary"] - b["voluntary"],
                     "involuntary": a["involuntary"] - b["involuntary"]})
    rows.sort(key=lambda r: (-r["cpu_s"], r["tid"]))
    return [{**r, "share": r["cpu_s"] / wall if wall > 0 else 0.0} for r in rows]


def spinning_thread(seconds: float = 0.5) -> int | None:
    """The thread that uses the most CPU while this process asks nothing of its threads (on a
    shared core it may get a small share of one), if any does."""
    before = thread_sample()
    time.sleep(seconds)
    busy = [r for r in thread_delta(before, thread_sample(), seconds) if r["tid"] != os.getpid()]
    return busy[0]["tid"] if busy and busy[0]["cpu_s"] >= 0.02 else None


def worker(out: pathlib.Path, big: str, many: str, discovery: bool, profile: bool,
           reps: int, idle_poller: bool) -> None:
    import shardload

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    result: dict = {"pid": os.getpid()}
    if profile or idle_poller:
        shardload.discover_once(many)  # starts the runtime
    if idle_poller:
        # The knob that moves the ratio, as an experiment (Realm has no flag for it): the
        # thread that spins while the rank is idle, Realm's background worker polling UCX,
        # runs only when nothing else wants its core (SCHED_IDLE).
        tid = spinning_thread()
        if tid is not None:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    if profile:
        # The runtime started and idle: what its threads burn while nothing is asked of them.
        before, t0 = thread_sample(), time.perf_counter()
        time.sleep(1.0)
        wall = time.perf_counter() - t0
        result["idle"] = {"wall_s": wall, "threads": thread_delta(before, thread_sample(), wall)}
    for name, source in (("big", big), ("many", many)):
        layout = shardload.discover_once(source)
        arr, info = shardload.load(layout, info=True)  # warm-up
        del arr
        loads = []
        before, t0 = thread_sample(), time.perf_counter()
        for _ in range(reps):
            arr, info = shardload.load(layout, info=True)
            loads.append({"launch_s": info.launch_s, "fill_s": info.fill_s,
                          "total_s": info.total_s})
            del arr
        wall = time.perf_counter() - t0
        after = thread_sample()
        best = min(x["launch_s"] + x["fill_s"] for x in loads)
        result[name] = {"s": best, "bytes": info.bytes, "processors": info.processors,
                        "tiles": info.tiles, "rows": info.total_rows, "loads": loads}
        if profile:
            result[name]["wall_s"] = wall
            result[name]["threads"] = thread_delta(before, after, wall)
    if discovery:
        for label, fn in (("discover_once", shardload.discover_once),
                          ("discover_every_rank", shardload.discover)):
            t0 = time.perf_counter()
            fn(many)
            result[label] = time.perf_counter() - t0
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def run_job(ranks: int, cpus: int, big: pathlib.Path, many: pathlib.Path, discovery: bool,
            profile: bool, reps: int, realm_args: str, bind: str,
            idle_poller: bool) -> list[dict]:
    """Every rank's results, rank 0 first."""
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "SHARDLOAD_MR_CPUS": str(cpus),
               "SHARDLOAD_MR_SYSMEM": os.environ.get("SHARDLOAD_MR_SYSMEM", "2600")}
        if realm_args:
            env["REALM_DEFAULT_ARGS"] = realm_args
        if bind:
            env["SHARDLOAD_MR_BIND"] = bind
        cmd = [str(ROOT / "scripts" / "multirank.sh"), "-n", str(ranks),
               str(ROOT / ".venv-mr" / "bin" / "python"), __file__, "--worker", d, str(big),
               str(many), str(reps)] + (["--discovery"] if discovery else []) + (
                   ["--profile"] if profile else []) + (
                   ["--idle-poller"] if idle_poller else [])
        subprocess.run(cmd, check=True, env=env, timeout=1800)
        return [json.loads((pathlib.Path(d) / f"rank{r}.json").read_text())
                for r in range(ranks)]


def plain_fill(source: pathlib.Path, reps: int) -> dict:
    """The engine's fill without Legate, into memory touched before (as Legate's pool is):
    all rows on 2 threads, and the first half (what rank 0 of 2 reads) on 1 thread."""
    import numpy as np

    import shardload
    import shardload.numpy as snp

    layout = shardload.discover(str(source))
    half = layout.total_rows // 2
    out_all = np.ones(layout.shape, dtype=layout.dtype)
    out_half = np.ones((half,) + tuple(layout.shape[1:]), dtype=layout.dtype)
    times: dict = {"2 threads, all rows": [], "1 thread, half the rows": []}
    for _ in range(reps + 1):  # the first of each is a warm-up
        for label, kw in (("2 threads, all rows", {"threads": 2, "out": out_all}),
                          ("1 thread, half the rows", {"threads": 1, "out": out_half,
                                                       "row_range": (0, half)})):
            _, info = snp.load(layout, overdecompose=1, info=True, **kw)
            times[label].append(info.fill_s)
    return {k: min(v[1:]) for k, v in times.items()}


def label_threads(res: dict, cpus: int) -> dict[int, str]:
    """What each thread of a rank is. Realm leaves its threads named after the program, so they
    are told apart by what they do (checked once with gdb's backtraces): the ones that run
    while the rank is idle poll UCX (the background worker); of the others, the `cpus` busiest
    in the loads are the CPU processors, which run the load's point tasks, and the next one is
    the utility processor; the rest are OpenMPI's and PMIx's event loops."""
    pid = res["pid"]
    idle = {r["tid"]: r["cpu_s"] for r in res["idle"]["threads"]}
    # Threads that wait use nothing in the idle second (0.00 s); a poller on a busy shared core
    # may get only a tenth of it, and with -ll:bgwork 2 two of them share it.
    spin_floor = 0.02 * res["idle"]["wall_s"]
    labels: dict[int, str] = {}
    rest = []
    for r in res["big"]["threads"]:  # busiest first
        tid, name = r["tid"], r["name"]
        if tid == pid:
            labels[tid] = "Python main thread"
        elif name == "async":
            labels[tid] = "UCX async thread"
        elif name == "jemalloc_bg_thd":
            labels[tid] = "jemalloc (pyarrow)"
        elif idle.get(tid, 0.0) >= spin_floor or r["idle_policy"]:
            labels[tid] = "background worker (UCX poll)"
        else:
            rest.append(tid)
    for i, tid in enumerate(rest):
        labels[tid] = ("CPU processor" if i < cpus else
                       "utility processor" if i == cpus else "MPI/PMIx event loops")
    return labels


ORDER = ("CPU processor", "background worker (UCX poll)", "utility processor",
         "Python main thread", "UCX async thread", "MPI/PMIx event loops", "jemalloc (pyarrow)")


def by_label(part: dict, labels: dict[int, str]) -> dict[str, list]:
    """CPU s, share of the wall, voluntary and involuntary switches and thread count per label."""
    out: dict[str, list] = {}
    for r in part["threads"]:
        g = out.setdefault(labels.get(r["tid"], "other"), [0.0, 0.0, 0, 0, 0])
        g[0] += r["cpu_s"]
        g[1] += r["share"]
        g[2] += r["voluntary"]
        g[3] += r["involuntary"]
        g[4] += 1
    return out


def print_threads(title: str, part: dict, labels: dict[int, str]) -> None:
    print(f"  {title}: {part['wall_s']:.2f} s of wall time")
    groups = by_label(part, labels)
    total = 0.0
    for label in ORDER + tuple(sorted(set(groups) - set(ORDER))):
        if label not in groups:
            continue
        cpu, share, vol, invol, n = groups[label]
        total += cpu
        name = f"{label} x{n}" if n > 1 else label
        print(f"    {name:<32}{cpu:>6.2f} CPU s {share:>5.0%} of the wall, switches "
              f"{vol:>5} voluntary {invol:>5} involuntary")
    print(f"    {'all threads':<32}{total:>6.2f} CPU s {total / part['wall_s']:>5.0%} of the wall")


def threads_report(jobs: dict[str, tuple[int, list[dict]]], plain: dict, small: int,
                   reps: int) -> None:
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}")
    for job, (cpus, ranks) in jobs.items():
        for r, res in enumerate(ranks):
            labels = label_threads(res, cpus)
            cores = sorted({t["cores"] for t in res["big"]["threads"]})
            idle_policy = sorted({labels[t["tid"]] for t in res["big"]["threads"]
                                  if t["idle_policy"]})
            idled = f"; under SCHED_IDLE: {', '.join(idle_policy)}" if idle_policy else ""
            print(f"{job}, rank {r} (threads allowed on cores {' '.join(cores)}{idled})")
            print_threads("idle (1 s of sleep in Python, the runtime started)", res["idle"],
                          labels)
            for name, label in (("big", f"{N_BIG} npy shards"), ("many", f"{small} x 100 KiB")):
                x = res[name]
                launch = statistics.median(t["launch_s"] for t in x["loads"])
                fill = statistics.median(t["fill_s"] for t in x["loads"])
                total = statistics.median(t["total_s"] for t in x["loads"])
                print(f"  {label}, {reps} loads ({x['tiles']} tiles): median launch_s {launch:.3f},"
                      f" fill_s {fill:.3f}, the whole call {total:.3f} s")
                print_threads("during the loads", x, labels)
    for name, times in plain.items():
        print(f"plain process, the engine's fill of {name} (shardload.numpy into memory "
              "touched before, best of the reps):")
        for label, s in times.items():
            print(f"  {label:<26}{s:.3f} s")
        one, two = times["1 thread, half the rows"], times["2 threads, all rows"]
        print(f"  1 thread on half / 2 threads on all: {one / two:.2f}x")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4], "--discovery" in sys.argv,
               "--profile" in sys.argv, int(sys.argv[5]), "--idle-poller" in sys.argv)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gb", type=float, default=2.0)
    p.add_argument("--small", type=int, default=10000)
    p.add_argument("--reps", type=int, default=3, help="timed loads per dataset (default 3)")
    p.add_argument("--threads-cpu", action="store_true",
                   help="report each rank's CPU seconds per thread, the launch/fill split and "
                        "the engine's fill in a plain process, instead of the discovery")
    p.add_argument("--realm-args", default="",
                   help="Realm flags for every rank, after scripts/multirank.sh's own")
    p.add_argument("--bind", choices=("core", "none"), default="",
                   help="bind each rank of the 2-rank job to cores of its own (the default of "
                        "scripts/multirank.sh) or not at all")
    p.add_argument("--idle-poller", action="store_true",
                   help="experiment: in every rank, the thread that spins while the rank is "
                        "idle (Realm's UCX poller) runs under SCHED_IDLE")
    a = p.parse_args()
    big, many = make_data(a.gb, a.small)
    knobs = (a.reps, a.realm_args, a.bind, a.idle_poller)
    one = run_job(1, 2, big, many, False, a.threads_cpu, *knobs)
    two = run_job(2, 1, big, many, not a.threads_cpu, a.threads_cpu, *knobs)
    print(f"{'dataset':<28}{'1 rank x 2 CPUs':>18}{'2 ranks x 1 CPU':>18}{'ratio 2r/1r':>14}")
    for name, label in (("big", f"{N_BIG} npy shards, {a.gb:g} GB"),
                        ("many", f"{a.small} x 100 KiB npy")):
        s1, s2 = one[0][name]["s"], two[0][name]["s"]
        gb = one[0][name]["bytes"] / 1e9
        print(f"{label:<28}{s1:>9.3f} s {gb / s1:>4.1f} GB/s{s2:>9.3f} s {gb / s2:>4.1f} GB/s"
              f"{s2 / s1:>10.2f}x")
    if a.threads_cpu:
        plain = {f"{N_BIG} npy shards": plain_fill(big, a.reps),
                 f"{a.small} x 100 KiB": plain_fill(many, a.reps)}
        threads_report({"1 rank x 2 CPUs": (2, one), "2 ranks x 1 CPU": (1, two)}, plain,
                       a.small, a.reps)
        return
    d1, d2 = two[0]["discover_once"], two[0]["discover_every_rank"]
    print(f"discovery of {a.small} shards on 2 ranks: discover_once {d1:.2f} s, discover on "
          f"every rank {d2:.2f} s ({d2 / d1:.2f}x)")


if __name__ == "__main__":
    main()
