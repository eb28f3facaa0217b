"""Small hostile HTTP servers on 127.0.0.1, for what the demo provider cannot do.

:class:`RawServer` hands each connection to a function that writes raw bytes (byte-level
control: trickling, lying Content-Length, closing early). :func:`gzip_lying_length` is the pycsw
2.x bug; :class:`GzipLyingProxy` puts it in front of any server (the demo provider).
"""

from __future__ import annotations

import gzip
import http.client
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)


def read_request(conn: socket.socket) -> Request | None:
    """One HTTP/1.x request from ``conn`` (None when the client closed first)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    want = int(headers.get("content-length") or 0)
    while len(body) < want:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return Request(method, path, headers, body)


class RawServer:
    """Accepts connections on 127.0.0.1; ``handle(conn, request)`` answers one request with raw
    bytes, then the connection is closed. Every request is kept in ``requests``."""

    def __init__(self, handle: Callable[[socket.socket, Request], None]):
        self.handle = handle
        self.requests: list[Request] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.port = self.sock.getsockname()[1]
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, path: str = "/oai") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            req = read_request(conn)
            if req is None:
                return
            self.requests.append(req)
            self.handle(conn, req)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def response_head(status: str = "200 OK", headers: dict[str, str] | None = None) -> bytes:
    """A status line and headers; ``Connection: close`` unless given (RawServer closes)."""
    headers = {"Connection": "close", **(headers or {})}
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def trickle(conn: socket.socket, data: bytes, every: float, stop: threading.Event, limit: float) -> None:
    """Send ``data`` one byte every ``every`` seconds, for at most ``limit`` seconds."""
    ends = time.monotonic() + limit
    for i in range(len(data)):
        if stop.is_set() or time.monotonic() > ends:
            return
        conn.sendall(data[i:i + 1])
        time.sleep(every)


def gzip_lying_length(conn: socket.socket, body: bytes, content_type: str = "text/xml",
                      cut: int = 0) -> None:
    """The pycsw 2.x bug: gzip body, Content-Length of the uncompressed body, then close.
    ``cut`` drops that many bytes from the end of the gzip member (a member cut short)."""
    packed = gzip.compress(body)
    if cut:
        packed = packed[:-cut]
    conn.sendall(response_head("200 OK", {
        "Content-Type": content_type, "Content-Encoding": "gzip",
        "Content-Length": str(len(body)), "Connection": "close",
    }) + packed)
    conn.shutdown(socket.SHUT_WR)


class GzipLyingProxy(RawServer):
    """Forwards every request to ``upstream`` and answers like pycsw 2.x behind gzip."""

    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        super().__init__(self._forward)

    def url(self, path: str | None = None) -> str:
        return f"http://127.0.0.1:{self.port}{path if path is not None else self.upstream.path}"

    def _forward(self, conn: socket.socket, req: Request) -> None:
        up = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        headers = {k: v for k, v in req.headers.items() if k not in ("host", "accept-encoding", "connection")}
        up.request(req.method, req.path, body=req.body or None, headers=headers)
        resp = up.getresponse()
        body = resp.read()
        up.close()
        if resp.status != 200:
            conn.sendall(response_head(f"{resp.status} {resp.reason}", {
                "Content-Length": str(len(body)), "Connection": "close"}) + body)
            return
        gzip_lying_length(conn, body, resp.getheader("Content-Type") or "text/xml")
