"""--events: what writing a window's Dagster events costs, Dagster's default SQLite event log vs
the project's dagster.yaml (`defs/event_log.py`: pooled connections, synchronous=NORMAL).

Each variant runs in a fresh child process with its own DAGSTER_HOME and writes ``--events-windows``
(100) windows' events as a batch run does: a materialization and three check results per window,
the windows spread over 10 assets. Variants are interleaved ``--events-runs`` (3) times; the table
shows the median milliseconds per window and the ratio of the default to the project's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harvest_pipeline.bench.report import table
from harvest_pipeline.bench.spec import child_env

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "dagster default (SqliteEventLogStorage)": "telemetry:\n  enabled: false\n",
    "project dagster.yaml (PooledSqliteEventLogStorage)": None,  # the project's file as it is
}

_CHILD = r"""
import json, sys, time
import dagster as dg
n = int(sys.argv[1])
with dg.DagsterInstance.get() as instance:
    storage = type(instance.event_log_storage).__name__
    t = time.perf_counter()
    for i in range(n):
        key, partition = dg.AssetKey(["harvest", f"s{i % 10}"]), f"2026-01-{i % 28 + 1:02d}"
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition=partition, metadata={"records": i}))
        for check in ("complete", "no_duplicates", "cursor_closed"):
            instance.report_runless_asset_event(dg.AssetCheckEvaluation(asset_key=key, check_name=check, passed=True, partition=partition))
    print(json.dumps({"storage": storage, "seconds": time.perf_counter() - t}))
"""


def _one(config: str | None, windows: int, workdir: Path) -> dict:
    home = Path(tempfile.mkdtemp(prefix="home-", dir=workdir))
    (home / "dagster.yaml").write_text(config if config is not None else (ROOT / "dagster.yaml").read_text())
    out = subprocess.run([sys.executable, "-c", _CHILD, str(windows)], env=child_env({"DAGSTER_HOME": home}),
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"events child failed: {out.stderr[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(args, workdir: Path, *, log=print) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    windows, runs = args.events_windows, args.events_runs
    per_window: dict[str, list[float]] = {name: [] for name in VARIANTS}
    storages: dict[str, str] = {}
    for r in range(runs):
        for name, config in VARIANTS.items():
            res = _one(config, windows, workdir)
            storages[name] = res["storage"]
            per_window[name].append(1000 * res["seconds"] / windows)
            log(f"events run {r + 1}/{runs}: {name}: {per_window[name][-1]:.1f} ms per window (load {os.getloadavg()[0]:.1f})")
    med = {name: statistics.median(v) for name, v in per_window.items()}
    default, ours = list(VARIANTS)
    print()
    print(f"== Dagster events of {windows} windows (1 materialization + 3 check results each), median of {runs} ==")
    print(table(["event log", "storage class", "ms per window (median)", "min", "max"],
                [[name, storages[name], f"{med[name]:.1f}", f"{min(v):.1f}", f"{max(v):.1f}"]
                 for name, v in per_window.items()]))
    print(f"default / project: {med[default] / med[ours]:.1f}x")
    return {"windows": windows, "runs": runs, "ms_per_window": per_window, "median": med,
            "speedup": med[default] / med[ours]}
