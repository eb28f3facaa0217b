"""One process harvests a source's windows at a time.

Windows of one source run one after another: politeness towards its server, and merges in window
order. Runs that harvest one source (a UI launch of its asset) and runs that harvest many (the
sensor's batch runs) both take the source's lock, an exclusive `flock` on
`<catalogue folder>/locks/source-<id>.lock`, so a run whose source is busy waits for the run that
holds it instead of starting a second traversal. The kernel drops the lock when its holder dies.

It is a local lock: with workers on several machines (a shared catalogue), the sensor still never
launches a source's windows twice, but a UI launch on another machine is not held back by it.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Callable

from harvest_pipeline.harvest import stop

POLL_SECONDS = 0.25


def lock_path(db_path: str | Path, source_id: str) -> Path:
    return Path(db_path).parent / "locks" / f"source-{source_id}.lock"


class SourceLock:
    def __init__(self, db_path: str | Path, source_id: str):
        self.path = lock_path(db_path, source_id)
        self.source_id = source_id
        self._fd: int | None = None

    def acquire(self, *, on_wait: Callable[[], None] | None = None, timeout: float | None = None) -> bool:
        """Take the lock, waiting up to `timeout` seconds (None: as long as it takes); False when the
        wait ran out or a stop was requested while waiting."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if stop.requested() is not None or (deadline is not None and time.monotonic() >= deadline):
                    os.close(fd)
                    return False
                if not told and on_wait is not None:
                    on_wait()
                    told = True
                time.sleep(POLL_SECONDS)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "SourceLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
