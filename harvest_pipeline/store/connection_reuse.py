"""One catalogue open shared by the writes that come close together, then closed again.

A sequence of windows writes to the catalogue in bursts: window N's merge (in a worker thread)
while window N+1 reads its split state and writes its ledger row (in the harvesting thread).
Opening an embedded DuckDB file costs a lock, the schema check, and on the last close a
checkpoint; `ConnectionReuse` lets such a burst open it once. Each user gets its own cursor (a
connection to the same database instance: its own transaction, safe in its own thread), and the
file is closed when nobody has used it for `idle_seconds`, or as soon as it is idle after being
held `max_hold_seconds`: DuckDB lets one process hold the file, and the sensor, other runs and
the CLI must get it between our bursts.

Only an embedded catalogue is reused: a shared one (PostgreSQL, DuckLake) is a session per
`connect()`, as before (its default database is a per-connection `USE`).
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Callable, Iterator

import duckdb

from harvest_pipeline.store.backend import ATTACHED_AS

Connect = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]

DEFAULT_IDLE_SECONDS = 0.3
DEFAULT_MAX_HOLD_SECONDS = 1.5


class ConnectionReuse:
    """A `connect()` that shares one open of `connect` between users close together in time.

    Call `close()` at the end (it waits for no user: call it once they are done)."""

    def __init__(self, connect: Connect, *, idle_seconds: float = DEFAULT_IDLE_SECONDS,
                 max_hold_seconds: float = DEFAULT_MAX_HOLD_SECONDS):
        self._connect = connect
        self.idle_seconds, self.max_hold_seconds = idle_seconds, max_hold_seconds
        self._lock = threading.Lock()
        self._opened = None  # (context manager, connection, opened at) while the file is open
        self._users = 0
        self._generation = 0  # which open an idle timer was started for
        self._timer: threading.Timer | None = None
        self._shared: bool | None = None  # a shared catalogue: never reused
        self._database = "main"  # the default database of the open connection
        self.opens = 0  # how often the file was opened (tests and the benchmark read it)

    @contextmanager
    def __call__(self) -> Iterator[duckdb.DuckDBPyConnection]:
        base = None if self._shared else self._acquire()
        if base is None:
            with self._connect() as con:
                yield con
            return
        try:
            if self._shared:  # learned at this first open: this user keeps the whole session
                yield base
                return
            cursor = base.cursor()
            try:
                # A cursor starts in the instance's default database; the embedded catalogue may be
                # a file attached to an in-memory instance (store/connection.py): use the same one.
                cursor.execute(f"USE {self._database}")
                yield cursor
            finally:
                cursor.close()
        finally:
            self._release()

    def _acquire(self) -> duckdb.DuckDBPyConnection | None:
        """The open connection (opened now if needed); None: open your own (a shared catalogue)."""
        with self._lock:
            if self._shared:
                return None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._opened is None:
                manager = self._connect()
                con = manager.__enter__()
                try:
                    database = con.execute("SELECT current_database()").fetchone()[0]
                except BaseException:
                    manager.__exit__(None, None, None)
                    raise
                self._shared = database == ATTACHED_AS
                self._database = database
                self._opened = (manager, con, time.monotonic())
                self._generation += 1
                self.opens += 1
            self._users += 1
            return self._opened[1]

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users or self._opened is None:
                return
            if self._shared or time.monotonic() - self._opened[2] >= self.max_hold_seconds:
                self._close_locked()
                return
            generation = self._generation
            self._timer = threading.Timer(self.idle_seconds, self._close_if_idle, args=(generation,))
            self._timer.daemon = True
            self._timer.start()

    def _close_if_idle(self, generation: int) -> None:
        with self._lock:
            if self._users == 0 and self._opened is not None and self._generation == generation:
                self._close_locked()

    def _close_locked(self) -> None:
        manager, _, _ = self._opened
        self._opened = None
        manager.__exit__(None, None, None)

    def close(self) -> None:
        """Close the file now if it is open and unused."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._opened is not None and self._users == 0:
                self._close_locked()
