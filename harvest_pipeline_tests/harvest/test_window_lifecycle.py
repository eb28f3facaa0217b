"""A window's life across runs: deferred by the server's clock then recovered, and two runs of
one window where only the run holding the window's lock may write its ledger row."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from harvest_pipeline.demo.process import start_demo_provider
from harvest_pipeline.errors import DeferredError
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.staging import open_staging_files, window_is_locked
from harvest_pipeline_tests.conftest import demo_options, today, day_window, demo_source, window_stats

pytestmark = pytest.mark.integration
HARVEST_ONCE = Path(__file__).with_name("harvest_once.py")


def _ledger_row(db_path, window) -> dict:
    with connect(db_path) as con:
        cur = con.execute(
            "SELECT * FROM harvest_windows WHERE source_id = 'demo' AND window_start = ?",
            [window.start.replace(tzinfo=None)],
        )
        row = cur.fetchone()
        return dict(zip([d[0] for d in cur.description], row))


def _live_count(db_path) -> int:
    with connect(db_path) as con:
        return con.execute("SELECT count(*) FROM records WHERE NOT deleted").fetchone()[0]


def test_a_window_deferred_by_the_servers_clock_asks_again_and_recovers(db_path):
    """The server's clock stands at 06:00 of yesterday: yesterday's window is deferred. Once the
    clock has moved past the window's end, the next run must ask the server again, fetch the
    records it could not list before, and verify the window."""
    window = day_window(1)
    six_am = window.start + timedelta(hours=6)
    with start_demo_provider(**demo_options(now=six_am)) as demo:
        source = demo_source(demo, overlap_seconds=3600)
        with pytest.raises(DeferredError, match="server's clock"):
            harvest_window(source, window, db_path=db_path)
        deferred = _ledger_row(db_path, window)
        assert deferred["status"] == ledger.DEFERRED
        assert deferred["retry_not_before"] is not None
        assert deferred["response_date"] == six_am.strftime("%Y-%m-%dT%H:%M:%SZ")
        seen_at_six = _live_count(db_path)

        demo.set_options(now=today() + timedelta(hours=1))
        requests_before = demo.faults()["requests"]
        report = harvest_window(source, window, db_path=db_path)
        assert demo.faults()["requests"] > requests_before  # the server was asked again
        assert report.status == ledger.VERIFIED
        expected = window_stats(demo, window)
        assert report.complete_list_size >= expected["total"]
        with connect(db_path) as con:
            in_window = con.execute(
                "SELECT count(*) FROM records WHERE datestamp >= ? AND datestamp < ?",
                [window.start.replace(tzinfo=None), window.end.replace(tzinfo=None)],
            ).fetchone()[0]
        assert in_window == expected["total"] > seen_at_six
        row = _ledger_row(db_path, window)
        assert (row["status"], row["error"], row["retry_not_before"]) == (ledger.VERIFIED, None, None)
        assert row["response_date"] == (today() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert open_staging_files(db_path) == []


def _harvest_child(url, db_path, window):
    env = {k: v for k, v in os.environ.items() if k != "HARVEST_CRASHPOINT"}
    return subprocess.Popen(
        [sys.executable, str(HARVEST_ONCE), url, str(db_path), window.start.isoformat()],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_the_run_that_loses_the_windows_lock_leaves_the_ledger_row_to_the_winner(tmp_path):
    """Two runs of one window: the second waits for the window's lock, gives up, and writes
    nothing; the row names the run that harvested the window, with no error."""
    db = tmp_path / "h.duckdb"
    window = day_window(2)
    # Small, slow pages: the first run holds the window far longer than the loser's 5 s wait.
    with start_demo_provider(**demo_options(page_size=5), slow_ms=700) as demo:
        first = _harvest_child(demo.url, db, window)
        deadline = time.monotonic() + 60
        while not (open_staging_files(db) and window_is_locked(open_staging_files(db)[0])):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        second = _harvest_child(demo.url, db, window)
        lost_out, lost_err = second.communicate(timeout=120)
        won_out, won_err = first.communicate(timeout=120)
        expected = window_stats(demo, window)
    assert first.returncode == 0, won_err
    assert second.returncode != 0 and "another run is harvesting this window" in lost_err, lost_out + lost_err
    status, received, winner_run = won_out.split()
    assert (status, int(received)) == (ledger.VERIFIED, expected["total"])
    row = _ledger_row(db, window)
    assert (row["status"], row["run_id"], row["error"], row["attempts"]) == (ledger.VERIFIED, winner_run, None, 1)


def test_records_the_overlap_asked_for_are_not_reported_as_outside_the_window(shared_demo, db_path):
    """`overlap_seconds` asks for the hours before the window on purpose: what comes back from
    there is what was asked for, not a server ignoring the dates."""
    window = day_window(3)
    source = demo_source(shared_demo, overlap_seconds=6 * 3600)
    report = harvest_window(source, window, db_path=db_path)
    with connect(db_path) as con:
        through_overlap = con.execute(
            "SELECT count(*) FROM records WHERE datestamp < ?", [window.start.replace(tzinfo=None)]
        ).fetchone()[0]
    assert through_overlap > 0  # the overlap did bring records from before the window
    assert report.status == ledger.VERIFIED
    assert report.outside_window == 0
    assert not any("outside the requested window" in w for w in report.warnings), report.warnings
