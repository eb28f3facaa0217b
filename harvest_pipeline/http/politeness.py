"""Politeness per host, shared by every process that harvests that host.

Requests to one host (``hostname``, plus ``_port`` when the URL names a port, see
:func:`host_key`) hold one of ``max_concurrent_requests`` slots while they are in flight, and start
at least ``min_request_interval_seconds`` after the previous request to that host started. With a
``state_dir`` (the harvester passes ``<catalogue dir>/hosts/``) both are file locks
(:class:`FileGate`), so they hold across processes (each Dagster run is its own process):

* slot ``i`` is ``<state_dir>/<host>.slot<i>.lock``; a request holds an exclusive ``fcntl.flock``
  on one of them while it is sent and its body read. A process waiting for a slot polls the files
  (10-100 ms, jittered). The kernel drops a flock when its process dies, so a killed harvest
  never leaves a slot taken;
* the interval uses ``<state_dir>/<host>.last``: under an exclusive flock, read the start time of
  the previous request, sleep out the rest of the interval while still holding the lock (so
  waiters queue up behind it), write the new start time, unlock.

A slot is taken before the interval gate, so a request never waits for a slot after it has been
stamped. Without a ``state_dir`` the same rules use in-process locks (:class:`LocalGate`, threads
of one process only). When the shared catalogue is configured, workers on different machines
share the limits through its PostgreSQL instead (:class:`PostgresGate`). Waits for a slot are bounded; past the bound :class:`SlotTimeout` is raised.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import re
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit


def host_key(url: str) -> str:
    """The politeness key of a URL: its hostname, plus ``_port`` when the URL names one.

    Safe as a file name (anything but ``[a-z0-9.-]`` becomes ``_``)."""
    parts = urlsplit(url)
    host = (parts.hostname or "unknown").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    key = f"{host}_{port}" if port else host
    return re.sub(r"[^a-z0-9.-]", "_", key)


class SlotTimeout(Exception):
    """No slot of host ``key`` came free within ``waited`` seconds."""

    def __init__(self, key: str, limit: int, waited: float):
        super().__init__(key)
        self.key, self.limit, self.waited = key, limit, waited


class LocalGate:
    """Per-host slots and interval for the threads of this process (no state directory)."""

    _registry: ClassVar[dict[tuple[str, int], tuple]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def _host(self, key: str, limit: int):
        with self._registry_lock:
            entry = self._registry.get((key, limit))
            if entry is None:
                entry = (threading.BoundedSemaphore(limit), threading.Lock(), [0.0])
                self._registry[(key, limit)] = entry
            return entry

    @contextmanager
    def hold(self, key: str, limit: int, interval: float, max_wait: float, sleep) -> Iterator[float]:
        sem, lock, last = self._host(key, limit)
        started = time.monotonic()
        if not sem.acquire(timeout=max_wait):
            raise SlotTimeout(key, limit, max_wait)
        try:
            waited = time.monotonic() - started
            if interval > 0:
                with lock:
                    wait = min(interval, last[0] + interval - time.time())
                    if wait > 0:
                        sleep(wait)
                        waited += wait
                    last[0] = time.time()
            yield waited
        finally:
            sem.release()


class FileGate:
    """Per-host slots and interval shared by every process using the same state directory."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)

    def _path(self, name: str) -> str:
        # Made every time: someone may clean the folder while a long harvest runs.
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return str(self.state_dir / name)

    def _take_slot(self, key: str, limit: int, max_wait: float, sleep) -> int:
        deadline = time.monotonic() + max_wait
        pause = 0.01
        while True:
            for i in range(limit):
                fd = os.open(self._path(f"{key}.slot{i}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as e:
                    os.close(fd)
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                    continue
                return fd
            if time.monotonic() >= deadline:
                raise SlotTimeout(key, limit, max_wait)
            sleep(pause * (0.5 + random.random()))
            pause = min(0.1, pause * 1.5)

    def _stamp(self, key: str, interval: float, sleep) -> float:
        fd = os.open(self._path(f"{key}.last"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 64, 0)
            try:
                last = float(raw.decode("ascii").strip() or 0)
            except (UnicodeDecodeError, ValueError):
                last = 0.0
            # min(interval, ...): a clock that stepped back must not block for longer.
            wait = min(interval, last + interval - time.time())
            if wait > 0:
                sleep(wait)
            stamp = f"{time.time():.6f}\n".encode("ascii")
            os.pwrite(fd, stamp.ljust(32), 0)
            return max(0.0, wait)
        finally:
            os.close(fd)  # closing drops the flock

    @contextmanager
    def hold(self, key: str, limit: int, interval: float, max_wait: float, sleep) -> Iterator[float]:
        started = time.monotonic()
        fd = self._take_slot(key, limit, max_wait, sleep)
        try:
            waited = time.monotonic() - started
            if interval > 0:
                waited += self._stamp(key, interval, sleep)
            yield waited
        finally:
            os.close(fd)


class PostgresGate:
    """Per-host slots and interval shared by every worker on every machine using one PostgreSQL.

    Used when the shared catalogue is configured (``HARVEST_CATALOGUE`` postgres or ducklake), on
    the same database (``HARVEST_CATALOGUE_PG_DSN``). Slot ``i`` of a host is the session advisory
    lock ``(hash(host), i)``, held on this thread's connection while the request is in flight;
    PostgreSQL drops it when a worker's connection dies, so a killed worker never keeps a slot.
    The interval is the row ``harvest_host_politeness(host_key)``: under its row lock, read the
    previous start, sleep out the rest of the interval still holding it, stamp the new start. Times
    are the database server's clock, so workers' clocks need not agree.
    """

    _TABLE = (
        "CREATE TABLE IF NOT EXISTS harvest_host_politeness "
        "(host_key TEXT PRIMARY KEY, last_start TIMESTAMPTZ)"
    )

    def __init__(self, dsn: str):
        self._dsn = dsn
        self._local = threading.local()
        self._table_ready = False

    def _conn(self):
        import psycopg  # only workers on a shared catalogue need it

        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self._dsn, autocommit=True, application_name="harvest-politeness")
            self._local.conn = conn
        if not self._table_ready:
            try:
                conn.execute(self._TABLE)
            except psycopg.errors.UniqueViolation:
                pass  # another worker created it at the same moment
            self._table_ready = True
        return conn

    @staticmethod
    def _lock_key(key: str) -> int:
        # Advisory locks take two int4: the host's crc32 as a signed int4, then the slot number.
        h = zlib.crc32(("harvest-host:" + key).encode())
        return h - (1 << 32) if h >= 1 << 31 else h

    def _take_slot(self, conn, key: str, limit: int, max_wait: float, sleep) -> int:
        deadline = time.monotonic() + max_wait
        pause = 0.01
        lock = self._lock_key(key)
        while True:
            for i in range(limit):
                if conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (lock, i)).fetchone()[0]:
                    return i
            if time.monotonic() >= deadline:
                raise SlotTimeout(key, limit, max_wait)
            sleep(pause * (0.5 + random.random()))
            pause = min(0.1, pause * 1.5)

    def _stamp(self, conn, key: str, interval: float, sleep) -> float:
        conn.execute(
            "INSERT INTO harvest_host_politeness (host_key) VALUES (%s) ON CONFLICT (host_key) DO NOTHING", (key,)
        )
        with conn.transaction():
            since = conn.execute(
                "SELECT extract(epoch FROM clock_timestamp() - last_start) FROM harvest_host_politeness"
                " WHERE host_key = %s FOR UPDATE",
                (key,),
            ).fetchone()[0]
            wait = 0.0 if since is None else min(interval, interval - float(since))
            if wait > 0:
                sleep(wait)
            conn.execute("UPDATE harvest_host_politeness SET last_start = clock_timestamp() WHERE host_key = %s", (key,))
        return max(0.0, wait)

    @contextmanager
    def hold(self, key: str, limit: int, interval: float, max_wait: float, sleep) -> Iterator[float]:
        started = time.monotonic()
        conn = self._conn()
        slot = self._take_slot(conn, key, limit, max_wait, sleep)
        try:
            waited = time.monotonic() - started
            if interval > 0:
                waited += self._stamp(conn, key, interval, sleep)
            yield waited
        finally:
            try:
                conn.execute("SELECT pg_advisory_unlock(%s, %s)", (self._lock_key(key), slot))
            except Exception:
                conn.close()  # closing the session releases its locks all the same


def shared_politeness_dsn() -> str | None:
    """The PostgreSQL of the shared catalogue, when one is configured (same variables as the store)."""
    if (os.environ.get("HARVEST_CATALOGUE") or "duckdb").strip().lower() in ("postgres", "ducklake"):
        return os.environ.get("HARVEST_CATALOGUE_PG_DSN") or None
    return None


_POSTGRES_GATES: dict[str, PostgresGate] = {}


def gate_for(state_dir: Path | None) -> LocalGate | FileGate | PostgresGate:
    """Across machines on the shared catalogue's PostgreSQL when one is configured; else file locks
    shared across processes under ``state_dir``; in-process locks without one."""
    dsn = shared_politeness_dsn()
    if dsn is not None and state_dir is not None:
        # One gate (one connection per thread) per process, however many transports it makes.
        return _POSTGRES_GATES.setdefault(dsn, PostgresGate(dsn))
    return FileGate(state_dir) if state_dir is not None else LocalGate()
