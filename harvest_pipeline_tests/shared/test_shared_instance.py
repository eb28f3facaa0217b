"""The shared catalogue attached once per process (store/shared_instance.py), on a real PostgreSQL."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from types import SimpleNamespace

import psycopg
import pytest

from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store import shared_instance
from harvest_pipeline.store.backend import CONFLICTS, run_write

pytestmark = pytest.mark.shared


def _sessions(dsn: str) -> int:
    """The catalogue database's sessions, this one left out."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]


def _counting_opens(monkeypatch) -> list:
    opens = []
    real = shared_instance.open_shared

    def counted(*args, **kwargs):
        opens.append(kwargs.get("pool"))
        return real(*args, **kwargs)

    monkeypatch.setattr(shared_instance, "open_shared", counted)
    return opens


def test_threads_of_a_process_attach_once_and_hold_at_most_the_pool_of_connections(shared_env, tmp_path, monkeypatch):
    env = shared_env("postgres")
    monkeypatch.setenv("HARVEST_CATALOGUE_PG_CONNECTIONS", "3")
    opens = _counting_opens(monkeypatch)
    db = tmp_path / "harvest.duckdb"
    start = threading.Barrier(12)
    errors: list = []

    def worker(n: int) -> None:
        try:
            start.wait()
            # A transaction that holds its connection a while, as a window's merge does.
            with connect(db) as con:
                con.execute("BEGIN TRANSACTION")
                ledger.set_watermark(con, f"s{n}", datetime(2026, 1, 1 + n))
                time.sleep(0.3)
                con.execute("COMMIT")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    peak = 0
    while any(t.is_alive() for t in threads):
        peak = max(peak, _sessions(env["HARVEST_CATALOGUE_PG_DSN"]))
        time.sleep(0.02)
    for t in threads:
        t.join()
    assert not errors
    assert opens == [(3, shared_instance.POOL_WAIT_SECONDS)]  # one attach for the process and its 12 threads
    assert 1 <= peak <= 3
    with connect(db) as con:
        assert [ledger.get_watermark(con, f"s{n}") for n in range(12)] == [datetime(2026, 1, 1 + n) for n in range(12)]
    shared_instance.close_shared_instances()
    assert _sessions(env["HARVEST_CATALOGUE_PG_DSN"]) == 0  # the pool's connections ended with the attach


def test_a_thread_inside_its_own_use_gets_the_same_cursor_and_needs_no_second_connection(shared_env, tmp_path, monkeypatch):
    shared_env("postgres")
    monkeypatch.setenv("HARVEST_CATALOGUE_PG_CONNECTIONS", "1")
    db = tmp_path / "harvest.duckdb"
    with connect(db) as outer:
        outer.execute("BEGIN TRANSACTION")
        ledger.set_watermark(outer, "s", datetime(2026, 3, 1))
        with connect(db) as inner:  # with a pool of one, a second connection would wait forever
            assert inner is outer
            assert ledger.get_watermark(inner, "s") == datetime(2026, 3, 1)  # its own transaction's write
        outer.execute("COMMIT")
    with connect(db) as con:
        assert ledger.get_watermark(con, "s") == datetime(2026, 3, 1)


def test_a_table_another_worker_altered_since_the_attach_is_written_after_one_retry(shared_env, tmp_path):
    """Another worker's migration adds a column after this process attached: the cached definition
    fails the write once, and run_write runs it again on a new attach."""
    env = shared_env("postgres")
    db = tmp_path / "harvest.duckdb"
    with connect(db) as con:
        ledger.set_watermark(con, "before", datetime(2026, 1, 1))  # attached, definitions cached
    with psycopg.connect(env["HARVEST_CATALOGUE_PG_DSN"], autocommit=True) as conn:
        conn.execute("ALTER TABLE harvest_windows ADD COLUMN added_by_a_later_version INTEGER")
    before = CONFLICTS.conflicts
    window = SimpleNamespace(start=datetime(2026, 1, 1), end=datetime(2026, 1, 2), key="2026-01-01")

    def fail(con):  # a MERGE DuckDB writes itself (its COPY has the cached definition's columns)
        ledger.fail_window(con, source_id="s", window=window, error="the server said no")

    run_write(lambda: connect(db), fail, what="test", sleep=lambda s: None)
    with connect(db) as con:
        assert ledger.get_window(con, "s", window.start).status == "failed"
    assert CONFLICTS.conflicts - before == 1  # the first try met the cached definition


def test_a_pool_size_that_is_not_a_number_fails_clearly(shared_env, tmp_path, monkeypatch):
    shared_env("postgres")
    monkeypatch.setenv("HARVEST_CATALOGUE_PG_CONNECTIONS", "lots")
    from harvest_pipeline.errors import HarvestError

    with pytest.raises(HarvestError, match="HARVEST_CATALOGUE_PG_CONNECTIONS"):
        with connect(tmp_path / "harvest.duckdb"):
            pass
