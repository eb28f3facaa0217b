"""Stopping `harvest-pipeline harvest` with SIGTERM / SIGINT: a real process against a slow demo."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from harvest_pipeline.demo.process import start_demo_provider
from harvest_pipeline.store import connect
from harvest_pipeline_tests.conftest import day_window, demo_options

pytestmark = pytest.mark.integration


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "harvest_pipeline.cli", *args]


def _signal_after(proc, demo, requests: int, signum, *, group: bool = False) -> tuple[str, int]:
    """Send `signum` once the provider served `requests` requests (to the process's whole group
    with `group`, as Ctrl-C in a terminal does); (output, requests after it)."""
    try:
        deadline = time.monotonic() + 120
        while demo.faults()["requests"] < requests:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the harvest never reached the provider"
            time.sleep(0.05)
        at_signal = demo.faults()["requests"]
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return out, demo.faults()["requests"] - at_signal


def _env(tmp_path) -> dict:
    return {
        **os.environ,
        "HARVEST_SOURCES_FILE": str(tmp_path / "sources.yaml"),
        "HARVEST_DUCKDB_PATH": str(tmp_path / "data" / "harvest.duckdb"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_at_the_next_page_and_a_rerun_resumes(tmp_path, sources_file, signum, code):
    # 6 windows of 60 records, 3 pages each, every answer 0.3 s late: a harvest of ~6 s.
    with start_demo_provider(**demo_options(days=8, records_per_day=60, page_size=25, slow_ms=300)) as demo:
        sources_file(demo=demo)
        env = _env(tmp_path)
        first, last = day_window(7), day_window(2)
        args = _cli("harvest", "demo", "--from", first.key, "--until", last.key)
        proc = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # After the first window's pages began: Identify and the first ListRecords come first.
        out, after = _signal_after(proc, demo, 3, signum)
        assert proc.returncode == code, out
        assert after <= 2, f"{after} requests after the signal\n{out}"
        assert "stopped by SIG" in out and "run the same command again" in out, out
        assert "Error occurred while executing op" not in out and "Traceback" not in out, out

        # The stopped window is not `failed`: a rerun takes it over from its cursor.
        status = subprocess.run(_cli("status"), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr
        assert "failed" not in status.stdout, status.stdout

        demo.set_options(slow_ms=0)
        again = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert again.stdout.count(": verified") >= 1 and "FAILED" not in again.stdout, again.stdout
        with connect(tmp_path / "data" / "harvest.duckdb") as con:
            stored = con.execute(
                "SELECT count(*), count(DISTINCT identifier) FROM records WHERE source_id = 'demo'"
            ).fetchone()
        expected = demo.stats(from_=first.start, until=last.end - timedelta(seconds=1))["total"]
        assert stored == (expected, expected)


def test_a_signal_stops_a_full_harvest_at_the_next_page_and_a_rerun_resumes(tmp_path, sources_file):
    # The whole source in one listing: 8 days of 60 records, pages of 25 (20 pages), 0.3 s each.
    with start_demo_provider(**demo_options(days=8, records_per_day=60, page_size=25, slow_ms=300)) as demo:
        sources_file(demo=demo)
        env = _env(tmp_path)
        args = _cli("harvest", "demo", "--full")
        proc = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, after = _signal_after(proc, demo, 4, signal.SIGINT)
        assert proc.returncode == 130, out
        assert after <= 2, f"{after} requests after the signal\n{out}"
        assert "stopped by SIGINT" in out and "run the same command again" in out, out
        assert "Error occurred while executing op" not in out and "Traceback" not in out and "FAILED" not in out, out

        served = demo.faults()["requests"]
        demo.set_options(slow_ms=0)
        again = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        expected = demo.stats()["total"]
        assert f"{expected} records of completeListSize {expected}" in again.stdout and "verified" in again.stdout
        # It resumed: the pages committed before the stop were not fetched again.
        assert demo.faults()["requests"] - served < 20, again.stdout
        with connect(tmp_path / "data" / "harvest.duckdb") as con:
            stored = con.execute("SELECT count(*), count(DISTINCT identifier) FROM records").fetchone()
        assert stored == (expected, expected)


def test_a_signal_stops_a_selected_reharvest_after_the_current_record_and_merges_those_fetched(tmp_path, sources_file):
    with start_demo_provider(**demo_options(days=2, records_per_day=20, page_size=25, slow_ms=0)) as demo:
        sources_file(demo=demo)
        env = _env(tmp_path)
        listed = subprocess.run(_cli("harvest", "demo", "--full"), env=env, cwd=tmp_path, capture_output=True,
                                text=True, timeout=300)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        with connect(tmp_path / "data" / "harvest.duckdb") as con:
            identifiers = [r[0] for r in con.execute(
                "SELECT identifier FROM records WHERE NOT deleted ORDER BY identifier LIMIT 8").fetchall()]
        demo.set_options(slow_ms=400)
        proc = subprocess.Popen(_cli("harvest", "demo", *[a for i in identifiers for a in ("--identifier", i)]),
                                env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        served = demo.faults()["requests"]
        out, after = _signal_after(proc, demo, served + 2, signal.SIGTERM)
        assert proc.returncode == 143, out
        assert after <= 1, f"{after} requests after the signal\n{out}"
        assert "stopped by SIGTERM" in out and "Traceback" not in out and "FAILED" not in out, out
        fetched = [i for i in identifiers if f"{i}  unchanged" in out]
        not_fetched = [i for i in identifiers if f"{i}  NOT FETCHED" in out]
        assert fetched and not_fetched and len(fetched) + len(not_fetched) == len(identifiers), out
        with connect(tmp_path / "data" / "harvest.duckdb") as con:
            merged = {r[0] for r in con.execute(
                "SELECT identifier FROM record_history WHERE attempt_id LIKE 'selected:%'").fetchall()}
        assert merged == set(fetched)


def test_ctrl_c_in_a_terminal_stops_without_a_traceback(tmp_path, sources_file):
    # A terminal sends SIGINT to its whole foreground process group, so Dagster's helpers (the
    # compute logs' `tail` and its Python watcher) got it too and printed KeyboardInterrupt
    # tracebacks, and Dagster's console logger printed the stopped run's failure with a stack.
    # The project's instance config, as in a user's clone (the CLI copies it into DAGSTER_HOME).
    shutil.copy(Path(__file__).resolve().parents[1] / "dagster.yaml", tmp_path / "dagster.yaml")
    with start_demo_provider(**demo_options(days=8, records_per_day=60, page_size=25, slow_ms=300)) as demo:
        sources_file(demo=demo)
        first, last = day_window(7), day_window(2)
        log = tmp_path / "harvest.log"
        with open(log, "w") as terminal:
            proc = subprocess.Popen(_cli("harvest", "demo", "--from", first.key, "--until", last.key),
                                    env=_env(tmp_path), cwd=tmp_path, stdout=terminal, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            # Well into the run's step: the server facts' requests come before the run starts.
            _signal_after(proc, demo, 7, signal.SIGINT, group=True)
        out = log.read_text()
        assert proc.returncode == 130, out
        assert "stopped by SIGINT" in out, out
        for noise in ("Traceback", "KeyboardInterrupt", "dagster - ERROR", "Stack Trace"):
            assert noise not in out, out
