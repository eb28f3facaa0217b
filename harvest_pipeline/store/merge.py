"""Merging a window's staging file into the catalogue: classify, upsert, tombstone, history.

A window of up to `merge_chunk_rows()` records is merged in one transaction, together with its
ledger row. A larger one is merged in chunks of that many records, each its own transaction,
because DuckDB keeps a transaction's inserted rows in memory until it commits (below a full row
group of 122,880 rows they are never written early), outside its memory limit: a 100,000-record
window took about 900 MB that way. The ledger row still comes last, in its own transaction, so
the window's verdict and checks stay all-or-nothing. After a crash between chunks the next run
merges only the chunks whose records have no history row of this traversal yet (see
`merge_window`). Idempotent: merging the same versions again finds every record 'unchanged' and
rewrites nothing in `records`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, TypeVar

import duckdb

from harvest_pipeline.crashpoints import crashpoint
from harvest_pipeline.store.clock import utcnow
from harvest_pipeline.store.columns import DROPPED_BY_TOMBSTONE, VALUE_COLUMNS
from harvest_pipeline.store.connection import transaction

T = TypeVar("T")

MERGE_CHUNK_ROWS_ENV = "HARVEST_MERGE_CHUNK_ROWS"
# About 45 MB of uncommitted rows (records and their history, ~1.3 KB of metadata each) per chunk.
DEFAULT_MERGE_CHUNK_ROWS = 10_000


def merge_chunk_rows() -> int:
    """Records merged per catalogue transaction (HARVEST_MERGE_CHUNK_ROWS, default 10,000)."""
    raw = os.environ.get(MERGE_CHUNK_ROWS_ENV)
    return max(1, int(raw)) if raw else DEFAULT_MERGE_CHUNK_ROWS

_ACTIONS = ("created", "updated", "unchanged", "deleted", "revived", "restored", "stale")
# History actions after which `records` held the received version.
_STORING_ACTIONS = ("created", "updated", "unchanged", "deleted", "revived", "restored")



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
    parts = ", ".join(f"coalesce(CAST({expr} AS VARCHAR), '\x00')" for expr in values.values())
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
    con.execute(f"ATTACH {_sql_literal_path(staging_file)} AS stg (READ_ONLY)")
    # No DETACH in a `finally`: after an error the transaction is aborted, a DETACH would fail
    # and hide the real error; the caller's connection is closed anyway.
    counts = _merge_attached(
        con, source_id=source_id, window_start=window_start, window_end=window_end,
        run_id=run_id, attempt_id=attempt_id, now=now,
    )
    con.execute("DETACH stg")
    return counts


def _merge_attached(con, *, source_id, window_start, window_end, run_id, attempt_id, now) -> MergeCounts:
    received = con.execute("SELECT count(*) FROM stg.page_records").fetchone()[0]
    quarantined, unparsed = _merge_quarantine(
        con, source_id=source_id, window_start=window_start, window_end=window_end,
        run_id=run_id, attempt_id=attempt_id, now=now,
    )
    con.execute(
        "UPDATE records SET identifier_key = md5_number_lower(identifier) WHERE identifier_key IS NULL"
    )
    distinct, stored, by_action = _merge_records(
        con, source_id=source_id, window_start=window_start, window_end=window_end,
        run_id=run_id, attempt_id=attempt_id, now=now,
    )
    return _counts(received, distinct, stored, quarantined, unparsed, by_action)


def _counts(received, distinct, stored, quarantined, unparsed, by_action) -> MergeCounts:
    return MergeCounts(
        received=int(received),
        distinct_received=int(distinct),
        stored=int(stored),
        quarantined=int(quarantined),
        quarantined_unparsed=int(unparsed),
        **{a: int(by_action.get(a, 0)) for a in _ACTIONS},
    )


def _merge_quarantine(con, *, source_id, window_start, window_end, run_id, attempt_id, now) -> tuple[int, int]:
    """The window's unreadable and unmappable records: quarantine rows, and history for the former."""
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
    return int(quarantined), int(unparsed)


def _chunk_filter(chunk: tuple[int, int] | None) -> str:
    """SQL condition on `identifier` for one of n chunks (by a hash: each identifier in one chunk)."""
    if chunk is None:
        return "true"
    n, k = int(chunk[0]), int(chunk[1])
    return f"md5_number_lower(identifier) % {n} = {k}"


def _merge_records(con, *, source_id, window_start, window_end, run_id, attempt_id, now,
                   chunk: tuple[int, int] | None = None) -> tuple[int, int, dict[str, int]]:
    """Classify and apply the staged records (those of `chunk` = (n, k) only, if given).

    Returns (distinct records, records stored, {action: count}).
    """
    # A record listed twice in one traversal counts once, in its last-received version.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE latest AS
        SELECT identifier, max(page_number::BIGINT * 1000000 + seq) AS pos,
               md5_number_lower(identifier) AS identifier_key
        FROM stg.page_records WHERE {_chunk_filter(chunk)} GROUP BY identifier
        """
    )
    # The stored rows of this window's records, found through the narrow `identifier_key` column
    # (DuckDB pushes the window's keys into its scan as a Bloom filter), then read by row id, so
    # the wide columns of the matching rows only are read and the cost follows the window, not
    # the catalogue. Rows written without a key (by hand) get theirs first; row-group statistics
    # make that free when there are none (the caller runs that UPDATE first).
    # The harvest always wins: a row edited by hand since (same version, different columns) is
    # rewritten and classed 'restored'. So the stored side's fingerprint is computed from the
    # stored values themselves (a fingerprint stored with the row would not see a hand edit), for
    # the window's rows only.
    stored_fp = _fingerprint({c: "r." + c for c in VALUE_COLUMNS})
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE stored AS
        SELECT r.rowid AS row_id, r.identifier, r.datestamp, r.deleted, r.content_hash, {stored_fp} AS fp
        FROM records r
        WHERE r.rowid IN (
            SELECT rowid FROM records WHERE source_id = ? AND identifier_key IN (SELECT identifier_key FROM latest)
        )
        """,
        [source_id],
    )
    # A received record with no row whose history shows it was stored before: its row was
    # deleted by hand. Its last stored version says whether the harvest restores that version,
    # and its first sighting stays its first_seen_at. Only identifiers without a row are looked up
    # (a window whose records all have rows filters the history down to nothing).
    storing = ", ".join(f"'{a}'" for a in _STORING_ACTIONS)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE stored_before AS
        SELECT h.identifier,
               arg_max(h.datestamp, (h.datestamp, h.received_at)) AS datestamp,
               arg_max(h.deleted, (h.datestamp, h.received_at)) AS deleted,
               arg_max(h.content_hash, (h.datestamp, h.received_at)) AS content_hash,
               min(h.received_at) AS first_seen_at
        FROM record_history h
        WHERE h.source_id = ? AND h.action IN ({storing})
          AND h.identifier IN (SELECT l.identifier FROM latest l ANTI JOIN stored s ON s.identifier = l.identifier)
        GROUP BY h.identifier
        """,
        [source_id],
    )
    incoming_fp = _fingerprint({c: _stored_value(c, "p.") for c in VALUE_COLUMNS})
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE classified AS
        SELECT i.identifier, i.page_number, i.seq, i.datestamp, r.identifier IS NOT NULL AS existed, r.row_id,
            h.first_seen_at,
            CASE
                WHEN r.identifier IS NULL AND h.identifier IS NULL THEN CASE WHEN i.deleted THEN 'deleted' ELSE 'created' END
                WHEN r.identifier IS NULL THEN CASE                    -- deleted by hand
                    WHEN h.datestamp IS NOT DISTINCT FROM i.datestamp AND h.deleted = i.deleted
                         AND h.content_hash IS NOT DISTINCT FROM i.content_hash THEN 'restored'
                    WHEN i.deleted THEN 'deleted'
                    WHEN h.deleted THEN 'revived'
                    ELSE 'updated'
                END
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
        LEFT JOIN stored r ON r.identifier = i.identifier
        LEFT JOIN stored_before h ON h.identifier = i.identifier
        """
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
    inserted = con.execute(
        f"""
        INSERT INTO records (source_id, identifier, {', '.join(VALUE_COLUMNS)},
                             first_seen_at, written_at, written_by_run, window_start, window_end, identifier_key)
        SELECT ?, i.identifier, {values}, coalesce(c.first_seen_at, ?), ?, ?, ?, ?, md5_number_lower(i.identifier)
        {changed} AND NOT c.existed
        """,
        [source_id, now, now, run_id, window_start, window_end],
    ).fetchone()[0]
    aliased = ", ".join(f"{_stored_value(c, 'i.')} AS {c}" for c in VALUE_COLUMNS)
    assignments = ", ".join(f"{c} = u.{c}" for c in VALUE_COLUMNS)
    # Matched by row id (found above, same transaction): no join against the whole table.
    updated = con.execute(
        f"""
        UPDATE records SET {assignments},
            written_at = ?, written_by_run = ?, window_start = ?, window_end = ?
        FROM (SELECT c.row_id, {aliased} {changed} AND c.existed) u
        WHERE records.rowid = u.row_id
        """,
        [now, run_id, window_start, window_end],
    ).fetchone()[0]
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
    # "Stored": received versions the catalogue now holds (or holds a newer version of): the rows
    # the two statements above wrote (their own row counts), plus the versions found already
    # stored, identical or older than the stored one.
    stored = int(inserted) + int(updated) + int(by_action.get("unchanged", 0)) + int(by_action.get("stale", 0))
    distinct = con.execute("SELECT count(*) FROM classified").fetchone()[0]
    con.execute("DROP TABLE classified")
    con.execute("DROP TABLE stored")
    con.execute("DROP TABLE stored_before")
    con.execute("DROP TABLE latest")
    return int(distinct), stored, {a: int(v) for a, v in by_action.items()}


def merge_window(
    con: duckdb.DuckDBPyConnection,
    staging_file: Path,
    *,
    source_id: str,
    window_start: datetime,
    window_end: datetime,
    run_id: str,
    attempt_id: str,
    finish: Callable[[duckdb.DuckDBPyConnection, MergeCounts], T],
    chunk_rows: int | None = None,
) -> tuple[MergeCounts, T]:
    """Merge the staged window; `finish(con, counts)` runs in the transaction that ends it.

    Call outside a transaction. `finish` writes the window's ledger row: it commits with the
    last of the window's writes, so a window is either merged with its verdict or not finished.

    Up to `chunk_rows` records (default `merge_chunk_rows()`): one transaction, as
    `merge_staging`. More: the records are split into n chunks by a hash of their identifier,
    each merged and committed on its own; then the quarantine rows and `finish` commit together.
    A chunk already merged by this traversal (its records have `record_history` rows with this
    `attempt_id`: the history rows commit with the chunk's writes) is not merged again after a
    crash; its counts are read back from those rows. Each identifier's classification depends
    only on its own row and history, so chunks do not see each other's writes.
    """
    chunk_rows = chunk_rows or merge_chunk_rows()
    now = utcnow()
    con.execute(f"ATTACH {_sql_literal_path(staging_file)} AS stg (READ_ONLY)")
    distinct_staged = con.execute("SELECT count(DISTINCT identifier) FROM stg.page_records").fetchone()[0]
    n = max(1, math.ceil(distinct_staged / chunk_rows))
    if n == 1:
        with transaction(con):
            counts = _merge_attached(
                con, source_id=source_id, window_start=window_start, window_end=window_end,
                run_id=run_id, attempt_id=attempt_id, now=now,
            )
            result = finish(con, counts)
        con.execute("DETACH stg")
        return counts, result

    received = con.execute("SELECT count(*) FROM stg.page_records").fetchone()[0]
    done = _chunks_done(con, source_id=source_id, attempt_id=attempt_id, n=n)
    distinct = stored = 0
    by_action: dict[str, int] = {}
    for k in range(n):
        if k in done:
            part_distinct, part_stored, part_actions = done[k]
        else:
            with transaction(con):
                if not done and k == 0:
                    con.execute(
                        "UPDATE records SET identifier_key = md5_number_lower(identifier) WHERE identifier_key IS NULL"
                    )
                part_distinct, part_stored, part_actions = _merge_records(
                    con, source_id=source_id, window_start=window_start, window_end=window_end,
                    run_id=run_id, attempt_id=attempt_id, now=now, chunk=(n, k),
                )
            crashpoint("between-merge-chunks")
        distinct += part_distinct
        stored += part_stored
        for a, v in part_actions.items():
            by_action[a] = by_action.get(a, 0) + v
    with transaction(con):
        quarantined, unparsed = _merge_quarantine(
            con, source_id=source_id, window_start=window_start, window_end=window_end,
            run_id=run_id, attempt_id=attempt_id, now=now,
        )
        counts = _counts(received, distinct, stored, quarantined, unparsed, by_action)
        result = finish(con, counts)
    con.execute("DETACH stg")
    return counts, result


def _chunks_done(con, *, source_id: str, attempt_id: str, n: int) -> dict[int, tuple[int, int, dict[str, int]]]:
    """Chunks of an n-chunk merge that this traversal (`attempt_id`) already committed.

    Their history rows are their counts: every merged record has one row, and 'stored' counts
    every action (a stale or unchanged version is held too, or a newer one).
    """
    rows = con.execute(
        f"""
        SELECT md5_number_lower(identifier) % {int(n)} AS chunk, action, count(*)
        FROM record_history
        WHERE source_id = ? AND attempt_id = ? AND action <> 'quarantined'
        GROUP BY ALL
        """,
        [source_id, attempt_id],
    ).fetchall()
    done: dict[int, tuple[int, int, dict[str, int]]] = {}
    for chunk, action, count in rows:
        distinct, stored, actions = done.get(int(chunk), (0, 0, {}))
        actions[action] = int(count)
        done[int(chunk)] = (distinct + int(count), stored + int(count), actions)
    return done
