"""The `harvest-pipeline` command as a user runs it: a real process, real Dagster home and DuckDB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest

from harvest_pipeline_tests.conftest import today, day_window

pytestmark = pytest.mark.integration


def run_cli(*args, env, cwd, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "harvest_pipeline.cli", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def cli_env(tmp_path, sources_file, demo):
    sources_file(demo=demo)
    env = {
        **os.environ,
        "HARVEST_SOURCES_FILE": str(tmp_path / "sources.yaml"),
        "HARVEST_DUCKDB_PATH": str(tmp_path / "data" / "harvest.duckdb"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }
    return env


def test_harvest_all_windows_then_status_matches_the_provider(cli_env, tmp_path, demo):
    done = run_cli("harvest", "demo", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified" in done.stdout and "FAILED" not in done.stdout
    assert f"watermark {today().replace(tzinfo=None)}" in done.stdout
    assert "BetaWarning" not in done.stderr  # Dagster's `owners` warning is noise to a CLI user

    status = run_cli("status", "--json", env=cli_env, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    [summary] = json.loads(status.stdout)
    expected = demo.stats(until=today() - timedelta(seconds=1))
    assert (summary["live"], summary["deleted"], summary["unmapped"]) == (expected["live"], expected["deleted"], 0)
    assert summary["watermark"].startswith(today().strftime("%Y-%m-%d"))
    assert summary["windows"] == {"verified": summary["windows"]["verified"]}
    assert summary["last_run"]["checks"] == {"complete": "passed", "no_duplicates": "passed", "cursor_closed": "passed"}

    # Runs went to the persistent Dagster home, so the UI shows them afterwards.
    assert any((tmp_path / "dagster_home").rglob("*.db"))

    text = run_cli("status", env=cli_env, cwd=tmp_path)
    assert f"{expected['live']} live, {expected['deleted']} deleted" in text.stdout


def test_failing_check_makes_harvest_exit_non_zero(cli_env, tmp_path, demo):
    demo.set_options(complete_list_size_bias=4)
    window = day_window(2)
    done = run_cli("harvest", "demo", "--from", window.key, "--until", window.key, env=cli_env, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED CHECKS complete" in done.stdout
    assert "watermark (none)" in done.stdout


def test_probe_prints_identify_formats_and_sets(shared_demo, tmp_path):
    out = run_cli("probe", shared_demo.url, env=dict(os.environ), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "YYYY-MM-DDThh:mm:ssZ" in out.stdout and "persistent" in out.stdout
    assert "oai_dc" in out.stdout and "oai_datacite" in out.stdout
    # each offered format with the mapper that reads it
    assert "http://www.openarchives.org/OAI/2.0/oai_dc/  -> oai_dc" in out.stdout
    assert "http://www.loc.gov/mods/v3  -> mods" in out.stdout
    assert "physics:optics" in out.stdout


def test_bad_sources_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - id: Bad\n    url: http://127.0.0.1:1/oai\n")
    env = {**os.environ, "HARVEST_SOURCES_FILE": str(bad)}
    out = run_cli("status", env=env, cwd=tmp_path)
    assert out.returncode == 2
    assert "source 'Bad': field 'id'" in out.stderr


def test_probe_a_csw_catalogue(shared_demo, tmp_path):
    out = run_cli("probe", shared_demo.base + "/csw", env=dict(os.environ), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "GetRecords" in out.stdout and "http://www.isotc211.org/2005/gmd" in out.stdout


def test_status_and_show_speak_partition_keys_utc_and_plain_english(cli_env, tmp_path, demo):
    from harvest_pipeline.harvest import harvest_window
    from harvest_pipeline.store import connect
    from harvest_pipeline_tests.conftest import demo_source

    db = tmp_path / "data" / "harvest.duckdb"
    harvest_window(demo_source(demo), day_window(3), db_path=db)
    interrupted = day_window(2)
    env = {**cli_env, "HARVEST_CRASHPOINT": "after-fetch:2"}  # the run dies after its second page
    killed = run_cli("harvest", "demo", "--from", interrupted.key, "--until", interrupted.key, env=env, cwd=tmp_path)
    assert killed.returncode != 0

    status = run_cli("status", "--json", env=cli_env, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    [summary] = json.loads(status.stdout)
    [cursor] = summary["open_cursors"]
    assert (cursor["window"], cursor["state"]) == (interrupted.key, "interrupted")
    assert cursor["window_start"] == interrupted.start.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert summary["last_run"]["started_at"].endswith("Z")
    text = run_cli("status", env=cli_env, cwd=tmp_path)
    assert f"open cursors: {interrupted.key} (interrupted)" in text.stdout

    with connect(db) as con:
        [(once,)] = con.execute(
            "SELECT identifier FROM record_history GROUP BY identifier HAVING count(*) = 1 ORDER BY 1 LIMIT 1"
        ).fetchall()
    shown = run_cli("show", "demo", once, env=cli_env, cwd=tmp_path)
    assert "History (1 row, oldest first)" in shown.stdout, shown.stdout + shown.stderr
    doc = json.loads(run_cli("show", "demo", once, "--json", env=cli_env, cwd=tmp_path).stdout)
    assert doc["record"]["datestamp"].endswith("Z") and doc["history"][0]["received_at"].endswith("Z")


def test_remap_rewrites_records_stored_with_other_mapped_values_and_then_nothing(cli_env, tmp_path, demo):
    start = day_window(3).key
    assert run_cli("harvest", "demo", "--from", start, env=cli_env, cwd=tmp_path).returncode == 0
    import duckdb

    db = cli_env["HARVEST_DUCKDB_PATH"]
    # A catalogue written by an earlier version of the mappers: some records lack subjects, one
    # was not mapped at all.
    with duckdb.connect(db) as con:
        live = con.execute("SELECT count(*) FROM records WHERE NOT deleted").fetchone()[0]
        [(unmapped,)] = con.execute("SELECT min(identifier) FROM records WHERE NOT deleted").fetchall()
        con.execute("UPDATE records SET subjects = [] WHERE NOT deleted AND identifier_key % 3 = 0")
        con.execute("UPDATE records SET title = NULL, subjects = NULL, format_name = NULL, "
                    "mapping_error = 'MappingError: no mapper' WHERE identifier = ?", [unmapped])
        differing = con.execute("SELECT count(*) FROM records WHERE NOT deleted "
                                "AND (identifier_key % 3 = 0 OR identifier = ?)", [unmapped]).fetchone()[0]

    status = run_cli("status", env=cli_env, cwd=tmp_path).stdout
    assert "! 1 live record(s) stored raw, no mapper read them; commonest: MappingError: no mapper (1)" in status
    assert "`harvest-pipeline remap demo`" in status

    dry = run_cli("remap", "demo", "--dry-run", env=cli_env, cwd=tmp_path)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"{live} live records mapped again" in dry.stdout
    assert f"{differing} map differently now, {differing} would be rewritten" in dry.stdout
    assert "(unmapped) -> oai_dc: 1" in dry.stdout and "1 record(s) no mapper read before are mapped now" in dry.stdout

    done = run_cli("remap", "demo", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{differing} map differently now, {differing} rewritten" in done.stdout
    shown = run_cli("show", "demo", unmapped, env=cli_env, cwd=tmp_path)
    assert "format_name   oai_dc" in shown.stdout and "restored" in shown.stdout
    assert "written by    remap of the stored XML remap-" in shown.stdout

    assert "stored raw" not in run_cli("status", env=cli_env, cwd=tmp_path).stdout
    again = run_cli("remap", "--all", env=cli_env, cwd=tmp_path)  # every source of the file: here `demo`
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"demo: {live} live records mapped again" in again.stdout and "0 map differently now" in again.stdout
    neither = run_cli("remap", env=cli_env, cwd=tmp_path)
    assert neither.returncode == 2 and "name the sources to remap, or give --all" in neither.stderr
