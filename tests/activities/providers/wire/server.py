"""A threaded loopback HTTP server that plays planned responses and records requests.

Streaming bodies go out with chunked transfer encoding, one planned chunk per HTTP chunk, so a
client sees each event when it is written. A response can pause at a gate (until the test has
seen the first delta) and can be cut: the socket closes mid-body, as a dropped stream would.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GATE_TIMEOUT_S = 30.0


@dataclass
class WireResponse:
    """One planned HTTP response."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    body: bytes | None = None
    cut_after: int | None = None
    gate_after: int | None = None


@dataclass
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The request body parsed as JSON."""
        return json.loads(self.body)


class WireServer:
    """Loopback server on an ephemeral port; `plan(...)` queues responses in order."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.gate = threading.Event()
        self.gate_results: list[bool] = []
        self._planned: list[WireResponse] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server._record(self, body)
                server._respond(self, server._next())

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>`."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> WireServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def plan(self, *responses: WireResponse) -> None:
        with self._lock:
            self._planned.extend(responses)

    def _next(self) -> WireResponse:
        with self._lock:
            if self._planned:
                return self._planned.pop(0)
        return WireResponse(status=500, body=b'{"error":{"message":"no planned response"}}')

    def _record(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self.requests.append(RecordedRequest(handler.command, handler.path, headers, body))

    def _respond(self, handler: BaseHTTPRequestHandler, response: WireResponse) -> None:
        handler.send_response(response.status)
        for name, value in response.headers.items():
            handler.send_header(name, value)
        if response.body is not None:
            handler.send_header("Content-Length", str(len(response.body)))
            handler.end_headers()
            handler.wfile.write(response.body)
            handler.wfile.flush()
            return
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for index, chunk in enumerate(response.chunks):
            if response.cut_after is not None and index >= response.cut_after:
                handler.close_connection = True
                handler.wfile.flush()
                handler.connection.shutdown(2)
                return
            if response.gate_after is not None and index == response.gate_after:
                self.gate_results.append(self.gate.wait(GATE_TIMEOUT_S))
            handler.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
