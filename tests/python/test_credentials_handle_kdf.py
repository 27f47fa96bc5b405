"""A credentials handle (``credentials=HANDLE`` in a sealed URL, so in every path a layout
prints) gives no fast way to guess the secret it stands for: it is HMAC-SHA256 of the entry's
items keyed by scrypt (N=2^14, r=8, p=1: 16 MiB and tens of milliseconds a guess) of their
guessable secret parts, salted with the store or origin (shardload/store_options.hpp, above
seal_credentials). Computed here from the URL alone with Python's hashlib and hmac, an oracle
independent of the engine's code; the unsalted SHA-256 of the items, which a guess cost
nanoseconds against, is no longer the handle."""
from __future__ import annotations

import hashlib
import hmac
import re

import pytest

from shardload import _core

DOMAIN = b"shardload credentials handle\n"
HEX64 = "0123456789abcdef" * 4  # a signature as a program makes it: left out of scrypt's input
TOKEN_LONG = "Ab3-_x" * 10  # 60 letters, digits, '-' and '_': left out too


def counted(text: str) -> bytes:
    raw = text.encode()
    return str(len(raw)).encode() + b":" + raw


def guessable(piece: str) -> str:
    """The piece with its runs of 40 or more letters, digits, '-' and '_' left out."""
    return re.sub(r"[A-Za-z0-9_-]{40,}", "", piece)


SIGNATURE_KEYS = {"sig", "sign", "md5", "hmac", "hdnea", "hdntl", "auth_key", "_upt", "policy"}


def is_signature(item: str) -> bool:
    """A query item whose value a signer computed over the URL: left out of scrypt's input."""
    key = item.partition("=")[0].lower()
    return "=" in item and (key.endswith("signature") or key in SIGNATURE_KEYS)


def scrypt_handle(items: bytes, salt_context: str, secret_pieces: list[str]) -> str:
    password = b"".join(counted(guessable(p)) for p in secret_pieces if not is_signature(p))
    key = hashlib.scrypt(password, salt=DOMAIN + salt_context.encode(), n=1 << 14, r=8, p=1,
                         maxmem=64 << 20, dklen=32)
    return hmac.new(key, items, "sha256").hexdigest()[:32]


def sha256_handle(items: bytes) -> str:
    """The handle before: 32 hex digits of an unsalted SHA-256, a fast oracle."""
    return hashlib.sha256(DOMAIN + items).hexdigest()[:32]


def handle_in(sealed: str) -> str:
    found = re.findall(r"credentials=([0-9a-f]{32})", sealed)
    assert len(found) == 1, sealed
    return found[0]


def s3_binding(endpoint: str, scheme: str, access_key: str) -> str:
    text = f"store\n{endpoint}\n{scheme}\n{access_key}".encode()
    return "store=" + hashlib.sha256(DOMAIN + text).hexdigest()[:32]


@pytest.mark.parametrize("secrets", [
    ["secret_key=minioadmin"],
    ["secret_key=minioadmin", "session_token=tok" + TOKEN_LONG],
    ["secret_key=" + TOKEN_LONG + "%2Bweak", "session_token=short%2Fone"],
])
def test_an_s3_handle_is_the_documented_scrypt_keyed_hmac_of_its_items(secrets):
    url = ("s3://bucket/data/x.npy?endpoint_override=127.0.0.1:9000&scheme=http&access_key=AKID"
           "&" + "&".join(secrets))
    sealed = _core.seal_store_url(url)
    assert not any(s.split("=", 1)[1] in sealed for s in secrets)
    binding = s3_binding("127.0.0.1:9000", "http", "AKID")
    items = (binding + "&" + "&".join(secrets)).encode()
    handle = handle_in(sealed)
    assert handle == scrypt_handle(items, binding, secrets)
    assert handle != sha256_handle(items)


@pytest.mark.parametrize("userinfo, query, secret_items", [
    # A person's password alone.
    ("alice:hunter2", "", []),
    # A short token and a presigned signature, a plain item between them (in the span, not a
    # secret: left out of scrypt's input).
    ("", f"a=1&token=abc123&b=2&Signature={HEX64}&c=3", ["token=abc123", f"Signature={HEX64}"]),
    # Both, the signature left out of scrypt's input, the password not.
    ("bob:correct%20horse", f"X-Amz-Signature={HEX64}", [f"X-Amz-Signature={HEX64}"]),
    # Signatures cut into short runs (CloudFront's base64 with '~', SigV2's percent-encoded
    # '+' and '/', nginx's md5=): left out whole, the short token beside them kept.
    ("", "Expires=1700000000&Signature=Ab~cD-e_~fGh&Key-Pair-Id=K2&token=t0k",
     ["Signature=Ab~cD-e_~fGh", "token=t0k"]),
    ("", "AWSAccessKeyId=AK&Expires=1&Signature=x%2By%2Fz%3D&md5=q-Z_Wv&sig=ab%2Fcd",
     ["Signature=x%2By%2Fz%3D", "md5=q-Z_Wv", "sig=ab%2Fcd"]),
])
def test_an_http_handle_is_the_documented_scrypt_keyed_hmac_of_its_items(
        userinfo, query, secret_items):
    at = userinfo + "@" if userinfo else ""
    url = f"https://{at}Data.Example.com:8443/d/x.npy" + (f"?{query}" if query else "")
    sealed = _core.seal_store_url(url)
    assert "hunter2" not in sealed and HEX64 not in sealed
    origin = "https://data.example.com:8443"
    # The entry: '@', then counted origin, user part, path before a path token and the token
    # (none here), then the query's span from its first secret item to its last.
    items = query.split("&")
    secret_at = [i for i, item in enumerate(items) if item in secret_items]
    span = "&".join(items[secret_at[0]:secret_at[-1] + 1]) if secret_at else ""
    entry = (b"@" + counted(origin) + counted(userinfo) + counted("") + counted("")
             + span.encode())
    handle = handle_in(sealed)
    assert handle == scrypt_handle(entry, origin, [userinfo, ""] + secret_items)
    assert handle != sha256_handle(entry)


def test_the_same_credentials_sealed_again_give_the_same_handle():
    url = "https://carol:pw1@host.example/x.npy?token=t0k"
    first = handle_in(_core.seal_store_url(url))
    assert all(handle_in(_core.seal_store_url(url)) == first for _ in range(50))
    # Another password, another handle.
    assert handle_in(_core.seal_store_url(url.replace("pw1", "pw2"))) != first


def test_urls_that_differ_in_their_signatures_alone_share_one_scrypt_key():
    """Signed URLs of many objects (each its own signature) make one K: their handles differ
    (the HMAC covers the items) but each is the oracle's HMAC under the K of the shared parts."""
    origin = "https://cdn.example"
    handles = set()
    for i in range(3):
        query = f"Expires=1&Signature=s{i}~x%2B{i}&Key-Pair-Id=K"
        sealed = _core.seal_store_url(f"{origin}/d/shard_{i:04d}.npy?{query}")
        span = f"Signature=s{i}~x%2B{i}"
        entry = b"@" + counted(origin) + counted("") + counted("") + counted("") + span.encode()
        handle = handle_in(sealed)
        assert handle == scrypt_handle(entry, origin, ["", "", span])
        handles.add(handle)
    assert len(handles) == 3
