"""Per-host politeness across machines: leases on the shared catalogue's PostgreSQL.

The gate the transport (``harvest_pipeline/http/politeness.py``) uses when a shared catalogue is
configured; it keeps its table and every statement here, with the catalogue's other SQL.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from harvest_pipeline.http.politeness import SlotTimeout


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
