"""A credentials handle (`credentials=HANDLE`, what a sealed URL holds instead of its secrets)
stands for the credentials of the store they were given with: its endpoint_override, scheme and
access_key. A URL that names the handle toward another endpoint (or over another scheme, or
with another key id) is refused naming the URL, before any request: never signed with the
sealed secret, never sent the session token. The same store keeps reading with it, also in
another process (a pickled Layout). Real moto on 127.0.0.1 holds the data; a second server on
127.0.0.1 records what another endpoint would receive."""
import pickle

import numpy as np
import pytest

import shardload
import shardload.numpy as sn
from closing_server import recording

SECRET, TOKEN = "SECRETsk1234567", "SECRETtok987654"


@pytest.fixture
def other():
    """Another endpoint: records every request (request line, headers) and answers 404."""
    with recording() as (endpoint, seen):
        yield endpoint, seen


@pytest.fixture
def sealed(bucket):
    """A dataset in the bucket, discovered with a secret and a session token: its layout, whose
    paths name the handle, and the handle."""
    a = np.arange(40, dtype=np.float64).reshape(10, 4)
    bucket.put_npy("d/shard_0000.npy", a[:6])
    bucket.put_npy("d/shard_0001.npy", a[6:])
    options = {**bucket.options, "access_key": "AKIDX", "secret_key": SECRET,
               "session_token": TOKEN}
    layout = shardload.discover(bucket.url("d/"), storage_options=options)
    handle = layout.paths[0].split("credentials=")[1].split("&")[0]
    return a, layout, handle


def test_the_store_it_was_sealed_for_reads_with_the_handle(sealed, bucket):
    a, layout, handle = sealed
    np.testing.assert_array_equal(sn.load(layout), a)
    np.testing.assert_array_equal(sn.load(pickle.loads(pickle.dumps(layout))), a)
    again = shardload.discover(
        bucket.url("d/") + f"?endpoint_override={bucket.endpoint}&scheme=http&region=us-east-1"
        f"&access_key=AKIDX&credentials={handle}")
    np.testing.assert_array_equal(sn.load(again), a)


@pytest.mark.parametrize("how", ["other endpoint", "no access_key", "storage_options"])
def test_a_handle_named_toward_another_endpoint_is_refused_before_any_request(sealed, other, how):
    _, _, handle = sealed
    ep, seen = other
    base = f"endpoint_override={ep}&scheme=http&region=us-east-1"
    if how == "storage_options":
        call = lambda: shardload.discover(  # noqa: E731
            "s3://other/x.npy", storage_options={"endpoint_override": ep, "scheme": "http",
                                                 "region": "us-east-1", "access_key": "AKIDX",
                                                 "credentials": handle})
    else:
        key = "&access_key=AKIDX" if how == "other endpoint" else ""
        url = f"s3://other/x.npy?{base}{key}&credentials={handle}"
        call = lambda: shardload.discover(url)  # noqa: E731
    with pytest.raises(ValueError) as e:
        call()
    message = str(e.value)
    assert "stands for the credentials of another store" in message, message
    assert "s3://other/x.npy" in message and SECRET not in message and TOKEN not in message
    assert seen == []  # nothing signed with the secret, no session token sent


def test_another_scheme_or_key_id_toward_the_same_endpoint_is_refused(sealed, bucket):
    _, _, handle = sealed
    for query in (f"endpoint_override={bucket.endpoint}&scheme=https&access_key=AKIDX",
                  f"endpoint_override={bucket.endpoint}&scheme=http&access_key=OTHERKEY"):
        with pytest.raises(ValueError, match="stands for the credentials of another store"):
            shardload.discover(bucket.url("d/") + f"?{query}&region=us-east-1&credentials={handle}")
