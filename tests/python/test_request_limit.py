"""The storage context's limit on requests in flight per store (max_requests): a load of many
tiles on many threads, its discovery included, never has more requests at once at the server
than the limit, over s3:// (moto behind a counting proxy) and http(s):// (the tests' HTTP
server behind the same proxy). The proxy counts what reaches it; each GET is held there a
little, so that requests the client sends at once are at the server at once."""

from __future__ import annotations

import io
import uuid

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")

import shardload  # noqa: E402
import shardload.numpy as snp  # noqa: E402

import test_http  # noqa: E402
from s3_fault_proxy import FaultProxy, Rule  # noqa: E402

_SHARDS = 16
_THREADS = 8


def _parts() -> list[np.ndarray]:
    rng = np.random.default_rng(42)
    return [rng.standard_normal((int(rows), 5)).astype("float32")
            for rows in rng.integers(20, 60, size=_SHARDS)]


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


@pytest.fixture
def s3_data(server):
    """(URL, options, expected array): the shards in a new bucket, read through a proxy that
    holds each ranged GET 20 ms."""
    name = "lim-" + uuid.uuid4().hex[:12]
    client = boto3.client("s3", endpoint_url=f"http://{server}", region_name="us-east-1")
    client.create_bucket(Bucket=name)
    parts = _parts()
    for i, p in enumerate(parts):
        client.put_object(Bucket=name, Key=f"d/shard_{i:04d}.npy", Body=_npy(p))
    with FaultProxy(server) as proxy:
        proxy.add(Rule("GET", ranged=True, action="delay", delay_s=0.02))
        options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1"}
        yield f"s3://{name}/d/", options, np.concatenate(parts), proxy


@pytest.fixture
def http_data():
    """(URLs, expected array, proxy): the shards on the tests' HTTP server, read through the
    proxy that holds each request 20 ms."""
    parts = _parts()
    with test_http.serving() as (store, base):
        for i, p in enumerate(parts):
            store.put(f"/d/shard_{i:04d}.npy", _npy(p))
        with FaultProxy(base.removeprefix("http://")) as proxy:
            proxy.add(Rule(None, action="delay", delay_s=0.02))
            urls = [f"http://{proxy.endpoint}/d/shard_{i:04d}.npy" for i in range(_SHARDS)]
            yield urls, np.concatenate(parts), proxy


@pytest.mark.parametrize("limit", [1, 3])
def test_s3_load_holds_the_stores_limit_on_requests_in_flight(s3_data, limit):
    url, options, want, proxy = s3_data
    got = snp.load(url, threads=_THREADS, overdecompose=2,
                   storage_options={**options, "max_requests": limit})
    np.testing.assert_array_equal(got, want)
    assert proxy.requests("GET") >= _SHARDS
    assert 1 <= proxy.max_in_flight <= limit


def test_s3_load_without_a_limit_given_has_many_requests_in_flight(s3_data):
    # The same load under the default limit: the proxy sees the threads' requests at once, so
    # the bound above is the limit's doing.
    url, options, want, proxy = s3_data
    got = snp.load(url, threads=_THREADS, overdecompose=2, storage_options=options)
    np.testing.assert_array_equal(got, want)
    assert proxy.max_in_flight > 3


@pytest.mark.parametrize("limit", [1, 3])
def test_http_load_holds_the_stores_limit_on_requests_in_flight(http_data, limit):
    urls, want, proxy = http_data
    got = snp.load(urls, threads=_THREADS, overdecompose=2,
                   storage_options={"max_requests": limit})
    np.testing.assert_array_equal(got, want)
    assert proxy.requests("HEAD") + proxy.requests("GET") >= _SHARDS
    assert 1 <= proxy.max_in_flight <= limit


def test_http_load_without_a_limit_given_has_many_requests_in_flight(http_data):
    urls, want, proxy = http_data
    got = snp.load(urls, threads=_THREADS, overdecompose=2)
    np.testing.assert_array_equal(got, want)
    assert proxy.max_in_flight > 3


@pytest.mark.parametrize("value", ["0", "1025", "x"])
def test_a_bad_max_requests_is_an_error_naming_the_url(s3_data, value):
    url, options, _, _ = s3_data
    with pytest.raises(ValueError, match=r"max_requests must be an integer from 1 to 1024"):
        shardload.discover(url, storage_options={**options, "max_requests": value})
