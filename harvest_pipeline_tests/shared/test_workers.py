"""Two independent workers, one shared catalogue and one Dagster instance storage on PostgreSQL.

Each worker is its own process with its own local folders (catalogue path, staging, host-lock
folder) and its own DAGSTER_HOME; what they share is PostgreSQL: Dagster's run storage
(.deploy/dagster.yaml's `storage` section), the catalogue and the politeness gate. Together they
harvest 10 demo sources at once through a recording proxy (one host for every source).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.sources import load_sources
from harvest_pipeline_tests.conftest import day_window, records_table

pytestmark = pytest.mark.shared

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [f"s{i:02d}" for i in range(10)]
DAYS = (3, 2)
INTERVAL = 0.15

WORKER = textwrap.dedent("""
    import sys
    from harvest_pipeline.cli import main
    first, last, *sources = sys.argv[1:]
    codes = [main(["harvest", s, "--from", first, "--until", last]) for s in sources]
    sys.exit(max(codes))
""")


def _sources_yaml(url: str) -> str:
    lines = ["sources:"]
    for s in SOURCES:
        lines += [f"  - id: {s}", f"    url: {url}", "    window: day", "    http:",
                  "      max_concurrent_requests: 1", f"      min_request_interval_seconds: {INTERVAL}"]
    return "\n".join(lines) + "\n"


def _instance_yaml(pg_port: int, db: str) -> tuple[str, dict]:
    """.deploy/dagster.yaml without its Docker run launcher (these workers run in-process)."""
    config = yaml.safe_load((ROOT / ".deploy" / "dagster.yaml").read_text())
    config.pop("run_launcher")
    env = {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(pg_port), "DAGSTER_PG_DB": db,
           "DAGSTER_PG_USER": "harvest", "DAGSTER_PG_PASSWORD": ""}
    return yaml.safe_dump(config), env


def test_two_workers_harvest_ten_sources_into_one_catalogue(demo, pg_server, shared_env, recording_proxy, tmp_path, monkeypatch):
    proxy = recording_proxy(demo.base, delay=0.01)
    sources_file = tmp_path / "sources.yaml"
    sources_file.write_text(_sources_yaml(proxy.base + "/oai"))
    catalogue_env = shared_env("postgres")
    instance_yaml, dagster_env = _instance_yaml(pg_server.port, pg_server.create_database())
    first, last = (day_window(d).start.strftime("%Y-%m-%d") for d in DAYS)

    # Deployment step one: create the instance's tables once (Dagster's own migration is not
    # safe to run from two processes at once; README: `dagster instance migrate`).
    init_home = tmp_path / "init_home"
    init_home.mkdir()
    (init_home / "dagster.yaml").write_text(instance_yaml)
    for k, v in dagster_env.items():
        monkeypatch.setenv(k, v)
    import dagster as dg

    dg.DagsterInstance.from_config(str(init_home)).dispose()

    workers = []
    for n, mine in enumerate((SOURCES[0::2], SOURCES[1::2])):
        home = tmp_path / f"worker{n}"
        (home / "dagster_home").mkdir(parents=True)
        (home / "dagster_home" / "dagster.yaml").write_text(instance_yaml)
        env = {**os.environ, **catalogue_env, **dagster_env, "DAGSTER_HOME": str(home / "dagster_home"),
               "HARVEST_DUCKDB_PATH": str(home / "data" / "harvest.duckdb"), "HARVEST_SOURCES_FILE": str(sources_file),
               "PYTHONPATH": str(ROOT)}
        workers.append(subprocess.Popen([sys.executable, "-c", WORKER, first, last, *mine], cwd=home, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(outputs)
    for out in outputs:
        assert out.count("windows ok") == 5 and "2/2 windows ok" in out, out

    # The politeness limit held across both workers: one request in flight, the interval kept.
    assert proxy.max_in_flight == 1
    starts = sorted(proxy.starts)
    assert len(starts) >= 10 * len(DAYS)
    # Stamped when the gate lets a request go; it reaches the proxy later, unevenly on a busy machine
    # (right after the full suite in CI one gap of 0.037 s was seen, between two requests the gate
    # released 0.15 s apart; with a benchmark running beside the suite, two of 69). A request held up
    # after its release shortens only the gap after it, and without the gate nearly every gap would
    # be short: allow one in twenty.
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    short = [round(g, 3) for g in gaps if g < INTERVAL - 0.1]
    assert len(short) <= max(1, len(gaps) // 20) and sum(gaps) / len(gaps) >= INTERVAL, (short, len(gaps))

    # Both workers' runs are in the one instance storage.
    import psycopg

    with psycopg.connect(pg_server.dsn(dagster_env["DAGSTER_PG_DB"])) as conn:
        runs = conn.execute("SELECT count(*), count(DISTINCT status) FROM runs").fetchone()
        windows = conn.execute(
            "SELECT count(DISTINCT asset_key || partition) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'"
        ).fetchone()[0]
    assert runs == (10, 1)  # one ranged run per source (both its windows), all succeeded
    assert windows == 10 * len(DAYS)  # each window has its own materialization

    # The shared catalogue equals an embedded harvest of the same sources and windows.
    shared = records_table(tmp_path / "worker0" / "data" / "harvest.duckdb")
    for var in catalogue_env:
        monkeypatch.delenv(var)
    monkeypatch.setenv("HARVEST_SOURCES_FILE", str(sources_file))
    embedded_db = tmp_path / "embedded" / "harvest.duckdb"
    for source in load_sources(sources_file):
        for d in DAYS:
            assert harvest_window(source, day_window(d), db_path=embedded_db).status == "verified"
    embedded = records_table(embedded_db)
    assert len(shared) == len(embedded) > 0
    assert shared == embedded
    # Nothing went into the workers' local catalogue files.
    assert not (tmp_path / "worker0" / "data" / "harvest.duckdb").exists()
    assert not (tmp_path / "worker1" / "data" / "harvest.duckdb").exists()
