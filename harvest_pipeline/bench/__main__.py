"""CLI of the benchmark: ``python -m harvest_pipeline.bench --help`` (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from harvest_pipeline.bench.contenders import ORDER, parse_names

SECTIONS = ("rss", "upsert", "backfill", "defs_load", "daemon", "sources", "profile", "shared", "many", "big_page",
            "events")

# --quick: tiny sizes everywhere, one run, no warm-up (a smoke run, not a measurement).
QUICK = dict(records=2000, page_size=100, runs=1, warmup=0, rss_sizes="2000,20000", rss_page_size=500,
             upsert_rows=5000, upsert_existing=20000, upsert_window=150, upsert_window_existing=20000,
             backfill_days=3, backfill_records_per_day=50, backfill_modes="cli,direct", sources_levels="1,2",
             sources_records=2000, profile_records=5000, defs_sources=20, defs_runs=1, daemon_days=3,
             daemon_delay_ms=100, shared_levels="1,4", shared_rows=200, shared_windows=2,
             many_sources=10, many_delay_ms=500, many_timeout=600,
             big_page_mb=6, events_windows=10, events_runs=1)
FULL = dict(records=100_000, page_size=200, runs=5, warmup=1, rss_sizes="100000,1000000", rss_page_size=500,
            upsert_rows=100_000, upsert_existing=1_000_000, upsert_window=150, upsert_window_existing=2_000_000,
            backfill_days=365, backfill_records_per_day=150, backfill_modes="cli,direct",
            sources_levels="1,2,5,10,20", sources_records=10_000, profile_records=50_000, defs_sources=200,
            defs_runs=5, daemon_days=40, daemon_delay_ms=800, shared_levels="1,4,16", shared_rows=2000,
            shared_windows=4, many_sources=100, many_delay_ms=2000, many_timeout=1800,
            big_page_mb=40, events_windows=100, events_runs=3)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harvest_pipeline.bench",
        description="Benchmark OAI-PMH harvesting against the demo provider (see harvest_pipeline/bench/__init__.py).",
    )
    g = p.add_argument_group("the contender table")
    g.add_argument("--records", type=int, help=f"records in the benchmark window (default {FULL['records']:,})")
    g.add_argument("--page-size", type=int, help=f"records per ListRecords page (default {FULL['page_size']})")
    g.add_argument("--runs", type=int, help=f"measured runs per contender (default {FULL['runs']})")
    g.add_argument("--warmup", type=int, help="unmeasured fetch-only passes first (default 1)")
    g.add_argument("--only", help=f"comma list of contenders (default all: {','.join(ORDER)})")
    g.add_argument("--no-contenders", action="store_true", help="skip the contender table (sections only)")
    g.add_argument("--quick", action="store_true", help="tiny sizes, 1 run, no warm-up: a smoke run")

    s = p.add_argument_group("extra sections (each runs only when asked; --all runs them all)")
    s.add_argument("--all", action="store_true", help="every section below")
    s.add_argument("--big-page", dest="big_page", action="store_true",
                   help="peak RSS of fetching, parsing and mapping ONE page of --big-page-mb MB")
    s.add_argument("--big-page-mb", type=float, help="size of that page (default 40)")
    s.add_argument("--big-page-runs", type=int, default=1, help="runs (default 1)")
    s.add_argument("--events", action="store_true",
                   help="Dagster events per window: Dagster's default SQLite event log vs the project's dagster.yaml")
    s.add_argument("--events-windows", type=int, help="windows whose events are written (default 100)")
    s.add_argument("--events-runs", type=int, help="interleaved runs per event log (default 3)")
    s.add_argument("--rss", action="store_true", help="peak RSS of harvest_window on big windows (1M vs 100k)")
    s.add_argument("--rss-sizes", help="comma list of window sizes (default 100000,1000000)")
    s.add_argument("--rss-page-size", type=int, help="page size for the RSS windows (default 500)")
    s.add_argument("--rss-runs", type=int, default=1, help="runs per size and variant (default 1)")
    s.add_argument("--rss-cap-mb", type=float, default=8000,
                   help="kill a harvest child whose RSS passes this (default 8000; protects a shared machine)")
    s.add_argument("--rss-again", choices=("yes", "no"), default="yes",
                   help="also harvest each window again into the catalogue holding it (default yes)")
    s.add_argument("--rss-what-if", default='{"memory_limit": "256MB"}',
                   help='DuckDB settings for a what-if row per size, JSON (default {"memory_limit": "256MB"}; "none")')
    s.add_argument("--upsert", action="store_true", help="DuckDB merge throughput: N staged rows into M stored")
    s.add_argument("--upsert-rows", type=int, help="staged rows N (default 100,000)")
    s.add_argument("--upsert-existing", type=int, help="rows M already in the catalogue (default 1,000,000)")
    s.add_argument("--upsert-window", type=int, help="rows of the small window whose merge cost is compared (default 150; 0 skips)")
    s.add_argument("--upsert-window-existing", type=int,
                   help="stored rows of the big source it is merged into (default 2,000,000)")
    s.add_argument("--backfill", action="store_true", help="wall time of a backfill of daily windows via Dagster")
    s.add_argument("--backfill-days", type=int, help="windows in the backfill (default 365)")
    s.add_argument("--backfill-records-per-day", type=int, help="records per daily window (default 150)")
    s.add_argument("--backfill-modes", help="comma list of cli,direct (default both)")
    s.add_argument("--backfill-windows-per-run", type=int,
                   help="windows_per_run of the benchmark source for the cli mode (default: the source default, 30)")
    s.add_argument("--backfill-runs", type=int, default=1, help="runs per backfill mode (default 1)")
    s.add_argument("--defs-load", dest="defs_load", action="store_true",
                   help="load the definitions of many sources: HTTP requests per load, time vs a bare `import dagster`")
    s.add_argument("--defs-sources", type=int, help="sources in the definitions (default 200)")
    s.add_argument("--defs-runs", type=int, help="loads measured, each in a fresh process (default 5)")
    s.add_argument("--daemon", action="store_true",
                   help="a latency-bound source brought up to date by `dagster dev` alone (sensor on)")
    s.add_argument("--daemon-days", type=int, help="closed daily windows to catch up (default 40)")
    s.add_argument("--daemon-delay-ms", type=int, help="the demo's delay before every OAI-PMH response (default 800)")
    s.add_argument("--daemon-port", type=int, default=3390, help="UI port of the `dagster dev` it starts (default 3390)")
    s.add_argument("--sources", action="store_true", help="N sources harvested at once as separate processes")
    s.add_argument("--sources-levels", help="comma list of N (default 1,2,5,10,20)")
    s.add_argument("--sources-records", type=int, help="records per source window (default 10,000; 20 children x ~0.5 GB each)")
    s.add_argument("--sources-runs", type=int, default=1, help="runs per level (default 1)")
    s.add_argument("--sources-cold", action="store_true",
                   help="do not create the shared catalogue first (the children race to create it)")
    s.add_argument("--profile", action="store_true", help="profile harvest_window on one window, list hotspots")
    s.add_argument("--profile-records", type=int, help="records in the profiled window (default 50,000)")
    s.add_argument("--profiler", choices=("cprofile", "pyinstrument"), default="cprofile")
    s.add_argument("--profile-contender", choices=("harvest", "dagster", "client"), default="harvest",
                   help="which contender to profile (default harvest)")

    s.add_argument("--shared", action="store_true",
                   help="embedded file vs shared catalogue (PostgreSQL, DuckLake): W concurrent writer processes")
    s.add_argument("--shared-levels", help="comma list of W (default 1,4,16)")
    s.add_argument("--shared-rows", type=int, help="rows per window (default 2,000)")
    s.add_argument("--shared-windows", type=int, help="windows per writer (default 4: created, revised, created, revised)")
    s.add_argument("--shared-kinds", default="embedded,postgres,ducklake", help="comma list (default embedded,postgres,ducklake)")
    s.add_argument("--many-sources", dest="many", type=int, nargs="?", const=-1, metavar="N",
                   help="N latency-bound sources (default 100, --quick 10), one demo provider each on its own "
                        "loopback address, brought up to date at once by `dagster dev` alone")
    s.add_argument("--many-days", type=int, default=3, help="closed daily windows per source (default 3)")
    s.add_argument("--many-records-per-day", type=int, default=100, help="records per window (default 100)")
    s.add_argument("--many-page-size", type=int, default=50, help="records per ListRecords page (default 50)")
    s.add_argument("--many-delay-ms", type=int, help="delay before every OAI-PMH response (default 2000)")
    s.add_argument("--many-max-runs", default="shipped",
                   help="comma list of max_concurrent_runs to measure; 'shipped' = dagster.yaml as it is (default)")
    s.add_argument("--many-timeout", type=float, help="seconds one level may take (default 1800)")
    s.add_argument("--many-port", type=int, default=3391, help="UI port of the `dagster dev` it starts (default 3391)")
    s.add_argument("--many-catalogue", choices=("duckdb", "postgres"), default="duckdb",
                   help="the catalogue the runs write: the embedded file (default) or a shared one in a throwaway "
                        "PostgreSQL cluster on 127.0.0.1, whose connections are counted")
    s.add_argument("--many-pg-max-connections", type=int, default=100,
                   help="max_connections of that cluster (default 100, PostgreSQL's own default)")
    o = p.add_argument_group("output and housekeeping")
    o.add_argument("--json", dest="json_path", help="also write every number to this JSON file")
    o.add_argument("--workdir", help="scratch folder (default: a new temp folder, removed at the end)")
    o.add_argument("--keep", action="store_true", help="keep the scratch folder")
    o.add_argument("--timeout", type=float, default=3600, help="seconds one child run may take (default 3600)")
    return p


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill unset flags from --quick or the full defaults."""
    defaults = QUICK if args.quick else FULL
    for k, v in defaults.items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    if args.all:
        for name in SECTIONS:
            setattr(args, name, True)
    if args.many is True or args.many == -1:  # --all, or --many-sources without N
        args.many = args.many_sources
    return args


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def machine_line() -> str:
    try:
        import os

        cpus = os.cpu_count()
        load = ", load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    except (AttributeError, OSError):
        cpus, load = "?", ""
    return f"python {platform.python_version()}, {platform.machine()}, {cpus} cpus{load}"


def versions() -> str:
    from importlib import metadata

    out = []
    for dist in ("requests", "lxml", "duckdb", "pyarrow", "dagster", "sickle", "oaipmh-scythe"):
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist} (not installed)")
    return ", ".join(out)


def run_contender_table(args, workdir: Path, results: dict) -> dict:
    from harvest_pipeline.bench.measure import run_contenders
    from harvest_pipeline.bench.report import contender_table, dagster_overhead
    from harvest_pipeline.bench.spec import bench_provider

    names = parse_names(args.only)
    log(f"contenders: {', '.join(names)}; window of {args.records:,} records, page size {args.page_size}, "
        f"{args.runs} run(s) each")
    with bench_provider(records_per_day=args.records, page_size=args.page_size, workdir=workdir) as (provider, spec):
        spec_file = spec.write(workdir / "spec.json")
        log(f"  provider {spec.url}: window {spec.window_key} holds {spec.expected:,} records")
        summaries = run_contenders(names, spec, spec_file, workdir / "contenders", runs=args.runs,
                                   warmup=args.warmup, timeout=args.timeout, log=log, keep=args.keep,
                                   provider=provider)
    print()
    print(f"== Contenders: one window of {spec.expected:,} records (from={spec.from_param} until={spec.until_param}),"
          f" page size {args.page_size}, {args.runs} run(s) each, records/s over runs ==")
    print(contender_table(summaries))
    overhead = dagster_overhead(summaries)
    if overhead:
        print(overhead)
    h = summaries.get("harvest")
    if h and h.ok:
        loop, post = h.extra_median("loop_s"), h.extra_median("post_loop_s")
        if loop is not None and post is not None:
            print(f"harvest_window phases (median): token loop + staging {loop:.2f} s, after the last page "
                  f"(duplicate check, merge, ledger) {post:.2f} s")
    print("peak RSS = VmHWM (peak resident set since exec) of the contender's own child process (interpreter +"
          " imports + run).")
    results["contenders"] = {
        "records": spec.expected, "page_size": args.page_size, "runs": args.runs,
        "summaries": {n: s.as_dict() for n, s in summaries.items()},
    }
    return summaries


def main(argv: list[str] | None = None) -> int:
    args = resolve(build_parser().parse_args(argv))
    try:
        parse_names(args.only)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="harvest-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv[1:] if argv is None else argv,
                     "machine": machine_line(), "versions": versions(), "sections": {}}
    print(f"harvest_pipeline benchmark ({'--quick smoke run' if args.quick else 'full sizes'}): {results['machine']}")
    print(f"  {results['versions']}")
    summaries: dict = {}
    t0 = time.perf_counter()
    try:
        if not args.no_contenders:
            summaries = run_contender_table(args, workdir, results)
        for name in SECTIONS:
            if not getattr(args, name):
                continue
            module = __import__(f"harvest_pipeline.bench.{name}_section", fromlist=["run"])
            try:
                results["sections"][name] = module.run(args, workdir / name, log=log)
            except Exception as exc:  # noqa: BLE001 - one broken section must not hide the others
                import traceback

                traceback.print_exc()
                print(f"\n== {name}: FAILED: {type(exc).__name__}: {exc} ==")
                results["sections"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        from harvest_pipeline.bench.report import targets, targets_table

        print()
        print("== Targets ==")
        items = targets(summaries, results["sections"])
        print(targets_table(items))
        results["targets"] = [t.__dict__ for t in items]
        print(f"\n(total bench time {time.perf_counter() - t0:.0f} s; scratch {workdir}"
              f"{'' if args.keep or args.workdir else ', removed'})")
    finally:
        if args.json_path:
            Path(args.json_path).write_text(json.dumps(results, indent=1, default=str))
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
