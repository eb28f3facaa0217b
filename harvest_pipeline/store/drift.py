"""The catalogue's side of the drift audit (harvest/drift.py): how many records a source holds."""

from __future__ import annotations

import duckdb


def catalogue_counts(con: duckdb.DuckDBPyConnection, source_id: str) -> tuple[int, int]:
    """(live, deleted) records of the source in `records`."""
    live, deleted = con.execute(
        "SELECT count(*) FILTER (WHERE NOT deleted), count(*) FILTER (WHERE deleted) FROM records WHERE source_id = ?",
        [source_id],
    ).fetchone()
    return int(live), int(deleted)
