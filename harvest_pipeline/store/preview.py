"""Small read-only views of the catalogue for the UI: a window's records, what a run changed, the
latest records per source. Each returns plain values (strings, numbers), ready for a table."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import duckdb

from harvest_pipeline.store.clock import to_naive_utc

# History actions that changed the catalogue (unchanged and stale versions did not).
CHANGING_ACTIONS = ("created", "updated", "deleted", "revived", "restored")
TITLE_CHARS = 120


def _utc(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _short(title: str | None) -> str | None:
    if title is None or len(title) <= TITLE_CHARS:
        return title
    return title[: TITLE_CHARS - 1] + "…"


def window_record_counts(con: duckdb.DuckDBPyConnection, source_id: str, start: datetime, end: datetime) -> dict[str, int]:
    """Live and deleted records of the source whose datestamp lies in [start, end).

    Describes the window as the catalogue holds it now, so harvesting the window again does not
    change it (unlike a run's own counts of created or deleted records).
    """
    live, deleted = con.execute(
        """
        SELECT count(*) FILTER (WHERE NOT deleted), count(*) FILTER (WHERE deleted)
        FROM records WHERE source_id = ? AND datestamp >= ? AND datestamp < ?
        """,
        [source_id, to_naive_utc(start), to_naive_utc(end)],
    ).fetchone()
    return {"live": int(live), "deleted": int(deleted)}


def source_has_deletions(con: duckdb.DuckDBPyConnection, source_id: str) -> bool:
    return bool(con.execute(
        "SELECT EXISTS (SELECT 1 FROM records WHERE source_id = ? AND deleted)", [source_id]
    ).fetchone()[0])


def changes_of_attempt(con: duckdb.DuckDBPyConnection, source_id: str, attempt_id: str, limit: int = 20) -> tuple[int, list[dict[str, Any]]]:
    """(how many records one attempt changed, the first `limit` of them: identifier, datestamp,
    action, title). The title is the record's current one (tombstones have none)."""
    actions = list(CHANGING_ACTIONS)
    total = con.execute(
        "SELECT count(*) FROM record_history WHERE source_id = ? AND attempt_id = ? AND list_contains(?, action)",
        [source_id, attempt_id, actions],
    ).fetchone()[0]
    rows = con.execute(
        """
        SELECT h.identifier, h.datestamp, h.action, r.title
        FROM record_history h
        LEFT JOIN records r ON r.source_id = h.source_id AND r.identifier = h.identifier
        WHERE h.source_id = ? AND h.attempt_id = ? AND list_contains(?, h.action)
        ORDER BY h.datestamp DESC, h.identifier
        LIMIT ?
        """,
        [source_id, attempt_id, actions, limit],
    ).fetchall()
    return int(total), [
        {"identifier": i, "datestamp": _utc(d), "action": a, "title": _short(t)} for i, d, a, t in rows
    ]


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
