"""--daemon: a latency-bound source brought up to date by `dagster dev` alone, sensor on.

The demo provider answers every OAI-PMH request after ``--daemon-delay-ms`` (default 800 ms, the
``slow_ms`` fault), with ``--daemon-days`` (default 40) closed daily windows of about two
ListRecords pages each (30 records a day, page size 25). ``dagster dev`` starts on a fresh Dagster
home (the project's dagster.yaml) and a fresh catalogue, with one source whose `start` is the first
day; nobody touches the UI. The section polls the instance until every window has a
materialization and no run of the source is in flight, then stops ``dagster dev``.

Server-bound time = ListRecords pages (from the ledger) x delay, one after another: what the
harvest cannot go below with one request at a time. Reported: the wall time from starting
``dagster dev`` (start-up included), and from the first run's launch to the last run's end
(the part the sensor and the runs decide). Target: wall <= 1.3x server-bound.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from harvest_pipeline.bench.backfill_section import ledger_totals
from harvest_pipeline.defs.batch import BATCH_JOB, batch_windows
from harvest_pipeline.bench.report import n1, table
from harvest_pipeline.bench.spec import bench_provider, child_env, open_instance

ROOT = Path(__file__).resolve().parents[2]
RECORDS_PER_DAY = 30
PAGE_SIZE = 25


def _progress(home: Path, source_id: str) -> tuple[int, int, list]:
    """(partitions materialized, runs in flight, runs) read from the instance (SQLite: no lock on the harvest)."""
    import dagster as dg

    with open_instance(home) as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["harvest", source_id])), limit=10_000).records
        runs = instance.get_run_records(filters=dg.RunsFilter(job_name=BATCH_JOB))
        flying = sum(1 for r in runs if not r.dagster_run.is_finished)
        described = []
        for r in runs:
            keys = batch_windows(r.dagster_run.run_config).get(source_id) or ["?"]
            described.append((r.create_timestamp.timestamp(), r.end_time, r.dagster_run.status.value, keys[0], keys[-1]))
        return len({r.partition_key for r in records}), flying, described


def create_instance_storage(home: Path) -> None:
    """Create the fresh Dagster home's storages before `dagster dev` starts: its processes creating
    them at once can stamp alembic_version twice (dagster-io/dagster#27390)."""
    import dagster as dg

    with open_instance(home) as instance:
        instance.get_runs(limit=1)
        instance.event_log_storage.get_concurrency_keys()
        instance.schedule_storage.all_instigator_state()


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def run(args, workdir: Path, *, log=print) -> dict:
    days, delay_ms, port = args.daemon_days, args.daemon_delay_ms, args.daemon_port
    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    db = workdir / "data" / "harvest.duckdb"
    out: dict = {"days": days, "delay_ms": delay_ms}
    with bench_provider(records_per_day=RECORDS_PER_DAY, page_size=PAGE_SIZE, days=days, workdir=workdir) as (provider, spec):
        first = (spec.start - timedelta(days=days - 1)).date().isoformat()
        (workdir / "sources.yaml").write_text(
            f"sources:\n  - id: {spec.source_id}\n    url: {spec.url}\n    window: day\n    start: {first}\n"
        )
        (workdir / "workspace.yaml").write_text(
            "load_from:\n  - python_module:\n      module_name: harvest_pipeline.definitions\n"
            "      location_name: harvest_pipeline\n      working_directory: .\n"
        )
        provider.set_options(slow_ms=delay_ms)
        env = child_env({"HARVEST_SOURCES_FILE": workdir / "sources.yaml", "HARVEST_DUCKDB_PATH": db,
                         "DAGSTER_HOME": home})
        create_instance_storage(home)
        log(f"daemon: {days} daily windows, {delay_ms} ms per OAI-PMH response; dagster dev on port {port}")
        t0 = time.time()
        with open(workdir / "dagster_dev.log", "wb") as logf:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                cwd=workdir, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
            )
            try:
                done = flying = 0
                runs: list = []
                deadline = t0 + args.timeout
                while time.time() < deadline:
                    time.sleep(1.0)
                    if proc.poll() is not None:
                        raise RuntimeError(f"dagster dev exited with {proc.returncode}; see {workdir / 'dagster_dev.log'}")
                    try:
                        done, flying, runs = _progress(home, spec.source_id)
                    except Exception:  # noqa: BLE001 - the instance is still being created
                        continue
                    if done >= days and not flying:
                        break
                wall = time.time() - t0
            finally:
                _stop(proc)
        requests = provider.faults().get("requests")
    totals = ledger_totals(db, spec.source_id)
    pages = int(_pages(db, spec.source_id))
    server_s = pages * delay_ms / 1000
    starts = [r[0] for r in runs]
    ends = [r[1] for r in runs if r[1]]
    runs_span = (max(ends) - min(starts)) if starts and ends else None
    ratio = wall / server_s if server_s else None
    out.update({"wall_s": wall, "runs_span_s": runs_span, "pages": pages, "server_bound_s": server_s,
                "oai_requests": requests, "ratio": ratio, "materialized": done, "runs": runs, **totals})
    print()
    print(f"== Latency-bound source through `dagster dev` (sensor on): {days} daily windows, "
          f"{delay_ms} ms per response ==")
    print(table(["measure", "value"], [
        ["windows verified (ledger) / materialized (Dagster)", f"{totals.get('passed', 0)} / {done}"],
        ["ListRecords pages (ledger)", str(pages)],
        ["OAI-PMH requests served (Identify included)", str(requests)],
        ["server-bound time = pages x delay", f"{server_s:.1f} s"],
        ["wall, from starting dagster dev", f"{wall:.1f} s"],
        ["first run launched .. last run ended", f"{runs_span:.1f} s" if runs_span else "-"],
        ["runs", ", ".join(f"{r[3]}..{r[4] or r[3]} {r[2]}" for r in sorted(runs))],
        ["wall / server-bound", f"{ratio:.2f}x (target <= 1.3x)" if ratio else "-"],
    ], right=set()))
    out["targets"] = [{
        "name": "latency-bound catch-up through the daemon <= 1.3x server-bound",
        "verdict": "PASS" if ratio and ratio <= 1.3 and done >= days else "MISS",
        "numbers": f"{wall:.0f} s wall vs {server_s:.0f} s of pages ({ratio:.2f}x; runs alone "
                   f"{n1(runs_span)} s = {runs_span / server_s:.2f}x)" if ratio and runs_span else f"{done}/{days} windows",
    }]
    return out


def _pages(db: Path, source_id: str) -> int:
    from harvest_pipeline.store import connect, ledger

    with connect(db, read_only=True) as con:
        return sum(r.pages or 0 for r in ledger.list_windows(con, source_id))
