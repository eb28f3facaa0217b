"""A source's lock across machines (a shared catalogue): workers that share no folder still hold a
source one at a time, through an advisory lock on the catalogue's PostgreSQL."""

from __future__ import annotations

import signal

import pytest

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.harvest.source_lock import SourceLock
from harvest_pipeline_tests.harvest.test_source_lock import hold_in_child

pytestmark = pytest.mark.shared


def test_two_machines_hold_a_source_one_at_a_time(shared_env, tmp_path):
    shared_env()
    # Each lock has its own catalogue folder, as on two machines: no flock is shared.
    here, there = SourceLock(tmp_path / "m1" / "harvest.duckdb", "a"), SourceLock(tmp_path / "m2" / "harvest.duckdb", "a")
    other = SourceLock(tmp_path / "m2" / "harvest.duckdb", "b")
    assert here.acquire(timeout=2)
    assert not there.acquire(timeout=0.6)
    assert other.acquire(timeout=2)  # another source is free
    here.release()
    assert there.acquire(timeout=2)
    there.release()
    other.release()


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
