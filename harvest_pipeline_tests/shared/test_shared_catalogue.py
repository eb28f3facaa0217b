"""The shared catalogue (PostgreSQL, DuckLake) behaves as the embedded file: same rows, same rules."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timedelta

import pytest

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.backend import CONFLICTS, catalogue_settings, open_shared, run_write
from harvest_pipeline.store.connection import connection_config
from harvest_pipeline.store.history import record_history
from harvest_pipeline.store.schema import MIGRATIONS
from harvest_pipeline_tests.conftest import day_window, demo_source, records_table

pytestmark = pytest.mark.shared

LEDGER = "SELECT source_id, window_start, status, attempts, received, created, updated, unchanged, deleted FROM harvest_windows ORDER BY 1, 2"


def _harvest_story(provider, db_path) -> dict:
    """Two windows, a re-run (unchanged), an upstream deletion and update, the window again."""
    source = demo_source(provider)
    reports = [harvest_window(source, day_window(d), db_path=db_path).status for d in (3, 2, 3)]
    with connect(db_path) as con:
        ids = [r[0] for r in con.execute(
            "SELECT identifier FROM records WHERE NOT deleted AND window_start = ? ORDER BY identifier LIMIT 2",
            [day_window(2).start.replace(tzinfo=None)]).fetchall()]
    late = day_window(2).end - timedelta(seconds=1)  # still inside the window, after every creation
    provider.delete(ids[0], at=late)
    provider.touch(ids[1], at=late)
    reports.append(harvest_window(source, day_window(2), db_path=db_path).status)
    with connect(db_path) as con:
        return {
            "reports": reports,
            "records": records_table(db_path),
            "ledger": con.execute(LEDGER).fetchall(),
            "history": [(h["action"], h["datestamp"]) for h in record_history(con, "demo", ids[1])],
            "state": con.execute("SELECT source_id, granularity, earliest_datestamp FROM source_state").fetchall(),
        }


@pytest.mark.parametrize("kind", ["postgres", "ducklake"])
def test_a_shared_catalogue_ends_equal_to_the_embedded_file(kind, demo, tmp_path, monkeypatch, shared_env):
    monkeypatch.delenv("HARVEST_CATALOGUE", raising=False)
    embedded = _harvest_story(demo, tmp_path / "embedded" / "harvest.duckdb")
    shared_env(kind)
    # The same provider has moved on (deletion, update): start a second one for the same story.
    from harvest_pipeline.demo.process import start_demo_provider
    from harvest_pipeline_tests.conftest import demo_options

    with start_demo_provider(**demo_options()) as fresh:
        shared = _harvest_story(fresh, tmp_path / "worker" / "harvest.duckdb")
    assert shared["reports"] == embedded["reports"] == ["verified"] * 4
    assert shared["records"] == embedded["records"]
    assert shared["ledger"] == embedded["ledger"]
    assert shared["history"] == embedded["history"]
    assert shared["state"] == embedded["state"]
    assert [a for a, _ in shared["history"]] == ["created", "updated"]
    # Nothing of it went to the local file: the worker's folder holds no catalogue.
    assert not (tmp_path / "worker" / "harvest.duckdb").exists()


def test_a_write_that_lost_a_conflict_runs_again(shared_env, tmp_path):
    """Two writers update the same ledger row: PostgreSQL refuses the later one, run_write retries it."""
    shared_env("postgres")
    db = tmp_path / "harvest.duckdb"
    with connect(db) as con:
        ledger.set_watermark(con, "s", datetime(2026, 1, 1))
    attempts = []

    def body(con):
        attempts.append(con.execute("SELECT watermark FROM source_state WHERE source_id = 's'").fetchone()[0])
        if len(attempts) == 1:
            # Another worker moves the row after this transaction's snapshot was taken.
            other = open_shared(catalogue_settings(), connection_config(db))
            ledger.set_watermark(other, "s", datetime(2026, 2, 1))
            other.close()
        ledger.set_watermark(con, "s", max(attempts[-1], datetime(2026, 1, 15)))
        return len(attempts)

    before = CONFLICTS.conflicts
    assert run_write(lambda: connect(db), body, what="test", sleep=lambda s: None) == 2
    assert CONFLICTS.conflicts == before + 1
    assert attempts == [datetime(2026, 1, 1), datetime(2026, 2, 1)]
    with connect(db) as con:
        assert ledger.get_watermark(con, "s") == datetime(2026, 2, 1)  # the second writer's wins: it saw it


def test_a_wrong_connection_fails_clearly_and_never_shows_the_password(pg_server, monkeypatch, tmp_path):
    monkeypatch.setenv("HARVEST_CATALOGUE", "postgres")
    monkeypatch.setenv("HARVEST_CATALOGUE_PG_DSN", f"host=127.0.0.1 port={pg_server.port} dbname=absent user=nobody password=s3cr3t-value")
    with pytest.raises(HarvestError) as err:
        with connect(tmp_path / "harvest.duckdb"):
            pass
    assert "s3cr3t-value" not in str(err.value)
    assert "could not open the shared catalogue" in str(err.value) and "HARVEST_CATALOGUE_PG_DSN" in str(err.value)


def test_many_processes_create_the_schema_at_once(shared_env, tmp_path):
    """Workers starting together on an empty catalogue: every one ends with the whole schema."""
    env = shared_env("postgres")
    code = textwrap.dedent("""
        import sys
        from harvest_pipeline.store import connect
        with connect(sys.argv[1]) as con:
            print(con.execute("SELECT max(version) FROM schema_migrations").fetchone()[0])
    """)
    import os

    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"w{i}" / "harvest.duckdb")],
                              env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [e for _, e in outs]
    assert len({o.strip() for o, _ in outs}) == 1
    with connect(tmp_path / "harvest.duckdb") as con:
        n = len(MIGRATIONS)
        assert con.execute("SELECT count(*), count(DISTINCT version) FROM schema_migrations").fetchone() == (n, n)
