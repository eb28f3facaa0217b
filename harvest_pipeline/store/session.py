"""One catalogue connection per process, kept open while the process is busy with it.

A run harvests windows (of one source, or of many sources in threads), and every window opens the
catalogue a few times (its ledger row, its merge, its metadata), window N's merge close to window
N+1's ledger row (harvest/sequence.py). Opening the embedded DuckDB file costs tens of
milliseconds, and closing it checkpoints, which is more than a small window's merge. So the
threads of a process share one open of the file, each use on a cursor of its own (DuckDB shares
one database instance per file within a process anyway):

- a session opens the file if it is not open and runs on a cursor of its own, beside the others;
- the connection stays open while sessions follow each other, and closes once the process has
  not used it for LINGER_SECONDS, so the sensor and the CLI can read between bursts;
- a process that waits for the file (the sensor's read, the CLI, another run, a catalogue
  refresh: every open goes through store/connection.py) touches the file's "wanted" marker;
  a session that finds it touched since the file was opened, and has held it for at least
  MIN_HOLD_SECONDS (two busy runs must not hand the file back and forth at every write), closes
  the connection and waits YIELD_SECONDS before opening it again, so the waiting process gets
  its turn;
- it is closed after MAX_HOLD_SECONDS of continuous use in any case (a reader that does not say
  it waits). Each close checkpoints the file, which costs more than a small window's merge, so it
  does not happen on a short timer.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from harvest_pipeline.store.connection import close_catalogue, open_catalogue, wanted_path
from harvest_pipeline.store.schema import ensure_schema

LINGER_SECONDS = 0.5
MIN_HOLD_SECONDS = 1.0
MAX_HOLD_SECONDS = 30.0
YIELD_SECONDS = 0.4


class CatalogueSession:
    """The process's open catalogue: one DuckDB instance, a cursor of it per use.

    Threads use it at the same time, each in its own transaction on its own cursor (DuckDB runs
    them side by side and checks that they write different rows: the sources of a batch run do).
    A thread that uses it again while it holds it gets the cursor it holds. The instance is
    closed only when no cursor is out, and nobody gets one while it closes.
    """

    def __init__(self, path: str | Path, *, linger_seconds: float = LINGER_SECONDS,
                 max_hold_seconds: float = MAX_HOLD_SECONDS):
        self.path = Path(path)
        self.wanted = wanted_path(path)
        self.linger_seconds, self.max_hold_seconds = linger_seconds, max_hold_seconds
        self._state = threading.Condition()
        self._anchor: duckdb.DuckDBPyConnection | None = None  # keeps the instance open between uses
        self._out = 0  # cursors handed out
        self._closing = False
        self._held = threading.local()  # the cursor this thread holds, if any
        self._opened_at = self._last_used = self._opened_wall = 0.0
        self._closer: threading.Thread | None = None
        self.opens = 0  # how often the file was opened (tests read it)

    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        held = getattr(self._held, "con", None)
        if held is not None:
            yield held  # the same thread again, inside its own use: the same cursor and transaction
            return
        self._check_out()
        try:
            con = open_catalogue(self.path)  # a cursor of the instance the anchor keeps open
        except BaseException:
            self._check_in()
            raise
        self._held.con = con
        try:
            yield con
        finally:
            self._held.con = None
            close_catalogue(self.path, con)  # a cursor that failed is not handed out again
            self._check_in()

    def _check_out(self) -> None:
        with self._state:
            while True:
                while self._closing:
                    self._state.wait()
                held = time.monotonic() - self._opened_at
                if self._anchor is not None and (held > self.max_hold_seconds
                                                 or (held > MIN_HOLD_SECONDS and self._asked_for_since_open())):
                    self._close_locked()
                    # The file is free: another process's waiting open gets in. Nobody here opens
                    # it meanwhile (`_closing` stays set).
                    self._closing = True
                    self._state.release()
                    try:
                        time.sleep(YIELD_SECONDS)
                    finally:
                        self._state.acquire()
                        self._closing = False
                        self._state.notify_all()
                    continue
                if self._anchor is None:
                    # The process's shared open of the file (small row groups, store/connection.py),
                    # so a `store.connect()` elsewhere in the process uses the same instance.
                    anchor = open_catalogue(self.path)
                    try:
                        ensure_schema(anchor)
                    except BaseException:
                        close_catalogue(self.path, anchor)
                        raise
                    self._anchor = anchor
                    self._opened_at = time.monotonic()
                    self._opened_wall = time.time()
                    self.opens += 1
                    self._start_closer()
                self._out += 1
                return

    def _check_in(self) -> None:
        with self._state:
            self._out -= 1
            self._last_used = time.monotonic()
            self._state.notify_all()

    def close(self) -> None:
        """Close the file once every cursor out is back (the end of a run)."""
        with self._state:
            while self._closing:
                self._state.wait()
            self._close_locked()

    def _close_locked(self) -> None:
        """With `_state` held: wait for the cursors out, then close the instance (it checkpoints)."""
        if self._anchor is None:
            return
        self._closing = True
        try:
            while self._out:
                self._state.wait()
            anchor, self._anchor = self._anchor, None
            close_catalogue(self.path, anchor)
        finally:
            self._closing = False
            self._state.notify_all()

    def _asked_for_since_open(self) -> bool:
        try:
            return self.wanted.stat().st_mtime >= self._opened_wall
        except OSError:
            return False

    def _start_closer(self) -> None:
        if self._closer is not None and self._closer.is_alive():
            return
        self._closer = threading.Thread(target=self._close_when_idle, name="catalogue-closer", daemon=True)
        self._closer.start()

    def _close_when_idle(self) -> None:
        while True:
            time.sleep(self.linger_seconds / 2)
            with self._state:
                if self._anchor is None:
                    return
                if not self._out and not self._closing and time.monotonic() - self._last_used >= self.linger_seconds:
                    self._close_locked()
                    return


_SESSIONS: dict[Path, CatalogueSession] = {}
_SESSIONS_LOCK = threading.Lock()


def process_session(path: str | Path) -> CatalogueSession:
    """The process's session for the embedded catalogue file at `path`."""
    key = Path(path).resolve()
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            session = _SESSIONS[key] = CatalogueSession(path)
        return session


def catalogue_connect(path: str | Path):
    """A `connect()` for the harvest core: the process's session for the embedded file, or a
    cursor of the process's one attach of a shared catalogue (store/shared_instance.py)."""
    from harvest_pipeline.store.backend import catalogue_settings
    from harvest_pipeline.store.connection import connection_config
    from harvest_pipeline.store.shared_instance import SharedConnect

    settings = catalogue_settings()
    if settings.shared:  # local folders (staging, spill) stay beside the file's path
        return SharedConnect.of(settings, connection_config(path))
    return process_session(path).connection


def close_all() -> None:
    """Close every session's connection (the end of a run: the file is free at once)."""
    from harvest_pipeline.store.shared_instance import close_shared_instances

    with _SESSIONS_LOCK:
        sessions = list(_SESSIONS.values())
    for session in sessions:
        session.close()
    close_shared_instances()  # a shared catalogue's attach and its pooled connections
