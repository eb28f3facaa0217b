"""One writer of the --shared section: merges its own source's windows, prints JSON timings.

usage: python -m harvest_pipeline.bench.shared_writer WORKDIR SOURCE_ID WINDOWS ROWS GO_FILE
The catalogue comes from the environment (HARVEST_CATALOGUE, ...; HARVEST_DUCKDB_PATH for the
embedded file). Staging files are built first, untimed; the merges start when GO_FILE appears.
Window k holds ROWS records: even k creates new identifiers, odd k revises the previous window's
(so both the insert and the update paths of the merge are measured).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harvest_pipeline.bench.upsert_section import build_staging
from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.backend import CONFLICTS, run_write
from harvest_pipeline.store.merge import merge_staging


def main() -> int:
    workdir, source_id, windows, rows, go = sys.argv[1:6]
    workdir, windows, rows, go = Path(workdir), int(windows), int(rows), Path(go)
    base = sum(map(ord, source_id)) * 10_000_000  # identifiers of different writers never meet
    staged = []
    for k in range(windows):
        lo = base + (k // 2) * rows
        staged.append(build_staging(workdir / f"{source_id}-{k}.stage", lo, lo + rows, version=k % 2))
    with connect():  # schema ready before the clock starts (as after a worker's first window)
        pass
    (workdir / f"ready-{source_id}").touch()
    while not go.exists():
        time.sleep(0.005)
    latencies, started = [], time.time()
    for k, path in enumerate(staged):
        start = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(days=k)

        def merge(con, path=path, start=start, k=k):
            ledger.begin_window(con, source_id=source_id, window_start=start, window_end=start + timedelta(days=1),
                                partition_key=f"w{k}", run_id=f"bench-{k}", from_param=None, until_param=None)
            counts = merge_staging(con, path, source_id=source_id, window_start=start,
                                   window_end=start + timedelta(days=1), run_id=f"bench-{k}", attempt_id=f"bench-{k}")
            ledger.finish_window(con, source_id=source_id, window_start=start, status="verified",
                                 received=counts.received, created=counts.created, updated=counts.updated)
            return counts

        t = time.perf_counter()
        counts = run_write(connect, merge, what=f"bench writer {source_id} window {k}")
        latencies.append(time.perf_counter() - t)
        expected = "created" if k % 2 == 0 else "updated"
        if getattr(counts, expected) != rows:
            raise SystemExit(f"window {k}: expected {rows} {expected}, got {counts}")
    print(json.dumps({"source": source_id, "started": started, "ended": time.time(), "latencies": latencies,
                      "conflicts": CONFLICTS.conflicts, "rows": rows * windows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
