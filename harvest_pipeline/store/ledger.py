"""The window ledger (`harvest_windows`) and per-source state (`source_state`, the watermark).

Upserts are declared once (`backend.Upsert`: the row, its key, what changes) and run as each
catalogue runs them best (`upsert_in_place`): in the embedded file an UPDATE then, for a new key,
an INSERT; in PostgreSQL a MERGE in PostgreSQL itself (DuckDB's MERGE would copy the table's key
columns, and the ledger grows by a row per window), except a window's end, whose text is DuckDB's;
in DuckLake, which has no keys to conflict on, DuckDB's MERGE.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import duckdb

from harvest_pipeline.http.redaction import redact_text
from harvest_pipeline.store.backend import EMBEDDED, Upsert, copied, dialect, upsert_in_place, upsert_rows_in_place
from harvest_pipeline.store.clock import to_naive_utc, utcnow

# Window statuses. Only VERIFIED and UNPROVEN let the watermark pass.
RUNNING = "running"
VERIFIED = "verified"  # every check passed, completeness proven against completeListSize
UNPROVEN = "unproven"  # checks passed but the server gave no completeListSize to prove against
INCOMPLETE = "incomplete"  # harvested, but a check failed
FAILED = "failed"  # the harvest itself failed; see `error`
DEFERRED = "deferred"  # the server asked us to come back later (see `retry_not_before`)
WATERMARK_PASSES = (VERIFIED, UNPROVEN)


@dataclass
class WindowRow:
    source_id: str
    window_start: datetime
    window_end: datetime
    partition_key: str
    status: str
    run_id: str | None
    attempts: int
    complete_list_size: int | None
    received: int | None
    stored: int | None
    upserted: int | None
    deleted: int | None
    pages: int | None
    duplicates: int | None
    check_complete: str | None
    check_duplicates: str | None
    check_cursor: str | None
    warnings: list[str] | None
    error: str | None
    started_at: datetime | None
    finished_at: datetime | None
    quarantined: int | None = None
    retry_not_before: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_WINDOW_COLUMNS = [f for f in WindowRow.__dataclass_fields__]


_BEGIN_WINDOW = Upsert(
    "harvest_windows",
    row="?::VARCHAR AS source_id, ?::TIMESTAMP AS window_start, ?::TIMESTAMP AS window_end, ?::VARCHAR AS partition_key,"
        " ?::VARCHAR AS run_id, ?::VARCHAR AS from_param, ?::VARCHAR AS until_param, ?::TIMESTAMP AS started_at",
    key=("source_id", "window_start"),
    update="window_end = excluded.window_end, partition_key = excluded.partition_key, status = 'running',"
           " run_id = excluded.run_id, attempts = harvest_windows.attempts + 1, from_param = excluded.from_param,"
           " until_param = excluded.until_param, started_at = excluded.started_at, finished_at = NULL, error = NULL,"
           " retry_not_before = NULL",
    insert={**copied("source_id", "window_start", "window_end", "partition_key"), "status": "'running'",
            **copied("run_id"), "attempts": "1", **copied("from_param", "until_param", "started_at")},
    usually_new=True,  # a window is begun again only after a failure or for a re-harvest
)


def begin_row(
    *,
    source_id: str,
    window_start: datetime,
    window_end: datetime,
    partition_key: str,
    run_id: str,
    from_param: str,
    until_param: str,
) -> tuple[Upsert, list]:
    """The upsert that marks a window running, and its row's parameters (see `begin_window`)."""
    return _BEGIN_WINDOW, [source_id, to_naive_utc(window_start), to_naive_utc(window_end), partition_key, run_id,
                           from_param, until_param, utcnow()]


def begin_window(con: duckdb.DuckDBPyConnection, **window: Any) -> None:
    """Mark a window running (its row inserted, or a stored one's attempts counted up); the
    arguments are `begin_row`'s."""
    upsert_in_place(con, *begin_row(**window))


def finish_window(con: duckdb.DuckDBPyConnection, *, source_id: str, window_start: datetime, **values: Any) -> None:
    """Write the outcome columns given as keyword arguments (names of harvest_windows columns).
    Inside `finishing_together(con)` the row is written with the others when that ends."""
    values = {**values, "finished_at": utcnow()}
    if values.get("warnings"):  # no configured secret is ever stored
        values["warnings"] = [redact_text(w) for w in values["warnings"]]
    if values.get("error"):
        values["error"] = redact_text(values["error"])
    key = [source_id, to_naive_utc(window_start)]
    if getattr(_together, "con", None) is con:
        _together.rows.append((values, key))
    else:
        _write_verdicts(con, [(values, key)])


# The verdicts written together by one thread: a batch run's catalogue writer ends the windows
# of a group at once, and a statement each cost milliseconds in a busy process.
_together = threading.local()


@contextmanager
def finishing_together(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """`finish_window` calls on `con` inside this block are written when it ends, those that set
    the same columns in one UPDATE (into the embedded file; elsewhere one by one). After an error
    inside the block nothing is written (the caller's transaction is aborted anyway)."""
    _together.con, _together.rows = con, []
    try:
        yield
        rows = _together.rows
    finally:
        _together.con, _together.rows = None, []
    by_columns: dict[tuple[str, ...], list] = {}
    for values, key in rows:
        by_columns.setdefault(tuple(values), []).append((values, key))
    for same_columns in by_columns.values():
        _write_verdicts(con, same_columns)


def _write_verdicts(con: duckdb.DuckDBPyConnection, rows: list[tuple[dict, list]]) -> None:
    """Rows of (outcome columns, [source_id, window_start]) that set the same columns: one UPDATE
    with the values as parameters, for one row or outside the embedded file (each row alone);
    for several rows in the embedded file, one UPDATE from their values typed as the columns."""
    columns = list(rows[0][0])
    if len(rows) == 1 or dialect(con) != EMBEDDED:
        sets = ", ".join(f"{c} = ?" for c in columns)
        for values, key in rows:
            con.execute(
                f"UPDATE harvest_windows SET {sets}, seconds = date_diff('millisecond', started_at, ?) / 1000.0"
                " WHERE source_id = ? AND window_start = ?",
                [*values.values(), values["finished_at"], *key],
            )
        return
    types = _ledger_types(con)
    row = ", ".join(f"?::{types[c]} AS {c}" for c in (*columns, "source_id", "window_start"))
    con.execute(
        f"UPDATE harvest_windows SET {', '.join(f'{c} = v.{c}' for c in columns)},"
        " seconds = date_diff('millisecond', harvest_windows.started_at, v.finished_at) / 1000.0"
        f" FROM ({' UNION ALL '.join(f'SELECT {row}' for _ in rows)}) AS v"
        " WHERE harvest_windows.source_id = v.source_id AND harvest_windows.window_start = v.window_start",
        [value for values, key in rows for value in (*values.values(), *key)],
    )


def _ledger_types(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """harvest_windows' column types, as the catalogue declares them (read once per process)."""
    if not _LEDGER_TYPES:
        _LEDGER_TYPES.update(con.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_catalog = current_database() AND table_schema = current_schema() AND table_name = 'harvest_windows'"
        ).fetchall())
    return _LEDGER_TYPES


_LEDGER_TYPES: dict[str, str] = {}


_END_WINDOW = Upsert(
    "harvest_windows",
    row="?::VARCHAR AS source_id, ?::TIMESTAMP AS window_start, ?::TIMESTAMP AS window_end, ?::VARCHAR AS partition_key,"
        " ?::VARCHAR AS status, ?::VARCHAR AS error, ?::TIMESTAMP AS started_at, ?::TIMESTAMP AS finished_at,"
        " ?::TIMESTAMP AS retry_not_before, ?::VARCHAR AS response_date",
    key=("source_id", "window_start"),
    update="status = excluded.status, error = excluded.error, finished_at = excluded.finished_at,"
           " retry_not_before = excluded.retry_not_before,"
           " response_date = coalesce(excluded.response_date, harvest_windows.response_date),"
           " attempts = CASE WHEN harvest_windows.status = 'running' THEN harvest_windows.attempts"
           " ELSE harvest_windows.attempts + 1 END,"
           " seconds = date_diff('millisecond', harvest_windows.started_at, excluded.finished_at) / 1000.0",
    insert={**copied("source_id", "window_start", "window_end", "partition_key", "status"), "attempts": "1",
            **copied("error", "started_at", "finished_at", "retry_not_before", "response_date")},
    in_postgres=False,  # date_diff
)


def _end_window(con, *, source_id: str, window, status: str, error: str, retry_not_before=None, response_date=None) -> None:
    """Record a window that ended without a verdict; inserts the row if the harvest never began."""
    now = utcnow()
    error = redact_text(error)  # no configured secret is ever stored, whatever the server echoed
    upsert_in_place(
        con, _END_WINDOW,
        [source_id, to_naive_utc(window.start), to_naive_utc(window.end), window.key, status, error[:4000],
         now, now, to_naive_utc(retry_not_before), response_date],
    )


def fail_window(con: duckdb.DuckDBPyConnection, *, source_id: str, window, error: str) -> None:
    _end_window(con, source_id=source_id, window=window, status=FAILED, error=error)


def defer_window(
    con: duckdb.DuckDBPyConnection, *, source_id: str, window, error: str, retry_not_before: datetime,
    response_date: str | None = None,
) -> None:
    """`response_date`: the server's clock when it is why the window waits (else None)."""
    _end_window(
        con, source_id=source_id, window=window, status=DEFERRED, error=error, retry_not_before=retry_not_before,
        response_date=response_date,
    )


def get_window(con: duckdb.DuckDBPyConnection, source_id: str, window_start: datetime) -> WindowRow | None:
    row = con.execute(
        f"SELECT {', '.join(_WINDOW_COLUMNS)} FROM harvest_windows WHERE source_id = ? AND window_start = ?",
        [source_id, to_naive_utc(window_start)],
    ).fetchone()
    return WindowRow(*row) if row else None


def list_windows(con: duckdb.DuckDBPyConnection, source_id: str, *, since: datetime | None = None) -> list[WindowRow]:
    return list_windows_since(con, {source_id: since})[source_id]


def list_windows_since(con: duckdb.DuckDBPyConnection, since: dict[str, datetime | None]) -> dict[str, list[WindowRow]]:
    """Each source's windows from its `since` on (all of them for None), in order, in one statement."""
    out: dict[str, list[WindowRow]] = {source_id: [] for source_id in since}
    if not since:
        return out
    ids = list(since)
    rows = con.execute(
        f"SELECT w.{', w.'.join(_WINDOW_COLUMNS)} FROM harvest_windows w"
        " JOIN (SELECT unnest(?::VARCHAR[]) AS source_id, unnest(?::TIMESTAMP[]) AS since) s"
        " ON s.source_id = w.source_id AND (s.since IS NULL OR w.window_start >= s.since)"
        " ORDER BY w.source_id, w.window_start",
        [ids, [to_naive_utc(since[i]) for i in ids]],
    ).fetchall()
    for r in rows:
        row = WindowRow(*r)
        out[row.source_id].append(row)
    return out


# --- source_state --------------------------------------------------------------------------
def get_watermark(con: duckdb.DuckDBPyConnection, source_id: str) -> datetime | None:
    return get_watermarks(con, [source_id])[source_id]


def get_watermarks(con: duckdb.DuckDBPyConnection, source_ids: list[str]) -> dict[str, datetime | None]:
    """The sources' watermarks (None: none stored), in one statement."""
    found = dict(con.execute(
        "SELECT source_id, watermark FROM source_state WHERE source_id IN (SELECT unnest(?::VARCHAR[]))",
        [list(source_ids)],
    ).fetchall()) if source_ids else {}
    return {source_id: found.get(source_id) for source_id in source_ids}


_SET_WATERMARK = Upsert(
    "source_state",
    row="?::VARCHAR AS source_id, ?::TIMESTAMP AS watermark, ?::TIMESTAMP AS updated_at",
    key=("source_id",),
    update="watermark = excluded.watermark, updated_at = excluded.updated_at",
    insert=copied("source_id", "watermark", "updated_at"),
)


def set_watermark(con: duckdb.DuckDBPyConnection, source_id: str, watermark: datetime) -> None:
    set_watermarks(con, {source_id: watermark})


def set_watermarks(con: duckdb.DuckDBPyConnection, watermarks: dict[str, datetime]) -> None:
    """`set_watermark` of several sources (into the embedded file: one UPDATE and one INSERT)."""
    now = utcnow()
    upsert_rows_in_place(con, _SET_WATERMARK, [[s, to_naive_utc(w), now] for s, w in watermarks.items()])


_RECORD_IDENTIFY = Upsert(
    "source_state",
    row="?::VARCHAR AS source_id, ?::VARCHAR AS granularity, ?::VARCHAR AS earliest_datestamp,"
        " ?::VARCHAR AS deleted_record, ?::TIMESTAMP AS updated_at",
    key=("source_id",),
    update="granularity = excluded.granularity, earliest_datestamp = excluded.earliest_datestamp,"
           " deleted_record = excluded.deleted_record, updated_at = excluded.updated_at",
    insert=copied("source_id", "granularity", "earliest_datestamp", "deleted_record", "updated_at"),
)


def record_identify(con: duckdb.DuckDBPyConnection, source_id: str, *, granularity: str, earliest_datestamp: str, deleted_record: str) -> None:
    upsert_in_place(con, _RECORD_IDENTIFY, [source_id, granularity, earliest_datestamp, deleted_record, utcnow()])


def get_quirks(con: duckdb.DuckDBPyConnection, source_id: str) -> set[str]:
    return quirks_of(con, [source_id])[source_id]


def quirks_of(con: duckdb.DuckDBPyConnection, source_ids: list[str]) -> dict[str, set[str]]:
    """The stored quirks of each source (an empty set for one without any), in one statement."""
    rows = con.execute(
        "SELECT source_id, quirks FROM source_state WHERE source_id IN (SELECT unnest(?::VARCHAR[]))",
        [list(source_ids)],
    ).fetchall() if source_ids else []
    found = {source_id: set(quirks or []) for source_id, quirks in rows}
    return {source_id: found.get(source_id, set()) for source_id in source_ids}


def add_quirks(con: duckdb.DuckDBPyConnection, source_id: str, quirks: set[str]) -> None:
    """Remember non-conforming behaviour of a source's server (kept sorted, without repeats)."""
    con.execute(
        """
        UPDATE source_state SET quirks = list_sort(list_distinct(list_concat(coalesce(quirks, []), ?::VARCHAR[])))
        WHERE source_id = ?
        """,
        [sorted(quirks), source_id],
    )
