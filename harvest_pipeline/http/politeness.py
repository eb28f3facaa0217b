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
share the limits through its PostgreSQL instead (`store/host_leases.py`). Waits for a slot are bounded; past the bound :class:`SlotTimeout` is raised.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import re
import threading
import time
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

    def _open(self, name: str) -> int:
        path = os.path.join(self.state_dir, name)
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            # Made again when missing: someone may clean the folder while a long harvest runs.
            self.state_dir.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def _take_slot(self, key: str, limit: int, max_wait: float, sleep) -> int:
        deadline = time.monotonic() + max_wait
        pause = 0.01
        while True:
            for i in range(limit):
                fd = self._open(f"{key}.slot{i}.lock")
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
        fd = self._open(f"{key}.last")
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


_POSTGRES_GATES: dict = {}


def gate_for(state_dir: Path | None):
    """Across machines on the shared catalogue's PostgreSQL when one is configured (its lease
    tables and SQL live with the catalogue's, in store/host_leases.py); else file locks shared
    across processes under ``state_dir``; in-process locks without one."""
    if state_dir is None:
        return LocalGate()
    from harvest_pipeline.store.backend import catalogue_settings  # the one reader of its settings

    settings = catalogue_settings()
    if settings.shared:
        from harvest_pipeline.store.host_leases import PostgresGate

        # One gate (one connection per thread) per process, however many transports it makes.
        return _POSTGRES_GATES.setdefault(settings.pg_dsn, PostgresGate(settings.pg_dsn))
    return FileGate(state_dir)
