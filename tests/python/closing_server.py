"""An HTTP server for the tests that ends its clients' connections when it closes, as a server
that stops does. Python's threading servers leave a kept-alive connection (HTTP/1.1) open after
server_close(): its handler thread waits for the client's next request, holding a descriptor of
the test process, and the client's connection pool keeps the other end, so each server a test
had started cost the process two descriptors and a thread per connection for as long as the
client kept it (docs/object_storage.md, "Connections kept")."""

from __future__ import annotations

import contextlib
import http.server
import socket
import ssl
import threading
from typing import Iterator


class ClosingHTTPServer(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer (daemon handler threads) whose server_close() also shuts down the
    connections still open; each handler then sees its client gone and ends."""

    daemon_threads = True

    def __init__(self, *args, **kwargs) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        with self._open_lock:
            still_open = list(self._open)
        for request in still_open:
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed meanwhile


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler], *, host: str = "127.0.0.1",
            tls: ssl.SSLContext | None = None,
            poll_interval: float = 0.5) -> Iterator[ClosingHTTPServer]:
    """A ClosingHTTPServer on `host` (a free port) answering with `handler` from a thread of
    its own, over TLS where `tls` is given; after the block, shut down, closed with the
    connections still open, and its thread joined, whatever the block raised."""
    server = ClosingHTTPServer((host, 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_interval},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def this_hosts_address() -> str | None:
    """An IPv4 address of this machine that is not a loopback one (where a route out leaves
    from), or None where it has none: a host a test can name that is not 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))  # a datagram socket's connect sends nothing
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def address(server: http.server.HTTPServer) -> str:
    """"127.0.0.1:PORT", the server's host and port as an endpoint_override names them."""
    return f"127.0.0.1:{server.server_address[1]}"


@contextlib.contextmanager
def recording() -> Iterator[tuple[str, list[list[str]]]]:
    """Another endpoint: a server that records every request it receives (its request line,
    then one "Name: value" line per header) and answers 404 with no body. Yields its
    "127.0.0.1:PORT" and the list of requests, for a test asserting what reached it (most
    often nothing: a secret never sent elsewhere, a value refused before any request)."""
    seen: list[list[str]] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _any(self) -> None:
            seen.append([self.requestline] + [f"{k}: {v}" for k, v in self.headers.items()])
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

    with serving(Recorder) as server:
        yield address(server), seen
