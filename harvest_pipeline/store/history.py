"""Reading one record's current state and its history (`harvest-pipeline show`, re-harvest reports)."""

from __future__ import annotations

from typing import Any

import duckdb

from harvest_pipeline.store.columns import STATE_COLUMNS

_HISTORY_COLUMNS = [
    "received_at", "action", "datestamp", "deleted", "content_hash", "window_start", "window_end",
    "run_id", "attempt_id", "page_number",
]


def _dicts(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def record_state(con: duckdb.DuckDBPyConnection, source_id: str, identifier: str) -> dict[str, Any] | None:
    """The record's row (raw XML left out), plus the ledger name of the window that wrote it."""
    rows = _dicts(
        con.execute(
            f"""
            SELECT {', '.join('r.' + c for c in STATE_COLUMNS)}, w.partition_key AS window_name
            FROM records r
            LEFT JOIN harvest_windows w ON w.source_id = r.source_id AND w.window_start = r.window_start
                AND w.window_end IS NOT DISTINCT FROM r.window_end
            WHERE r.source_id = ? AND r.identifier = ?
            """,
            [source_id, identifier],
        )
    )
    return rows[0] if rows else None


def record_history(con: duckdb.DuckDBPyConnection, source_id: str, identifier: str) -> list[dict[str, Any]]:
    """Every received version of the record, oldest first (ties in arrival order)."""
    return _dicts(
        con.execute(
            f"""
            SELECT {', '.join('h.' + c for c in _HISTORY_COLUMNS)}, h.metadata_xml IS NOT NULL AS has_xml,
                   w.partition_key AS window_name
            FROM record_history h
            LEFT JOIN harvest_windows w ON w.source_id = h.source_id AND w.window_start = h.window_start
                AND w.window_end IS NOT DISTINCT FROM h.window_end
            WHERE h.source_id = ? AND h.identifier = ?
            ORDER BY h.received_at, h.rowid
            """,
            [source_id, identifier],
        )
    )


def actions_for_attempt(con: duckdb.DuckDBPyConnection, source_id: str, attempt_id: str) -> dict[str, str]:
    """identifier -> history action written by one attempt (a re-harvest's merge)."""
    return dict(
        con.execute(
            "SELECT identifier, action FROM record_history WHERE source_id = ? AND attempt_id = ?",
            [source_id, attempt_id],
        ).fetchall()
    )
