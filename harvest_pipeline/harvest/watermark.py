"""The watermark rule, shared by the sensor and the CLI.

The watermark is the end of the longest run of consecutive closed windows, from the source's
first window (or the current watermark), whose checks passed. It never moves back and never
passes a window that failed, is incomplete, is missing, or is being harvested right now.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from harvest_pipeline.store import ledger

RETRY_BASE = timedelta(minutes=1)
RETRY_MAX = timedelta(hours=6)


def retry_delay(attempts: int) -> timedelta:
    """Backoff before a failed window is tried again: 1 min, 2, 4, ... capped at 6 h."""
    return min(RETRY_BASE * (2 ** max(attempts - 1, 0)), RETRY_MAX)


def advance(
    windows: list[tuple[str, datetime, datetime]],
    ledger_rows: dict[datetime, ledger.WindowRow],
    watermark: datetime | None,
    in_flight: set[str] = frozenset(),
) -> datetime | None:
    """`windows`: closed windows (key, start, end) in time order; naive UTC datetimes."""
    new_watermark = watermark
    for key, start, end in windows:
        if new_watermark is not None and start < new_watermark:
            continue
        row = ledger_rows.get(start)
        if row is None or row.status not in ledger.WATERMARK_PASSES or key in in_flight:
            break
        new_watermark = end
    return new_watermark


def plan_tick(
    *,
    windows: list[tuple[str, datetime, datetime]],
    ledger_rows: dict[datetime, ledger.WindowRow],
    watermark: datetime | None,
    in_flight: set[str],
    now: datetime,
    limit: int,
) -> tuple[datetime | None, list[str]]:
    """The new watermark and the partition keys a sensor tick should launch."""
    new_watermark = advance(windows, ledger_rows, watermark, in_flight)
    launch: list[str] = []
    for key, start, _end in windows:
        if len(launch) >= limit:
            break
        if (new_watermark is not None and start < new_watermark) or key in in_flight:
            continue
        row = ledger_rows.get(start)
        if row is not None and row.status in ledger.WATERMARK_PASSES:
            continue
        if row is not None and row.status == ledger.DEFERRED and row.retry_not_before is not None:
            if now < row.retry_not_before:
                continue  # the server asked us to come back later
        elif row is not None and row.attempts:
            last = row.finished_at or row.started_at
            if last is not None and now - last < retry_delay(row.attempts):
                continue  # failed (or died while running) recently: back off
        launch.append(key)
    return new_watermark, launch


def advance_stored(con, source_id: str, windows: list[tuple[str, datetime, datetime]]) -> datetime | None:
    """Apply `advance` to the ledger and store the new watermark; return it.

    Runs call this when their windows are done (the sensor only reads), and so does the CLI.
    """
    return advance_stored_many(con, {source_id: windows})[source_id]


def advance_stored_many(con, windows_by_source: dict[str, list[tuple[str, datetime, datetime]]]) -> dict[str, datetime | None]:
    """`advance_stored` of several sources in three statements whatever their number: a batch run
    advances its sources' watermarks together at its end (each source's own transaction, at the
    same time as a hundred others, waited about 1 s for the catalogue, measured)."""
    current = ledger.get_watermarks(con, list(windows_by_source))
    rows = ledger.list_windows_since(con, current)
    new = {source_id: advance(windows, {r.window_start: r for r in rows[source_id]}, current[source_id])
           for source_id, windows in windows_by_source.items()}
    moved = {source_id: w for source_id, w in new.items() if w is not None and w != current[source_id]}
    if moved:
        ledger.set_watermarks(con, moved)
    return new


def launch_ranges(windows: list[tuple[str, datetime, datetime]], launch: list[str], size: int) -> list[tuple[str, str]]:
    """Group the keys to launch into runs: consecutive windows only, at most `size` per run.

    A ranged run covers every window between its first and last key, so a gap (a window verified
    or in flight in between) starts a new run.
    """
    position = {key: i for i, (key, _start, _end) in enumerate(windows)}
    ranges: list[tuple[str, str]] = []
    first = last = None
    count = 0
    for key in launch:
        if first is not None and (position[key] != position[last] + 1 or count >= size):
            ranges.append((first, last))
            first = None
        if first is None:
            first, count = key, 0
        last, count = key, count + 1
    if first is not None:
        ranges.append((first, last))
    return ranges
