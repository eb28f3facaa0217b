"""Small helpers shared by the lifecycle tests."""

from __future__ import annotations

import os
import subprocess
import sys

from harvest_pipeline.store import connect


def run_cli(*args, env, cwd, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "harvest_pipeline.cli", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )


def cli_env(tmp_path, db_path) -> dict:
    return {
        **os.environ,
        "HARVEST_SOURCES_FILE": str(tmp_path / "sources.yaml"),
        "HARVEST_DUCKDB_PATH": str(db_path),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }


def history_actions(db_path, identifier: str, source_id: str = "demo") -> list[tuple]:
    with connect(db_path) as con:
        return con.execute(
            "SELECT action, attempt_id, run_id FROM record_history WHERE source_id = ? AND identifier = ?"
            " ORDER BY received_at, rowid",
            [source_id, identifier],
        ).fetchall()


def live_identifiers(db_path, source_id: str = "demo") -> set[str]:
    with connect(db_path) as con:
        return {
            r[0]
            for r in con.execute(
                "SELECT identifier FROM records WHERE source_id = ? AND NOT deleted", [source_id]
            ).fetchall()
        }


def record_row(db_path, identifier: str, source_id: str = "demo") -> dict | None:
    with connect(db_path) as con:
        cur = con.execute("SELECT * FROM records WHERE source_id = ? AND identifier = ?", [source_id, identifier])
        row = cur.fetchone()
        return None if row is None else dict(zip([d[0] for d in cur.description], row))
