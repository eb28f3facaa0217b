"""Reconciliation SQL: the upstream identifier listing, the comparison with the catalogue, tombstones.

The listing goes page by page into a small DuckDB file of its own (never a Python list: a source
may hold millions of identifiers); the catalogue is opened only for the short comparison and, when
the guard allows it, the tombstoning, in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow as pa

from harvest_pipeline.errors import StoreLockedError
from harvest_pipeline.http.redaction import redact_text
from harvest_pipeline.store.clock import to_naive_utc, utcnow
from harvest_pipeline.store.columns import DROPPED_BY_TOMBSTONE
from harvest_pipeline.store.connection import open_with_retry, remove_database_file

# record_history.attempt_id of a reconciliation's tombstones: 'reconcile:<run_id>'.
RECONCILE_MARKER = "reconcile:"

APPLIED = "applied"  # the missing records were tombstoned (possibly none)
BLOCKED = "blocked"  # the mass-deletion guard refused; nothing was deleted
INCOMPLETE = "incomplete"  # the listing came back shorter than its completeListSize; nothing deleted

_IDENTIFIER_SCHEMA = pa.schema([("identifier", pa.string()), ("deleted", pa.bool_())])


def listing_path(db_path: str | Path, source_id: str) -> Path:
    """data/staging/<source>/reconcile.duckdb next to the catalogue."""
    return Path(db_path).parent / "staging" / source_id / "reconcile.duckdb"


class IdentifierListing:
    """The upstream listing of one source being staged; one process at a time (DuckDB's lock)."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.con = open_with_retry(path, wait_seconds=5.0)
        except StoreLockedError as exc:
            raise StoreLockedError(
                f"reconciliation listing {path} is locked",
                hint="another reconciliation of this source is running; wait for it to finish",
            ) from exc
        # Start from scratch: a listing interrupted earlier cannot be trusted or resumed.
        self.con.execute("CREATE OR REPLACE TABLE upstream (identifier VARCHAR, deleted BOOLEAN)")

    def add(self, identifiers: list[str], deleted: list[bool]) -> None:
        """Append one page of headers."""
        if not identifiers:
            return
        page = pa.table({"identifier": identifiers, "deleted": deleted}, schema=_IDENTIFIER_SCHEMA)
        self.con.register("page_headers", page)
        try:
            self.con.execute("INSERT INTO upstream SELECT identifier, deleted FROM page_headers")
        finally:
            self.con.unregister("page_headers")

    def count(self) -> int:
        return int(self.con.execute("SELECT count(*) FROM upstream").fetchone()[0])

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None

    def remove(self) -> None:
        self.close()
        remove_database_file(self.path)


@dataclass(frozen=True)
class Comparison:
    listed: int  # headers listed upstream (deleted ones and repeats included)
    upstream_live: int  # distinct identifiers listed as live
    local_live: int  # live records of the source in the catalogue
    missing: int  # live here, not live upstream, and not written since the listing began
    examples: list[str]


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def compare(con: duckdb.DuckDBPyConnection, listing_file: Path, *, source_id: str, listing_started_at: datetime) -> Comparison:
    """Fill the temp table `reconcile_missing` and count; call inside the caller's transaction.

    A record written after the listing began is never missing: the harvest has just seen it, and
    the listing may have passed its position before it appeared upstream.
    """
    if con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = 'lst'").fetchone()[0]:
        con.execute("DETACH lst")  # an earlier comparison's on this connection, its transaction over
    # Not detached here: duckdb 1.5 refuses to detach, inside the transaction, a file it read, and
    # the refusal aborts the transaction. The next comparison on this connection (or close) does.
    con.execute(f"ATTACH {_literal(listing_file)} AS lst (READ_ONLY)")
    con.execute(
        "CREATE OR REPLACE TEMP TABLE reconcile_upstream AS"
        " SELECT DISTINCT identifier FROM lst.upstream WHERE NOT deleted"
    )
    listed = con.execute("SELECT count(*) FROM lst.upstream").fetchone()[0]
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE reconcile_missing AS
        SELECT r.identifier FROM records r
        ANTI JOIN reconcile_upstream u ON u.identifier = r.identifier
        WHERE r.source_id = ? AND NOT r.deleted AND r.written_at < ?
        """,
        [source_id, to_naive_utc(listing_started_at)],
    )
    upstream_live = con.execute("SELECT count(*) FROM reconcile_upstream").fetchone()[0]
    local_live = con.execute(
        "SELECT count(*) FROM records WHERE source_id = ? AND NOT deleted", [source_id]
    ).fetchone()[0]
    missing = con.execute("SELECT count(*) FROM reconcile_missing").fetchone()[0]
    examples = [r[0] for r in con.execute("SELECT identifier FROM reconcile_missing ORDER BY 1 LIMIT 10").fetchall()]
    return Comparison(int(listed), int(upstream_live), int(local_live), int(missing), examples)


def tombstone_missing(
    con: duckdb.DuckDBPyConnection,
    *,
    source_id: str,
    run_id: str,
    tombstone_hash: Callable[[list[str] | None], str],
) -> int:
    """Tombstone every record in `reconcile_missing` and append its history; return how many.

    The tombstone keeps the record's datestamp (the server never said when it went), so a later
    listing of that same version revives it. `tombstone_hash(set_specs)` is the merge's content
    hash of a deletion, so a later harvested deletion of the record classes as unchanged.
    """
    now = utcnow()
    con.create_function("reconcile_tombstone_hash", tombstone_hash, ["VARCHAR[]"], "VARCHAR", null_handling="special")
    try:
        dropped = ", ".join(f"{c} = NULL" for c in DROPPED_BY_TOMBSTONE)
        con.execute(
            f"""
            UPDATE records SET deleted = true, {dropped},
                content_hash = reconcile_tombstone_hash(set_specs),
                written_at = ?, written_by_run = ?, window_start = NULL, window_end = NULL
            WHERE source_id = ? AND NOT deleted AND identifier IN (SELECT identifier FROM reconcile_missing)
            """,
            [now, run_id, source_id],
        )
    finally:
        con.remove_function("reconcile_tombstone_hash")
    con.execute(
        """
        INSERT INTO record_history
        SELECT r.source_id, r.identifier, r.datestamp, true, r.content_hash, 'deleted', NULL, NULL, ?, ?, NULL, NULL, ?
        FROM records r JOIN reconcile_missing m ON m.identifier = r.identifier
        WHERE r.source_id = ? AND r.written_by_run = ? AND r.written_at = ?
        """,
        [run_id, RECONCILE_MARKER + run_id, now, source_id, run_id, now],
    )
    return int(
        con.execute(
            "SELECT count(*) FROM record_history WHERE source_id = ? AND attempt_id = ? AND received_at = ?",
            [source_id, RECONCILE_MARKER + run_id, now],
        ).fetchone()[0]
    )


def drop_temp_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DROP TABLE IF EXISTS reconcile_missing")
    con.execute("DROP TABLE IF EXISTS reconcile_upstream")


def record_reconciliation(con: duckdb.DuckDBPyConnection, **row) -> None:
    """Append the outcome row (`reconciliations` column names as keyword arguments)."""
    row = {**row, "finished_at": utcnow(), "listing_started_at": to_naive_utc(row["listing_started_at"])}
    if row.get("reason"):
        row["reason"] = redact_text(row["reason"])
    con.execute(
        f"INSERT INTO reconciliations ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
        list(row.values()),
    )


def last_reconciliation(con: duckdb.DuckDBPyConnection, source_id: str) -> dict | None:
    cur = con.execute(
        "SELECT * FROM reconciliations WHERE source_id = ? ORDER BY finished_at DESC LIMIT 1", [source_id]
    )
    row = cur.fetchone()
    return None if row is None else dict(zip([d[0] for d in cur.description], row))

