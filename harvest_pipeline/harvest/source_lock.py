"""One process harvests a source's windows at a time.

Windows of one source run one after another: politeness towards its server, and merges in window
order. Runs that harvest one source (a UI launch of its asset) and runs that harvest many (the
sensor's batch runs) both take the source's lock, an exclusive `flock` on
`<catalogue folder>/locks/source-<id>.lock`, so a run whose source is busy waits for the run that
holds it instead of starting a second traversal. The kernel drops the lock when its holder dies.

With a shared catalogue (workers on several machines) the lock is also taken on the catalogue's
PostgreSQL (store/source_leases.py, an advisory lock), so a UI launch on one machine waits for a
batch run holding the source on another; PostgreSQL drops it when the holder's connection ends.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Callable

from harvest_pipeline.harvest import stop
from harvest_pipeline.store.backend import catalogue_settings
from harvest_pipeline.store.source_leases import PostgresSourceLock

POLL_SECONDS = 0.25


def lock_path(db_path: str | Path, source_id: str) -> Path:
    return Path(db_path).parent / "locks" / f"source-{source_id}.lock"


def _shared_lock(source_id: str) -> PostgresSourceLock | None:
    """The source's lock on the shared catalogue's PostgreSQL, or None for the embedded file."""
    settings = catalogue_settings()
    return PostgresSourceLock(settings.pg_dsn, source_id) if settings.shared else None


class SourceLock:
    def __init__(self, db_path: str | Path, source_id: str):
        self.path = lock_path(db_path, source_id)
        self.source_id = source_id
        self._fd: int | None = None
        self._shared: PostgresSourceLock | None = None

    def acquire(self, *, on_wait: Callable[[], None] | None = None, timeout: float | None = None) -> bool:
        """Take the lock, waiting up to `timeout` seconds (None: as long as it takes); False when the
        wait ran out or a stop was requested while waiting."""
        deadline = None if timeout is None else time.monotonic() + timeout
        shared = _shared_lock(self.source_id)  # before the file: a misconfigured catalogue raises here
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        local = told = held = False
        try:
            while True:
                if not local:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        local = True
                    except BlockingIOError:
                        pass
                # The machine's lock first, then the other machines' (held meanwhile: a run on this
                # machine would wait for this one anyway).
                held = local and (shared is None or shared.try_acquire())
                if held or stop.requested() is not None or (deadline is not None and time.monotonic() >= deadline):
                    break
                if not told and on_wait is not None:
                    on_wait()
                    told = True
                time.sleep(POLL_SECONDS)
        finally:
            if not held:  # the wait ran out, a stop, or an error: let go of what was taken
                os.close(fd)
                if shared is not None:
                    shared.close()
        if held:
            self._fd, self._shared = fd, shared
        return held

    def release(self) -> None:
        if self._shared is not None:
            self._shared.close()  # PostgreSQL releases the advisory lock
            self._shared = None
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "SourceLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
