"""--sources: N sources harvested at once on one machine, each as its own process.

Starts max(N) demo providers, each on its own loopback address (127.0.0.1, 127.0.0.2, ...: a
different host per source, as in real life; 127.0.0.1 with distinct ports if an address cannot
be bound), each serving one closed window of ``--sources-records`` records. For each level N
(default 1, 2, 5, 10, 20) it launches N ``run_one harvest`` children against N different
providers, all writing to ONE shared catalogue (as a deployment does: windows of different sources
run side by side and their merges queue on the catalogue's lock). The children do their imports
first and start their timed part at the same wall-clock instant (``--start-at``).

The shared catalogue is created (schema included) before each level, as it exists in a running
deployment; ``--sources-cold`` skips that, and the children then race to create it.

The transport's per-host politeness (HttpSettings: max_concurrent_requests per host,
min_request_interval_seconds) is left at the source defaults and applies per host; the lock files
live beside the shared catalogue, as in production. Reported per level: total records/s =
all records / (last end - common start), per-source records/s, and the machine's CPU busy share
over the same interval (the demo providers run on the same cores: they are part of the load).
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from pathlib import Path

from harvest_pipeline.bench.measure import Sample, Stats, check_count, collect, spawn
from harvest_pipeline.bench.report import n0, n1, table
from harvest_pipeline.bench.spec import bench_provider

SATURATED = 80.0  # CPU % (bench's own or the machine's, the higher) from which the cores count as saturated
GROWTH = 1.05  # below saturation, each level must beat the previous by 5%
HOLD = 0.8  # after saturation, throughput must stay within 80% of the best level


def _cpu_times():
    try:
        import psutil

        return psutil.cpu_times()
    except Exception:  # noqa: BLE001
        return None


def _busy_percent(a, b) -> float | None:
    if a is None or b is None:
        return None
    total = sum(b) - sum(a)
    idle = (b.idle - a.idle) + (getattr(b, "iowait", 0) - getattr(a, "iowait", 0))
    return 100.0 * (total - idle) / total if total > 0 else None


def _http_settings_note() -> str:
    try:
        from harvest_pipeline.sources.registry import HttpSettings

        h = HttpSettings()
        keys = [k for k in ("max_concurrent_requests", "min_request_interval_seconds") if hasattr(h, k)]
        return ", ".join(f"{k}={getattr(h, k)}" for k in keys) or "no politeness settings exposed"
    except Exception:  # noqa: BLE001
        return "no HttpSettings in this version"


def _start_providers(stack: ExitStack, n: int, records: int, page_size: int, workdir: Path, log) -> list:
    specs = []
    for k in range(n):
        host = f"127.0.0.{k + 1}"
        try:
            provider, spec = stack.enter_context(bench_provider(
                records_per_day=records, page_size=page_size, host=host, workdir=workdir, startup_timeout=120))
        except RuntimeError:
            log(f"  cannot bind {host}; using 127.0.0.1 with its own port")
            provider, spec = stack.enter_context(bench_provider(records_per_day=records, page_size=page_size,
                                                                workdir=workdir, startup_timeout=120))
        spec.source_id = f"src{k + 1:02d}"
        spec.extra = {"provider_pid": provider.proc.pid}
        specs.append(spec)
    return specs


def _process_cpu(pids: list[int]) -> float | None:
    try:
        import psutil

        total = 0.0
        for pid in pids:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        return total
    except Exception:  # noqa: BLE001
        return None


def run_level(specs, n: int, folder: Path, timeout: float, log, *, cold: bool = False) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "data" / "harvest.duckdb"
    if not cold:
        # The steady state: the catalogue exists. (With --sources-cold every child races to create it:
        # concurrent first opens of a new DuckDB file fail with "exists, but it is not a valid DuckDB
        # database file", a cold-start race of the harvest core that this bench found.)
        from harvest_pipeline.store import connect

        with connect(db):
            pass
    files = []
    provider_pids = [spec.extra["provider_pid"] for spec in specs[:n]]
    for spec in specs[:n]:
        spec.extra["db_path"] = str(db)
        files.append(spec.write(folder / f"spec-{spec.source_id}.json"))
    start_at = time.time() + 2.0 + 0.35 * n  # time for every child's imports on a small machine
    procs = [(spec, spawn("harvest", f, folder / spec.source_id, start_at=start_at)) for spec, f in zip(specs, files)]
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    cpu0 = _cpu_times()
    prov0 = _process_cpu(provider_pids)
    samples: list[Sample] = []
    for spec, proc in procs:
        s = collect("harvest", proc, folder / spec.source_id, timeout)
        check_count(s, spec)
        samples.append(s)
    cpu1 = _cpu_times()
    prov1 = _process_cpu(provider_pids)
    ok = [s for s in samples if not s.error]
    if not ok:
        return {"n": n, "error": f"all {len(samples)} failed, e.g. {samples[0].error}" if samples else "no child"}
    begin = min(s.data["started_at"] for s in ok)
    end = max(s.data["ended_at"] for s in ok)
    records = sum(s.records for s in ok)
    wall = end - begin
    late = max((s.data.get("late_s") or 0) for s in ok)
    ncpu = os.cpu_count() or 1
    own = sum(s.data.get("cpu_s") or 0 for s in ok) + ((prov1 - prov0) if prov0 is not None and prov1 is not None else 0)
    return {
        "own_cpu_pct": 100.0 * own / (wall * ncpu) if wall > 0 else None,
        "n": n, "records": records, "wall_s": wall, "rate": records / wall if wall > 0 else 0.0,
        "per_source": Stats.of(s.rate for s in ok).median, "cpu_busy_pct": _busy_percent(cpu0, cpu1),
        "errors": [s.error for s in samples if s.error], "late_s": late,
        "rss_peak_mb": max((s.data.get("rss_peak_mb") or 0) for s in samples),
    }


def run(args, workdir: Path, *, log=print) -> dict:
    levels = sorted({int(x) for x in str(args.sources_levels).split(",") if x.strip()})
    runs = getattr(args, "sources_runs", None) or 1
    records = args.sources_records
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict = {"levels": {}, "records_per_source": records, "politeness": _http_settings_note(), "runs": runs}
    rows = []
    with ExitStack() as stack:
        log(f"sources: starting {max(levels)} demo providers of {records:,} records each")
        specs = _start_providers(stack, max(levels), records, args.page_size, workdir, log)
        for n in levels:
            results = []
            for r in range(runs):
                res = run_level(specs, n, workdir / f"n{n}-{r}", args.timeout, log,
                                cold=getattr(args, "sources_cold", False))
                results.append(res)
                log(f"  {n} source(s): " + (f"ERROR {res['error']}" if res.get("error") else
                                            f"{res['records']:,} records in {res['wall_s']:.1f} s = {res['rate']:,.0f} rec/s,"
                                            f" CPU busy {n1(res['cpu_busy_pct'])}%"
                                            + (f", {len(res['errors'])} failed" if res["errors"] else "")))
            ok = [x for x in results if not x.get("error")]
            rate = Stats.of(x["rate"] for x in ok)
            cpu = Stats.of(x["cpu_busy_pct"] for x in ok if x.get("cpu_busy_pct") is not None)
            own = Stats.of(x["own_cpu_pct"] for x in ok if x.get("own_cpu_pct") is not None)
            per = Stats.of(x["per_source"] for x in ok)
            failed = sum(len(x.get("errors") or []) for x in ok) + (len(results) - len(ok))
            rows.append([n, f"{ok[-1]['records']:,}" if ok else "ERROR", *([n0(rate.median), n0(rate.min), n0(rate.max)]
                         if rate else ["-", "-", "-"]), n0(per.median) if per else "-", n1(own.median) if own else "-",
                         n1(cpu.median) if cpu else "-",
                         n1(max((x.get("rss_peak_mb") or 0) for x in ok)) if ok else "-", failed or ""])
            out["levels"][str(n)] = {"results": results, "rate": rate.as_dict() if rate else None,
                                     "cpu_busy_pct": cpu.median if cpu else None,
                                     "own_cpu_pct": own.median if own else None}
    print()
    print(f"== {', '.join(map(str, levels))} sources at once: one window of {records:,} records per source, "
          f"separate processes, one shared catalogue ({runs} run(s) per level) ==")
    print(table(["sources", "records", "total rec/s median", "min", "max", "per-source rec/s", "bench CPU %",
                 "machine CPU %", "max child RSS MB", "failed"], rows))
    print(f"politeness (per host, source defaults): {out['politeness']}; each source has its own host 127.0.0.k.")
    print("bench CPU % = CPU seconds of the harvest children + their demo providers / (wall x cores); machine CPU %"
          " = every process on the machine (other work included).")
    if not getattr(args, "sources_cold", False):
        print("The shared catalogue is created before each level (steady state); --sources-cold lets the children"
              " race to create it.")
    errs = sorted({e for v in out["levels"].values() for x in v["results"] for e in (x.get("errors") or [])})
    for e in errs[:3]:
        print(f"failed child: {e[:300]}")
    out["target"] = _target(out)
    return out


def _target(out: dict) -> dict:
    name = "throughput grows with sources until CPU saturates"
    # Saturated = the cores are busy, by the bench's own processes or by anything else on the machine.
    pts = [(int(n), v["rate"]["median"], max((c for c in (v["own_cpu_pct"], v["cpu_busy_pct"]) if c is not None),
                                              default=None))
           for n, v in out["levels"].items() if v["rate"]]
    pts.sort()
    if len(pts) < 2:
        return {"name": name, "verdict": "n/a", "numbers": "needs two levels or more"}
    ok = True
    best = 0.0
    saturated = False
    for i, (n, rate, cpu) in enumerate(pts):
        if i and not saturated and rate < GROWTH * pts[i - 1][1]:
            ok = False
        if saturated and rate < HOLD * best:
            ok = False
        best = max(best, rate)
        if cpu is not None and cpu >= SATURATED:
            saturated = True
    numbers = "; ".join(f"{n}: {rate:,.0f} rec/s at {n1(cpu)}% CPU" for n, rate, cpu in pts)
    return {"name": name, "verdict": "PASS" if ok else "MISS",
            "numbers": numbers + f" (grow >= {GROWTH:.2f}x per level below {SATURATED:.0f}% CPU, then hold >= {HOLD:.0%} of best)"}
