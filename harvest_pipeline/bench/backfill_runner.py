"""Child process of the --backfill section: the whole backfill with harvest_window in a loop.

    python -m harvest_pipeline.bench.backfill_runner direct --spec SPEC.json --workdir DIR

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


def main(argv: list[str] | None = None) -> int:
    from harvest_pipeline.bench.backfill_section import ledger_totals
    from harvest_pipeline.bench.spec import BenchSpec

    p = argparse.ArgumentParser(prog="python -m harvest_pipeline.bench.backfill_runner")
    p.add_argument("mode", choices=("direct",))
    p.add_argument("--spec", required=True)
    p.add_argument("--workdir", required=True)
    args = p.parse_args(argv)
    spec = BenchSpec.read(args.spec)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict = {"mode": args.mode}
    try:
        out.update(direct(spec, workdir))
        out.update(ledger_totals(Path(out["db"]), spec.source_id))
    except Exception as exc:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        out["error"] = f"{type(exc).__name__}: {exc}"
    print(RESULT_PREFIX + json.dumps(out, default=str), flush=True)
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())
