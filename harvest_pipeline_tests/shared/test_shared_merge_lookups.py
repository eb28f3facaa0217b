"""A small window's merge into PostgreSQL reads its own rows, on PostgreSQL's indexes (store/merge.py)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import psycopg
import pytest

from harvest_pipeline.bench.upsert_section import build_big_source, build_staging, merge_into
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.backend import query_in_place
from harvest_pipeline.store.history import record_history
from harvest_pipeline.store.preview import source_has_deletions, windows_record_counts
from harvest_pipeline.store.shared_instance import close_shared_instances
from harvest_pipeline_tests.conftest import day_window, demo_source, records_table

pytestmark = pytest.mark.shared


def _rows_read_by_scans(dsn: str, *tables: str) -> dict[str, int]:
    """Rows PostgreSQL's sequential scans read per table, once this process's sessions have ended
    (a session's counts reach the statistics when it ends)."""
    close_shared_instances()
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 10
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND pid <> pg_backend_pid()").fetchone()[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return dict(conn.execute("SELECT relname, coalesce(seq_tup_read, 0) FROM pg_stat_user_tables"
                                 " WHERE relname = ANY(%s)", [list(tables or ("records", "record_history"))]).fetchall())


def test_a_window_reads_its_own_rows_not_its_source(shared_env, tmp_path, monkeypatch):
    from harvest_pipeline.store import merge

    monkeypatch.setattr(merge, "PG_CHUNK", 1_000)  # the large window's keys in three queries
    env = shared_env("postgres")
    dsn = env["HARVEST_CATALOGUE_PG_DSN"]
    db = tmp_path / "harvest.duckdb"
    stored = 60_000
    build_big_source(db, stored)  # one source of 60,000 records
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO record_history (source_id, identifier, datestamp, deleted, content_hash, action,"
                     " received_at) SELECT source_id, identifier, datestamp, deleted, content_hash, 'created',"
                     " written_at FROM records")  # and its history
        conn.execute("ANALYZE records")
        conn.execute("ANALYZE record_history")
    before = _rows_read_by_scans(dsn)
    # 150 new records (their keys and their history looked up), then 150 new versions.
    _, created, _ = merge_into(db, build_staging(tmp_path / "new.stage", 5_000_000, 5_000_150, version=0), window=1)
    _, updated, _ = merge_into(db, build_staging(tmp_path / "again.stage", 0, 150, version=1), window=2)
    # A window above the small lookup's 2,000 keys: PostgreSQL still looks them up, in chunks.
    _, large, _ = merge_into(db, build_staging(tmp_path / "large.stage", 10_000, 12_500, version=2), window=3)
    after = _rows_read_by_scans(dsn)
    assert (created.created, updated.updated, large.updated) == (150, 150, 2_500)
    read = {table: after.get(table, 0) - before.get(table, 0) for table in ("records", "record_history")}
    # Before the lookups ran in PostgreSQL each merge copied every row's key (an UPDATE of rows
    # without one) and the source's rows in its keys' range: 180,000 rows and more.
    assert read["records"] < stored // 10, read
    assert read["record_history"] < stored // 10, read
    # What the window's materialization reads afterwards: its records' counts, and whether the
    # source has any tombstone (it has none: the answer cannot stop at a first one).
    with connect(db) as con:
        day = datetime(2020, 1, 2)  # the 150 new versions' day
        counts = windows_record_counts(con, [("bench", day, day + timedelta(days=1))])[0]
        has_tombstones = source_has_deletions(con, "bench")
    read_after = _rows_read_by_scans(dsn)
    assert counts == {"live": 150, "deleted": 0} and not has_tombstones
    assert read_after["records"] - after["records"] < stored // 10


def test_a_row_deleted_by_hand_comes_back_from_its_history_as_in_the_embedded_file(demo, tmp_path, monkeypatch, shared_env):
    """Its history (read in PostgreSQL by identifier) says it was stored: the harvest restores it,
    keeping its first sighting, exactly as in the embedded file."""

    def story(db_path) -> dict:
        source = demo_source(demo)
        harvest_window(source, day_window(3), db_path=db_path)
        with connect(db_path) as con:
            identifier, first_seen = con.execute(
                "SELECT identifier, first_seen_at FROM records ORDER BY identifier LIMIT 1").fetchone()
            con.execute("DELETE FROM records WHERE identifier = ?", [identifier])
        status = harvest_window(source, day_window(3), db_path=db_path).status
        with connect(db_path) as con:
            return {
                "status": status,
                "first_seen_kept": con.execute("SELECT first_seen_at FROM records WHERE identifier = ?",
                                               [identifier]).fetchone()[0] == first_seen,
                "actions": [h["action"] for h in record_history(con, "demo", identifier)],
                "records": records_table(db_path),
            }

    monkeypatch.delenv("HARVEST_CATALOGUE", raising=False)
    embedded = story(tmp_path / "embedded" / "harvest.duckdb")
    shared_env("postgres")
    shared = story(tmp_path / "worker" / "harvest.duckdb")
    assert embedded["status"] == "verified" and embedded["first_seen_kept"]
    assert "restored" in embedded["actions"]
    assert shared == embedded


def test_a_window_begins_on_the_ledgers_key_not_by_reading_the_ledger(shared_env, tmp_path):
    """The ledger grows by a row per window; a window's first write runs in PostgreSQL on its key."""
    env = shared_env("postgres")
    dsn = env["HARVEST_CATALOGUE_PG_DSN"]
    db = tmp_path / "harvest.duckdb"
    with connect(db):
        pass  # the schema
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO harvest_windows (source_id, window_start, window_end, partition_key, status, attempts)"
                     " SELECT 's', d, d + interval '1 day', to_char(d, 'YYYY-MM-DD'), 'verified', 1"
                     " FROM generate_series(timestamp '2000-01-01', timestamp '2019-12-31', interval '1 day') d")
        conn.execute("ANALYZE harvest_windows")
    before = _rows_read_by_scans(dsn, "harvest_windows")
    start = datetime(2020, 1, 1)
    for run in ("r1", "r2"):  # begun, then begun again (its second attempt)
        with connect(db) as con:
            ledger.begin_window(con, source_id="s", window_start=start, window_end=start + timedelta(days=1),
                                partition_key="2020-01-01", run_id=run, from_param="2020-01-01", until_param="2020-01-01")
    read = _rows_read_by_scans(dsn, "harvest_windows")["harvest_windows"] - before["harvest_windows"]
    with connect(db) as con:
        row = ledger.get_window(con, "s", start)
    assert (row.status, row.attempts, row.run_id) == ("running", 2, "r2")
    assert read < 700, read  # the ledger holds 7,305 windows


@pytest.mark.parametrize("conforming", ["on", "off"])
def test_values_handed_to_postgresql_as_text_come_back_as_they_were(shared_env, tmp_path, conforming):
    """Identifiers are the servers' strings: quotes, backslashes and non-ASCII survive the literals
    the lookups write, whatever the server's standard_conforming_strings."""
    shared_env("postgres")
    values = ["oai:x:it's", "oai:x:back\\slash\\'quote", "oai:x:ünïcødé", "plain", 42, 1.5,
              datetime(2026, 1, 2, 3, 4, 5, 678000), None]
    with connect(tmp_path / "harvest.duckdb") as con:
        con.execute("BEGIN TRANSACTION")
        con.execute(f"CALL postgres_execute('catalogue', 'SET LOCAL standard_conforming_strings = {conforming}')")
        for value in values:
            assert query_in_place(con, "SELECT ? AS v", [value]).fetchone()[0] == value
        con.execute("COMMIT")


def test_a_postgresql_without_merge_gets_the_same_ledger_through_duckdb(shared_env, tmp_path, monkeypatch):
    """PostgreSQL before 15 has no MERGE: the upserts then run as DuckDB's, with the same rows."""
    from harvest_pipeline.store import backend

    shared_env("postgres")
    monkeypatch.setattr(backend, "_has_merge", lambda con: False)
    db = tmp_path / "harvest.duckdb"
    start = datetime(2020, 1, 1)
    for run in ("r1", "r2"):
        with connect(db) as con:
            ledger.begin_window(con, source_id="s", window_start=start, window_end=start + timedelta(days=1),
                                partition_key="2020-01-01", run_id=run, from_param=None, until_param=None)
            ledger.set_watermark(con, "s", start + timedelta(days=1))
    with connect(db) as con:
        row = ledger.get_window(con, "s", start)
        assert (row.status, row.attempts, row.run_id) == ("running", 2, "r2")
        assert ledger.get_watermark(con, "s") == start + timedelta(days=1)
