"""Merging a window's staging file into the catalogue: classify, upsert, tombstone, history.

One transaction per window (the caller opens and commits it, together with the ledger row), so
the catalogue is locked for this step only. Idempotent: merging the same versions again finds
every record 'unchanged' and rewrites nothing in `records`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from harvest_pipeline.store.clock import utcnow
from harvest_pipeline.store.columns import DROPPED_BY_TOMBSTONE, VALUE_COLUMNS

_ACTIONS = ("created", "updated", "unchanged", "deleted", "revived", "restored", "stale")



@dataclass(frozen=True)
class MergeCounts:
    received: int
    distinct_received: int
    stored: int
    created: int
    updated: int
    unchanged: int
    deleted: int
    revived: int
    restored: int
    stale: int
    quarantined: int = 0  # unparseable records plus records whose metadata could not be mapped
    quarantined_unparsed: int = 0

    @property
    def upserted(self) -> int:
        return self.created + self.updated + self.revived + self.restored


def _stored_value(column: str, alias: str) -> str:
    """The SQL for what `records.<column>` gets from an incoming row (tombstones drop metadata)."""
    if column in DROPPED_BY_TOMBSTONE:
        return f"CASE WHEN {alias}deleted THEN NULL ELSE {alias}{column} END"
    return f"{alias}{column}"


def _fingerprint(values: dict[str, str]) -> str:
    """SQL for one md5 over a row's stored values (NULL and empty kept apart)."""
    # chr(0), not a NUL inside the literal: duckdb 1.5's parser ends the statement at a NUL byte.
    parts = ", ".join(f"coalesce(CAST({expr} AS VARCHAR), chr(0))" for expr in values.values())
    return f"md5(concat_ws(chr(31), {parts}))"


def _sql_literal_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def merge_staging(
    con: duckdb.DuckDBPyConnection,
    staging_file: Path,
    *,
    source_id: str,
    window_start: datetime,
    window_end: datetime,
    run_id: str,
    attempt_id: str,
) -> MergeCounts:
    """Apply the staged window to `records` and `record_history`; call inside a transaction.

    Memory stays bounded whatever the window's size: the temp tables are narrow (identifier,
    position, action) and the wide columns (raw XML) stream from the staging file straight into
    their destination.
    """
    now = utcnow()
    if con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = 'stg'").fetchone()[0]:
        con.execute("DETACH stg")  # an earlier merge's on this connection, its transaction over
    con.execute(f"ATTACH {_sql_literal_path(staging_file)} AS stg (READ_ONLY)")
    # No DETACH in a `finally`: after an error the transaction is aborted, a DETACH would fail
    # and hide the real error; the caller's connection is closed anyway.
    counts = _merge_attached(
        con, source_id=source_id, window_start=window_start, window_end=window_end,
        run_id=run_id, attempt_id=attempt_id, now=now,
    )
    # No DETACH here either: duckdb 1.5 refuses to detach, inside the transaction, a file it read,
    # and the refusal aborts the transaction. The next merge on this connection (or close) detaches it.
    return counts


def _merge_attached(con, *, source_id, window_start, window_end, run_id, attempt_id, now) -> MergeCounts:
    received = con.execute("SELECT count(*) FROM stg.page_records").fetchone()[0]
    quarantined, unparsed = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE kind = 'parse') FROM stg.page_quarantine"
    ).fetchone()
    con.execute(
        """
        INSERT INTO quarantine
        SELECT ?, identifier, kind, error, raw, ?, ?, ?, ?, page_number, ? FROM stg.page_quarantine
        """,
        [source_id, window_start, window_end, run_id, attempt_id, now],
    )
    # A record we could not read has no version to store; its history says so.
    con.execute(
        """
        INSERT INTO record_history
        SELECT ?, coalesce(identifier, '(unreadable)'), NULL, false, NULL, 'quarantined', ?, ?, ?, ?,
               page_number, NULL, ?
        FROM stg.page_quarantine WHERE kind = 'parse'
        """,
        [source_id, window_start, window_end, run_id, attempt_id, now],
    )
    # A record listed twice in one traversal counts once, in its last-received version.
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE latest AS
        SELECT identifier, max(page_number::BIGINT * 1000000 + seq) AS pos
        FROM stg.page_records GROUP BY identifier
        """
    )
    # The harvest always wins: a row edited by hand since (same version, different columns) is
    # rewritten and classed 'restored'. Rows are compared by a fingerprint computed on each side
    # before the join, so the join never carries the wide columns (raw XML) of a large catalogue.
    incoming_fp = _fingerprint({c: _stored_value(c, "p.") for c in VALUE_COLUMNS})
    stored_fp = _fingerprint({c: c for c in VALUE_COLUMNS})
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE classified AS
        SELECT i.identifier, i.page_number, i.seq, i.datestamp, r.identifier IS NOT NULL AS existed,
            CASE
                WHEN r.identifier IS NULL THEN CASE WHEN i.deleted THEN 'deleted' ELSE 'created' END
                WHEN i.datestamp < r.datestamp THEN 'stale'            -- never overwrite a newer version
                WHEN i.deleted AND r.deleted THEN CASE WHEN r.fp = i.fp THEN 'unchanged' ELSE 'restored' END
                WHEN i.deleted THEN 'deleted'
                WHEN r.deleted THEN 'revived'
                WHEN r.content_hash IS NOT DISTINCT FROM i.content_hash
                     AND r.datestamp IS NOT DISTINCT FROM i.datestamp
                    THEN CASE WHEN r.fp = i.fp THEN 'unchanged' ELSE 'restored' END
                ELSE 'updated'
            END AS action
        FROM (
            SELECT p.identifier, p.page_number, p.seq, p.datestamp, p.deleted, p.content_hash, {incoming_fp} AS fp
            FROM stg.page_records p
            JOIN latest l ON l.identifier = p.identifier AND l.pos = p.page_number::BIGINT * 1000000 + p.seq
        ) i
        LEFT JOIN (
            SELECT identifier, datestamp, deleted, content_hash, {stored_fp} AS fp
            FROM records WHERE source_id = ?
        ) r ON r.identifier = i.identifier
        """,
        [source_id],
    )
    # New rows are inserted and existing ones updated in place, in two statements: DuckDB's
    # INSERT .. ON CONFLICT DO UPDATE holds every conflicting row in memory, which a window
    # revising 100,000 records of a large catalogue does not survive.
    changed = """
        FROM stg.page_records i
        JOIN classified c ON c.identifier = i.identifier AND c.page_number = i.page_number AND c.seq = i.seq
        WHERE c.action IN ('created', 'updated', 'deleted', 'revived', 'restored')
    """
    values = ", ".join(_stored_value(c, "i.") for c in VALUE_COLUMNS)
    con.execute(
        f"""
        INSERT INTO records (source_id, identifier, {', '.join(VALUE_COLUMNS)},
                             first_seen_at, written_at, written_by_run, window_start, window_end)
        SELECT ?, i.identifier, {values}, ?, ?, ?, ?, ?
        {changed} AND NOT c.existed
        """,
        [source_id, now, now, run_id, window_start, window_end],
    )
    aliased = ", ".join(f"{_stored_value(c, 'i.')} AS {c}" for c in VALUE_COLUMNS)
    assignments = ", ".join(f"{c} = u.{c}" for c in VALUE_COLUMNS)
    con.execute(
        f"""
        UPDATE records SET {assignments},
            written_at = ?, written_by_run = ?, window_start = ?, window_end = ?
        FROM (SELECT i.identifier, {aliased} {changed} AND c.existed) u
        WHERE records.source_id = ? AND records.identifier = u.identifier
        """,
        [now, run_id, window_start, window_end, source_id],
    )
    con.execute(
        """
        INSERT INTO record_history
        SELECT ?, i.identifier, i.datestamp, i.deleted, i.content_hash, c.action, ?, ?, ?, ?, i.page_number,
               CASE WHEN c.action IN ('created', 'updated', 'revived', 'restored') THEN i.metadata_xml END, ?
        FROM stg.page_records i
        JOIN classified c ON c.identifier = i.identifier AND c.page_number = i.page_number AND c.seq = i.seq
        """,
        [source_id, window_start, window_end, run_id, attempt_id, now],
    )
    by_action = dict(con.execute("SELECT action, count(*) FROM classified GROUP BY action").fetchall())
    # "Stored": received versions the catalogue now holds (or holds a newer version of).
    stored = con.execute(
        """
        SELECT count(*) FROM classified c
        JOIN records r ON r.source_id = ? AND r.identifier = c.identifier
            AND (c.datestamp IS NULL OR r.datestamp >= c.datestamp)
        """,
        [source_id],
    ).fetchone()[0]
    distinct = con.execute("SELECT count(*) FROM classified").fetchone()[0]
    con.execute("DROP TABLE classified")
    con.execute("DROP TABLE latest")
    return MergeCounts(
        received=int(received),
        distinct_received=int(distinct),
        stored=int(stored),
        quarantined=int(quarantined),
        quarantined_unparsed=int(unparsed),
        **{a: int(by_action.get(a, 0)) for a in _ACTIONS},
    )
