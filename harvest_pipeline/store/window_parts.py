"""Sub-windows of a window that split itself (`harvest_window_parts`, migration 5).

A window that cannot finish whole is harvested as sub-windows (:mod:`harvest_pipeline.harvest.split`).
Each sub-window has its own staging folder (its durable cursor) and its own row here, at any depth;
the window's own row in `harvest_windows` says how it was split (`split_into`, `split_reason`)
and carries the sums of its leaf sub-windows (those not split further).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from harvest_pipeline.http.redaction import redact_text
from harvest_pipeline.store.backend import Upsert, copied, upsert_in_place
from harvest_pipeline.store.clock import to_naive_utc, utcnow

# Outcome columns a leaf sub-window contributes to its window's row (summed).
SUMMED = (
    "received", "distinct_received", "stored", "created", "updated", "unchanged", "deleted", "revived",
    "restored", "stale", "upserted", "quarantined", "repaired_chars", "pages", "duplicates",
)


def part_staging_path(db_path: str | Path, source_id: str, start: datetime, end: datetime) -> Path:
    """data/staging/<source>/parts/<start>-<end>.stage: a sub-window's own cursor and pages."""
    name = f"{start:%Y%m%dT%H%M%S}-{end:%Y%m%dT%H%M%S}.stage"
    return Path(db_path).parent / "staging" / source_id / "parts" / name


@dataclass(frozen=True)
class PartState:
    status: str
    split_into: int | None
    split_reason: str | None


_PART_KEY = ("source_id", "part_start", "part_end")
_PART_ROW = ("?::VARCHAR AS source_id, ?::TIMESTAMP AS window_start, ?::TIMESTAMP AS part_start,"
             " ?::TIMESTAMP AS part_end, ?::INTEGER AS depth, ?::VARCHAR AS part_key")
_BEGIN_PART = Upsert(
    "harvest_window_parts",
    row=_PART_ROW + ", ?::VARCHAR AS run_id, ?::VARCHAR AS from_param, ?::VARCHAR AS until_param, ?::TIMESTAMP AS started_at",
    key=_PART_KEY,
    update="status = 'running', run_id = excluded.run_id, attempts = harvest_window_parts.attempts + 1,"
           " from_param = excluded.from_param, until_param = excluded.until_param, started_at = excluded.started_at,"
           " finished_at = NULL, error = NULL, retry_not_before = NULL",
    insert={**copied("source_id", "window_start", "part_start", "part_end", "depth", "part_key"), "status": "'running'",
            **copied("run_id"), "attempts": "1", **copied("from_param", "until_param", "started_at")},
)
_END_PART = Upsert(
    "harvest_window_parts",
    row=_PART_ROW + ", ?::VARCHAR AS status, ?::VARCHAR AS error, ?::TIMESTAMP AS started_at,"
        " ?::TIMESTAMP AS finished_at, ?::TIMESTAMP AS retry_not_before, ?::VARCHAR AS response_date",
    key=_PART_KEY,
    update="status = excluded.status, error = excluded.error, finished_at = excluded.finished_at,"
           " retry_not_before = excluded.retry_not_before,"
           " response_date = coalesce(excluded.response_date, harvest_window_parts.response_date),"
           " seconds = date_diff('millisecond', harvest_window_parts.started_at, excluded.finished_at) / 1000.0",
    insert={**copied("source_id", "window_start", "part_start", "part_end", "depth", "part_key", "status"),
            "attempts": "1", **copied("error", "started_at", "finished_at", "retry_not_before", "response_date")},
    in_postgres=False,  # date_diff
)


class PartLedger:
    """The ledger of one sub-window, with the signatures of :mod:`harvest_pipeline.store.ledger`'s
    window functions, so `harvest_window` writes a sub-window's row the way it writes a window's."""

    def __init__(self, window_start: datetime, part_start: datetime, part_end: datetime, depth: int):
        self.window_start = to_naive_utc(window_start)
        self.part_start = to_naive_utc(part_start)
        self.part_end = to_naive_utc(part_end)
        self.depth = depth

    def begin_row(self, *, source_id: str, partition_key: str, run_id: str, from_param, until_param, **_) -> tuple:
        """The upsert that marks this part running, and its row's parameters."""
        return _BEGIN_PART, [source_id, self.window_start, self.part_start, self.part_end, self.depth, partition_key,
                             run_id, from_param, until_param, utcnow()]

    def begin_window(self, con, **window) -> None:
        upsert_in_place(con, *self.begin_row(**window))

    def finish_window(self, con, *, source_id: str, window_start=None, **values: Any) -> None:
        values = {**values, "finished_at": utcnow()}
        sets = ", ".join(f"{k} = ?" for k in values)
        con.execute(
            f"UPDATE harvest_window_parts SET {sets}, seconds = date_diff('millisecond', started_at, ?) / 1000.0"
            " WHERE source_id = ? AND part_start = ? AND part_end = ?",
            [*values.values(), values["finished_at"], source_id, self.part_start, self.part_end],
        )

    def _end(self, con, *, source_id: str, window, status: str, error: str, retry_not_before=None, response_date=None) -> None:
        now = utcnow()
        upsert_in_place(
            con, _END_PART,
            [source_id, self.window_start, self.part_start, self.part_end, self.depth, window.key, status,
             redact_text(error)[:4000], now, now, to_naive_utc(retry_not_before), response_date],
        )

    def fail_window(self, con, *, source_id: str, window, error: str) -> None:
        self._end(con, source_id=source_id, window=window, status="failed", error=error)

    def defer_window(self, con, *, source_id: str, window, error: str, retry_not_before, response_date=None) -> None:
        self._end(con, source_id=source_id, window=window, status="deferred", error=error,
                  retry_not_before=retry_not_before, response_date=response_date)

    # --- split bookkeeping ---------------------------------------------------------------
    def state(self, con, source_id: str) -> PartState | None:
        row = con.execute(
            "SELECT status, split_into, split_reason FROM harvest_window_parts"
            " WHERE source_id = ? AND part_start = ? AND part_end = ?",
            [source_id, self.part_start, self.part_end],
        ).fetchone()
        return PartState(*row) if row else None

    def mark_split(self, con, *, source_id: str, partition_key: str, run_id: str, split_into: int, reason: str) -> None:
        """The sub-window is being harvested as `split_into` smaller ones (its row is kept running)."""
        self.begin_window(con, source_id=source_id, partition_key=partition_key, run_id=run_id,
                          from_param=None, until_param=None)
        con.execute(
            "UPDATE harvest_window_parts SET split_into = ?, split_reason = ? WHERE source_id = ? AND part_start = ? AND part_end = ?",
            [split_into, reason[:4000], source_id, self.part_start, self.part_end],
        )


def window_state(con: duckdb.DuckDBPyConnection, source_id: str, window_start: datetime) -> PartState | None:
    """The partition window's status and split in `harvest_windows` (None: never harvested)."""
    return window_states(con, {source_id: [window_start]}).get((source_id, to_naive_utc(window_start)))


def window_states(con: duckdb.DuckDBPyConnection,
                  starts_by_source: dict[str, list[datetime]]) -> dict[tuple[str, datetime], PartState]:
    """The states of many sources' partition windows in one statement, by (source id, naive UTC
    window start); a window never harvested has none."""
    wanted = {(source_id, to_naive_utc(start)) for source_id, starts in starts_by_source.items() for start in starts}
    if not wanted:
        return {}
    # Read through the caller's connection, as one window's state always was (its transaction's own
    # writes included); the sources' and the starts' lists select their cross product, of which the
    # pairs asked for are kept.
    ids, starts = sorted({s for s, _ in wanted}), sorted({t for _, t in wanted})
    rows = con.execute(
        "SELECT source_id, window_start, status, split_into, split_reason FROM harvest_windows"
        " WHERE source_id IN (SELECT unnest(?::VARCHAR[])) AND window_start IN (SELECT unnest(?::TIMESTAMP[]))",
        [ids, starts],
    ).fetchall()
    return {(source_id, start): PartState(*state) for source_id, start, *state in rows if (source_id, start) in wanted}


def mark_window_split(con, *, source_id: str, window, run_id: str, split_into: int, reason: str) -> None:
    """The partition window is being harvested as `split_into` sub-windows (status running)."""
    from harvest_pipeline.store import ledger

    ledger.begin_window(con, source_id=source_id, window_start=window.start, window_end=window.end,
                        partition_key=window.key, run_id=run_id, from_param=None, until_param=None)
    con.execute(
        "UPDATE harvest_windows SET split_into = ?, split_reason = ? WHERE source_id = ? AND window_start = ?",
        [split_into, reason[:4000], source_id, to_naive_utc(window.start)],
    )


@dataclass(frozen=True)
class LeafSums:
    leaves: int
    statuses: dict[str, int]
    sizes_known: int  # leaves whose server gave a completeListSize
    complete_list_size: int  # the sum of the known ones
    checks_failed: dict[str, int]  # check column -> leaves where it failed
    checks_unproven: int
    cursor_closed: bool
    sums: dict[str, int]
    warnings: list[str]


def leaf_sums(con: duckdb.DuckDBPyConnection, source_id: str, start: datetime, end: datetime, depth: int) -> LeafSums:
    """What the leaf sub-windows inside [start, end) below `depth` add up to."""
    where = "source_id = ? AND part_start >= ? AND part_end <= ? AND depth > ? AND split_into IS NULL"
    params = [source_id, to_naive_utc(start), to_naive_utc(end), depth]
    sums = ", ".join(f"coalesce(sum({c}), 0)" for c in SUMMED)
    row = con.execute(
        f"SELECT count(*), count(complete_list_size), coalesce(sum(complete_list_size), 0),"
        " count(*) FILTER (WHERE check_complete = 'failed'), count(*) FILTER (WHERE check_duplicates = 'failed'),"
        " count(*) FILTER (WHERE check_cursor = 'failed'), count(*) FILTER (WHERE check_complete = 'unproven'),"
        f" coalesce(bool_and(cursor_closed), false), {sums} FROM harvest_window_parts WHERE {where}",
        params,
    ).fetchone()
    statuses = dict(con.execute(f"SELECT status, count(*) FROM harvest_window_parts WHERE {where} GROUP BY 1", params).fetchall())
    warnings = [
        f"{key}: {w}"
        for key, ws in con.execute(
            f"SELECT part_key, warnings FROM harvest_window_parts WHERE {where} AND len(warnings) > 0 ORDER BY part_start",
            params,
        ).fetchall()
        for w in ws
    ]
    return LeafSums(
        leaves=row[0], statuses=statuses, sizes_known=row[1], complete_list_size=int(row[2]),
        checks_failed={"check_complete": row[3], "check_duplicates": row[4], "check_cursor": row[5]},
        checks_unproven=row[6], cursor_closed=bool(row[7]), sums=dict(zip(SUMMED, map(int, row[8:]))),
        warnings=warnings,
    )


def list_parts(con: duckdb.DuckDBPyConnection, source_id: str, window_start: datetime) -> list[dict]:
    """Every sub-window row of a partition window, in time order (depth first)."""
    cur = con.execute(
        "SELECT * FROM harvest_window_parts WHERE source_id = ? AND window_start = ? ORDER BY part_start, depth",
        [source_id, to_naive_utc(window_start)],
    )
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]
