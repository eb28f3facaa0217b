"""Child process of the --backfill section: one whole backfill, direct or ranged.

    python -m harvest_pipeline.bench.backfill_runner direct|ranged --spec SPEC.json --workdir DIR
        [--max-partitions N]

The spec's ``extra`` holds ``first_day`` and ``last_day``. Prints ``BENCH_RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from harvest_pipeline.bench.run_one import RESULT_PREFIX


def _days(first: str, last: str) -> list[date]:
    d, end = date.fromisoformat(first), date.fromisoformat(last)
    out = []
    while d <= end:
        out.append(d)
        d += timedelta(days=1)
    return out


def direct(spec, workdir: Path) -> dict:
    from harvest_pipeline.harvest import Window, harvest_window

    source = spec.source_config(start=datetime.fromisoformat(spec.extra["first_day"]).replace(tzinfo=UTC))
    db = workdir / "data" / "harvest.duckdb"
    os.environ["HARVEST_DUCKDB_PATH"] = str(db)  # the transport's host lock files go beside it
    failed = 0
    t = time.perf_counter()
    for d in _days(spec.extra["first_day"], spec.extra["last_day"]):
        start = datetime(d.year, d.month, d.day, tzinfo=UTC)
        try:
            harvest_window(source, Window(start, start + timedelta(days=1), d.isoformat()), db_path=db)
        except Exception as exc:  # noqa: BLE001 - counted; the ledger says why
            failed += 1
            print(f"{d}: {exc}", file=sys.stderr)
    return {"wall_s": time.perf_counter() - t, "failed": failed, "db": str(db)}


def ranged(spec, workdir: Path, max_partitions: int) -> dict:
    os.environ["HARVEST_DUCKDB_PATH"] = str(workdir / "data" / "harvest.duckdb")
    home = workdir / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    t_setup = time.perf_counter()
    import dagster as dg

    from harvest_pipeline.bench.ranged import (
        RANGE_TAGS,
        build_ranged_definitions,
        per_partition_check_status,
        ranges,
    )

    start = datetime.fromisoformat(spec.extra["first_day"]).replace(tzinfo=UTC)
    source = spec.source_config(start=start)
    defs = build_ranged_definitions(source, start, max_partitions)
    job = defs.resolve_job_def(f"harvest_{source.id}_ranged")
    asset = defs.resolve_assets_def(dg.AssetKey(["harvest", source.id]))
    keys = [k for k in asset.partitions_def.get_partition_keys()
            if spec.extra["first_day"] <= k <= spec.extra["last_day"]]
    instance = dg.DagsterInstance.local_temp(tempdir=str(home))
    setup_s = time.perf_counter() - t_setup
    t = time.perf_counter()
    failed_runs = 0
    launched = ranges(keys, max_partitions)
    for lo, hi in launched:
        result = job.execute_in_process(
            instance=instance, raise_on_error=False, tags=dict(zip(RANGE_TAGS, (lo, hi))),
            run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
        )
        failed_runs += 0 if result.success else 1
    wall = time.perf_counter() - t
    status = per_partition_check_status(instance, asset.key)
    per_window = {name: {p: s for p, s in by.items() if p != "None"} for name, by in status.items()}
    visible = min((sum(1 for p in by if p in keys) for by in per_window.values()), default=0)
    summaries = sum(1 for by in status.values() if "None" in by)
    mats = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=asset.key), limit=len(keys) + 10)
    instance.dispose()
    return {
        "wall_s": wall, "setup_s": setup_s, "runs_launched": len(launched), "failed_runs": failed_runs,
        "checks_visible": f"{visible}/{len(keys)} partitions x {len(per_window)} checks"
                          + (" (+ a partition=None run summary per check)" if summaries else ""),
        "materializations": len({r.partition_key for r in mats.records}),
        "db": os.environ["HARVEST_DUCKDB_PATH"],
    }


def main(argv: list[str] | None = None) -> int:
    from harvest_pipeline.bench.backfill_section import ledger_totals
    from harvest_pipeline.bench.spec import BenchSpec

    p = argparse.ArgumentParser(prog="python -m harvest_pipeline.bench.backfill_runner")
    p.add_argument("mode", choices=("direct", "ranged"))
    p.add_argument("--spec", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--max-partitions", type=int, default=30)
    args = p.parse_args(argv)
    spec = BenchSpec.read(args.spec)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict = {"mode": args.mode}
    try:
        out.update(direct(spec, workdir) if args.mode == "direct" else ranged(spec, workdir, args.max_partitions))
        out.update(ledger_totals(Path(out["db"]), spec.source_id))
    except Exception as exc:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        out["error"] = f"{type(exc).__name__}: {exc}"
    print(RESULT_PREFIX + json.dumps(out, default=str), flush=True)
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())
