"""A fresh Dagster home opened by several processes at once (dagster-io/dagster#27390)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import pytest

from harvest_pipeline_tests.conftest import day_window

pytestmark = pytest.mark.integration

# Each child pays for `import dagster` first, then waits for the same start signal, so the
# instance storage is created by all of them within a few milliseconds, as when a sensor tick,
# the UI and a CLI run start together on a new home.
_OPEN_HOME = """
import sys, time
from pathlib import Path
import dagster
from harvest_pipeline.home import ensure_dagster_home
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.001)
ensure_dagster_home()
with dagster.DagsterInstance.get():
    pass
"""


def _alembic_versions(home) -> dict[str, int]:
    counts = {}
    for db in sorted(home.rglob("*.db")):
        with sqlite3.connect(db) as con:
            if con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'alembic_version'").fetchone()[0]:
                counts[db.relative_to(home).as_posix()] = con.execute("SELECT count(*) FROM alembic_version").fetchone()[0]
    return counts


def test_concurrent_first_runs_on_a_fresh_home_leave_one_alembic_version(tmp_path, sources_file, demo):
    sources_file(demo=demo)
    home = tmp_path / "dagster_home"
    env = {
        **os.environ,
        "HARVEST_SOURCES_FILE": str(tmp_path / "sources.yaml"),
        "HARVEST_DUCKDB_PATH": str(tmp_path / "data" / "harvest.duckdb"),
        "DAGSTER_HOME": str(home),
    }
    go = tmp_path / "go"
    children = [
        subprocess.Popen([sys.executable, "-c", _OPEN_HOME, str(go)], env=env, cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    time.sleep(8)  # every child has imported dagster and is polling for the signal
    go.touch()
    outcomes = [(c.wait(timeout=120), c.stderr.read()) for c in children]
    assert [code for code, _ in outcomes] == [0] * len(children), outcomes
    versions = _alembic_versions(home)
    assert "history/runs.db" in versions
    assert set(versions.values()) == {1}, versions

    window = day_window(2)
    done = subprocess.run(
        [sys.executable, "-m", "harvest_pipeline.cli", "harvest", "demo", "--from", window.key, "--until", window.key],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1/1 windows ok" in done.stdout
