"""A fault-injecting HTTP proxy on 127.0.0.1 for the object-storage tests (test_s3_faults.py).

It forwards each request to an upstream S3 server (the tests' moto server) and, where a rule
the test set matches the request, answers it badly instead: an HTTP error (500, 503, 403, a
404 for a key that is there), a ``SlowDown`` (503 with S3's XML error body), the 301 of a
bucket in another region, a reset connection, a body cut short (the upstream's
Content-Length, fewer bytes, then the connection closed), a delay, the answer without its ETag
and Last-Modified, or, for a request the upstream does serve: its answer lost (the connection
reset after the upstream stored a PUT), held back, with its ETag spelled otherwise, or a LIST
answer without some keys. The client under test is pointed at it with ``endpoint_override``.
Pure Python, one thread per connection; nothing but the standard library.

    proxy = FaultProxy("127.0.0.1:9000")
    proxy.add(Rule("GET", path="shard_0001", ranged=True, action="slowdown", count=2))
    ... load with endpoint_override=proxy.endpoint ...
    assert proxy.rules[0].fired == 2
    proxy.close()
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import re
import socket
import struct
import threading
import time
from typing import Callable

from closing_server import ClosingHTTPServer

ACTIONS = ("500", "503", "403", "404", "410", "slowdown", "reset", "truncate", "delay", "wrong-region",
           "no-validators", "lost-answer", "held-answer", "respell-etag", "hide-listed")

# What AWS answers a request sent to a regional endpoint other than the bucket's: a 301
# naming the bucket's region in a header (a HEAD's only word) and in its XML body.
WRONG_REGION = "eu-west-3"

_ERROR_CODES = {"500": (500, "InternalError", "We encountered an internal error."),
                "503": (503, "ServiceUnavailable", "Please reduce your request rate."),
                "403": (403, "AccessDenied", "Access Denied"),
                # A key the store has, answered as missing: a read that lags the PUT (a
                # caching proxy, an eventually consistent store).
                "404": (404, "NoSuchKey", "The specified key does not exist."),
                # A gateway's answer for an object it had and removed, or a link revoked.
                "410": (410, "Gone", "The object is gone."),
                "slowdown": (503, "SlowDown", "Please reduce your request rate.")}

# Headers that describe one hop's connection, not the message: never forwarded.
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer",
        "upgrade"}


@dataclasses.dataclass
class Rule:
    """Which requests to spoil and how.

    ``method``: "GET", "HEAD", ... or None for any. ``path``: a substring of the request
    target (path and query: a LIST is ``/bucket?list-type=2&prefix=...``), or None for any.
    ``ranged``: True for requests with a Range header only, False for those without, None for
    both. ``range``: a substring of the Range header ("bytes=4096-"), or None for any.
    ``action``: one of ACTIONS. ``count``: how many matching requests to spoil (None:
    all of them). ``delay_s``: for "delay", how long to hold the response before forwarding
    it; for an error, how long to wait before answering it; for "held-answer", how long to hold
    the upstream's answer before sending it. "lost-answer": the request is forwarded (a PUT is
    stored), then the connection is reset. For both, ``after`` (if given) is called once the
    upstream answered (another writer acting meanwhile, or a test told the PUT is stored). "respell-etag": the answer's ETag header goes through
    ``respell``. "hide-listed": a LIST answer without the entries whose key holds ``hide``
    (a listing that lags the writes); an answer that holds no such key is not counted.
    ``fired`` counts the requests spoiled so far."""

    method: str | None = None
    path: str | None = None
    ranged: bool | None = None
    range: str | None = None
    action: str = "500"
    count: int | None = 1
    delay_s: float = 0.0
    region: str = WRONG_REGION  # "wrong-region": the region its answer names
    after: Callable[[], None] | None = None  # "lost-answer", "held-answer"
    respell: Callable[[str], str] | None = None  # "respell-etag"
    hide: str = ""  # "hide-listed"
    fired: int = 0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action: expected one of {ACTIONS}, found {self.action!r}")

    def matches(self, method: str, target: str, range_: str | None) -> bool:
        has_range = range_ is not None
        if self.count is not None and self.fired >= self.count:
            return False
        if self.method is not None and self.method != method:
            return False
        if self.path is not None and self.path not in target:
            return False
        if self.range is not None and (range_ is None or self.range not in range_):
            return False
        return self.ranged is None or self.ranged == has_range


class _Server(ClosingHTTPServer):
    allow_reuse_address = True
    # socketserver's default backlog is 5: a client opening more connections at once (a
    # discovery probing 8 objects) had the rest wait for a SYN retransmission, a second.
    request_queue_size = 128
    proxy: "FaultProxy"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects of S3

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # quiet: the test's output is the proxy's log list

    def _body(self) -> bytes:
        """The request's body: by its Content-Length, or the chunks of a chunked one (the
        AWS SDK's uploads), forwarded with a Content-Length."""
        if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""
        parts = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _any(self) -> None:
        proxy: FaultProxy = self.server.proxy  # type: ignore[attr-defined]
        with proxy._lock:
            proxy._in_flight += 1
            proxy.max_in_flight = max(proxy.max_in_flight, proxy._in_flight)
        self._unanswered = True
        try:
            self._serve()
        finally:
            self._answered()

    def _answered(self) -> None:
        # A request is in flight from its arrival until its answer starts: the client may
        # have the whole answer and send its next request before this thread's last write
        # returns, and counting until then saw two requests of a client that had one.
        if getattr(self, "_unanswered", False):
            self._unanswered = False
            proxy: FaultProxy = self.server.proxy  # type: ignore[attr-defined]
            with proxy._lock:
                proxy._in_flight -= 1

    def send_response_only(self, code, message=None):  # noqa: D102 (BaseHTTPRequestHandler's)
        if code >= 200:  # not an interim "100 Continue"
            self._answered()
        super().send_response_only(code, message)

    def _serve(self) -> None:
        proxy: FaultProxy = self.server.proxy  # type: ignore[attr-defined]
        body = self._body()
        rule = proxy._take(self.command, self.path, self.headers.get("Range"))
        proxy._log(self.command, self.path, self.headers.get("Range"),
                   rule.action if rule else None, dict(self.headers.items()))
        if rule is None:
            self._forward(body)
        elif rule.action in _ERROR_CODES:
            if rule.delay_s and proxy._closing.wait(rule.delay_s):
                self._reset()
                return
            self._error(*_ERROR_CODES[rule.action])
        elif rule.action == "wrong-region":
            self._error(301, "PermanentRedirect",
                        "The bucket you are attempting to access must be addressed using the "
                        "specified endpoint. Please send all future requests to this endpoint.",
                        f"<Endpoint>bucket.s3.{rule.region}.amazonaws.com</Endpoint>",
                        (("x-amz-bucket-region", rule.region),))
        elif rule.action == "reset":
            self._reset()
        elif rule.action == "truncate":
            self._forward(body, truncate=True)
        elif rule.action == "no-validators":
            self._forward(body, drop=("etag", "last-modified"))
        elif rule.action == "lost-answer":
            self._upstream(body)
            if rule.after is not None:
                rule.after()
            self._reset()
        elif rule.action == "held-answer":
            answer = self._upstream(body)
            if rule.after is not None:
                rule.after()
            proxy._closing.wait(rule.delay_s)
            self._send(*answer)
        elif rule.action == "respell-etag":
            status, reason, headers, data = self._upstream(body)
            respell = rule.respell or (lambda v: v)
            headers = [(k, respell(v) if k.lower() == "etag" else v) for k, v in headers]
            self._send(status, reason, headers, data)
        elif rule.action == "hide-listed":
            status, reason, headers, data = self._upstream(body)
            entry = re.compile(rb"<Contents>(?:(?!</Contents>).)*?<Key>[^<]*" +
                               re.escape(rule.hide.encode()) + rb"[^<]*</Key>.*?</Contents>",
                               re.S)
            data, hidden = entry.subn(b"", data)
            if hidden == 0:
                with proxy._lock:
                    rule.fired -= 1
            else:
                data = re.sub(rb"<KeyCount>(\d+)</KeyCount>",
                              lambda m: b"<KeyCount>%d</KeyCount>" % (int(m.group(1)) - hidden),
                              data)
            self._send(status, reason, headers, data)
        else:  # delay
            if proxy._closing.wait(rule.delay_s):
                self._reset()
                return
            self._forward(body)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

    def _upstream(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        proxy: FaultProxy = self.server.proxy  # type: ignore[attr-defined]
        host, port = proxy.upstream.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            # The proxy answered any "Expect: 100-continue" itself and has the whole body.
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in _HOP and k.lower() != "expect"}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        finally:
            conn.close()

    def _forward(self, body: bytes, truncate: bool = False, drop: tuple[str, ...] = ()) -> None:
        self._send(*self._upstream(body), truncate=truncate, drop=drop)

    def _send(self, status: int, reason: str, headers: list[tuple[str, str]], data: bytes,
              truncate: bool = False, drop: tuple[str, ...] = ()) -> None:
        """An upstream's answer as the client gets it (Content-Length of ``data``)."""
        self.send_response_only(status, reason)
        length = None
        for k, v in headers:
            if k.lower() in _HOP or k.lower() in drop:
                continue
            if k.lower() == "content-length":
                length = v
                continue
            self.send_header(k, v)
        if self.command == "HEAD":
            # No body: the object's length as the upstream said it.
            self.send_header("Content-Length", length if length is not None else "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        if truncate:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        if truncate:
            # Half the body (at least one byte short), then the connection ends.
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str, extra: str = "",
               headers: tuple[tuple[str, str], ...] = ()) -> None:
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>{message}</Message>{extra}<RequestId>fault-proxy</RequestId></Error>"
                ).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self) -> None:
        # SO_LINGER with a zero timeout: close() sends a RST instead of a FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class FaultProxy:
    """A proxy on 127.0.0.1 (``endpoint``, "127.0.0.1:PORT") in front of ``upstream``
    ("HOST:PORT"), serving until :meth:`close`. ``rules`` are checked in order for each
    request, the first that matches (and has firings left) spoils it; ``log`` lists every
    request as (method, target, Range header or None, the action taken or None), and
    ``headers`` each request's (method, target, its headers as sent)."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.rules: list[Rule] = []
        self.log: list[tuple[str, str, str | None, str | None]] = []
        self.headers: list[tuple[str, str, dict[str, str]]] = []
        # When each request of the log came in (time.monotonic()).
        self.arrived: list[float] = []
        # The most requests it was serving at once (since the last clear()).
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.endpoint = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        """Forgets the rules, the log and the most requests in flight."""
        with self._lock:
            self.rules.clear()
            self.log.clear()
            self.headers.clear()
            self.arrived.clear()
            self.max_in_flight = self._in_flight

    def requests(self, method: str | None = None, path: str | None = None) -> int:
        """How many requests of ``method`` (None: any) whose target contains ``path`` (None:
        any) came through."""
        with self._lock:
            return sum(1 for m, t, _, _ in self.log
                       if (method is None or m == method) and (path is None or path in t))

    def close(self) -> None:
        self._closing.set()  # ends the delays at once
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self, method: str, target: str, range_: str | None) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, target, range_):
                    rule.fired += 1
                    return rule
        return None

    def _log(self, method: str, target: str, range_: str | None, action: str | None,
             headers: dict[str, str]) -> None:
        with self._lock:
            self.log.append((method, target, range_, action))
            self.headers.append((method, target, headers))
            self.arrived.append(time.monotonic())
