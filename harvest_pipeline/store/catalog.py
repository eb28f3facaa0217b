"""The downstream view of the catalogue: the `catalog` view, `source_stats`, Parquet exports.

`catalog` is a view (always current) of the live records of every source with the normalized
fields; `source_stats` is a table rebuilt on each refresh; the exports are one Parquet file per
source in `data/exports/`, each written under a temporary name and renamed into place, so a
reader never sees a half-written file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb

from harvest_pipeline.store.clock import utcnow
from harvest_pipeline.store.columns import CATALOG_COLUMNS

STATS_COLUMNS = ["source_id", "live", "deleted", "quarantined", "last_change", "refreshed_at"]


def exports_dir(db_path: str | Path) -> Path:
    """data/exports next to the catalogue file."""
    return Path(db_path).parent / "exports"


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = current_database() AND table_schema = current_schema() AND table_name = ?",
            [table],
        ).fetchall()
    }


def _quarantine_counts_sql(con: duckdb.DuckDBPyConnection) -> str:
    """Per source, distinct records in quarantine; an empty relation while the table does not exist."""
    cols = _columns(con, "quarantine")
    if "source_id" not in cols:
        return "SELECT NULL::VARCHAR AS source_id, 0::BIGINT AS n WHERE false"
    if "identifier" in cols:
        # The same unreadable record harvested twice is one record; unidentifiable ones count each.
        n = "count(DISTINCT identifier) + count(*) FILTER (WHERE identifier IS NULL)"
    else:
        n = "count(*)"
    return f"SELECT source_id, {n} AS n FROM quarantine GROUP BY source_id"


def refresh_catalog(con: duckdb.DuckDBPyConnection, source_ids: list[str]) -> list[dict[str, Any]]:
    """(Re)create the `catalog` view and the `source_stats` table; return the stats rows.

    `source_stats` has a row for every configured source (zeros before its first harvest) and for
    any other source the catalogue still holds.
    """
    con.execute(
        f"CREATE OR REPLACE VIEW catalog AS SELECT {', '.join(CATALOG_COLUMNS)} FROM records WHERE NOT deleted"
    )
    con.execute(
        f"""
        CREATE OR REPLACE TABLE source_stats AS
        WITH ids AS (
            SELECT unnest(?::VARCHAR[]) AS source_id
            UNION SELECT DISTINCT source_id FROM records
        ),
        rec AS (
            SELECT source_id, count(*) FILTER (WHERE NOT deleted) AS live,
                   count(*) FILTER (WHERE deleted) AS deleted, max(written_at) AS last_change
            FROM records GROUP BY source_id
        ),
        q AS ({_quarantine_counts_sql(con)})
        SELECT ids.source_id, coalesce(rec.live, 0)::BIGINT AS live, coalesce(rec.deleted, 0)::BIGINT AS deleted,
               coalesce(q.n, 0)::BIGINT AS quarantined, rec.last_change, ?::TIMESTAMP AS refreshed_at
        FROM ids LEFT JOIN rec USING (source_id) LEFT JOIN q USING (source_id)
        ORDER BY ids.source_id
        """,
        [list(source_ids), utcnow()],
    )
    return source_stats(con)


def source_stats(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    cur = con.execute(f"SELECT {', '.join(STATS_COLUMNS)} FROM source_stats ORDER BY source_id")
    return [dict(zip(STATS_COLUMNS, row)) for row in cur.fetchall()]


def export_parquet(con: duckdb.DuckDBPyConnection, directory: Path, source_ids: list[str]) -> dict[str, tuple[Path, int]]:
    """Write `<directory>/<source_id>.parquet` (the source's live records) for each source.

    Each file is written as `.<source_id>.parquet.tmp`, then renamed over the old one (atomic on
    one filesystem). Returns source_id -> (path, rows).
    """
    directory.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[Path, int]] = {}
    for source_id in source_ids:
        final = directory / f"{source_id}.parquet"
        tmp = directory / f".{source_id}.parquet.tmp"
        target = "'" + str(tmp).replace("'", "''") + "'"
        try:
            rows = con.execute(
                f"COPY (SELECT * FROM catalog WHERE source_id = ? ORDER BY identifier) TO {target} (FORMAT PARQUET)",
                [source_id],
            ).fetchone()[0]
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        out[source_id] = (final, int(rows))
    return out


def catalog_fingerprint(con: duckdb.DuckDBPyConnection) -> str:
    """Changes whenever a harvest, re-harvest or reconciliation writes a record (or quarantines one)."""
    total, deleted, last = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE deleted), max(written_at) FROM records"
    ).fetchone()
    quarantined = 0
    if "source_id" in _columns(con, "quarantine"):
        quarantined = con.execute("SELECT count(*) FROM quarantine").fetchone()[0]
    return f"{total}:{deleted}:{last.isoformat() if last else '-'}:{quarantined}"
