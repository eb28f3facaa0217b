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
from harvest_pipeline.store.pg_session import ProcessSession


class PostgresGate:
    """Per-host slots and interval shared by every worker on every machine using one PostgreSQL.

    Used when the shared catalogue is configured (``HARVEST_CATALOGUE`` postgres or ducklake), on
    the same database (``HARVEST_CATALOGUE_PG_DSN``). Slot ``i`` of a host is the session advisory
    lock ``(hash(host), i)``, held while the request is in flight; PostgreSQL drops it when a
    worker's session ends, so a killed worker never keeps a slot. The interval is the row
    ``harvest_host_politeness(host_key)``: each request reserves its start there in one statement
    (the later of now and the last reserved start plus the interval), then sleeps until it. Times
    are the database server's clock, so workers' clocks need not agree.

    A process uses one session for all its hosts and threads (store/pg_session.py), each statement
    short, none held across a sleep. Advisory locks are re-entrant within a session, so the slots
    this process holds are also counted here, and a thread never takes one another thread holds.
    """

    _TABLE = (
        "CREATE TABLE IF NOT EXISTS harvest_host_politeness "
        "(host_key TEXT PRIMARY KEY, last_start TIMESTAMPTZ)"
    )

    def __init__(self, dsn: str):
        self._session = ProcessSession.of(dsn, "harvest-politeness", setup=self._TABLE)
        self._lock = threading.Lock()  # guards _held
        self._held: set[tuple[int, int]] = set()  # (host lock key, slot) held by this process

    @staticmethod
    def _lock_key(key: str) -> int:
        # Advisory locks take two int4: the host's crc32 as a signed int4, then the slot number.
        h = zlib.crc32(("harvest-host:" + key).encode())
        return h - (1 << 32) if h >= 1 << 31 else h

    def _try_slot(self, lock: int, slot: int) -> bool:
        with self._lock:
            if (lock, slot) in self._held:
                return False
            self._held.add((lock, slot))  # claimed before asking, so no other thread asks for it meanwhile
        taken = False
        try:
            taken = bool(self._session.execute("SELECT pg_try_advisory_lock(%s, %s)", (lock, slot))[0])
        finally:
            if not taken:
                with self._lock:
                    self._held.discard((lock, slot))
        return taken

    def _take_slot(self, key: str, limit: int, max_wait: float, sleep) -> int:
        deadline = time.monotonic() + max_wait
        pause = 0.01
        lock = self._lock_key(key)
        while True:
            for i in range(limit):
                if self._try_slot(lock, i):
                    return i
            if time.monotonic() >= deadline:
                raise SlotTimeout(key, limit, max_wait)
            sleep(pause * (0.5 + random.random()))
            pause = min(0.1, pause * 1.5)

    def _release_slot(self, key: str, slot: int) -> None:
        lock = self._lock_key(key)
        try:
            self._session.execute("SELECT pg_advisory_unlock(%s, %s)", (lock, slot))
        except Exception:  # noqa: BLE001 - a session that ended released its locks all the same
            pass
        finally:
            with self._lock:
                self._held.discard((lock, slot))

    def _reserve_start(self, key: str, interval: float, sleep) -> float:
        """Reserve this request's start (at least `interval` after the last one reserved, on any
        worker) and sleep until it; returns the seconds slept."""
        self._session.execute(
            "INSERT INTO harvest_host_politeness (host_key) VALUES (%s) ON CONFLICT (host_key) DO NOTHING", (key,)
        )
        wait = float(self._session.execute(
            "UPDATE harvest_host_politeness"
            " SET last_start = greatest(clock_timestamp(), last_start + make_interval(secs => %s))"
            " WHERE host_key = %s RETURNING extract(epoch FROM last_start - clock_timestamp())",
            (interval, key),
        )[0])
        if wait > 0:
            sleep(wait)
        return max(0.0, wait)

    @contextmanager
    def hold(self, key: str, limit: int, interval: float, max_wait: float, sleep) -> Iterator[float]:
        started = time.monotonic()
        slot = self._take_slot(key, limit, max_wait, sleep)
        try:
            waited = time.monotonic() - started
            if interval > 0:
                waited += self._reserve_start(key, interval, sleep)
            yield waited
        finally:
            self._release_slot(key, slot)
