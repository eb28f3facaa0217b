"""A real PostgreSQL on 127.0.0.1 (its own cluster in a temporary folder) and a recording proxy.

The shared-catalogue tests (marker `shared`, run by `bash .ci/test-shared`) need Debian's
`postgresql` package (initdb, pg_ctl); .ci/test-shared installs it when missing. As root, the
cluster runs as the `postgres` user (initdb refuses root).
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harvest_pipeline.bench.pg_cluster import pg_bindir, temporary_postgres


@pytest.fixture(scope="session")
def pg_server():
    if pg_bindir() is None:
        message = "PostgreSQL is not installed (apt-get install -y postgresql; bash .ci/test-shared does it)"
        if os.environ.get("HARVEST_REQUIRE_POSTGRES"):
            pytest.fail(message)
        pytest.skip(message)
    with temporary_postgres() as server:
        yield server


@pytest.fixture(autouse=True)
def _close_shared_attaches():
    """Each test's catalogue is a new database: the process's attaches of the last one (and their
    pooled connections) end with its test."""
    yield
    from harvest_pipeline.store.shared_instance import close_shared_instances

    close_shared_instances()


@pytest.fixture
def shared_env(pg_server, tmp_path, monkeypatch):
    """Point this process at a fresh shared catalogue; returns the variables (for child processes)."""

    def make(kind: str = "postgres") -> dict[str, str]:
        env = {"HARVEST_CATALOGUE": kind, "HARVEST_CATALOGUE_PG_DSN": pg_server.dsn(pg_server.create_database())}
        if kind == "ducklake":
            env["HARVEST_DUCKLAKE_DATA_PATH"] = str(tmp_path / "lake") + "/"
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return env

    return make


class RecordingProxy(ThreadingHTTPServer):
    """Forwards every request to `upstream`, counting requests in flight and when each started."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: str, delay: float = 0.0):
        self.upstream, self.delay = upstream.rstrip("/"), delay
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = 0
        self.starts: list[float] = []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecordingProxy

    def log_message(self, *a):
        pass

    def do_GET(self):
        self._forward(None)

    def do_POST(self):
        self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _forward(self, body):
        srv = self.server
        with srv.lock:
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            srv.starts.append(time.time())
        try:
            time.sleep(srv.delay)
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
            req = urllib.request.Request(srv.upstream + self.path, data=body, headers=headers, method=self.command)
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    status, ctype, payload = resp.status, resp.headers.get("Content-Type", "text/xml"), resp.read()
            except urllib.error.HTTPError as exc:
                status, ctype, payload = exc.code, exc.headers.get("Content-Type", "text/plain"), exc.read()
        finally:
            with srv.lock:
                srv.in_flight -= 1
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def recording_proxy():
    started = []

    def start(upstream: str, delay: float = 0.0) -> RecordingProxy:
        srv = RecordingProxy(upstream, delay)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.shutdown()
        srv.server_close()
