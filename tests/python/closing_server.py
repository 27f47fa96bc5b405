"""An HTTP server for the tests that ends its clients' connections when it closes, as a server
that stops does. Python's threading servers leave a kept-alive connection (HTTP/1.1) open after
server_close(): its handler thread waits for the client's next request, holding a descriptor of
the test process, and the client's connection pool keeps the other end, so each server a test
had started cost the process two descriptors and a thread per connection for as long as the
client kept it (docs/object_storage.md, "Connections kept")."""

from __future__ import annotations

import http.server
import socket
import threading


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
