"""--shared: the embedded file against the shared catalogues, with 1, 4 and 16 concurrent writers.

Each writer is its own process (as each Dagster run is) and merges its own source's windows with
the project's merge (begin_window, merge_staging, finish_window in one transaction, retried on
write conflicts by run_write), exactly the catalogue work of harvest_window; no HTTP, so what is
measured is the catalogue. Kinds:
  embedded  the DuckDB file (HARVEST_DUCKDB_PATH): writers queue for its lock
  postgres  the tables in PostgreSQL through DuckDB's postgres extension
  ducklake  DuckLake, catalog in PostgreSQL, Parquet in a local folder
PostgreSQL is a throwaway cluster on 127.0.0.1 (bench/pg_cluster.py), on the same machine.
Reported: records/s = all rows / (last merge end - first merge start); merge latency per window
(one transaction, retries included), median and max; write conflicts retried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harvest_pipeline.bench.measure import Stats
from harvest_pipeline.bench.report import n2, table

KINDS = ("embedded", "postgres", "ducklake")


def _one(kind: str, writers: int, *, windows: int, rows: int, workdir: Path, pg, timeout: float) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_CATALOGUE")}
    env["HARVEST_DUCKDB_PATH"] = str(workdir / "catalogue" / "harvest.duckdb")
    if kind != "embedded":
        env["HARVEST_CATALOGUE"] = kind
        env["HARVEST_CATALOGUE_PG_DSN"] = pg.dsn(pg.create_database())
        env["HARVEST_DUCKLAKE_DATA_PATH"] = str(workdir / "lake") + "/"
    go = workdir / "go"
    procs = []
    for i in range(writers):
        local = dict(env)
        if kind != "embedded":  # each worker its own local folder, as on its own machine
            local["HARVEST_DUCKDB_PATH"] = str(workdir / f"writer{i}" / "harvest.duckdb")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "harvest_pipeline.bench.shared_writer", str(workdir), f"w{i:02d}", str(windows),
             str(rows), str(go)], env=local, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    while len(list(workdir.glob("ready-*"))) < writers:
        if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    go.touch()
    outs, errors = [], []
    for p in procs:
        out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        if p.returncode != 0:
            errors.append((err.strip().splitlines()[-1], err.strip()[-3000:]) if err.strip()
                          else (f"exit {p.returncode}", ""))
        else:
            outs.append(json.loads(out.strip().splitlines()[-1]))
    if errors:
        return {"kind": kind, "writers": writers, "error": errors[0][0], "stderr_tail": errors[0][1],
                "failed_writers": len(errors)}
    wall = max(o["ended"] for o in outs) - min(o["started"] for o in outs)
    latencies = [x for o in outs for x in o["latencies"]]
    total = sum(o["rows"] for o in outs)
    return {"kind": kind, "writers": writers, "rows": total, "wall_s": wall, "records_per_s": total / wall,
            "latency": Stats.of(latencies).as_dict(), "conflicts": sum(o["conflicts"] for o in outs)}


def run(args, workdir: Path, *, log=print) -> dict:
    from harvest_pipeline.bench.pg_cluster import temporary_postgres

    levels = [int(x) for x in str(args.shared_levels).split(",")]
    kinds = [k for k in str(args.shared_kinds).split(",") if k]
    results = []
    with temporary_postgres(max_connections=400) as pg:
        for writers in levels:
            for kind in kinds:  # the kinds side by side per level: same machine state
                log(f"shared: {kind}, {writers} writer(s) x {args.shared_windows} windows x {args.shared_rows} rows")
                r = _one(kind, writers, windows=args.shared_windows, rows=args.shared_rows,
                         workdir=workdir / f"{kind}-{writers}", pg=pg, timeout=args.timeout)
                if "error" in r:
                    log(f"  FAILED: {r['error']}")
                else:
                    log(f"  {r['records_per_s']:,.0f} records/s, {r['conflicts']} conflicts")
                results.append(r)
    rows = []
    base = {r["writers"]: r.get("records_per_s") for r in results if r["kind"] == "embedded"}
    for r in results:
        if "error" in r:
            rows.append([r["kind"], r["writers"], "FAILED", "-", "-", "-", "-", r["error"][:80]])
            continue
        ratio = f"{r['records_per_s'] / base[r['writers']]:.2f}x" if base.get(r["writers"]) else "-"
        rows.append([r["kind"], r["writers"], f"{r['records_per_s']:,.0f}", ratio, n2(r["latency"]["median"]),
                     n2(r["latency"]["max"]), r["conflicts"], ""])
    print()
    print(f"== Shared catalogue: W writer processes, each {args.shared_windows} windows of {args.shared_rows} rows"
          " (created, then revised), one transaction per window ==")
    print(table(["catalogue", "writers", "records/s", "vs embedded", "merge s median", "merge s max",
                 "conflicts retried", "note"], rows))
    print("records/s over the wall time of all writers; merge s = one window's transaction, retries included."
          " PostgreSQL runs on the same machine.")
    return {"windows": args.shared_windows, "rows": args.shared_rows, "results": results}


__all__ = ["run", "KINDS"]
