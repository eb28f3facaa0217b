"""SIGKILL at every named point of a window harvest, and two harvests of one window at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.store import connect, ledger
from harvest_pipeline_tests.conftest import day_window, demo_source, records_table

pytestmark = pytest.mark.integration
HARVEST_ONCE = Path(__file__).with_name("harvest_once.py")


def _child(url, db, window, crashpoint=None, extra_env=None, **kw):
    env = {**os.environ, **(extra_env or {})}
    env.pop("HARVEST_CRASHPOINT", None)
    if crashpoint:
        env["HARVEST_CRASHPOINT"] = crashpoint
    return subprocess.Popen(
        [sys.executable, str(HARVEST_ONCE), url, str(db), window.start.isoformat()],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw,
    )


@pytest.fixture(scope="module")
def clean_table(shared_demo, tmp_path_factory):
    db = tmp_path_factory.mktemp("clean") / "h.duckdb"
    harvest_window(demo_source(shared_demo), day_window(2, shared_demo.today), db_path=db)
    return records_table(db)


@pytest.mark.parametrize("point", ["after-fetch:2", "mid-page-write:2", "mid-merge", "after-merge"])
def test_sigkill_at_any_point_then_rerun_gives_the_uninterrupted_table(shared_demo, tmp_path, clean_table, point):
    db = tmp_path / "h.duckdb"
    # One page per staging commit, so that every point is passed more than once.
    proc = _child(shared_demo.url, db, day_window(2), crashpoint=point, extra_env={"HARVEST_STAGING_COMMIT_ROWS": "1"})
    proc.wait(timeout=120)
    assert proc.returncode == -9, proc.stderr.read()  # it really died there, by SIGKILL
    report = harvest_window(demo_source(shared_demo), day_window(2), db_path=db)
    assert report.status == ledger.VERIFIED
    assert records_table(db) == clean_table
    with connect(db) as con:
        # Nothing was double-counted: one ledger row, one current row per identifier.
        assert con.execute("SELECT count(*) FROM harvest_windows").fetchone()[0] == 1
        assert con.execute("SELECT count(*) - count(DISTINCT identifier) FROM records").fetchone()[0] == 0


def test_two_runs_of_one_window_at_once_never_double_count(shared_demo, tmp_path, clean_table):
    db = tmp_path / "h.duckdb"
    first, second = (_child(shared_demo.url, db, day_window(2)) for _ in range(2))
    outs = [p.communicate(timeout=180) for p in (first, second)]
    codes = sorted(p.returncode for p in (first, second))
    assert codes[0] == 0
    if codes[1] != 0:  # the loser waited for the staging file, then said why
        err = next(e for (o, e), p in zip(outs, (first, second)) if p.returncode)
        assert "another run is harvesting this window" in err
    assert records_table(db) == clean_table
    with connect(db) as con:
        # Whichever way the runs met, every version was applied once (created, or a tombstone
        # 'deleted'), and a second successful run found everything unchanged.
        applied = con.execute(
            "SELECT count(*), count(DISTINCT identifier) FROM record_history WHERE action IN ('created', 'deleted')"
        ).fetchone()
        assert applied == (len(clean_table), len(clean_table))
        actions = {a for (a,) in con.execute("SELECT DISTINCT action FROM record_history").fetchall()}
        assert actions <= {"created", "deleted", "unchanged"}
        assert ("unchanged" in actions) == (codes[1] == 0)
        assert con.execute("SELECT count(*) FROM harvest_windows").fetchone()[0] == 1


def test_a_reader_holding_the_catalogue_makes_the_harvest_wait_not_fail(shared_demo, tmp_path, clean_table):
    db = tmp_path / "h.duckdb"
    with connect(db):
        pass  # create the file and schema
    reader = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], read_only=True); "
         "print('open', flush=True); time.sleep(3); c.close()", str(db)],
        stdout=subprocess.PIPE, text=True,
    )
    assert reader.stdout.readline().strip() == "open"
    started = time.monotonic()
    report = harvest_window(demo_source(shared_demo), day_window(2), db_path=db)
    reader.wait(timeout=30)
    assert report.status == ledger.VERIFIED
    assert time.monotonic() - started >= 1  # it had to wait for the reader's lock
    assert records_table(db) == clean_table


def test_set_names_and_source_ids_cannot_inject(shared_demo, tmp_path):
    hostile = "x'); DROP TABLE records; --"
    source = demo_source(shared_demo, set=hostile)
    report = harvest_window(source, day_window(2), db_path=tmp_path / "h.duckdb")
    assert report.counts.received == 0  # an unknown set: noRecordsMatch, nothing else happened
    with duckdb.connect(str(tmp_path / "h.duckdb")) as con:
        assert con.execute("SELECT count(*) FROM records").fetchone()[0] == 0
    with pytest.raises(Exception, match="lowercase"):
        demo_source(shared_demo, id="../../etc")


def test_status_tells_an_interrupted_window_from_a_running_one(shared_demo, tmp_path):
    from harvest_pipeline.store.staging import StagingWindow, open_staging_files, window_is_locked

    db = tmp_path / "h.duckdb"
    proc = _child(shared_demo.url, db, day_window(2), crashpoint="after-fetch:2")
    proc.wait(timeout=120)
    [staging] = open_staging_files(db)
    assert not window_is_locked(staging)  # the killed run left its cursor, not its lock
    with StagingWindow(staging):
        assert window_is_locked(staging)


def test_killed_between_a_page_file_and_its_cursor_fetches_only_that_page_again(tunable_demo, tmp_path):
    from harvest_pipeline.store.staging import open_staging_files

    window, source = day_window(2), demo_source(tunable_demo)
    before = tunable_demo.faults()["requests"]
    clean = harvest_window(source, window, db_path=tmp_path / "clean" / "h.duckdb")
    clean_requests = tunable_demo.faults()["requests"] - before  # Identify and every page
    assert clean.pages >= 3

    db = tmp_path / "h.duckdb"
    proc = _child(tunable_demo.url, db, window, crashpoint="mid-page-write:2", extra_env={"HARVEST_STAGING_COMMIT_ROWS": "1"})
    proc.wait(timeout=120)
    assert proc.returncode == -9, proc.stderr.read()
    [staging] = open_staging_files(db)
    assert len(list(staging.glob("rows-[0-9]*.parquet"))) == 2  # page 2's rows reached the disk, its cursor did not

    before = tunable_demo.faults()["requests"]
    report = harvest_window(source, window, db_path=db)
    assert report.resumed and report.restarts == 0 and report.status == ledger.VERIFIED
    # Page 1 was committed: not asked for again; page 2 was, once.
    assert tunable_demo.faults()["requests"] - before == clean_requests - 1
    assert records_table(db) == records_table(tmp_path / "clean" / "h.duckdb")
    assert open_staging_files(db) == []
