"""Merging a window's staged pages into the catalogue: classify, upsert, tombstone, history.

One transaction per window (the caller opens and commits it, together with the ledger row), so
the catalogue is locked for this step only. Idempotent: merging the same versions again finds
every record 'unchanged' and rewrites nothing in `records`.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.store import merge_memory
from harvest_pipeline.store.clock import utcnow
from harvest_pipeline.store.backend import (
    EMBEDDED, POSTGRES, WriteWorthRetrying, dialect, pg_array, pg_execute_sql, pg_literal, pg_rows, query_in_place,
)
from harvest_pipeline.store.columns import DROPPED_BY_TOMBSTONE, VALUE_COLUMNS, identifier_key_sql

# Public names here (actions, SQL pieces, small_list, sql_list) are shared with merge_group.py,
# which merges a group of small windows with the same classification and INSERTs.
ACTIONS = ("created", "updated", "unchanged", "deleted", "revived", "restored", "stale")
# Identifiers listed more than once that a merge names (the duplicates check's message).
DUPLICATE_EXAMPLES = 5

# A staged row's place in the traversal as one number, page first (a page holds far fewer than
# PAGE_POSITIONS records: the body cap); among a record's repeats the last received wins.
PAGE_POSITIONS = 1_000_000


def received_position(alias: str = "") -> str:
    """SQL: the traversal position of a staged row (of table alias `alias`)."""
    prefix = f"{alias}." if alias else ""
    return f"{prefix}page_number::BIGINT * {PAGE_POSITIONS} + {prefix}seq"


# History actions that wrote the received version into `records` (the others left the row as it was).
WRITING_ACTIONS = ("created", "updated", "deleted", "revived", "restored")
_WRITES = "c.action IN (" + ", ".join(f"'{a}'" for a in WRITING_ACTIONS) + ")"  # of a `classified c` row

# History actions after which `records` held the received version.
STORING = ", ".join(f"'{a}'" for a in WRITING_ACTIONS + ("unchanged",))
# Of a record's history rows `h` with STORING actions: its last stored version and first sighting.
LAST_STORED_VERSION = """arg_max(h.datestamp, (h.datestamp, h.received_at)) AS datestamp,
               arg_max(h.deleted, (h.datestamp, h.received_at)) AS deleted,
               arg_max(h.content_hash, (h.datestamp, h.received_at)) AS content_hash,
               min(h.received_at) AS first_seen_at"""
# `records` columns an INSERT of the merge fills, in the order of `inserted_values`.
INSERTED_COLUMNS = ", ".join(("source_id", "identifier", *VALUE_COLUMNS, "first_seen_at", "written_at",
                               "written_by_run", "window_start", "window_end", "identifier_key"))



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
    duplicate_examples: tuple[str, ...] = ()  # identifiers listed more than once, the first few
    # The records this merge wrote, newest datestamps first, at most PREVIEW_ROWS: (identifier,
    # datestamp, action, title as stored). None: not taken by the merge (a split window's sums,
    # counts read back from the ledger); the UI's preview then reads the catalogue.
    changed_preview: tuple[tuple, ...] | None = None

    @property
    def duplicates(self) -> int:
        """Listings that repeat an identifier already listed in this traversal."""
        return self.received - self.distinct_received

    @property
    def changed(self) -> int:
        """Records this merge wrote (WRITING_ACTIONS)."""
        return self.created + self.updated + self.deleted + self.revived + self.restored

    @property
    def upserted(self) -> int:
        return self.created + self.updated + self.revived + self.restored


def _stored_value(column: str, alias: str) -> str:
    """The SQL for what `records.<column>` gets from an incoming row (tombstones drop metadata)."""
    if column in DROPPED_BY_TOMBSTONE:
        return f"CASE WHEN {alias}deleted THEN NULL ELSE {alias}{column} END"
    return f"{alias}{column}"


# The action for a received record (`i`) that has no row in `records`, from its last stored
# version in the history (`h`, stored_before; NULL: never stored).
ACTION_WITHOUT_ROW = """CASE
                    WHEN h.identifier IS NULL THEN CASE WHEN i.deleted THEN 'deleted' ELSE 'created' END
                    -- deleted by hand:
                    WHEN h.datestamp IS NOT DISTINCT FROM i.datestamp AND h.deleted = i.deleted
                         AND h.content_hash IS NOT DISTINCT FROM i.content_hash THEN 'restored'
                    WHEN i.deleted THEN 'deleted'
                    WHEN h.deleted THEN 'revived'
                    ELSE 'updated'
                END"""


def _fingerprint(values: dict[str, str]) -> str:
    """SQL for one md5 over a row's stored values (NULL and empty kept apart)."""
    # chr(0), not a NUL inside the literal: duckdb 1.5's parser ends the statement at a NUL byte.
    parts = ", ".join(f"coalesce(CAST({expr} AS VARCHAR), chr(0))" for expr in values.values())
    return f"md5(concat_ws(chr(31), {parts}))"


# Rows of the changed-records preview a merge takes (MergeCounts.changed_preview).
PREVIEW_ROWS = 20
# The preview's order, over its own columns (identifier, datestamp, action, title): newest
# datestamps first, then by identifier (store/preview.py reads the catalogue back in this order).
PREVIEW_ORDER = "datestamp DESC NULLS LAST, identifier"
# The preview's columns, of a classified row `c` and its staged row `i`: the received datestamp and
# the title the record was stored with (none for a tombstone).
PREVIEW_COLUMNS = f"c.identifier, i.datestamp, c.action, {_stored_value('title', 'i.')} AS title"


def _changed_preview(con) -> tuple[tuple, ...]:
    """The window's preview (MergeCounts.changed_preview) from `classified` and the staged rows.

    The newest written rows are picked from `classified` first; only their pages' staged rows are
    read for the titles (one statement joining the whole window's staged rows took 80 ms at
    100,000 records)."""
    top = con.execute(
        f"SELECT identifier, datestamp, action, {received_position()} AS pos FROM classified c"
        f" WHERE {_WRITES} ORDER BY {PREVIEW_ORDER} LIMIT {PREVIEW_ROWS}"
    ).fetchall()
    if not top:
        return ()
    pages = sorted({pos // PAGE_POSITIONS for *_, pos in top})
    titles = dict(con.execute(
        f"SELECT {received_position()}, {_stored_value('title', '')} FROM stg.page_records"
        f" WHERE page_number IN {sql_list(pages)} AND {received_position()} IN {sql_list([pos for *_, pos in top])}"
    ).fetchall())
    return tuple((identifier, datestamp, action, titles.get(pos)) for identifier, datestamp, action, pos in top)


# Set: a small window's merge reads the stored identifiers instead of trusting their keys (the
# way out of an identifier_key collision, which the merge reports).
READ_IDENTIFIERS_ENV = "HARVEST_MERGE_READ_IDENTIFIERS"

# Up to this many keys (or identifiers) are looked up as a list of constants (see `stored`).
SMALL_LOOKUP = 2_000


def small_list(con, query: str, limit: int = SMALL_LOOKUP) -> list | None:
    """The query's single column, or None when it has more than `limit` rows."""
    rows = con.execute(f"{query} LIMIT {limit + 1}").fetchall()
    return None if len(rows) > limit else [r[0] for r in rows]


# A PostgreSQL catalogue finds the rows of a window of up to PG_LOOKUP records in PostgreSQL itself;
# a larger window is joined by DuckDB. Statements handed to PostgreSQL as text (lookups, the DELETE
# of rows written again) carry PG_CHUNK values each: their text grows with them.
PG_LOOKUP = 100_000
PG_CHUNK = 5_000
# What the merge reads of a stored row in PostgreSQL: its version and the values its fingerprint covers.
_PG_STORED_SELECT = ", ".join(f'"{c}"' for c in dict.fromkeys(
    ("source_id", "identifier", "datestamp", "deleted", "content_hash", "first_seen_at", *VALUE_COLUMNS)))


def _pg_chunks(values: list) -> list[list]:
    """`values` in chunks of PG_CHUNK (no chunk for no values)."""
    return [values[at:at + PG_CHUNK] for at in range(0, len(values), PG_CHUNK)]


def pg_rows_for(values: list, query_for) -> str:
    """A FROM item: the rows PostgreSQL returns for `query_for(chunk)`, chunk after chunk of `values`."""
    chunks = _pg_chunks(values) or [[]]
    return "(" + " UNION ALL ".join(f"SELECT * FROM {pg_rows(query_for(chunk))}" for chunk in chunks) + ")"


def give_rows_their_keys(con, kind: str) -> None:
    """Rows written without an `identifier_key` (by hand) get theirs, so a lookup by key finds them."""
    if kind != POSTGRES or query_in_place(
        con, "SELECT EXISTS (SELECT 1 FROM records WHERE identifier_key IS NULL)", []
    ).fetchone()[0]:
        # (PostgreSQL answers from its partial index; DuckDB's UPDATE would copy every row's key.
        # In the embedded file row-group statistics make it free when there are none.)
        con.execute(
            f"UPDATE records SET identifier_key = {identifier_key_sql('identifier')} WHERE identifier_key IS NULL"
        )


def sql_value(value) -> str:
    """One integer or text constant, as `sql_list` writes it."""
    return sql_list([value])[1:-1]


def sql_list(values: list) -> str:
    """A parenthesised SQL list of integer or text constants; (NULL) when empty (matches nothing)."""
    if not values:
        return "(NULL)"
    return "(" + ", ".join(str(int(v)) if isinstance(v, int) else "'" + str(v).replace("'", "''") + "'" for v in values) + ")"


def _read_same_versions(con, stored_fp: str, *, check_identifiers: bool) -> bool:
    """Create `compared_stored`: the stored content hash and fingerprint of the rows whose datestamp is
    the received one's (or both deleted): only those can be 'unchanged' or 'restored'; for the
    others the datestamps and deletion flags decide. With `check_identifiers` (rows found by key
    alone), the rows read here and the rows a stale version leaves alone get their stored
    identifier checked; the rows the merge rewrites are checked by the UPDATE itself. Returns
    whether it read any."""
    same = f"""
        SELECT s.row_id FROM stored s
        JOIN stg.page_records p ON p.identifier = s.identifier
        JOIN latest l ON l.identifier = p.identifier AND l.pos = {received_position('p')}
        WHERE s.datestamp IS NOT DISTINCT FROM p.datestamp OR (s.deleted AND p.deleted)
           {'OR p.datestamp < s.datestamp' if check_identifiers else ''}
    """
    row_ids = small_list(con, same)
    if row_ids == []:
        return False
    wanted = f"({same})" if row_ids is None else sql_list(row_ids)
    # Tables of their own, not an UPDATE of `stored`: DuckDB holds a transaction's updated values
    # in memory, and a window of 1,000,000 records merged again unchanged did not fit in 256 MB.
    # A table written by a query spills to disk.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE compared_stored AS
        SELECT s.identifier, w.content_hash, w.fp
        FROM stored s
        JOIN (SELECT r.rowid AS row_id, r.content_hash, {stored_fp} AS fp FROM records r
              WHERE r.rowid IN {wanted}) w ON w.row_id = s.row_id
        """
    )
    if check_identifiers:
        _check_identifiers(con, f"SELECT count(*) FROM stored s JOIN records r ON r.rowid = s.row_id"
                                f" WHERE r.rowid IN {wanted} AND r.identifier <> s.identifier")
    return True


def _compare_fingerprints(con, *, stored_side: str) -> None:
    """Create `compared`: for each row of `stored_side` (identifier, content_hash, fp: the stored
    versions worth comparing), its content hash and whether the received version's fingerprint
    is the stored one's. Only those rows get a received fingerprint (an md5 over every value
    column, the raw XML included, for every received row was a quarter of a 100,000-record
    window's merge)."""
    received_fp = _fingerprint({c: _stored_value(c, "p.") for c in VALUE_COLUMNS})
    # Two statements, each with one large join: the staged rows stream past the narrow (identifier,
    # position) of the rows compared, then the fingerprints meet. (One statement holding both
    # sides' fingerprints ran a 1,000,000-record window out of 128 MB.)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE received AS
        SELECT p.identifier, {received_fp} AS fp
        FROM stg.page_records p
        JOIN (SELECT l.identifier, l.pos FROM latest l SEMI JOIN {stored_side} v ON v.identifier = l.identifier) l
          ON l.identifier = p.identifier AND l.pos = {received_position('p')}
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE compared AS
        SELECT v.identifier, v.content_hash, v.fp = x.fp AS same_fp
        FROM {stored_side} v JOIN received x ON x.identifier = v.identifier
        """
    )
    con.execute("DROP TABLE received")


def _check_identifiers(con, mismatches_sql: str) -> None:
    """Fail the merge (nothing written) when a row found by its key holds another identifier."""
    if con.execute(mismatches_sql).fetchone()[0]:
        _key_collision()


def _key_collision():
    raise HarvestError(
        "two record identifiers of this source share an identifier_key (63 bits of their md5); "
        "the merge found a stored row by key that holds another identifier",
        hint=f"nothing was written; run the window again with {READ_IDENTIFIERS_ENV}=1 (the merge then reads "
             "the stored identifiers, slower on a large catalogue), and report it",
    )


# The staged Parquet files are read through two views of an in-memory database named `stg`, so the
# merge's SQL reads `stg.page_records` and `stg.page_quarantine`. A view reads the files that the
# merging connection's variables list (`SET VARIABLE` belongs to its connection), so merges on
# different connections of one DuckDB instance never see each other's files. DuckDB reads the
# files itself: streamed, within its memory limit, only the columns a statement names, and a slice
# of pages skips the row groups outside it.
_STAGED = {"page_records": "stg_page_files", "page_quarantine": "stg_quarantine_files"}
# Merges of a batch run's sources run side by side, on cursors of one instance: the first ones
# would create the views together, and DuckDB refuses two transactions creating one name.
_CREATING_VIEWS = threading.Lock()


def _expose_staging(con: duckdb.DuckDBPyConnection, staging_folder: Path) -> bool:
    """Point the views at the folder's files; return whether it holds quarantined records."""
    from harvest_pipeline.store.staging import EMPTY_QUARANTINE_FILE, staged_file_lists

    files = dict(zip(_STAGED, staged_file_lists(staging_folder)))
    for view, variable in _STAGED.items():
        con.execute(f"SET VARIABLE {variable} = ?", [files[view]])
    with _CREATING_VIEWS:
        if not con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = 'stg'").fetchone()[0]:
            _create_views(con, files)
    return Path(files["page_quarantine"][0]).name != EMPTY_QUARANTINE_FILE


def _create_views(con: duckdb.DuckDBPyConnection, files: dict[str, list[str]]) -> None:
    # Created once per instance, on a connection of its own: a transaction writes one database
    # only, and the caller's has the catalogue. (A view binds its names again when it is read, in
    # the reading connection.)
    with con.cursor() as setup:
        setup.execute("ATTACH IF NOT EXISTS ':memory:' AS stg")
        for view, variable in _STAGED.items():
            setup.execute(f"SET VARIABLE {variable} = ?", [files[view][:1]])
            setup.execute(f"CREATE VIEW IF NOT EXISTS stg.{view} AS SELECT * FROM read_parquet(getvariable('{variable}'))")


def _hide_staging(con: duckdb.DuckDBPyConnection) -> None:
    for variable in _STAGED.values():
        con.execute(f"RESET VARIABLE {variable}")


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
    position, action) and the wide columns (raw XML) stream from the staged files straight into
    their destination.
    """
    now = utcnow()
    has_quarantine = _expose_staging(con, staging_file)
    # No clean-up in a `finally`: after an error the transaction is aborted, and the next merge on
    # this connection registers its own files under the same names.
    try:
        counts = _merge_attached(
            con, source_id=source_id, window_start=window_start, window_end=window_end,
            run_id=run_id, attempt_id=attempt_id, now=now, has_quarantine=has_quarantine,
        )
    except duckdb.OutOfMemoryException as exc:
        if merge_memory.ran_out_lowered(con):
            raise WriteWorthRetrying(
                f"the merge ran out of memory at the lower limit it gives its fingerprints and writes "
                f"({str(exc).splitlines()[0][:160]}); merging the window again at the whole limit"
            ) from exc
        raise
    finally:
        merge_memory.done(con)  # a large window's settings (threads, memory limit) given back
    return counts


def _merge_attached(con, *, source_id, window_start, window_end, run_id, attempt_id, now, has_quarantine) -> MergeCounts:
    # Rows per page: the window's size now, its slices later (one read of the staged files).
    page_rows = _page_rows(con)
    received = sum(n for _, n in page_rows)
    if received > LARGE_WINDOW_ROWS and dialect(con) == EMBEDDED:
        merge_memory.classifying(con)  # one thread; its writes at a lower limit (store/merge_memory.py)
    # Most windows quarantine nothing: each statement skipped is a few ms of a small window's merge.
    quarantined, unparsed = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE kind = 'parse') FROM stg.page_quarantine"
    ).fetchone() if has_quarantine else (0, 0)
    if quarantined:
        con.execute(
            """
            INSERT INTO quarantine
            SELECT ?, identifier, kind, error, raw, ?, ?, ?, ?, page_number, ? FROM stg.page_quarantine
            """,
            [source_id, window_start, window_end, run_id, attempt_id, now],
        )
    if unparsed:
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
        f"""
        CREATE OR REPLACE TEMP TABLE latest AS
        SELECT identifier, max({received_position()}) AS pos,
               {identifier_key_sql('identifier')} AS identifier_key, count(*) AS listed
        FROM stg.page_records GROUP BY identifier
        """
    )
    # The stored rows of this window's records, found through the narrow `identifier_key` column
    # (DuckDB pushes the window's keys into its scan as a Bloom filter), then read by row id, so
    # the wide columns of the matching rows only are read and the cost follows the window, not
    # the catalogue. Rows written without a key (by hand) get theirs first.
    kind = dialect(con)
    give_rows_their_keys(con, kind)
    # The harvest always wins: a row edited by hand since (same version, different columns) is
    # rewritten and classed 'restored'. So the stored side's fingerprint is computed from the
    # stored values themselves (a fingerprint stored with the row would not see a hand edit), for
    # the window's rows only.
    stored_fp = _fingerprint({c: "r." + c for c in VALUE_COLUMNS})
    # DuckDB's own file has stable row ids within the transaction; a shared catalogue (PostgreSQL,
    # DuckLake) is matched by its key instead, which its own index serves.
    by_rowid = kind == EMBEDDED
    # A small window's keys go into the statement as a list of constants: DuckDB then filters the
    # key column inside its scan (about 10x cheaper than the semi-join a subquery gets, measured
    # on 2,000,000 rows). A large window reads most row groups anyway: a join.
    # PostgreSQL looks up larger windows itself, on its index (source_id, identifier_key).
    lookup_limit = PG_LOOKUP if kind == POSTGRES else SMALL_LOOKUP
    keys = small_list(con, "SELECT DISTINCT identifier_key FROM latest", lookup_limit)
    if kind == POSTGRES and keys is not None:
        stored_rows = pg_rows_for(keys, lambda chunk: (
            f"SELECT {_PG_STORED_SELECT} FROM records"
            f" WHERE source_id = {pg_literal(source_id)} AND identifier_key = ANY({pg_array(chunk, 'bigint')})"
        )) + " r"
        found = "r.source_id = ?"
    else:
        window_keys = "(SELECT identifier_key FROM latest)" if keys is None else sql_list(keys)
        stored_rows = "records r"
        found = (
            f"r.rowid IN (SELECT rowid FROM records WHERE source_id = ? AND identifier_key IN {window_keys})"
            if by_rowid else
            f"r.source_id = ? AND r.identifier_key IN {window_keys}"
        )
    # The embedded file reads the narrow columns first and the wide ones (for the fingerprint) only
    # for the rows whose stored version may be the received one: a row fetched among millions costs
    # its row group's compressed XML, so a window of new versions spread over the catalogue reads
    # no XML at all. A small window does not even read the stored identifiers (strings, as costly
    # as the rest of the lookup): a row is its key's, and the statements that use a row check its
    # identifier (see `_check_identifiers`). A shared catalogue reads its rows by key.
    by_key_only = by_rowid and keys is not None and not os.environ.get(READ_IDENTIFIERS_ENV)
    if by_key_only:
        n_stored = con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE stored AS
            SELECT f.row_id, l.identifier, f.datestamp, f.deleted
            FROM (SELECT rowid AS row_id, identifier_key, datestamp, deleted FROM records
                  WHERE source_id = ? AND identifier_key IN {window_keys}) f
            JOIN latest l ON l.identifier_key = f.identifier_key
            """,
            [source_id],
        ).fetchone()[0]
        # Two identifiers of the window, or two stored rows, with one key (63 bits of md5: about
        # one chance in 10^7 for a source of 10 million records): read the identifiers after all.
        by_key_only = n_stored < 2 or not con.execute(
            "SELECT count(*) FROM (SELECT identifier FROM stored GROUP BY identifier HAVING count(*) > 1)"
        ).fetchone()[0]
    if not by_key_only:
        n_stored = con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE stored AS
            SELECT {'r.rowid' if by_rowid else 'NULL::BIGINT'} AS row_id, r.identifier, r.datestamp, r.deleted
                   {'' if by_rowid else f', r.content_hash, {stored_fp} AS fp'}
                   {', r.first_seen_at AS stored_first_seen_at' if kind == POSTGRES else ''}
            FROM {stored_rows}
            WHERE {found}
            """,
            [source_id],
        ).fetchone()[0]
    # A window of new records (a catch-up's usual one) has no stored row to compare.
    # A large window's fingerprints (an md5 over every stored version's XML) run at a lower memory
    # limit: they set the peak of a window merged again (store/merge_memory.py).
    merge_memory.fingerprinting(con)
    if not n_stored:
        fingerprinted = False
    elif by_rowid:
        fingerprinted = _read_same_versions(con, stored_fp, check_identifiers=by_key_only)
    else:
        fingerprinted = True
    if fingerprinted:
        # The embedded file read the stored versions worth comparing; a shared catalogue, all.
        _compare_fingerprints(con, stored_side="compared_stored" if by_rowid else "stored")
        if by_rowid:
            con.execute("DROP TABLE compared_stored")
    merge_memory.fingerprinted(con)
    # A received record with no row whose history shows it was stored before: its row was
    # deleted by hand. Its last stored version says whether the harvest restores that version,
    # and its first sighting stays its first_seen_at. Only identifiers without a row are looked up;
    # a window whose records all have rows reads no history at all (a list of no identifiers still
    # scanned the source's history: 58 ms cold for a history of 2,000,000 rows).
    absent_sql = "SELECT l.identifier FROM latest l ANTI JOIN stored s ON s.identifier = l.identifier"
    absent = small_list(con, absent_sql, lookup_limit)
    # The embedded file knows which of them were stored once (store/row_tally.py): only those are
    # looked up in the history, which otherwise scans the identifiers of the source's whole history.
    tallies, restored = None, []
    if by_rowid and absent != []:
        from harvest_pipeline.store import row_tally  # here: it builds on this module's SQL helpers

        tallies = row_tally.ensure_removed_known(con, [source_id])
        restored = row_tally.removed_among(con, f"SELECT {sql_value(source_id)} AS source_id, identifier"
                                                f" FROM ({absent_sql})")
        absent = [identifier for _, identifier in restored]
        if len(absent) > lookup_limit:  # many rows deleted by hand: matched by a query, not a long list
            absent_sql = (f"SELECT x.identifier FROM records_removed x WHERE x.source_id = {sql_value(source_id)}"
                          f" AND x.identifier IN ({absent_sql})")
            absent = None
    history = "record_history h"
    history_in_pg = kind == POSTGRES and bool(absent)
    if history_in_pg:
        # PostgreSQL reads the history of these identifiers only, on its index (source_id, identifier).
        history = pg_rows_for(absent, lambda chunk: (
            "SELECT identifier, datestamp, deleted, content_hash, received_at, source_id, action FROM record_history"
            f" WHERE source_id = {pg_literal(source_id)} AND action IN ({STORING})"
            f" AND identifier = ANY({pg_array(chunk, 'text')})"
        )) + " h"
    # PostgreSQL's rows are these identifiers' already: matched again by the query, not a long list.
    absent_identifiers = f"({absent_sql})" if absent is None or history_in_pg else sql_list(absent)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE stored_before AS
        SELECT h.identifier, {LAST_STORED_VERSION}
        FROM {history}
        WHERE {'false AND ' if absent == [] else ''}h.source_id = ? AND h.action IN ({STORING})
          AND h.identifier IN {absent_identifiers}
        GROUP BY h.identifier
        """,
        [source_id],
    )
    # The stored and received fingerprints, where read (a window without a stored version like the
    # received one compares none).
    compare = ("LEFT JOIN compared v ON v.identifier = i.identifier" if fingerprinted else
               "CROSS JOIN (SELECT NULL::VARCHAR AS content_hash, NULL::BOOLEAN AS same_fp) v")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE classified AS
        SELECT i.identifier, i.page_number, i.seq, i.datestamp, r.identifier IS NOT NULL AS existed, r.row_id,
            {'coalesce(h.first_seen_at, r.stored_first_seen_at)' if kind == POSTGRES else 'h.first_seen_at'}
                AS first_seen_at,
            CASE
                WHEN r.identifier IS NULL THEN {ACTION_WITHOUT_ROW}
                WHEN i.datestamp < r.datestamp THEN 'stale'            -- never overwrite a newer version
                WHEN i.deleted AND r.deleted THEN CASE WHEN v.same_fp THEN 'unchanged' ELSE 'restored' END
                WHEN i.deleted THEN 'deleted'
                WHEN r.deleted THEN 'revived'
                WHEN v.content_hash IS NOT DISTINCT FROM i.content_hash
                     AND r.datestamp IS NOT DISTINCT FROM i.datestamp
                    THEN CASE WHEN v.same_fp THEN 'unchanged' ELSE 'restored' END
                ELSE 'updated'
            END AS action
        FROM (
            SELECT p.identifier, p.page_number, p.seq, p.datestamp, p.deleted, p.content_hash
            FROM stg.page_records p
            JOIN latest l ON l.identifier = p.identifier AND l.pos = {received_position('p')}
        ) i
        LEFT JOIN stored r ON r.identifier = i.identifier
        LEFT JOIN stored_before h ON h.identifier = i.identifier
        {compare}
        """
    )
    # New rows are inserted and existing ones updated in place, in two statements: DuckDB's
    # INSERT .. ON CONFLICT DO UPDATE holds every conflicting row in memory, which a window
    # revising 100,000 records of a large catalogue does not survive. A large window is written in
    # slices of pages (same transaction): each statement's join then holds one slice, not the window.
    inserted = updated = 0
    # Rows updated in place need the whole limit (a window of 1,000,000 new versions ran out of
    # memory at 80 MB, not at 128): only a large window of new rows writes at the lower one (64 MB).
    if received > LARGE_WINDOW_ROWS and not con.execute(f"SELECT count(*) FROM classified c WHERE c.existed AND {_WRITES}").fetchone()[0]:
        merge_memory.writing(con)
    for first_page, last_page in _page_slices(con, page_rows):
        n_inserted, n_updated = _write_slice(
            con, first_page, last_page, source_id=source_id, window_start=window_start, window_end=window_end,
            run_id=run_id, attempt_id=attempt_id, now=now, by_rowid=by_rowid, replace_rows=kind == POSTGRES,
        )
        inserted, updated = inserted + n_inserted, updated + n_updated
    if tallies is not None:
        # Every received record without a row got one (each action without a row writes).
        row_tally.after_inserts(con, tallies, (
            f"SELECT {sql_value(source_id)}, count(*), bit_xor(l.identifier_key)"
            " FROM latest l ANTI JOIN stored s ON s.identifier = l.identifier"), restored)
    by_action = dict(con.execute("SELECT action, count(*) FROM classified GROUP BY action").fetchall())
    # The UI's preview of what this window changed, taken here from the window's own rows: read
    # back from the catalogue afterwards it cost two scans that grow with the source (38 ms cold
    # on a source of 2,000,000 records and their history, against 2 ms here).
    preview = _changed_preview(con) if any(by_action.get(a) for a in WRITING_ACTIONS) else ()
    # "Stored": received versions the catalogue now holds (or holds a newer version of): the rows
    # the two statements above wrote (their own row counts), plus the versions found already
    # stored, identical or older than the stored one.
    stored = int(inserted) + int(updated) + int(by_action.get("unchanged", 0)) + int(by_action.get("stale", 0))
    distinct = sum(by_action.values())  # one action per received identifier
    examples = [r[0] for r in con.execute(
        "SELECT identifier FROM latest WHERE listed > 1 ORDER BY identifier LIMIT ?", [DUPLICATE_EXAMPLES]
    ).fetchall()] if received > distinct else []
    if received > LARGE_WINDOW_ROWS:
        # A large window's temp tables are let go before its commit. A small window's stay until
        # its cursor is closed (after the transaction) or the next merge replaces them: in a busy
        # process every statement waits for Python's GIL a few times (bench/ROUNDS.md).
        for table in ("classified", "stored", "stored_before", *(("compared",) if fingerprinted else ()), "latest"):
            con.execute(f"DROP TABLE {table}")
        _hide_staging(con)
    return MergeCounts(
        received=int(received),
        distinct_received=int(distinct),
        stored=int(stored),
        quarantined=int(quarantined),
        quarantined_unparsed=int(unparsed),
        duplicate_examples=tuple(examples),
        changed_preview=preview,
        **{a: int(by_action.get(a, 0)) for a in ACTIONS},
    )


# Rows written per statement of a large window's merge: the join of one slice (its staged rows
# and their classification) is what the statement holds in memory.
MERGE_SLICE_ROWS = 20_000
# A window of more rows merges on one thread and writes at a lower memory limit (store/merge_memory.py).
# Not the slice size: windows up to 20,000 records, merged on two threads at the whole limit, set
# the harvest's peak RSS (395 MB at 20,000 records, 302 MB at 20,001; with this value 2,000: 225
# MB at 2,000 records, 317 MB at 20,000; bench --rss). HARVEST_MERGE_LARGE_WINDOW_ROWS overrides it.
LARGE_WINDOW_ROWS = int(os.environ.get("HARVEST_MERGE_LARGE_WINDOW_ROWS") or 2_000)


def _page_rows(con) -> list[tuple[int, int]]:
    """(page, rows) of the staged window, in page order."""
    return con.execute("SELECT page_number, count(*) FROM stg.page_records GROUP BY 1 ORDER BY 1").fetchall()


def _page_slices(con, page_rows: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """Consecutive page ranges of the staged window, each at most MERGE_SLICE_ROWS rows (a page
    larger than that is a slice of its own); one range for a window smaller than a slice.
    `page_rows`: the window's `_page_rows`, when already read."""
    slices: list[tuple[int, int]] = []
    first = last = None
    rows = 0
    for page, n in _page_rows(con) if page_rows is None else page_rows:
        if first is not None and rows + n > MERGE_SLICE_ROWS:
            slices.append((first, last))
            first, rows = None, 0
        first = page if first is None else first
        last, rows = page, rows + n
    if first is not None:
        slices.append((first, last))
    return slices


def inserted_values(*, source_id: str, run_id: str, window_start: str, window_end: str) -> str:
    """The SELECT list of a new `records` row (INSERTED_COLUMNS) from staged row `i` and its
    classification `c`, with the run's SQL expressions given; then two parameters: the time for a
    first sighting (when the history has none) and the write's time."""
    values = ", ".join(_stored_value(c, "i.") for c in VALUE_COLUMNS)
    return (f"{source_id}, i.identifier, {values}, coalesce(c.first_seen_at, ?), ?, {run_id}, {window_start}, "
            f"{window_end}, {identifier_key_sql('i.identifier')}")


def history_values(*, source_id: str, window_start: str, window_end: str, run_id: str, attempt_id: str) -> str:
    """The SELECT list of a `record_history` row from staged row `i` and its classification `c`,
    with the run's SQL expressions given; then one parameter, the time received. The XML is kept
    for the versions the merge wrote that differ from the stored one."""
    return (f"{source_id}, i.identifier, i.datestamp, i.deleted, i.content_hash, c.action, {window_start}, "
            f"{window_end}, {run_id}, {attempt_id}, i.page_number, "
            "CASE WHEN c.action IN ('created', 'updated', 'revived', 'restored') THEN i.metadata_xml END, ?")


def _write_slice(con, first_page, last_page, *, source_id, window_start, window_end, run_id, attempt_id, now,
                 by_rowid, replace_rows=False) -> tuple[int, int]:
    """Insert, update and record the history of the classified rows staged on these pages.

    `replace_rows` (PostgreSQL): rows written again are deleted by PostgreSQL on its primary key and
    inserted again with their first sighting, in the same transaction: DuckDB's UPDATE of an
    attached PostgreSQL table copies every row of the source to find the window's."""
    pages = (f"i.page_number BETWEEN {int(first_page)} AND {int(last_page)}"
             f" AND c.page_number BETWEEN {int(first_page)} AND {int(last_page)}")
    # A statement with nothing to write still reads its slice's staged rows, every column: a window
    # of new records skips the UPDATE, a window found unchanged both.
    to_insert, to_update = con.execute(
        f"SELECT count(*) FILTER (WHERE NOT c.existed), count(*) FILTER (WHERE c.existed) FROM classified c"
        f" WHERE c.page_number BETWEEN {int(first_page)} AND {int(last_page)} AND {_WRITES}"
    ).fetchone()
    changed = f"""
        FROM stg.page_records i
        JOIN classified c ON c.identifier = i.identifier AND c.page_number = i.page_number AND c.seq = i.seq
        WHERE {pages} AND {_WRITES}
    """
    if replace_rows and to_update:
        replaced = [row[0] for row in con.execute(
            f"SELECT c.identifier FROM classified c WHERE c.page_number BETWEEN {int(first_page)} AND {int(last_page)}"
            f" AND c.existed AND {_WRITES}"
        ).fetchall()]
        for chunk in _pg_chunks(replaced):
            con.execute(pg_execute_sql(
                f"DELETE FROM records WHERE source_id = {pg_literal(source_id)}"
                f" AND identifier = ANY({pg_array(chunk, 'text')})"))
        written = con.execute(
            f"""
            INSERT INTO records ({INSERTED_COLUMNS})
            SELECT {inserted_values(source_id="?", run_id="?", window_start="?", window_end="?")}
            {changed}
            """,
            [source_id, now, now, run_id, window_start, window_end],
        ).fetchone()[0]
        inserted, updated = written - len(replaced), len(replaced)
    else:
        inserted = con.execute(
            f"""
            INSERT INTO records ({INSERTED_COLUMNS})
            SELECT {inserted_values(source_id="?", run_id="?", window_start="?", window_end="?")}
            {changed} AND NOT c.existed
            """,
            [source_id, now, now, run_id, window_start, window_end],
        ).fetchone()[0] if to_insert else 0
        aliased = ", ".join(f"{_stored_value(c, 'i.')} AS {c}" for c in VALUE_COLUMNS)
        assignments = ", ".join(f"{c} = u.{c}" for c in VALUE_COLUMNS)
        # Matched by row id (found above, same transaction): no join against the whole table. A
        # shared catalogue is matched by its key.
        # By row id, the identifier checked (a row found by key alone may, once in 10^7 sources, be
        # another identifier's): a row not updated is one whose identifier differed.
        match = ("records.rowid = u.row_id AND records.identifier = u.identifier" if by_rowid
                 else "records.source_id = ? AND records.identifier = u.identifier")
        # Up to SMALL_LOOKUP rows, their ids as constants too: DuckDB then reads only the row groups
        # that hold them (a join alone scanned every row of `records` to find a small window's rows).
        # The count above already says when there are more: no statement to find that out again.
        row_ids = small_list(con, f"SELECT c.row_id FROM classified c WHERE c.page_number BETWEEN {int(first_page)}"
                                  f" AND {int(last_page)} AND c.existed AND {_WRITES}") \
            if by_rowid and 0 < to_update <= SMALL_LOOKUP else None
        if row_ids is not None:
            match += f" AND records.rowid IN {sql_list(row_ids)}"
        updated = con.execute(
            f"""
            UPDATE records SET {assignments},
                written_at = ?, written_by_run = ?, window_start = ?, window_end = ?
            FROM (SELECT c.row_id, i.identifier AS identifier, {aliased} {changed} AND c.existed) u
            WHERE {match}
            """,
            [now, run_id, window_start, window_end] + ([] if by_rowid else [source_id]),
        ).fetchone()[0] if to_update else 0
    if by_rowid and updated != to_update:
        _key_collision()
    con.execute(
        f"""
        INSERT INTO record_history
        SELECT {history_values(source_id="?", window_start="?", window_end="?", run_id="?", attempt_id="?")}
        FROM stg.page_records i
        JOIN classified c ON c.identifier = i.identifier AND c.page_number = i.page_number AND c.seq = i.seq
        WHERE {pages}
        """,
        [source_id, window_start, window_end, run_id, attempt_id, now],
    )
    return int(inserted), int(updated)
