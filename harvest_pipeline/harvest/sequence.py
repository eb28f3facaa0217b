"""Harvest consecutive windows of one source with the server kept busy.

`harvest_windows` is what a run that harvests a range of a source's windows calls (Dagster's
ranged runs, the batch job, the CLI through them). Each window is harvested exactly as
`harvest_partition` harvests it alone: its own from/until traversal and durable cursor, its own
ledger row and verdict, split into sub-windows when it cannot finish whole. What changes is
the time between windows: window N's merge, verdict and `on_window_done` callback run in a worker
thread while window N+1's traversal (its ledger row, then its first requests) runs in the
calling thread.

Guarantees:

- One request at a time per source (politeness): the overlap is traversal(N+1) with merge(N).
  Window N+1's first request goes out as soon as window N's list has ended, while N's last page
  is still mapped and committed (harvest/early_start.py); never while N may still ask for a page.
- Merges in window order, one at a time; `on_window_done` is called once per window, in order,
  from the worker thread, after the window's merge (or with its error).
- A window that fails is recorded failed (as `harvest_window` records it) and the following
  windows still run. A window that must split (harvest/split.py) waits for the merges before it,
  then splits in the calling thread.
- A stop request (harvest/stop.py) stops the traversal at a page boundary; the windows already
  traversed are still merged, the later ones are not started.
- A crash after a window's list is complete and before its merge loses nothing: its staging folder
  holds the closed cursor and the next run merges it without asking the server again.
- The catalogue is opened once for the writes that come together and closed between them
  (store/session.py): other processes get the file between a run's merges.
- On the embedded file and PostgreSQL, window N+1's ledger row and window N's merge (a small
  window's) are written by the process's catalogue writer (harvest/grouped_writes.py), together
  with the other sources' writes that wait at the same time, in one transaction; N+1's row does
  not wait for N's merge. A large window merges in the worker thread, in a transaction of its own.

No Dagster here: the caller turns reports into events in `on_window_done`.
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.harvest import background, stop
from harvest_pipeline.harvest.budget import bind_time_budget
from harvest_pipeline.harvest.early_start import EarlyFirstPage
from harvest_pipeline.harvest.grouped_writes import grouped_writer
from harvest_pipeline.harvest.listers import Lister, lister_for
from harvest_pipeline.harvest.split import harvest_partition, split_failed_window, split_reason
from harvest_pipeline.harvest.window import (
    MERGE_SLOTS, Connect, Progress, Window, WindowHarvest, WindowReport, request_bounds,
)
from harvest_pipeline.store.backend import DUCKLAKE, catalogue_settings
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store.ledger import quirks_of
from harvest_pipeline.store.session import catalogue_connect, process_session
from harvest_pipeline.store.staging import staging_path
from harvest_pipeline.store.clock import to_naive_utc
from harvest_pipeline.store.window_parts import PartState, window_states

log = logging.getLogger(__name__)


@dataclass
class WindowOutcome:
    """One window of the sequence: its report, or the error that ended it (never both)."""

    window: Window
    report: WindowReport | None = None
    error: BaseException | None = None
    started: bool = True  # False: not started, the harvest was stopped before it

    @property
    def ok(self) -> bool:
        return self.report is not None


OnWindowDone = Callable[[WindowOutcome], None]


@dataclass(frozen=True)
class StartingState:
    """What a source's windows start from: each window's ledger state (None: never harvested;
    a window that split before is harvested through its sub-windows) and the quirks earlier runs
    stored for the server (they shape even the first request)."""

    windows: dict[datetime, PartState | None]  # by the Window's start
    quirks: frozenset[str]


def read_starting_states(con, windows_by_source: dict[str, list[Window]]) -> dict[str, StartingState]:
    """The StartingState of every source's windows, in two statements whatever their number: a
    batch run reads its hundred sources' at once (each reading its own queued them on the
    catalogue about 0.4 s before their first requests, bench --many-sources)."""
    states = window_states(con, {sid: [w.start for w in ws] for sid, ws in windows_by_source.items()})
    quirks = quirks_of(con, list(windows_by_source))
    return {sid: StartingState({w.start: states.get((sid, to_naive_utc(w.start))) for w in ws}, frozenset(quirks[sid]))
            for sid, ws in windows_by_source.items()}


def harvest_windows(
    source: SourceConfig,
    windows: Iterable[Window],
    *,
    run_id: str | None = None,
    db_path: str | Path,
    connect: Connect | None = None,
    lister: Lister | None = None,
    progress: Progress | None = None,
    on_window_done: OnWindowDone | None = None,
    starting: StartingState | None = None,
) -> list[WindowOutcome]:
    """Harvest `windows` of `source` in order, window N's merge overlapping window N+1's traversal.

    Arguments as `harvest_partition` (one `lister`, its HTTP session and Identify, serves every
    window). Returns each window's outcome, in order; no window's error is raised (a
    KeyboardInterrupt is, once the merges already started have finished). `on_window_done(outcome)`
    is called in a worker thread, in window order, as soon as each window is merged or failed; an
    exception it raises is raised here at the end, after every window ran. `starting`: the
    windows' StartingState as the caller read it, holding the source's lock (read here otherwise).
    """
    run_id = run_id or uuid.uuid4().hex
    lister = lister or lister_for(source, state_dir=Path(db_path).parent / "hosts")
    # Without a connect() of the caller's, the process's catalogue session (store/session.py):
    # the writes that come together (merge(N), N+1's ledger row) share one open of the file.
    catalogue = connect or catalogue_connect(db_path)
    # The writes of all the process's harvests that wait together go in one transaction (ledger
    # rows, small windows' merges: harvest/grouped_writes.py), into the embedded file or PostgreSQL.
    # DuckLake, whose concurrent commits conflict on its metadata, writes each window on its own.
    writer = None if catalogue_settings().kind == DUCKLAKE else grouped_writer(catalogue, hold=lambda: MERGE_SLOTS)
    merger = background.InOrder()  # window N's merge before N+1's
    pending: list[Future] = []
    callback_errors: list[BaseException] = []

    def deliver(outcome: WindowOutcome) -> WindowOutcome:
        if on_window_done is not None:
            try:
                on_window_done(outcome)
            except BaseException as exc:  # noqa: BLE001 - raised to the caller at the end
                callback_errors.append(exc)
        return outcome

    def merged(harvest: WindowHarvest) -> WindowOutcome:
        try:
            outcome = WindowOutcome(harvest.window, report=harvest.merge())
        except BaseException as exc:  # noqa: BLE001 - recorded in the ledger; the next windows run
            outcome = WindowOutcome(harvest.window, error=exc)
        return deliver(outcome)

    def wait_for_merges() -> None:
        for future in pending:
            future.exception()  # each task catches its own errors; this only waits

    harvest_kw = dict(run_id=run_id, db_path=db_path, connect=catalogue, lister=lister, progress=progress)
    identify_recorded = False
    quirks_known = None  # the stored quirks as the window before read them, plus what it learned
    windows = list(windows)
    # Each window's first page, asked for when the window before has no more pages to ask for
    # (harvest/early_start.py): the server then answers while that window's last page is written.
    early = [EarlyFirstPage() for _ in windows]
    prior_states: dict[datetime, PartState | None] = {}

    def begin_next(n: int):
        """What window n-1 calls once its list has ended (None after the last window)."""
        if n >= len(windows):
            return None
        window = windows[n]
        return lambda: _ask_first_page_early(source, window, lister, db_path, prior_states.get(window.start), early[n])
    try:
        # Which windows split before (their next run goes to their sub-windows), and what earlier
        # runs learned about the server, read once: so even the first window's ledger row is
        # written by the catalogue writer (or the merge thread) while its first page is fetched (a
        # batch run starts a hundred sources at once, and their rows would otherwise hold back
        # each first request).
        if starting is None or any(w.start not in starting.windows for w in windows):
            with catalogue() as con:
                starting = read_starting_states(con, {source.id: windows})[source.id]
        prior_states.update(starting.windows)
        quirks_known = set(starting.quirks)
        lister.apply_quirks(quirks_known)
        # The first window's first request too goes out now, while its ledger row and staging
        # folder are written: a batch run's hundred sources otherwise each waited for those (and
        # for the catalogue writer's shared commit) before their first request.
        if windows:
            _ask_first_page_early(source, windows[0], lister, db_path, prior_states.get(windows[0].start), early[0])
        for n, window in enumerate(windows):
            signum = stop.requested()
            if signum is not None:
                not_started = stop.HarvestStopped(
                    f"not started: the harvest was stopped by {stop.signal_name(signum)}",
                    signum=signum, source_id=source.id, window=window.key,
                    hint="run the same command again; it starts this window",
                )
                pending.append(merger.submit(deliver, WindowOutcome(window, error=not_started, started=False)))
                continue
            prior = prior_states[window.start]
            if prior is not None and prior.split_into:
                # Split before: its sub-windows are harvested and merged here, after the merges before it.
                wait_for_merges()
                pending.append(merger.submit(deliver, _outcome(window, harvest_partition, source, window, **harvest_kw)))
                quirks_known = None
                continue
            # Window N+1's ledger row: by the catalogue writer; without one, in the merge thread after N's merge.
            harvest = WindowHarvest(source, window, record_identify=not identify_recorded, quirks_known=quirks_known,
                                    submit_begin=merger.submit, writer=writer, early=early[n],
                                    on_list_end=begin_next(n + 1), **harvest_kw)
            try:
                harvest.traverse()
            except HarvestError as exc:
                identify_recorded = identify_recorded or harvest.begun
                quirks_known = _learned(harvest)
                if split_reason(exc) is None:
                    pending.append(merger.submit(deliver, WindowOutcome(window, error=exc)))
                    continue
                wait_for_merges()
                pending.append(merger.submit(
                    deliver, _outcome(window, split_failed_window, source, window, exc, **harvest_kw)))
                quirks_known = None
                continue
            except Exception as exc:  # noqa: BLE001 - recorded in the ledger by traverse(); the next windows run
                identify_recorded = identify_recorded or harvest.begun
                quirks_known = _learned(harvest)
                pending.append(merger.submit(deliver, WindowOutcome(window, error=exc)))
                continue
            identify_recorded = True
            quirks_known = _learned(harvest)
            pending.append(merger.submit(merged, harvest))
    finally:
        for asked in early:
            asked.discard()  # a first page not taken (a stop, an error): its listing is closed
        merger.shutdown(wait=True)
        if connect is None:
            process_session(db_path).close()  # the file is free for other processes at once
    outcomes = [future.result() for future in pending]
    if callback_errors:
        raise callback_errors[0]
    return outcomes


def _ask_first_page_early(source: SourceConfig, window: Window, lister: Lister, db_path, prior,
                          early: EarlyFirstPage) -> None:
    """Send `window`'s first request now, while the window before it writes its last page; not for
    a stop, a window that split before (its sub-windows are asked for) or one with a staging folder
    of its own (it resumes from its cursor)."""
    if (stop.requested() is not None or (prior is not None and prior.split_into)
            or staging_path(db_path, source.id, window.start).exists()):
        return
    try:
        # The request is this window's: its time budget, not the one of the window that is ending.
        bind_time_budget(lister, source.traversal, time.monotonic())
        early.start(lister, *request_bounds(source, window, lister))
    except Exception as exc:  # noqa: BLE001 - the window asks for its first page itself
        log.warning("source %s, window %s: could not ask for its first page early: %s", source.id, window.key, exc)


def _learned(harvest: WindowHarvest) -> set[str] | None:
    """The quirks the next window starts from: stored + learned (None: read them, not begun)."""
    if not harvest.begun:
        return None
    return set(harvest.known_quirks) | set(getattr(harvest, "quirks", ())) | set(harvest.lister.quirks)


def _outcome(window: Window, harvest, *args, **kw) -> WindowOutcome:
    try:
        return WindowOutcome(window, report=harvest(*args, **kw))
    except Exception as exc:  # noqa: BLE001 - recorded in the ledger; the next windows run
        return WindowOutcome(window, error=exc)
