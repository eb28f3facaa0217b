"""The catalogue's tables, created or migrated on first use.

Migrations are numbered and append-only: add a new entry to MIGRATIONS, never edit an old one.
The `records` table comes from its one declaration, :mod:`harvest_pipeline.store.columns`
(migration 1 creates the columns declared with ``added_in=1``; a later migration adds its own
with ``add_record_columns_sql(n)``). All timestamps are UTC, stored as TIMESTAMP (naive).
"""

from __future__ import annotations

import re
import threading
import time

import duckdb

from harvest_pipeline.store.backend import EMBEDDED, POSTGRES, ddl_for, dialect, pg_execute_sql
from harvest_pipeline.store.clock import utcnow
from harvest_pipeline.store.columns import (
    RAW_XML_COMPRESSION, RAW_XML_COMPRESSION_OLD_FORMAT, add_record_columns_sql, create_records_sql,
    identifier_key_sql, rebuild_records_without_key_sql,
)

MIGRATIONS: list[tuple[int, str | dict[str, str]]] = [
    (
        1,
        create_records_sql()
        + f"""
        CREATE TABLE record_history (
            source_id     VARCHAR NOT NULL,
            identifier    VARCHAR NOT NULL,
            datestamp     TIMESTAMP,
            deleted       BOOLEAN NOT NULL,
            content_hash  VARCHAR,
            action        VARCHAR NOT NULL,   -- created|updated|unchanged|deleted|revived|stale
            window_start  TIMESTAMP,
            window_end    TIMESTAMP,
            run_id        VARCHAR,
            attempt_id    VARCHAR,
            page_number   INTEGER,
            metadata_xml  VARCHAR {RAW_XML_COMPRESSION},  -- kept only when the version differs from the stored one
            received_at   TIMESTAMP NOT NULL
        );

        CREATE TABLE harvest_windows (
            source_id           VARCHAR NOT NULL,
            window_start        TIMESTAMP NOT NULL,
            window_end          TIMESTAMP NOT NULL,
            partition_key       VARCHAR NOT NULL,
            status              VARCHAR NOT NULL,  -- running|verified|unproven|incomplete|failed
            run_id              VARCHAR,
            attempt_id          VARCHAR,
            attempts            INTEGER NOT NULL DEFAULT 0,
            from_param          VARCHAR,
            until_param         VARCHAR,
            complete_list_size  BIGINT,
            received            BIGINT,
            distinct_received   BIGINT,
            stored              BIGINT,
            created             BIGINT,
            updated             BIGINT,
            unchanged           BIGINT,
            deleted             BIGINT,
            revived             BIGINT,
            stale               BIGINT,
            upserted            BIGINT,           -- created + updated + revived
            pages               INTEGER,
            duplicates          BIGINT,
            cursor_closed       BOOLEAN,
            check_complete      VARCHAR,          -- passed|failed|unproven
            check_duplicates    VARCHAR,          -- passed|failed
            check_cursor        VARCHAR,          -- passed|failed
            response_date       VARCHAR,
            warnings            VARCHAR[],
            error               VARCHAR,
            started_at          TIMESTAMP,
            finished_at         TIMESTAMP,
            seconds             DOUBLE,
            PRIMARY KEY (source_id, window_start)
        );

        CREATE TABLE source_state (
            source_id           VARCHAR PRIMARY KEY,
            watermark           TIMESTAMP,        -- every window before it is verified
            granularity         VARCHAR,
            earliest_datestamp  VARCHAR,
            deleted_record      VARCHAR,
            updated_at          TIMESTAMP NOT NULL
        );
        """,
    ),
    (
        2,
        """
        -- Records we could not read (parse) or map: kept with their raw bytes, never dropped.
        CREATE TABLE quarantine (
            source_id       VARCHAR NOT NULL,
            identifier      VARCHAR,            -- NULL when not even the identifier was readable
            kind            VARCHAR NOT NULL,   -- parse | map
            error           VARCHAR NOT NULL,
            raw             BLOB,
            window_start    TIMESTAMP,
            window_end      TIMESTAMP,
            run_id          VARCHAR,
            attempt_id      VARCHAR,
            page_number     INTEGER,
            quarantined_at  TIMESTAMP NOT NULL
        );
        ALTER TABLE harvest_windows ADD COLUMN restored BIGINT;
        ALTER TABLE harvest_windows ADD COLUMN quarantined BIGINT;
        ALTER TABLE harvest_windows ADD COLUMN repaired_chars BIGINT;
        ALTER TABLE harvest_windows ADD COLUMN retry_not_before TIMESTAMP;  -- deferred windows
        -- Non-conforming behaviour seen and worked around, e.g. 'continuation-needs-arguments'.
        ALTER TABLE source_state ADD COLUMN quirks VARCHAR[];
        """,
    ),
    (
        3,
        """
        -- One row per reconciliation of a source (deletion by absence from the upstream listing).
        -- Its tombstones are in record_history with action 'deleted' and attempt_id 'reconcile:<run_id>'.
        CREATE TABLE reconciliations (
            source_id            VARCHAR NOT NULL,
            run_id               VARCHAR NOT NULL,
            status               VARCHAR NOT NULL,   -- applied | blocked | incomplete
            reason               VARCHAR,
            verb                 VARCHAR,            -- how upstream was listed (ListIdentifiers, ListRecords, ...)
            listed               BIGINT,             -- headers listed upstream, deleted ones included
            upstream_live        BIGINT,             -- distinct identifiers listed as live
            complete_list_size   BIGINT,
            local_live           BIGINT,             -- live records of the source in the catalogue
            missing              BIGINT,             -- live here, not live upstream
            deleted              BIGINT,             -- tombstoned by this reconciliation
            max_delete_fraction  DOUBLE,
            confirmed            BOOLEAN NOT NULL,   -- run config confirm_mass_deletion
            examples             VARCHAR[],          -- some of the missing identifiers
            listing_started_at   TIMESTAMP NOT NULL,
            finished_at          TIMESTAMP NOT NULL
        );
        """,
    ),
    (
        4,
        # A merge finds the stored rows of its window through this one narrow integer column
        # (DuckDB pushes the window's keys into the scan as a Bloom filter), so its cost follows
        # the window, not the catalogue. Rows written before it get theirs here.
        add_record_columns_sql(4)
        + f"UPDATE records SET identifier_key = {identifier_key_sql('identifier')};\n",
    ),
    (
        5,
        """
        -- Windows that split themselves (harvest/split.py): a window that could not finish whole
        -- is harvested as sub-windows. The window's row then sums its sub-windows' counts and
        -- says how it was split; each sub-window (at any depth) has its row here.
        ALTER TABLE harvest_windows ADD COLUMN split_into INTEGER;    -- NULL: harvested whole
        ALTER TABLE harvest_windows ADD COLUMN split_reason VARCHAR;  -- the error that made it split
        CREATE TABLE harvest_window_parts (
            source_id           VARCHAR NOT NULL,
            window_start        TIMESTAMP NOT NULL,   -- the partition's window (harvest_windows)
            part_start          TIMESTAMP NOT NULL,
            part_end            TIMESTAMP NOT NULL,
            depth               INTEGER NOT NULL,     -- 1: a part of the window, 2: a part of a part ...
            part_key            VARCHAR NOT NULL,
            status              VARCHAR NOT NULL,
            split_into          INTEGER,
            split_reason        VARCHAR,
            run_id              VARCHAR,
            attempt_id          VARCHAR,
            attempts            INTEGER NOT NULL DEFAULT 0,
            from_param          VARCHAR,
            until_param         VARCHAR,
            complete_list_size  BIGINT,
            received            BIGINT,
            distinct_received   BIGINT,
            stored              BIGINT,
            created             BIGINT,
            updated             BIGINT,
            unchanged           BIGINT,
            deleted             BIGINT,
            revived             BIGINT,
            restored            BIGINT,
            stale               BIGINT,
            upserted            BIGINT,
            quarantined         BIGINT,
            repaired_chars      BIGINT,
            pages               INTEGER,
            duplicates          BIGINT,
            cursor_closed       BOOLEAN,
            check_complete      VARCHAR,
            check_duplicates    VARCHAR,
            check_cursor        VARCHAR,
            response_date       VARCHAR,
            warnings            VARCHAR[],
            error               VARCHAR,
            retry_not_before    TIMESTAMP,
            started_at          TIMESTAMP,
            finished_at         TIMESTAMP,
            seconds             DOUBLE,
            PRIMARY KEY (source_id, part_start, part_end)
        );
        """,
    ),
    (
        6,
        # The embedded file's `records` loses its PRIMARY KEY (source_id, identifier). DuckDB keeps
        # that key's ART index in memory, loaded as merges touch it: it grew with the catalogue
        # (a 150-record update of a 2,000,000-record source needed more than 128 MB to commit).
        # The merge alone writes `records`, one transaction at a time per file (DuckDB's file
        # lock), and inserts only identifiers it found without a row: the key holds without the
        # index. PostgreSQL keeps its key (concurrent writers; its index lives on disk); DuckLake
        # never had one.
        {EMBEDDED: rebuild_records_without_key_sql(6)},
    ),
    (
        7,
        # PostgreSQL: indexes for the per-window reads PostgreSQL runs itself (store/merge.py,
        # store/preview.py, through postgres_query): a window's stored rows by key, rows still
        # without a key (none, unless written by hand), the history of identifiers without a row,
        # a window's records by datestamp, a source's tombstones. Before, DuckDB's postgres
        # extension copied the whole source for them (it pushes an IN list as its range).
        {POSTGRES: pg_execute_sql(
            "CREATE INDEX IF NOT EXISTS records_source_key ON records (source_id, identifier_key)",
            "CREATE INDEX IF NOT EXISTS records_without_key ON records (source_id) WHERE identifier_key IS NULL",
            "CREATE INDEX IF NOT EXISTS record_history_source_identifier ON record_history (source_id, identifier)",
            "CREATE INDEX IF NOT EXISTS records_source_datestamp ON records (source_id, datestamp)",
            "CREATE INDEX IF NOT EXISTS records_tombstones ON records (source_id) WHERE deleted",
        )},
    ),
    (
        8,
        # The embedded file: each source's row tally and its identifiers stored once without a row,
        # so a window of new records reads no history (store/row_tally.py). No key: DuckDB would
        # keep its index in memory, and only the merge writes them.
        {EMBEDDED: """
        CREATE TABLE record_tallies (
            source_id   VARCHAR NOT NULL,
            row_count   BIGINT NOT NULL,     -- rows of the source after the merge that wrote it
            key_xor     BIGINT NOT NULL,     -- the bit_xor of their identifier_key
            written_at  TIMESTAMP NOT NULL
        );
        CREATE TABLE records_removed (
            source_id   VARCHAR NOT NULL,
            identifier  VARCHAR NOT NULL     -- stored once (its history says so), no row now
        );
        """},
    ),
]


# Connections of one process to one file share a database: two threads (the daemon's sensor
# threads, say) must not both apply a migration.
_MIGRATING = threading.Lock()


def ensure_schema(con: duckdb.DuckDBPyConnection) -> int:
    """Apply the migrations this file has and the database lacks; return the schema version."""
    with _MIGRATING:
        for attempt in range(5):
            try:
                return _ensure_schema(con)
            except duckdb.Error:
                # Workers starting together on a fresh shared catalogue race to create the same
                # tables; the losers find them made on the next pass.
                if attempt == 4 or dialect(con) == EMBEDDED:
                    raise
                time.sleep(0.1 * (attempt + 1))
        raise AssertionError("unreachable")


def _ensure_schema(con: duckdb.DuckDBPyConnection) -> int:
    kind = dialect(con)
    con.execute(
        ddl_for(kind, "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")
    )
    have = _applied(con)
    version = max(have, default=0)
    older_format = kind == EMBEDDED and _in_older_format(con)
    for number, sql in MIGRATIONS:
        if number in have:
            continue
        if isinstance(sql, dict):
            sql = sql.get(kind, "")  # a migration for some backends only: the others just record it
        con.execute("BEGIN TRANSACTION")
        try:
            if older_format:
                sql = sql.replace(RAW_XML_COMPRESSION, RAW_XML_COMPRESSION_OLD_FORMAT)
            if sql.strip():
                con.execute(ddl_for(kind, sql))
            con.execute("INSERT INTO schema_migrations VALUES (?, ?)", [number, utcnow()])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            # A shared catalogue: another worker applied it at the same moment (its CREATE won).
            if kind == EMBEDDED or number not in _applied(con):
                raise
        version = number
    return version


def _in_older_format(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the file predates DuckDB's storage format v1.2, which zstd needs (it would store the
    raw XML uncompressed there). store/connection.py opens it in v1.2; a plain duckdb.connect does not."""
    row = con.execute(
        "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    version = (row[0] or "") if row else ""  # '' for an in-memory database: nothing is stored
    numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    return bool(numbers) and numbers < (1, 2)


def _applied(con: duckdb.DuckDBPyConnection) -> set[int]:
    return {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
