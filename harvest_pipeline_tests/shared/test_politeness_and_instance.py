"""Per-host limits across workers that share no folder, and the deploy instance on a real PostgreSQL."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.shared

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import sys
    from harvest_pipeline.http import Transport
    from harvest_pipeline.sources.registry import HttpSettings
    url, state, n, conc, interval = sys.argv[1:6]
    t = Transport(HttpSettings(max_retries=0, max_concurrent_requests=int(conc),
                               min_request_interval_seconds=float(interval)), state_dir=state)
    for _ in range(int(n)):
        t.get(url)
""")


def _run(url: str, tmp_path: Path, env: dict, *, n: int, conc: int, interval: float, procs: int = 3) -> None:
    # Each child has its own state folder: as on separate machines, no file lock is shared.
    children = [subprocess.Popen([sys.executable, "-c", CHILD, url, str(tmp_path / f"machine{i}" / "hosts"), str(n),
                                  str(conc), str(interval)], env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
                                 stderr=subprocess.PIPE) for i in range(procs)]
    for c in children:
        _, err = c.communicate(timeout=120)
        assert c.returncode == 0, err.decode()


def test_workers_without_a_shared_folder_keep_the_hosts_concurrency(demo, recording_proxy, shared_env, tmp_path):
    env = shared_env("postgres")
    proxy = recording_proxy(demo.base, delay=0.15)
    _run(proxy.base + "/oai?verb=Identify", tmp_path, env, n=3, conc=1, interval=0)
    assert len(proxy.starts) == 9
    assert proxy.max_in_flight == 1
    # Two slots: two in flight at most, and the instrument does see overlap.
    proxy2 = recording_proxy(demo.base, delay=0.15)
    _run(proxy2.base + "/oai?verb=Identify", tmp_path, env, n=3, conc=2, interval=0)
    assert proxy2.max_in_flight == 2


def test_a_process_fetching_from_many_threads_keeps_the_limit_on_one_session(demo, recording_proxy, shared_env, tmp_path,
                                                                            monkeypatch):
    """A batch run fetches for a hundred sources at once: one session per process, not per thread
    (PostgreSQL's default allows 100 connections), and the host's limit still holds across its threads."""
    from concurrent.futures import ThreadPoolExecutor

    import psycopg

    from harvest_pipeline.http import Transport
    from harvest_pipeline.sources.registry import HttpSettings

    sessions = []
    real_connect = psycopg.connect

    def counting(*args, **kwargs):
        if kwargs.get("application_name") == "harvest-politeness":
            sessions.append(1)
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counting)
    shared_env("postgres")
    proxy = recording_proxy(demo.base, delay=0.1)
    # A transport per thread, as each source has its own; one gate for the process.
    transports = [Transport(HttpSettings(max_retries=0, max_concurrent_requests=2, min_request_interval_seconds=0),
                            state_dir=tmp_path / "hosts") for _ in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda t: [t.get(proxy.base + "/oai?verb=Identify") for _ in range(2)], transports))
    assert len(proxy.starts) == 16 and proxy.max_in_flight == 2
    assert len(sessions) == 1


def test_workers_without_a_shared_folder_keep_the_hosts_interval(demo, recording_proxy, shared_env, tmp_path):
    env = shared_env("ducklake")  # the gate is the same for either shared kind
    proxy = recording_proxy(demo.base)
    _run(proxy.base + "/oai?verb=Identify", tmp_path, env, n=3, conc=3, interval=0.25)
    starts = sorted(proxy.starts)
    assert len(starts) == 9
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.2  # 0.25 s asked; scheduling noise


def test_without_the_shared_catalogue_the_folders_decide(demo, recording_proxy, tmp_path, monkeypatch):
    """The control: separate folders and no shared catalogue share nothing, so the limit is per machine."""
    monkeypatch.delenv("HARVEST_CATALOGUE", raising=False)
    proxy = recording_proxy(demo.base, delay=0.3)
    _run(proxy.base + "/oai?verb=Identify", tmp_path, {}, n=2, conc=1, interval=0)
    assert proxy.max_in_flight >= 2


def test_the_deploy_instance_runs_on_postgresql(pg_server, monkeypatch, tmp_path):
    import dagster as dg
    from dagster_postgres import PostgresRunStorage

    db = pg_server.create_database()
    for k, v in {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(pg_server.port), "DAGSTER_PG_DB": db,
                 "DAGSTER_PG_USER": "harvest", "DAGSTER_PG_PASSWORD": ""}.items():
        monkeypatch.setenv(k, v)
    instance = dg.DagsterInstance.from_config(str(ROOT / ".deploy"))
    try:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert type(instance.run_launcher).__name__ == "DockerRunLauncher"
        assert instance.get_runs() == []
    finally:
        instance.dispose()


def test_workers_creating_the_politeness_table_at_the_same_moment_all_go_on(pg_server):
    # PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe against a concurrent one: the loser may
    # fail with "type ... already exists" or a unique violation (seen in the two-worker test).
    # Each session here is a worker's first connection, all at once, on fresh databases.
    import threading

    from harvest_pipeline.store.host_leases import PostgresGate
    from harvest_pipeline.store.pg_session import ProcessSession

    for _ in range(6):
        dsn = pg_server.dsn(pg_server.create_database())
        sessions = [ProcessSession(dsn, f"worker{i}", setup=PostgresGate._TABLE) for i in range(8)]
        start = threading.Barrier(len(sessions))
        errors: list[BaseException] = []

        def first_statement(session):
            start.wait()
            try:
                assert session.execute("SELECT count(*) FROM harvest_host_politeness", ()) == (0,)
            except BaseException as e:  # noqa: BLE001 - collected for the assertion below
                errors.append(e)

        threads = [threading.Thread(target=first_statement, args=(s,)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
