"""`harvest-pipeline sources list|add|remove|check` and the UI job `register_source`, against the
demo provider over 127.0.0.1, on a copy of the shipped sources file (comments and all)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from harvest_pipeline.defs.factory import build_definitions
from harvest_pipeline.defs.register import REGISTER_JOB, register_run_config
from harvest_pipeline.sources import load_sources

pytestmark = pytest.mark.integration
SHIPPED = Path(__file__).resolve().parents[2] / "data" / "sources.yaml"


def run_cli(*args, env, cwd):
    return subprocess.run(
        [sys.executable, "-m", "harvest_pipeline.cli", "sources", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
    )


@pytest.fixture
def shipped_copy(tmp_path, shared_demo, monkeypatch) -> tuple[Path, dict]:
    path = tmp_path / "sources.yaml"
    shutil.copy(SHIPPED, path)
    env = {
        "HARVEST_SOURCES_FILE": str(path),
        "HARVEST_DUCKDB_PATH": str(tmp_path / "data" / "harvest.duckdb"),
        "HARVEST_DEMO_URL": shared_demo.url,
        "HARVEST_DEMO_CSW_URL": shared_demo.base + "/csw",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return path, {**os.environ, **env}


def test_add_probes_proposes_and_appends_keeping_every_comment_then_remove_restores_the_file(shipped_copy, shared_demo, tmp_path):
    path, env = shipped_copy
    original = path.read_text()
    added = run_cli("add", "physics", shared_demo.url, "--set", "physics", "--prefix", "oai_datacite", env=env, cwd=tmp_path)
    assert added.returncode == 0, added.stdout + added.stderr
    assert "Demo Harvest Repository" in added.stdout and "Reload the code location" in added.stdout
    text = path.read_text()
    assert text.startswith(original)  # nothing above the new entry changed: comments, ${VAR}s, order
    assert "# added by `harvest-pipeline sources add`" in text
    physics = {s.id: s for s in load_sources(path)}["physics"]
    assert (physics.url, physics.metadata_prefix, physics.set, physics.window) == (shared_demo.url, "oai_datacite", "physics", "day")

    listed = json.loads(run_cli("list", "--json", env=env, cwd=tmp_path).stdout)
    assert [s["id"] for s in listed] == ["demo", "demo_csw", "physics"]

    removed = run_cli("remove", "physics", env=env, cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    assert "records stay in the catalogue" in removed.stdout
    assert path.read_text() == original


def test_add_refuses_what_the_server_does_not_offer_and_leaves_the_file_alone(shipped_copy, shared_demo, tmp_path):
    path, env = shipped_copy
    original = path.read_text()
    wrong_prefix = run_cli("add", "marc", shared_demo.url, "--prefix", "marc21", env=env, cwd=tmp_path)
    assert wrong_prefix.returncode == 2 and "pick one it lists: oai_dc, oai_datacite" in wrong_prefix.stderr
    wrong_set = run_cli("add", "nowhere", shared_demo.url, "--set", "astronomy", env=env, cwd=tmp_path)
    assert wrong_set.returncode == 2 and "does not list the set astronomy" in wrong_set.stderr
    taken = run_cli("add", "demo", shared_demo.url, env=env, cwd=tmp_path)
    assert taken.returncode == 2 and "exists already" in taken.stderr
    bad_id = run_cli("add", "Bad-Id", shared_demo.url, env=env, cwd=tmp_path)
    assert bad_id.returncode == 2 and "field 'id'" in bad_id.stderr and "must be lowercase" in bad_id.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/oai"
    down = run_cli("add", "down", closed, "--timeout", "2", env=env, cwd=tmp_path)
    assert down.returncode == 1 and closed in down.stderr
    assert path.read_text() == original


def test_check_validates_the_file_and_asks_each_server_without_harvesting(shipped_copy, shared_demo, tmp_path):
    path, env = shipped_copy
    ok = run_cli("check", env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "valid, 2 source(s)" in ok.stdout
    assert "demo                 ok" in ok.stdout and "demo_csw             ok" in ok.stdout
    assert not (tmp_path / "data" / "harvest.duckdb").exists()  # nothing harvested, no catalogue

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = run_cli("check", "--timeout", "2", env={**env, "HARVEST_DEMO_CSW_URL": f"http://127.0.0.1:{port}/csw"}, cwd=tmp_path)
    assert down.returncode == 1
    assert "demo                 ok" in down.stdout and "demo_csw             FAILED" in down.stdout
    assert f"127.0.0.1:{port}" in down.stdout

    path.write_text(path.read_text().replace("window: day", "window: fortnight", 1))
    invalid = run_cli("check", env=env, cwd=tmp_path)
    assert invalid.returncode == 2 and "source 'demo': field 'window'" in invalid.stderr


def test_register_source_job_adds_the_source_and_a_reload_shows_its_asset(shipped_copy, shared_demo, tmp_path):
    path, _ = shipped_copy
    original = path.read_text()
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(REGISTER_JOB).execute_in_process(
            run_config=register_run_config(id="history", url=shared_demo.url, set="history", window="week"),
            instance=instance,
        )
    assert result.success
    assert path.read_text().startswith(original)
    assert "# added by the UI job register_source" in path.read_text()
    reloaded = build_definitions()  # what a code location reload does
    asset = reloaded.resolve_assets_def(dg.AssetKey(["harvest", "history"]))
    assert asset.partitions_def.get_partition_keys()  # weekly windows since the demo's earliest record
    assert {s.id: (s.set, s.window) for s in load_sources(path)}["history"] == ("history", "week")
