"""The catalogue writes of a process's harvests that arrive together, done in one transaction.

A batch run harvests up to a hundred sources at once, and their windows end at about the same
time (the servers answer at their pace, all together). Each window then writes its ledger row
when it begins and its merge and verdict when its list is complete: a few ms of statements and a
commit each, which queued for the CPU and held back the sources' next windows (measured: merges
waited 4.8 s on average with a hundred sources). Here one thread per catalogue takes every write
waiting, runs them in one transaction (the merges of small windows as one group,
store/merge_group.py) and commits once; the more writes wait, the larger the group and the
cheaper each one.

Each write keeps its own outcome: when a group's transaction fails, its writes are run again one
by one, each in a transaction of its own, so a window's error is that window's, as before. A
group holds at most one merge per source (a source's windows merge in order, one at a time).
A crash loses nothing: a window's staging folder stays until its merge committed.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import duckdb

from harvest_pipeline.store import ledger
from harvest_pipeline.store.backend import Upsert, run_write, upsert_in_place, upsert_rows_in_place
from harvest_pipeline.store.merge import LARGE_WINDOW_ROWS, MergeCounts
from harvest_pipeline.store.merge_group import StagedWindow, merge_staged_windows

log = logging.getLogger(__name__)

Connect = Callable[[], Any]

# A group's bounds. Its merges' rows: at most what one small window's merge holds (a group of 90
# windows, 9,000 rows, ran out of DuckDB's 128 MB in the 100-source bench). Its writes: DuckDB
# holds about 0.9 MB per INSERT statement until the commit when it runs on more than one thread
# (batch runs set one; HARVEST_DUCKDB_THREADS may say otherwise), so 64 writes stay near half of
# the default 128 MB; on one thread they hold next to nothing (store/backend.py upsert_in_place).
MAX_GROUP_WINDOWS = 100
MAX_GROUP_ROWS = LARGE_WINDOW_ROWS
MAX_GROUP_WRITES = 64
# The thread ends after this long without writes (a new write starts it again).
IDLE_SECONDS = 2.0


@dataclass
class _Write:
    body: Callable[[duckdb.DuckDBPyConnection], Any]  # the write alone (a plain write, or a merge with its verdict)
    what: str
    future: Future = field(default_factory=Future)
    staged: StagedWindow | None = None  # a merge: its window, merged in the group
    finish: Callable[[duckdb.DuckDBPyConnection, MergeCounts], Any] | None = None  # after its merge, same transaction
    row: tuple[Upsert, list] | None = None  # an upsert's row, written with the group's other rows of that upsert
    before: Callable[[duckdb.DuckDBPyConnection], Any] | None = None  # a write's part before its row


class GroupedWriter:
    """Runs writes submitted from many threads, those waiting together in one transaction."""

    def __init__(self, connect: Connect, *, hold: Callable[[], Any] | None = None):
        self.connect = connect
        self._hold = hold  # a context manager factory held around each transaction (merges at once per process)
        self._waiting: deque[_Write] = deque()
        self._state = threading.Condition()
        self._thread: threading.Thread | None = None

    def write(self, body: Callable[[duckdb.DuckDBPyConnection], Any], *, what: str) -> Future:
        """Run `body(con)` in a catalogue transaction; its Future gives what it returned or raised."""
        return self._submit(_Write(body, what))

    def upsert(self, upsert: Upsert, params: list, *, before: Callable[[duckdb.DuckDBPyConnection], Any] | None = None,
               what: str) -> Future:
        """Run `before(con)` (if given), then `upsert` of one row (its parameters `params`), in a
        catalogue transaction. In a group the rows of one upsert go together (into the embedded
        file one UPDATE and one INSERT, where a hundred windows' ledger rows took a statement each,
        and each statement a wait for Python's GIL in a busy process). The Future gives None."""

        def alone(con):
            if before is not None:
                before(con)
            upsert_in_place(con, upsert, params)

        return self._submit(_Write(alone, what, row=(upsert, params), before=before))

    def merge(self, staged: StagedWindow, finish: Callable[[duckdb.DuckDBPyConnection, MergeCounts], Any], *,
              alone: Callable[[duckdb.DuckDBPyConnection], Any], what: str) -> Future:
        """Merge a staged window, then `finish(con, counts)` in the same transaction (its verdict);
        `alone(con)` does both when the window is written on its own. The Future gives finish's result."""
        return self._submit(_Write(alone, what, staged=staged, finish=finish))

    def _submit(self, item: _Write) -> Future:
        with self._state:
            self._waiting.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="catalogue-writes", daemon=True)
                self._thread.start()
            self._state.notify()
        return item.future

    def _serve(self) -> None:
        while True:
            with self._state:
                if not self._waiting:
                    self._state.wait(IDLE_SECONDS)
                if not self._waiting:
                    self._thread = None
                    return
                group = self._take()
            self._run(group)

    def _take(self) -> list[_Write]:
        """The writes waiting, in order, within the group's bounds (one merge per source, at most
        MAX_GROUP_WRITES writes); the others wait, in order, for the next group."""
        group, later = [], deque()
        sources, rows = set(), 0
        while self._waiting:
            item = self._waiting.popleft()
            if len(group) >= MAX_GROUP_WRITES:
                later.append(item)
                continue
            staged = item.staged
            if staged is not None:
                if staged.source_id in sources or (sources and (len(sources) >= MAX_GROUP_WINDOWS
                                                                or rows + staged.received > MAX_GROUP_ROWS)):
                    later.append(item)
                    continue
                sources.add(staged.source_id)
                rows += staged.received
            group.append(item)
        self._waiting.extendleft(reversed(later))
        return group

    def _run(self, group: list[_Write]) -> None:
        if len(group) == 1:
            return self._run_alone(group[0])
        try:
            results = self._transaction(lambda con: _write_group(con, group), f"{len(group)} catalogue writes")
        except BaseException as exc:  # noqa: BLE001 - each write runs again alone and keeps its own outcome
            log.warning("a group of %d catalogue writes failed (%s: %s); writing them one by one",
                     len(group), type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
            for item in group:
                self._run_alone(item)
            return
        for item, result in zip(group, results):
            item.future.set_result(result)

    def _run_alone(self, item: _Write) -> None:
        try:
            item.future.set_result(self._transaction(item.body, item.what))
        except BaseException as exc:  # noqa: BLE001 - the submitter raises it
            item.future.set_exception(exc)

    def _transaction(self, body, what: str):
        if self._hold is None:
            return run_write(self.connect, body, what=what, log=log)
        with self._hold():
            return run_write(self.connect, body, what=what, log=log)


def _write_group(con: duckdb.DuckDBPyConnection, group: list[_Write]) -> list:
    """The group's plain writes in order, then its upserts' rows (one set of statements per
    upsert), then its merges as one group, then each merge's finish (their ledger rows together)."""
    results: dict[int, Any] = {}
    merges = [(n, item) for n, item in enumerate(group) if item.staged is not None]
    rows: dict[int, tuple[Upsert, list]] = {}  # id(upsert) -> (upsert, its rows' parameters)
    for n, item in enumerate(group):
        if item.row is not None:
            if item.before is not None:
                item.before(con)
            upsert, params = item.row
            rows.setdefault(id(upsert), (upsert, []))[1].append(params)
            results[n] = None
        elif item.staged is None:
            results[n] = item.body(con)
    for upsert, all_params in rows.values():
        upsert_rows_in_place(con, upsert, all_params)
    counts = merge_staged_windows(con, [item.staged for _, item in merges]) if merges else []
    with ledger.finishing_together(con):  # the windows' verdict rows in one statement
        for (n, item), merged in zip(merges, counts):
            results[n] = item.finish(con, merged)
    return [results[n] for n in range(len(group))]


# Weak: a writer lives while a harvest uses it (or its thread runs).
_WRITERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_WRITERS_LOCK = threading.Lock()


def grouped_writer(connect: Connect, *, hold: Callable[[], Any] | None = None) -> GroupedWriter:
    """The process's writer for this `connect()` (the process's catalogue session: one per file)."""
    with _WRITERS_LOCK:
        writer = _WRITERS.get(connect)
        if writer is None:
            writer = _WRITERS[connect] = GroupedWriter(connect, hold=hold)
        return writer
