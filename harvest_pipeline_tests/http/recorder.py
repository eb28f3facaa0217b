"""A small recording HTTP server on 127.0.0.1 for the transport's tests (the `rec` fixture,
conftest.py): what the demo provider cannot express (server-side concurrency and arrival
times, Retry-After enforcement, huge bodies, echoing POSTs, a status on demand). It also
answers requests sent to it as a proxy (absolute URLs in the request line)."""

from __future__ import annotations

import email.utils
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from harvest_pipeline_tests.oai.test_parse import identify_xml


class Recorder(ThreadingHTTPServer):
    """Records every request: arrival time, client port, headers; tracks requests in flight.

    A request counts as in flight from its arrival until just before its response is written,
    so a client can never see a response while the server still counts that request."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.log: list[dict] = []
        self.strict_until: dict[str, float] = {}
        super().__init__(("127.0.0.1", 0), _RecHandler)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RecHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recorder

    def log_message(self, *a):
        pass

    def do_GET(self):
        self._serve()

    def do_POST(self):
        self._serve()

    def _serve(self):
        srv = self.server
        n = int(self.headers.get("Content-Length") or 0)
        body_in = self.rfile.read(n) if n else b""
        with srv.lock:
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            srv.log.append({"t": time.time(), "path": self.path, "port": self.client_address[1],
                            "headers": dict(self.headers), "body": body_in})
        try:
            status, headers, body = self._route(urlsplit(self.path), body_in)
        finally:
            with srv.lock:
                srv.in_flight -= 1
        if callable(body):  # a streamed body: body(write)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            try:
                body(self.wfile.write)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
            return
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self, u, body_in):
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        xml = {"Content-Type": "text/xml"}
        if u.path == "/oai":
            time.sleep(float(q.get("ms", 0)) / 1000)
            return 200, xml, identify_xml()
        if u.path == "/status":
            return int(q["code"]), {"Content-Type": "text/plain"}, b"no"
        if u.path == "/echo":
            return 200, xml, body_in
        if u.path == "/big":
            size = int(float(q["mb"]) * 1024 * 1024)
            if q.get("chunked"):
                def stream(write, size=size):
                    sent = 0
                    while sent < size:
                        chunk = b" " * 65536
                        write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        sent += len(chunk)
                    write(b"0\r\n\r\n")
                return 200, {**xml, "Transfer-Encoding": "chunked"}, stream
            return 200, xml, b"<x>" + b" " * size + b"</x>"
        if u.path == "/strict":  # 503 + Retry-After; a retry that comes too early gets 503 again
            key, form = q["key"], q["form"]
            with self.server.lock:
                until = self.server.strict_until.get(key)
                if until is None:
                    if form == "date":
                        until = math.ceil(time.time()) + 1
                        value = email.utils.formatdate(until, usegmt=True)
                    else:
                        until, value = time.time() + 1, "1"
                    self.server.strict_until[key] = until
                    return 503, {"Retry-After": value}, b"busy"
            if time.time() < until:
                return 503, {}, b"too early"
            return 200, xml, identify_xml()
        return 404, {}, b"?"
