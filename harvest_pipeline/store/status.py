"""Read-only summaries of the catalogue for `harvest-pipeline status` and the tests."""

from __future__ import annotations

from typing import Any

import duckdb


def source_summary(con: duckdb.DuckDBPyConnection, source_id: str) -> dict[str, Any]:
    live, deleted, unmapped = con.execute(
        "SELECT count(*) FILTER (WHERE NOT deleted), count(*) FILTER (WHERE deleted), "
        "count(*) FILTER (WHERE NOT deleted AND mapping_error IS NOT NULL) FROM records WHERE source_id = ?",
        [source_id],
    ).fetchone()
    state = con.execute(
        "SELECT watermark, granularity, deleted_record FROM source_state WHERE source_id = ?", [source_id]
    ).fetchone()
    by_status = dict(
        con.execute(
            "SELECT status, count(*) FROM harvest_windows WHERE source_id = ? GROUP BY status", [source_id]
        ).fetchall()
    )
    last = con.execute(
        """
        SELECT partition_key, status, run_id, started_at, finished_at, check_complete, check_duplicates,
               check_cursor, error
        FROM harvest_windows WHERE source_id = ? ORDER BY started_at DESC NULLS LAST LIMIT 1
        """,
        [source_id],
    ).fetchone()
    return {
        "source_id": source_id,
        "watermark": state[0] if state else None,
        "granularity": state[1] if state else None,
        "deleted_record": state[2] if state else None,
        "live": int(live),
        "deleted": int(deleted),
        "unmapped": int(unmapped),
        "unmapped_reasons": unmapped_reasons(con, source_id) if unmapped else [],
        "windows": by_status,
        "last_run": None
        if last is None
        else {
            "window": last[0],
            "status": last[1],
            "run_id": last[2],
            "started_at": last[3],
            "finished_at": last[4],
            "checks": {"complete": last[5], "no_duplicates": last[6], "cursor_closed": last[7]},
            "error": last[8],
        },
    }


def failing_windows(con: duckdb.DuckDBPyConnection, source_id: str, limit: int = 10) -> list[tuple]:
    return con.execute(
        """
        SELECT partition_key, status, coalesce(error, '') FROM harvest_windows
        WHERE source_id = ? AND status IN ('failed', 'incomplete') ORDER BY window_start LIMIT ?
        """,
        [source_id, limit],
    ).fetchall()


def unmapped_reasons(con: duckdb.DuckDBPyConnection, source_id: str, limit: int = 3) -> list[tuple[str, int]]:
    """The commonest reasons live records of the source are stored raw (no mapper read them), with counts."""
    return [(reason, int(n)) for reason, n in con.execute(
        """
        SELECT mapping_error, count(*) AS n FROM records
        WHERE source_id = ? AND NOT deleted AND mapping_error IS NOT NULL
        GROUP BY mapping_error ORDER BY n DESC, mapping_error LIMIT ?
        """,
        [source_id, limit],
    ).fetchall()]
