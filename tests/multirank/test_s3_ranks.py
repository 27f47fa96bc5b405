"""Object storage on 2 ranks: s3:// sources against one moto S3 server that this module starts
on 127.0.0.1, reached by both ranks (the endpoint in storage_options, the credentials in the
environment of s3_server.CLIENT_ENV), compared with numpy, pyarrow and zarr run here.

Three jobs (each starts Legate on both ranks, which costs more than the loads): every format
and the manifest, discovery and batches (one job); `shardload read`; faults. The requests each
rank makes are told apart by giving each rank its own proxy (tests/python/s3_fault_proxy.py)
in front of the server."""

from __future__ import annotations

import io
import pathlib
import sys
import threading
import time

import numpy as np
import pytest
from conftest import BUILD, RANKS, python_job, run_job, write_spec
from data import RAGGED, dataset, write_shards
from plan import split_between_ranks, tiles

# The object-storage helpers of the single-process tests: the server and the proxy.
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1] / "python"))
pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup_multirank.sh")
import s3_server  # noqa: E402
from s3_fault_proxy import FaultProxy, Rule  # noqa: E402

FORMATS = ["npy", "raw", "parquet", "arrow", "zarr"]
TOTAL = sum(RAGGED)  # 35 rows: divisible by neither 2 tiles nor 8
# How to speak to the store, besides the endpoint (the default retries and time limits).
OPTIONS = {"scheme": "http", "region": "us-east-1"}
# For the faults: a refusal whose body does not fit its range is retried; twice is enough.
FEW_ATTEMPTS = {"max_attempts": "2", "backoff_ms": "10"}


@pytest.fixture(scope="module")
def server():
    with s3_server.serving() as endpoint:
        yield endpoint


def _options(endpoint: str, **more: str) -> dict:
    return {**OPTIONS, "endpoint_override": endpoint, **more}


def _ok(job, name: str) -> list[dict]:
    found = [r.results()[name] for r in job.ranks]
    for rank, result in zip(job.ranks, found):
        assert result["ok"], f"rank {rank.index}: {result}"
    return found


def _same_error(job, name: str) -> dict:
    found = [r.results()[name] for r in job.ranks]
    assert not any(f["ok"] for f in found), found
    assert len({(f["type"], f["message"]) for f in found}) == 1, found
    return found[0]


def _job_through_a_proxy_per_rank(server, base: pathlib.Path, ops: list[dict]):
    """Runs s3_cases.py with ``ops`` on every rank, each rank reaching the store through a
    proxy of its own (AWS_ENDPOINT_URL_S3 on that rank: URLs that name no endpoint go there),
    so each proxy's log is what that rank asked. Returns the job and the proxies (closed)."""
    proxies = [FaultProxy(server) for _ in range(RANKS)]
    rank_env = {str(r): {"AWS_ENDPOINT_URL_S3": f"http://{p.endpoint}"}
                for r, p in enumerate(proxies)}
    spec = write_spec(base / "spec.json", {"ops": ops, "rank_env": rank_env})
    try:
        job = python_job(base / "out", "s3_cases.py", str(spec), env=s3_server.CLIENT_ENV,
                         timeout=300)
    finally:
        for p in proxies:
            p.close()
    assert job.rc == 0, job.describe()
    return job, proxies


# ---- every format, discovery on one rank, the manifest, batches: one job ----------------------

@pytest.fixture(scope="module")
def loaded(server, tmp_path_factory):
    base = tmp_path_factory.mktemp("s3")
    bucket = s3_server.Bucket(server, prefix="mr-")
    opts = _options(server)
    rng = np.random.default_rng(23)
    oracle, ops = {}, []
    for fmt in FORMATS:
        parts = dataset(rng, fmt, RAGGED)
        kwargs = write_shards(base / fmt, fmt, parts)
        bucket.upload_tree(fmt, base / fmt)
        whole = np.concatenate(parts)
        for k in (1, 4):  # 2 tiles or 7 of 5 rows: tiles span objects, chunks and row groups
            ops.append({"name": f"{fmt}-K{k}", "op": "load", "source": bucket.url(f"{fmt}/"),
                        "kwargs": {**kwargs, "overdecompose": k, "storage_options": opts}})
            oracle[f"{fmt}-K{k}"] = whole
        ops.append({"name": f"{fmt}-rows", "op": "load", "source": bucket.url(f"{fmt}/"),
                    "kwargs": {**kwargs, "overdecompose": 4, "row_range": [3, 27],
                               "storage_options": opts}})
        oracle[f"{fmt}-rows"] = whole[3:27]
        if fmt == "npy":
            npy = parts
    # One Zarr v3 store of 37 rows in chunks of 4 (the last one partial).
    import zarr

    store = zarr.create_array(base / "one.zarr", shape=(37, 2), dtype="float32", chunks=(4, 2),
                              zarr_format=3)
    oracle["store"] = rng.standard_normal((37, 2)).astype(np.float32)
    store[...] = oracle["store"]
    bucket.upload_tree("one.zarr", base / "one.zarr")
    ops.append({"name": "store", "op": "load", "source": bucket.url("one.zarr"),
                "kwargs": {"overdecompose": 3, "storage_options": opts}})
    # A list of URLs (each rank discovers it: only a str source is discovered once).
    urls = [bucket.url(f"npy/shard_{i:04d}.npy") for i in (6, 2, 4)]
    ops.append({"name": "list", "op": "load", "source": urls,
                "kwargs": {"overdecompose": 2, "storage_options": opts}})
    oracle["list"] = np.concatenate([npy[6], npy[2], npy[4]])

    # Keys whose characters SigV4 escapes (space, '+', '%', brackets, non-ASCII), a glob's
    # last part naming one of them as spelled: each rank's tiles sign requests for them.
    odd = "odd dir+%41[1]~\u00e9/"
    for i, p in enumerate(npy):
        buf = io.BytesIO()
        np.save(buf, p)
        bucket.put(f"{odd}s[{i}]+.npy", buf.getvalue())
    ops.append({"name": "odd", "op": "load", "source": bucket.url(odd),
                "kwargs": {"pattern": "s[{}]+.npy", "overdecompose": 4,
                           "storage_options": opts}})
    oracle["odd"] = np.concatenate(npy)
    ops.append({"name": "odd-one", "op": "load", "source": bucket.url(f"{odd}s[3]+.npy"),
                "kwargs": {"overdecompose": 2, "storage_options": opts}})
    oracle["odd-one"] = npy[3]

    # Discovery on one rank, each rank's tiles reading their own objects (each rank through
    # a proxy of its own: the URL names no endpoint).
    ops.append({"name": "per-rank", "op": "load", "source": bucket.url("npy/"),
                "once": {"storage_options": OPTIONS}, "kwargs": {"overdecompose": 1}})
    oracle["per-rank"] = oracle["npy-K1"]

    # The manifest: index on both ranks, then discover_once from it, checked and trusted.
    bucket.upload_tree("man", base / "npy")
    ops += [{"name": "index", "op": "index", "source": bucket.url("man/"),
             "kwargs": {"storage_options": opts}},
            {"name": "man-once", "op": "once", "source": bucket.url("man/"),
             "kwargs": {"storage_options": opts}},
            {"name": "man-trusted", "op": "load", "source": bucket.url("man/"),
             "once": {"storage_options": opts, "trust_manifest": True},
             "kwargs": {"overdecompose": 4}},
            {"name": "man-plain", "op": "load", "source": bucket.url("man/"),
             "kwargs": {"storage_options": opts, "trust_manifest": True}}]
    oracle["man-trusted"] = oracle["man-plain"] = oracle["npy-K1"]
    # index with checksums, the URL naming no endpoint (each rank's own proxy): one rank
    # lists, probes, reads every object for its checksum and uploads the manifest.
    bucket.upload_tree("man2", base / "npy")
    ops += [{"name": "index-once", "op": "index", "source": bucket.url("man2/"),
             "kwargs": {"storage_options": OPTIONS, "checksum": "xxh3"}},
            {"name": "man2-load", "op": "load", "source": bucket.url("man2/"),
             "kwargs": {"storage_options": opts, "trust_manifest": True}}]
    oracle["man2-load"] = oracle["npy-K1"]

    # batches over s3://, read ahead and not
    for prefetch in (0, 2):
        ops.append({"name": f"batches-p{prefetch}", "op": "batches",
                    "source": bucket.url("parquet/" if prefetch else "npy/"),
                    "rows_per_batch": 6, "kwargs": {"prefetch": prefetch,
                                                    "storage_options": opts}})
    oracle["batches-p0"] = oracle["npy-K1"]
    oracle["batches-p2"] = oracle["parquet-K1"]

    job, proxies = _job_through_a_proxy_per_rank(server, base, ops)
    return bucket, job, oracle, proxies


def test_the_credentials_reach_both_ranks(loaded):
    _, job, _, _ = loaded
    for r in job.ranks:
        assert set(s3_server.CLIENT_ENV) <= set(r.results()["env"]), r.results()["env"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("what", ["K1", "K4", "rows"])
def test_every_format_equals_numpy_on_both_ranks(loaded, fmt, what):
    _, job, oracle, _ = loaded
    name = f"{fmt}-{what}"
    _ok(job, name)
    for rank in job.ranks:
        got = rank.array(name)
        assert got.dtype == oracle[name].dtype and got.shape == oracle[name].shape, name
        np.testing.assert_array_equal(got, oracle[name], err_msg=f"rank {rank.index}: {name}")


@pytest.mark.parametrize("name", ["store", "list", "odd", "odd-one"])
def test_a_zarr_store_and_a_list_of_urls(loaded, name):
    _, job, oracle, _ = loaded
    _ok(job, name)
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array(name), oracle[name])


def _requests(proxy: FaultProxy, prefix: str) -> dict[str, set[int]]:
    """The shards under ``prefix`` that requests through ``proxy`` named, by kind: "list"
    (LISTs of the prefix, as {0}), "head", "header" (GETs from byte 0), "rows" (GETs from a
    later byte: a tile's rows)."""
    found: dict[str, set[int]] = {"list": set(), "head": set(), "header": set(), "rows": set()}
    for method, target, range_, _ in proxy.log:
        path = target.split("?")[0]
        if method == "GET" and "list-type=" in target and f"prefix={prefix}" in target:
            found["list"].add(0)
        if f"/{prefix}/shard_" not in path:
            continue
        shard = int(path.rsplit("shard_", 1)[1].split(".")[0])
        if method == "HEAD":
            found["head"].add(shard)
        elif method == "GET":
            found["header" if (range_ or "bytes=0-").startswith("bytes=0-") else "rows"].add(
                shard)
    return found


def test_discovery_on_one_rank_and_each_ranks_tiles_read_their_objects(loaded):
    _, job, oracle, proxies = loaded
    seen = [_requests(p, "npy") for p in proxies]
    # One rank listed the prefix and read every shard's header; the other did neither.
    every = set(range(len(RAGGED)))
    assert sorted(bool(s["list"]) for s in seen) == [False, True], seen
    discoverer = [s["list"] for s in seen].index({0})
    assert seen[discoverer]["header"] == every, seen
    assert not seen[1 - discoverer]["header"], seen
    # Both ranks read rows, each exactly the objects of the tiles it ran (an empty shard: none).
    rows = [s["rows"] for s in seen]
    assert all(rows) and split_between_ranks(RAGGED, RANKS, 1, rows), (
        rows, tiles(RAGGED, RANKS, 1))
    results = _ok(job, "per-rank")
    assert results[0]["layout"] == results[1]["layout"], results
    assert results[0]["layout"]["rows_per_shard"] == RAGGED, results
    assert results[0]["layout"]["manifest_state"] == "ABSENT", results
    # The layout names no endpoint: each rank's tiles went through that rank's own.
    assert all("endpoint_override" not in f for f in results[0]["layout"]["files"]), results
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array("per-rank"), oracle["per-rank"])


def test_index_on_two_ranks_then_load_from_the_manifest(loaded):
    bucket, job, oracle, _ = loaded
    written = {r["manifest"] for r in _ok(job, "index")}
    assert len(written) == 1 and written.pop().startswith(bucket.url("man/shardload.manifest"))
    keys = bucket.client.list_objects_v2(Bucket=bucket.name, Prefix="man/")["Contents"]
    assert [k["Key"] for k in keys].count("man/shardload.manifest") == 1
    assert [r["layout"]["manifest_state"] for r in _ok(job, "man-once")] == ["USED"] * RANKS
    assert [r["layout"]["manifest_state"] for r in _ok(job, "man-trusted")] == ["TRUSTED"] * 2
    for name in ("man-trusted", "man-plain"):
        _ok(job, name)
        for rank in job.ranks:
            np.testing.assert_array_equal(rank.array(name), oracle[name])


def _bytes_read(proxy: FaultProxy, key: str) -> int:
    """How many bytes from the start of ``key`` GETs through ``proxy`` covered, without a gap
    (the whole object for an unranged GET)."""
    spans = []
    for method, target, range_, _ in proxy.log:
        if method != "GET" or not target.split("?")[0].endswith("/" + key):
            continue
        if not range_:
            return 1 << 62
        first, _, last = range_.removeprefix("bytes=").partition("-")
        spans.append((int(first), int(last) + 1 if last else 1 << 62))
    end = 0
    for first, stop in sorted(spans):
        if first > end:
            break
        end = max(end, stop)
    return end


def test_index_on_two_ranks_probes_reads_and_uploads_on_one(loaded):
    """Every rank calls index(); one does the work, every rank returns the same path."""
    bucket, job, oracle, proxies = loaded
    written = {r["manifest"] for r in _ok(job, "index-once")}
    assert len(written) == 1, written
    assert written.pop().split("?")[0] == bucket.url("man2/shardload.manifest")
    seen = [_requests(p, "man2") for p in proxies]
    puts = [[n for n in _puts(p, "man2")] for p in proxies]
    every = set(range(len(RAGGED)))
    worker = [bool(s["list"]) for s in seen].index(True)
    assert not seen[1 - worker]["list"] and not seen[1 - worker]["header"], seen
    assert not seen[1 - worker]["rows"] and not puts[1 - worker], (seen, puts)
    # The worker probed every object and read every non-empty one whole for its checksum.
    assert seen[worker]["header"] == every, seen
    assert puts[worker] == ["shardload.manifest"], puts
    for i in every:
        key = f"man2/shard_{i:04d}.npy"
        size = bucket.client.head_object(Bucket=bucket.name, Key=key)["ContentLength"]
        assert _bytes_read(proxies[worker], key) >= size, (key, size)
    _ok(job, "man2-load")
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array("man2-load"), oracle["man2-load"])


@pytest.mark.parametrize("prefetch", [0, 2])
def test_batches(loaded, prefetch):
    _, job, oracle, _ = loaded
    name = f"batches-p{prefetch}"
    assert all(r["batches"] == [6, 6, 6, 6, 6, 5] for r in _ok(job, name))
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array(name), oracle[name])


# ---- saving to s3:// on two ranks: one job --------------------------------------------------

def _puts(proxy: FaultProxy, prefix: str) -> list[str]:
    """The names of the objects under ``prefix`` that PUTs through ``proxy`` uploaded (a
    multipart upload's parts and completion under the object's name too)."""
    return [t.split("?")[0].rsplit(f"/{prefix}/", 1)[1] for m, t, _, _ in proxy.log
            if m in ("PUT", "POST") and f"/{prefix}/" in t.split("?")[0]]


def _lists(proxy: FaultProxy, prefix: str) -> int:
    return sum(1 for m, t, _, _ in proxy.log
               if m == "GET" and "list-type=" in t and f"prefix={prefix}" in t)


# Shards of chosen rows (35 in all): a one-point launch per shard with rows, placed by where
# an even tiling of the rows puts the shard's first row, so that both ranks upload.
CHOSEN = [0, 9, 1, 0, 17, 8, 0]


@pytest.fixture(scope="module")
def saved(server, tmp_path_factory):
    """Saves from both ranks, each rank reaching the store through a proxy of its own (the
    saves' URLs name no endpoint), and loads each result back through the server itself (so
    the proxies' logs hold the saves' requests alone)."""
    base = tmp_path_factory.mktemp("s3save")
    bucket = s3_server.Bucket(server, prefix="mr-")
    rng = np.random.default_rng(31)
    parts = dataset(rng, "npy", RAGGED)
    write_shards(base / "src", "npy", parts)
    # A prefix that holds a user's object: no save may write there.
    bucket.put("full/notes.txt", b"mine")
    direct = {"storage_options": _options(server)}
    cases = {
        "npy": {"num_shards": 5},
        # 35 rows in 20 shards of 2: shards 18 and 19 have no rows (no tile uploads them)
        "empties": {"num_shards": 20},
        "raw": {"num_shards": 3, "format": "raw", "checksum": "xxh3"},
        "full": {"num_shards": 2},
        "zarr": {"num_shards": 4, "format": "zarr"},
        "chosen": {"shard_rows": CHOSEN},
    }
    ops = [{"name": name, "op": "save", "source": str(base / "src"), "dest": bucket.url(f"{name}/"),
            "save": {**save, "storage_options": OPTIONS}, "kwargs": direct}
           for name, save in cases.items()]
    # Then over the raw dataset, in fewer shards of another format.
    ops.append({"name": "over", "op": "save", "source": str(base / "src"),
                "dest": bucket.url("raw/"), "kwargs": direct,
                "save": {"num_shards": 2, "overwrite": True, "storage_options": OPTIONS}})
    job, proxies = _job_through_a_proxy_per_rank(server, base, ops)
    return bucket, job, np.concatenate(parts), proxies


def _keys(bucket, prefix: str) -> list[str]:
    found = bucket.client.list_objects_v2(Bucket=bucket.name, Prefix=f"{prefix}/")
    return sorted(k["Key"][len(prefix) + 1:] for k in found.get("Contents", []))


@pytest.mark.parametrize("name, shards", [("npy", 5), ("empties", 20)])
def test_a_save_on_two_ranks_uploads_each_shard_once_and_commits_once(saved, name, shards):
    bucket, job, whole, proxies = saved
    infos = [r["info"] for r in _ok(job, name)]
    assert [i["num_shards"] for i in infos] == [shards] * RANKS, infos
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array(name), whole, err_msg=f"rank {rank.index}")
    names = [f"shard_{i:04d}.npy" for i in range(shards)]
    assert _keys(bucket, name) == sorted(names + ["shardload.manifest"])
    for i, key in enumerate(names):  # each object is its shard, read by numpy
        body = bucket.client.get_object(Bucket=bucket.name, Key=f"{name}/{key}")["Body"].read()
        lo = min(len(whole), i * -(-len(whole) // shards))
        hi = min(len(whole), (i + 1) * -(-len(whole) // shards))
        np.testing.assert_array_equal(np.load(io.BytesIO(body)), whole[lo:hi], err_msg=key)
    puts = [set(_puts(p, name)) for p in proxies]
    # One rank listed the prefix and committed (the manifest); each shard was uploaded by one
    # rank only, and both ranks uploaded shards.
    lists = [_lists(p, name) for p in proxies]
    assert sorted(bool(n) for n in lists) == [False, True], (lists, puts)
    lister = 0 if lists[0] else 1
    assert [("shardload.manifest" in p) for p in puts] == [i == lister for i in range(RANKS)]
    shard_puts = [{n for n in p if n.startswith("shard_")} for p in puts]
    assert sorted(shard_puts[0] | shard_puts[1]) == names, puts
    assert not shard_puts[0] & shard_puts[1], puts
    assert all(shard_puts), puts
    if name == "empties":
        # The two shards without rows: uploaded at the preparation, by the listing rank.
        assert {"shard_0018.npy", "shard_0019.npy"} <= shard_puts[lister], puts


def test_shards_of_chosen_rows_on_two_ranks_are_each_uploaded_once(saved):
    bucket, job, whole, proxies = saved
    infos = [r["info"] for r in _ok(job, "chosen")]
    assert [i["num_shards"] for i in infos] == [len(CHOSEN)] * RANKS, infos
    assert [i["tiles"] for i in infos] == [4] * RANKS, infos  # one launch per shard with rows
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array("chosen"), whole, err_msg=f"rank {rank.index}")
    names = [f"shard_{i:04d}.npy" for i in range(len(CHOSEN))]
    assert _keys(bucket, "chosen") == sorted(names + ["shardload.manifest"])
    ends = np.cumsum([0, *CHOSEN])
    for i, key in enumerate(names):
        body = bucket.client.get_object(Bucket=bucket.name, Key=f"chosen/{key}")["Body"].read()
        np.testing.assert_array_equal(np.load(io.BytesIO(body)), whole[ends[i]:ends[i + 1]],
                                      err_msg=key)
    puts = [set(_puts(p, "chosen")) for p in proxies]
    with_rows = {names[i] for i, r in enumerate(CHOSEN) if r}
    shard_puts = [{n for n in p if n in with_rows} for p in puts]
    assert shard_puts[0] | shard_puts[1] == with_rows and not shard_puts[0] & shard_puts[1], puts
    assert all(shard_puts), puts
    # The empty shards and the manifest: by the committing rank alone, once each.
    committer = [("shardload.manifest" in p) for p in puts]
    assert sorted(committer) == [False, True], puts
    empty = set(names) - with_rows
    assert empty <= puts[committer.index(True)] and not empty & puts[committer.index(False)]


def test_a_zarr_save_on_two_ranks_uploads_each_store_once_and_commits_once(saved):
    bucket, job, whole, proxies = saved
    infos = [r["info"] for r in _ok(job, "zarr")]
    assert [i["num_shards"] for i in infos] == [4] * RANKS, infos
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array("zarr"), whole, err_msg=f"rank {rank.index}")
    stores = [f"shard_{i:04d}.zarr" for i in range(4)]
    chunks = [f"{s}/0.0" for s in stores]  # 35 rows of 12 bytes: one chunk a store
    metadata = [f"{s}/.zarray" for s in stores]
    assert _keys(bucket, "zarr") == sorted(chunks + metadata + ["shardload.manifest"])
    for i, key in enumerate(chunks):  # each chunk is its store's rows, as stored
        body = bucket.client.get_object(Bucket=bucket.name, Key=f"zarr/{key}")["Body"].read()
        assert body == whole[9 * i:9 * (i + 1)].tobytes(), key
    puts = [set(_puts(p, "zarr")) for p in proxies]
    # Each store's chunk uploaded by one rank, both ranks uploading; the metadata and the
    # manifest by the committing rank alone.
    chunk_puts = [p & set(chunks) for p in puts]
    assert sorted(chunk_puts[0] | chunk_puts[1]) == chunks and not chunk_puts[0] & chunk_puts[1]
    assert all(chunk_puts), puts
    committer = [("shardload.manifest" in p) for p in puts]
    assert sorted(committer) == [False, True], puts
    assert set(metadata) <= puts[committer.index(True)], puts
    assert not set(metadata) & puts[committer.index(False)], puts


def test_a_raw_save_with_checksums_and_its_overwrite_on_two_ranks(saved):
    bucket, job, whole, proxies = saved
    _ok(job, "raw")
    _ok(job, "over")
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array("raw"), whole)
        np.testing.assert_array_equal(rank.array("over"), whole)
    # The overwrite left the new npy dataset alone: the raw shards and sidecar were deleted
    # (and no empty marker object made for the prefix).
    assert _keys(bucket, "raw") == ["shard_0000.npy", "shard_0001.npy", "shardload.manifest"]
    # Each save committed on one rank: two manifests uploaded in all, each once (a multipart
    # upload is three requests; a PUT of its own, one).
    uploads = [n for p in proxies for n in _puts(p, "raw") if n == "shardload.manifest"]
    assert len(uploads) in (2, 6), uploads


def test_a_save_refused_on_two_ranks_writes_nothing(saved):
    bucket, job, _, proxies = saved
    err = _same_error(job, "full")
    assert "not empty" in err["message"] and bucket.url("full/") in err["message"], err
    assert "notes.txt" in err["message"], err
    assert _keys(bucket, "full") == ["notes.txt"]
    assert not any(_puts(p, "full") for p in proxies)


# ---- the command line ----------------------------------------------------------------------

def test_cli_read_on_two_ranks(server, tmp_path):
    bucket = s3_server.Bucket(server, prefix="mr-")
    rng = np.random.default_rng(29)
    write_shards(tmp_path / "npy", "npy", dataset(rng, "npy", RAGGED))
    bucket.upload_tree("c", tmp_path / "npy")
    opts = [f"--storage-option={k}={v}" for k, v in _options(server).items()]
    job = run_job(tmp_path / "out", [str(BUILD / "shardload"), "read", bucket.url("c/"), *opts,
                                     "--overdecompose", "2"],
                  env=s3_server.CLIENT_ENV, timeout=240)
    assert [r.rc for r in job.ranks] == [0] * RANKS and job.rc == 0, job.describe()
    speaking = [r for r in job.ranks if (r.out + r.err).strip()]
    assert len(speaking) == 1, job.describe()
    report = speaking[0].out
    assert "shard_0007.npy" in report or str(TOTAL) in report, report
    assert "remote retries: 0" in report, report


# ---- faults --------------------------------------------------------------------------------

def _npy_set(bucket, prefix: str, seed: int, n: int = 8) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    parts = [rng.standard_normal((4, 2)) for _ in range(n)]
    for i, p in enumerate(parts):
        bucket.put_npy(f"{prefix}/shard_{i:04d}.npy", p)
    return parts


def _when_both_wait(out: pathlib.Path, name: str, act, errors: list) -> threading.Thread:
    """A thread that waits until every rank opened marker-<name> (it then waits for the file
    go-<name>), calls ``act`` and writes go-<name>."""
    def run():
        try:
            while not all((out / f"rank{r}" / f"marker-{name}").exists() for r in range(RANKS)):
                if (out / f"go-{name}").exists():
                    return  # the job ended without getting here
                time.sleep(0.05)
            act()
        except Exception as e:  # the test reports it
            errors.append(e)
        finally:
            (out / f"go-{name}").touch()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.fixture(scope="module")
def faults(server, tmp_path_factory):
    base = tmp_path_factory.mktemp("s3faults")
    out = base / "out"
    bucket = s3_server.Bucket(server, prefix="mr-")
    proxy = FaultProxy(server)
    opts = _options(server, **FEW_ATTEMPTS)
    via_proxy = _options(proxy.endpoint, **FEW_ATTEMPTS)
    parts = {p: _npy_set(bucket, p, seed) for seed, p in enumerate(("ow", "ow2", "deny", "deny2"))}

    def overwrite(prefix: str):
        # The same size, other bytes: only the ETag tells. The last shard: with one tile per
        # rank, the second rank's tile alone reads it.
        return lambda: bucket.put_npy(f"{prefix}/shard_0007.npy", parts[prefix][7] + 1)

    # 403 for every request about one object, read by a tile (the trusted manifest spares
    # discovery its requests); 403 for another's request at discovery (its GET on the signed
    # path, its HEAD on Arrow's).
    proxy.add(Rule(None, path="/deny/shard_0006.npy", action="403", count=None))
    proxy.add(Rule(None, path="/deny2/shard_0003.npy", action="403", count=None))
    ops = [{"name": "overwritten", "op": "load", "source": bucket.url("ow/"),
            "once": {"storage_options": opts}, "wait": "wait-ow", "kwargs": {}},
           {"name": "deny-index", "op": "index", "source": bucket.url("deny/"),
            "kwargs": {"storage_options": opts}},
           {"name": "denied", "op": "load", "source": bucket.url("deny/"),
            "kwargs": {"storage_options": via_proxy, "trust_manifest": True}},
           {"name": "denied-discovery", "op": "load", "source": bucket.url("deny2/"),
            "kwargs": {"storage_options": via_proxy}},
           {"name": "after", "op": "load", "source": bucket.url("deny/"),
            "kwargs": {"storage_options": opts}},
           # last: the error ends the program on both ranks
           {"name": "uncaught", "op": "load", "source": bucket.url("ow2/"),
            "once": {"storage_options": opts}, "wait": "wait-ow2", "kwargs": {},
            "uncaught": True}]
    spec = write_spec(base / "spec.json", {"ops": ops})
    errors: list = []
    waits = {"wait-ow": overwrite("ow"), "wait-ow2": overwrite("ow2")}
    out.mkdir()
    threads = [_when_both_wait(out, name, act, errors) for name, act in waits.items()]
    try:
        job = python_job(out, "s3_cases.py", str(spec), env=s3_server.CLIENT_ENV, timeout=300)
    finally:
        proxy.close()
        for name in waits:  # a thread still waiting for markers ends now
            (out / f"go-{name}").touch()
        for t in threads:
            t.join(timeout=10)
    assert not errors, errors
    return bucket, job, parts


def test_an_object_overwritten_between_discovery_and_load_is_an_error_on_every_rank(faults):
    bucket, job, _ = faults
    err = _same_error(job, "overwritten")
    assert "ShardReadError" in err["mro"], err
    assert bucket.url("ow/shard_0007.npy") in err["message"], err
    assert "changed" in err["message"], err


def test_a_403_for_one_object_is_an_error_naming_it_on_every_rank(faults):
    bucket, job, _ = faults
    err = _same_error(job, "denied")
    assert "ShardReadError" in err["mro"], err
    assert bucket.url("deny/shard_0006.npy") in err["message"], err
    # The store's words: S3's error code through the signed path (on Arrow's, whose answer to a
    # short range cannot hold the 403's body, what the object's HEAD answers).
    assert ("AccessDenied" in err["message"] or "ACCESS_DENIED" in err["message"]) and (
        "Permission denied" in err["message"]), err
    err = _same_error(job, "denied-discovery")
    assert "LayoutError" in err["mro"], err
    assert bucket.url("deny2/shard_0003.npy") in err["message"], err
    assert "AccessDenied" in err["message"] or "ACCESS_DENIED" in err["message"], err


def test_the_runtime_survives_the_faults_on_every_rank(faults):
    _, job, parts = faults
    _ok(job, "after")
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array("after"), np.concatenate(parts["deny"]))


def test_an_uncaught_error_ends_every_rank_with_an_error(faults):
    bucket, job, _ = faults
    # Each rank raised the error naming the object, and exited with status 1 (not killed,
    # not hung: the job ended within its time).
    assert job.rc != 0, job.describe()
    assert [r.rc for r in job.ranks] == [1] * RANKS, job.describe()
    for r in job.ranks:
        assert bucket.url("ow2/shard_0007.npy") in r.err, job.describe()
        assert "ShardReadError" in r.err, job.describe()
