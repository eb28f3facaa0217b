"""Windows that split themselves: a window that cannot finish whole is harvested in smaller parts.

`harvest_partition` is the entry point the Dagster asset calls (instead of `harvest_window`):

1. It harvests the window whole, as always.
2. If that fails for a reason a smaller date range can cure (see :func:`split_reason`: tokens that
   kept expiring after every restart, server errors or timeouts that outlasted the retries, a
   traversal budget of pages, records or time), the window is split: longer than a day into
   calendar days (UTC), longer than an hour into hours, else into halves, never below
   ``MIN_PART_SECONDS`` and never below a day when the server's granularity is days.
3. Each sub-window is harvested by `harvest_window` with its own staging folder (its durable
   cursor) and its own ledger row in `harvest_window_parts`; one that fails the same way is
   split again, up to ``MAX_SPLIT_DEPTH`` levels.
4. The window's row in `harvest_windows` then sums its leaf sub-windows (the ones not split
   further) and gets the combined verdict: `verified` only when every leaf verified, `unproven`
   when some leaf could only be unproven, `incomplete` when a leaf's check failed. `split_into`
   and `split_reason` say how and why it was split.

A window that split is remembered: its next run goes straight to its sub-windows. A run that
stopped mid-split (killed, a sub-window failed or was deferred) resumes it: the sub-windows that
already passed are kept, the others run again, each from its own cursor. Once the window has a
verdict, a new run harvests every sub-window again (as a window run again is listed again).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from harvest_pipeline.errors import (
    BadResumptionToken, DeferredError, HarvestError, HTTPStatusError, ResponseTooLarge, TransportError, WindowBusyError,
)
from harvest_pipeline.harvest.listers import Lister, lister_for
from harvest_pipeline.harvest.stop import HarvestStopped
from harvest_pipeline.harvest.window import (
    CheckVerdict, Connect, Progress, Window, WindowReport, _status_for, harvest_window,
)
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect as store_connect
from harvest_pipeline.store import ledger, transaction
from harvest_pipeline.store.merge import MergeCounts
from harvest_pipeline.store.staging import StagingWindow, staging_path
from harvest_pipeline.store.window_parts import (
    PartLedger, leaf_sums, mark_window_split, part_staging_path, window_state,
)

# Sub-windows of sub-windows of sub-windows at most (month -> day -> hour -> half hour).
MAX_SPLIT_DEPTH = 3
# A part shorter than this is not split again: a range that small failing is not about size.
MIN_PART_SECONDS = 120
# Budget guards a smaller range cures (loops and overflowing counts are the server's bug, not size).
SIZE_GUARDS = {"page-limit", "record-limit", "time-limit"}
# Server errors that, after the transport's retries, mean "too much at once" as often as "down".
SERVER_ERRORS = {500, 502, 503, 504}

# The attempt id of a split window's report: its records were merged by its sub-windows' attempts.
SPLIT_ATTEMPT_PREFIX = "split:"


def split_reason(exc: BaseException) -> str | None:
    """Why a smaller date range may succeed where `exc` ended the window; None: splitting won't help."""
    if isinstance(exc, BadResumptionToken):
        return "the server's tokens kept expiring before the list ended"
    guard = getattr(exc, "guard", None)  # traversal budgets (errors.BudgetExceeded)
    if guard in SIZE_GUARDS:
        return f"the traversal budget ran out (guard '{guard}')"
    if isinstance(exc, HTTPStatusError):
        return f"the server kept failing with HTTP {exc.status_code}" if exc.status_code in SERVER_ERRORS else None
    if isinstance(exc, TransportError) and not isinstance(exc, ResponseTooLarge) and "answer within" in exc.message:
        return "the server kept timing out"
    return None


def sub_windows(window: Window, granularity: str | None, root_key: str) -> list[Window]:
    """The parts `window` splits into (empty: it cannot be split further)."""
    length = window.end - window.start
    day_only = (granularity or "").strip() == "YYYY-MM-DD"
    if length > timedelta(days=1):
        edges = _edges(window, timedelta(days=1), lambda t: t.replace(hour=0, minute=0, second=0, microsecond=0))
    elif day_only:
        return []  # a day-granularity server cannot be asked for less than a day
    elif length > timedelta(hours=1):
        edges = _edges(window, timedelta(hours=1), lambda t: t.replace(minute=0, second=0, microsecond=0))
    elif length >= timedelta(seconds=2 * MIN_PART_SECONDS):
        middle = window.start + timedelta(seconds=int(length.total_seconds()) // 2)
        edges = [window.start, middle, window.end]
    else:
        return []
    return [Window(a, b, _part_key(root_key, a, b)) for a, b in zip(edges, edges[1:])]


def _edges(window: Window, step: timedelta, floor) -> list[datetime]:
    edges = [window.start]
    t = floor(window.start) + step
    while t < window.end:
        edges.append(t)
        t += step
    return edges + [window.end]


def _part_key(root_key: str, start: datetime, end: datetime) -> str:
    return f"{root_key}/{start:%Y-%m-%dT%H:%M:%SZ}..{end:%Y-%m-%dT%H:%M:%SZ}"


@dataclass
class _Run:
    source: SourceConfig
    root: Window
    run_id: str
    db_path: str | Path
    connect: Connect
    lister: Lister
    progress: Progress | None
    granularity: str | None
    resume: bool  # reuse the sub-windows that passed in a split that never reached a verdict


def harvest_partition(
    source: SourceConfig,
    window: Window,
    *,
    run_id: str | None = None,
    db_path: str | Path,
    connect: Connect | None = None,
    lister: Lister | None = None,
    progress: Progress | None = None,
) -> WindowReport:
    """Harvest a partition's window, split into sub-windows if it cannot finish whole.

    Same arguments, report and errors as `harvest_window`; a split window's report sums its
    sub-windows and its warnings say how it was split.
    """
    started = time.monotonic()
    run_id = run_id or uuid.uuid4().hex
    connect = connect or (lambda: store_connect(db_path))
    lister = lister or lister_for(source, state_dir=Path(db_path).parent / "hosts")
    with connect() as con:
        prior = window_state(con, source.id, window.start)
    resume = bool(prior and prior.split_into and prior.status not in (ledger.VERIFIED, ledger.UNPROVEN, ledger.INCOMPLETE))
    run = _Run(source, window, run_id, db_path, connect, lister, progress, None, resume)
    report = _harvest(run, window, 0, prior)
    if report is not None:
        return report
    return _split_report(run, window, time.monotonic() - started)


def _harvest(run: _Run, win: Window, depth: int, prior) -> WindowReport | None:
    """Harvest `win` whole (its report) or split (None: its ledger row holds the sums)."""
    book = ledger if depth == 0 else PartLedger(run.root.start, win.start, win.end, depth)
    if prior is not None and prior.split_into:
        reason = prior.split_reason or "it was split before"
    else:
        try:
            return harvest_window(
                run.source, win, run_id=run.run_id, db_path=run.db_path, connect=run.connect, lister=run.lister,
                progress=run.progress, part=None if depth == 0 else book,
            )
        except HarvestError as exc:
            reason = _split_reason_or_raise(run, win, depth, exc)
    _split(run, win, depth, book, reason)
    return None


def split_failed_window(
    source: SourceConfig,
    window: Window,
    error: HarvestError,
    *,
    run_id: str,
    db_path: str | Path,
    connect: Connect,
    lister: Lister,
    progress: Progress | None = None,
) -> WindowReport:
    """The whole attempt at a partition's `window` failed with `error` (harvest_window recorded it):
    split it if a smaller range can cure that (its report, as `harvest_partition`'s), else raise
    `error`. For callers that ran the whole attempt themselves (harvest/sequence.py)."""
    started = time.monotonic()
    run = _Run(source, window, run_id, db_path, connect, lister, progress, None, False)
    reason = _split_reason_or_raise(run, window, 0, error)
    _split(run, window, 0, ledger, reason)
    return _split_report(run, window, time.monotonic() - started)


def _split_reason_or_raise(run: _Run, win: Window, depth: int, exc: HarvestError) -> str:
    """Why `win` is split after `exc`; raises `exc` when splitting cannot help."""
    why = split_reason(exc)
    if why is None:
        raise exc
    if depth >= MAX_SPLIT_DEPTH or not _parts(run, win):
        raise exc.with_context(hint=f"{why}, and the window cannot be split further") from None
    return f"{why}: {exc.message}"


def _parts(run: _Run, win: Window) -> list[Window]:
    if run.granularity is None:
        run.granularity = run.lister.describe().get("granularity")
    return sub_windows(win, run.granularity, run.root.key)


def _split(run: _Run, win: Window, depth: int, book, reason: str) -> None:
    """Harvest `win` as its sub-windows, holding `win`'s own lock, then write its combined row."""
    parts = _parts(run, win)
    source = run.source
    path = (staging_path(run.db_path, source.id, win.start) if depth == 0
            else part_staging_path(run.db_path, source.id, win.start, win.end))
    hold = StagingWindow(path)  # the window's lock: a second run of it waits and gives up
    try:
        hold.remove()  # pages of the whole attempt: the sub-windows list everything again
        with run.connect() as con, transaction(con):
            if depth == 0:
                mark_window_split(con, source_id=source.id, window=win, run_id=run.run_id,
                                  split_into=len(parts), reason=reason)
            else:
                book.mark_split(con, source_id=source.id, partition_key=win.key, run_id=run.run_id,
                                split_into=len(parts), reason=reason)
        for part in parts:
            part_book = PartLedger(run.root.start, part.start, part.end, depth + 1)
            with run.connect() as con:
                state = part_book.state(con, source.id)
            if run.resume and state is not None and not state.split_into and state.status in ledger.WATERMARK_PASSES:
                continue  # passed in the split this run resumes
            try:
                _harvest(run, part, depth + 1, state)
            except WindowBusyError:
                raise  # another run holds that part: it owns the rows
            except BaseException as exc:
                if not isinstance(exc, HarvestStopped):  # a stopped split resumes as it stood
                    _record_part_failure(run, win, book, part, exc)
                raise
        with run.connect() as con, transaction(con):
            _write_combined(con, run, win, depth, book, len(parts), reason)
    finally:
        hold.release()


def _record_part_failure(run: _Run, win: Window, book, part: Window, exc: BaseException) -> None:
    text = f"sub-window {part.key} " + ("was deferred" if isinstance(exc, DeferredError) else "failed") + f": {exc}"
    with run.connect() as con:
        if isinstance(exc, DeferredError):
            book.defer_window(con, source_id=run.source.id, window=win, error=text, response_date=exc.response_date,
                              retry_not_before=datetime.now(timezone.utc) + timedelta(seconds=exc.retry_after_seconds))
        else:
            book.fail_window(con, source_id=run.source.id, window=win, error=text)


def _combined_checks(sums, split_into: int, reason: str) -> dict[str, CheckVerdict]:
    s = sums.sums
    size = f"{sums.complete_list_size}" + ("" if sums.sizes_known == sums.leaves else f" ({sums.sizes_known} of {sums.leaves} gave one)")
    meta = {"received": s["received"], "stored": s["stored"], "complete_list_size": sums.complete_list_size,
            "sub_windows": sums.leaves, "split_into": split_into}
    failed = sums.checks_failed
    intro = f"split into {split_into} sub-windows ({reason.split(':')[0]}); over its {sums.leaves} harvested sub-windows"
    if failed["check_complete"]:
        complete = CheckVerdict(False, "error", f"{intro}: {failed['check_complete']} incomplete; received "
                                f"{s['received']}, stored {s['stored']}, completeListSize summed {size}", meta)
    elif sums.checks_unproven:
        complete = CheckVerdict(False, "warn", f"{intro}: {sums.checks_unproven} cannot be proven complete (no "
                                f"completeListSize); received {s['received']}, stored {s['stored']}", {**meta, "unproven": True})
    else:
        complete = CheckVerdict(True, "error", f"{intro}: every one complete; received {s['received']} and stored "
                                f"{s['stored']} of completeListSize summed {size}", meta)
    return {
        "complete": complete,
        "no_duplicates": CheckVerdict(
            s["duplicates"] == 0, "error",
            "no identifier listed twice within a sub-window" if s["duplicates"] == 0
            else f"{s['duplicates']} repeated listings within sub-windows", {"duplicates": s["duplicates"]},
        ),
        "cursor_closed": CheckVerdict(
            failed["check_cursor"] == 0, "error",
            "every sub-window's list ended with an empty or absent token" if failed["check_cursor"] == 0
            else f"{failed['check_cursor']} sub-window(s) left a resumption token open", {},
        ),
    }


def _write_combined(con, run: _Run, win: Window, depth: int, book, split_into: int, reason: str) -> None:
    sums = leaf_sums(con, run.source.id, win.start, win.end, depth)
    checks = _combined_checks(sums, split_into, reason)
    status = _status_for(checks)
    note = f"split into {split_into} sub-windows because {reason}; the counts are their sums"
    book.finish_window(
        con, source_id=run.source.id, window_start=win.start, status=status, error=None, run_id=run.run_id,
        complete_list_size=sums.complete_list_size if sums.sizes_known == sums.leaves else None,
        cursor_closed=not sums.checks_failed["check_cursor"],
        check_complete="passed" if checks["complete"].passed else ("unproven" if checks["complete"].severity == "warn" else "failed"),
        check_duplicates="passed" if checks["no_duplicates"].passed else "failed",
        check_cursor="passed" if checks["cursor_closed"].passed else "failed",
        warnings=[note, *sums.warnings[:200]], split_into=split_into, split_reason=reason[:4000],
        **sums.sums,
    )


def _split_report(run: _Run, window: Window, seconds: float) -> WindowReport:
    """The partition's report, read back from the ledger rows the split wrote."""
    with run.connect() as con:
        sums = leaf_sums(con, run.source.id, window.start, window.end, 0)
        state = window_state(con, run.source.id, window.start)
        row = ledger.get_window(con, run.source.id, window.start)
    checks = _combined_checks(sums, state.split_into, state.split_reason or "")
    s = sums.sums
    counts = MergeCounts(
        received=s["received"], distinct_received=s["distinct_received"], stored=s["stored"], created=s["created"],
        updated=s["updated"], unchanged=s["unchanged"], deleted=s["deleted"], revived=s["revived"],
        restored=s["restored"], stale=s["stale"], quarantined=s["quarantined"],
    )
    return WindowReport(
        source_id=run.source.id, window=window, status=row.status, run_id=run.run_id, attempt_id=SPLIT_ATTEMPT_PREFIX + run.run_id,
        from_param=None, until_param=None, pages=s["pages"], complete_list_size=row.complete_list_size,
        counts=counts, duplicates=s["duplicates"], duplicate_examples=[], cursor_closed=sums.cursor_closed,
        outside_window=0, resumed=run.resume, restarts=0, warnings=list(row.warnings or []), seconds=seconds,
        checks=checks, repaired=s["repaired_chars"],
    )
