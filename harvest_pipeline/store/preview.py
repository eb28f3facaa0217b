"""Small read-only views of the catalogue for the UI: a window's records, what a run changed, the
latest records per source. Each returns plain values (strings, numbers), ready for a table."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import duckdb

from harvest_pipeline.store.backend import query_in_place
from harvest_pipeline.store.clock import to_naive_utc
from harvest_pipeline.store.merge import PREVIEW_ORDER, WRITING_ACTIONS

TITLE_CHARS = 120


def _utc(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _short(title: str | None) -> str | None:
    if title is None or len(title) <= TITLE_CHARS:
        return title
    return title[: TITLE_CHARS - 1] + "…"


def windows_record_counts(con: duckdb.DuckDBPyConnection,
                          windows: list[tuple[str, datetime, datetime]]) -> list[dict[str, int]]:
    """Per (source, start, end) window: the source's live and deleted records whose datestamp lies
    in [start, end), all in one statement.

    Describes each window as the catalogue holds it now, so harvesting it again does not change it
    (unlike a run's own counts of created or deleted records). One branch per window, each filtered
    on its own source and range as alone (a join on the list would lose the row groups' datestamp
    statistics).
    """
    if not windows:
        return []
    branch = ("SELECT {n} AS n, count(*) FILTER (WHERE NOT deleted) AS live, count(*) FILTER (WHERE deleted) AS deleted"
              " FROM records WHERE source_id = ? AND datestamp >= ? AND datestamp < ?")
    rows = dict((n, (live, deleted)) for n, live, deleted in query_in_place(
        con, " UNION ALL ".join(branch.format(n=n) for n in range(len(windows))),
        [v for source_id, start, end in windows for v in (source_id, to_naive_utc(start), to_naive_utc(end))],
    ).fetchall())
    return [{"live": int(rows[n][0]), "deleted": int(rows[n][1])} for n in range(len(windows))]


def source_has_deletions(con: duckdb.DuckDBPyConnection, source_id: str) -> bool:
    return bool(query_in_place(
        con, "SELECT EXISTS (SELECT 1 FROM records WHERE source_id = ? AND deleted)", [source_id]
    ).fetchone()[0])


def changed_records(con: duckdb.DuckDBPyConnection, source_id: str, window_start: datetime, window_end: datetime, *,
                    attempt_id: str | None = None, run_id: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """The first `limit` records that one attempt at a window (or, for a window harvested as
    sub-windows, one run's attempts inside it) changed: identifier, datestamp, action, title,
    newest datestamps first. The title is the record's current one (tombstones have none).

    The history rows are found by their window (row groups of other windows are skipped on their
    statistics), then the titles of those records (`= ANY`, which DuckDB filters inside its scan;
    `list_contains` was 6x slower): on 2,000,000 records about 12 ms, against 23 ms for a join on
    identifiers plus a count of the history."""
    if (attempt_id is None) == (run_id is None):
        raise ValueError("give exactly one of attempt_id and run_id")
    by, value = ("attempt_id", attempt_id) if attempt_id is not None else ("run_id", run_id)
    changed = con.execute(
        f"""
        SELECT identifier, datestamp, action FROM record_history
        WHERE source_id = ? AND window_start >= ? AND window_start < ? AND {by} = ? AND list_contains(?, action)
        ORDER BY {PREVIEW_ORDER}
        LIMIT ?
        """,
        [source_id, to_naive_utc(window_start), to_naive_utc(window_end), value, list(WRITING_ACTIONS), limit],
    ).fetchall()
    if not changed:
        return []
    identifiers = sorted({i for i, _, _ in changed})
    found = con.execute(
        "SELECT identifier, title FROM records WHERE source_id = ? AND identifier = ANY(?)",
        [source_id, identifiers],
    ).fetchall()
    titles = dict(found)
    return preview_rows((i, d, a, titles.get(i)) for i, d, a in changed)


def preview_rows(rows: Iterable[tuple]) -> list[dict[str, Any]]:
    """(identifier, datestamp, action, title) rows, a merge's own (MergeCounts.changed_preview) or
    read back above, as the preview table's rows."""
    return [{"identifier": i, "datestamp": _utc(d), "action": a, "title": _short(t)} for i, d, a, t in rows]


def latest_records(con: duckdb.DuckDBPyConnection, source_ids: list[str], per_source: int = 5) -> list[dict[str, Any]]:
    """The `per_source` live records with the newest datestamps of each source."""
    rows = con.execute(
        """
        SELECT source_id, identifier, datestamp, title FROM (
            SELECT source_id, identifier, datestamp, title,
                   row_number() OVER (PARTITION BY source_id ORDER BY datestamp DESC, identifier) AS n
            FROM records WHERE NOT deleted AND list_contains(?, source_id)
        ) WHERE n <= ?
        ORDER BY source_id, datestamp DESC, identifier
        """,
        [list(source_ids), per_source],
    ).fetchall()
    return [
        {"source_id": s, "identifier": i, "datestamp": _utc(d), "title": _short(t)} for s, i, d, t in rows
    ]
