"""What the `harvest-pipeline` command says when things go wrong, run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harvest_pipeline.store import connect
from harvest_pipeline.store.staging import StagingWindow, staging_path
from harvest_pipeline_tests.conftest import day_window

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(tmp_path, sources_file, demo):
    sources_file(demo=demo)
    return {
        **os.environ,
        "HARVEST_SOURCES_FILE": str(tmp_path / "sources.yaml"),
        "HARVEST_DUCKDB_PATH": str(tmp_path / "data" / "harvest.duckdb"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }


def _cli(*args, env, cwd, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "harvest_pipeline.cli", *args], env=env, cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw,
    )


def test_a_run_that_loses_the_window_lock_says_why_and_leaves_the_ledger_alone(cli_env, tmp_path):
    db = tmp_path / "data" / "harvest.duckdb"
    window = day_window(2)
    with connect(db):
        pass  # the catalogue exists, with no row for the window
    # This test holds the window as another harvest would.
    with StagingWindow(staging_path(db, "demo", window.start)):
        out, err = _cli("harvest", "demo", "--from", window.key, "--until", window.key, env=cli_env, cwd=tmp_path).communicate(timeout=300)
    lines = [line for line in out.splitlines() if line.startswith("[1/1]")]
    assert len(lines) == 1, out + err
    assert "FAILED: window staging file" in lines[0] and "another run is harvesting this window right now" in lines[0], lines
    assert "Error occurred while executing op" not in out
    with connect(db) as con:
        assert con.execute("SELECT count(*) FROM harvest_windows").fetchone()[0] == 0


@pytest.mark.parametrize("command", [("status",), ("probe", "{url}")])
def test_output_into_a_closed_pipe_ends_quietly(cli_env, tmp_path, demo, command):
    """`status | head`: the reader leaves before the command has written; no traceback."""
    proc = _cli(*(part.format(url=demo.url) for part in command), env=cli_env, cwd=tmp_path)
    proc.stdout.close()  # the reader has gone, as `head` does after its lines
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert proc.returncode == 1
