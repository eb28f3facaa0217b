"""A source's lock across machines (a shared catalogue): workers that share no folder still hold a
source one at a time, through an advisory lock on the catalogue's PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.harvest.source_lock import SourceLock
from harvest_pipeline_tests.harvest.test_source_lock import ROOT, hold_in_child

pytestmark = pytest.mark.shared


def _tries(db_path, source_id: str, env: dict, timeout: float = 0.6) -> bool:
    """Whether another process (another machine: its own catalogue folder) takes the lock in time."""
    code = ("import sys; from harvest_pipeline.harvest.source_lock import SourceLock; "
            "print(SourceLock(sys.argv[1], sys.argv[2]).acquire(timeout=float(sys.argv[3])))")
    out = subprocess.run([sys.executable, "-c", code, str(db_path), source_id, str(timeout)], capture_output=True,
                         text=True, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


def test_two_machines_hold_a_source_one_at_a_time(shared_env, tmp_path):
    env = shared_env()
    here, there = tmp_path / "m1" / "harvest.duckdb", tmp_path / "m2" / "harvest.duckdb"  # no shared folder
    lock = SourceLock(here, "a")
    assert lock.acquire(timeout=2)
    assert not _tries(there, "a", env)
    assert _tries(there, "b", env)  # another source is free
    lock.release()
    assert _tries(there, "a", env, timeout=2)


def test_a_process_holds_its_sources_on_one_session(shared_env, pg_server, tmp_path):
    """A batch run holds a hundred sources at once: one connection each would use up the server's."""
    import psycopg

    env = shared_env()
    locks = [SourceLock(tmp_path / "m1" / "harvest.duckdb", f"s{i}") for i in range(5)]
    assert all(lock.acquire(timeout=2) for lock in locks)
    with psycopg.connect(env["HARVEST_CATALOGUE_PG_DSN"], autocommit=True) as con:
        sessions, held = con.execute(
            "SELECT count(DISTINCT a.pid), count(l.*) FROM pg_stat_activity a"
            " JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory'"
            " WHERE a.application_name = 'harvest-source-lock' AND a.datname = current_database()"
        ).fetchone()
    assert (sessions, held) == (1, 5)
    for lock in locks:
        lock.release()
    assert _tries(tmp_path / "m2" / "harvest.duckdb", "s0", env, timeout=2)  # released: free on another machine


def test_a_killed_worker_frees_its_source_on_every_machine(shared_env, tmp_path):
    env = shared_env()
    child = hold_in_child(tmp_path / "m1" / "harvest.duckdb", "a", env)
    lock = SourceLock(tmp_path / "m2" / "harvest.duckdb", "a")
    try:
        assert not lock.acquire(timeout=0.6)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert lock.acquire(timeout=10)  # PostgreSQL ended the dead worker's session, and its lock
    lock.release()


def test_an_unreachable_database_is_a_clear_error_without_the_password(pg_server, monkeypatch, tmp_path):
    monkeypatch.setenv("HARVEST_CATALOGUE", "postgres")
    monkeypatch.setenv("HARVEST_CATALOGUE_PG_DSN", "host=127.0.0.1 port=1 dbname=x user=u password=s3cret connect_timeout=2")
    with pytest.raises(HarvestError) as err:
        SourceLock(tmp_path / "harvest.duckdb", "a").acquire(timeout=1)
    text = f"{err.value} {err.value.hint}"
    assert "source's lock" in text and "HARVEST_CATALOGUE_PG_DSN" in text and "s3cret" not in text
