"""--rss: peak RSS of our full harvest of ONE big window (1,000,000 vs 100,000 records).

Each size gets its own demo provider (``--days 1 --records-per-day N``, clock frozen after the
day, so the window is closed). ``harvest_window`` runs in a child process per run; the table shows
its peak RSS (VmHWM: ``ru_maxrss`` since exec) and the sampled peak of each phase: the token loop (pages -> staging file) and
the merge (staging -> catalogue, one transaction).

Then the same window harvested again into the catalogue the first as-is run left (row "again":
every record found already stored, unchanged; the merge compares the stored and received
fingerprints of the whole window, which ran out of memory at 1,000,000 records before the fourth
round). ``--rss-again no`` skips it.

A what-if row per size (``--rss-what-if``, default ``{"memory_limit": "256MB"}``) runs the same
harvest with those DuckDB settings injected into every ``duckdb.connect`` of the child (bench-only
monkeypatch, no project file changes), to show what bounding DuckDB's buffer pool would buy.
A child whose RSS passes ``--rss-cap-mb`` (default 8000) is killed and reported as "> cap", so the
benchmark cannot starve a shared machine.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from harvest_pipeline.bench.contenders import DUCKDB_CONFIG_ENV
from harvest_pipeline.bench.measure import Summary, check_count, run_child
from harvest_pipeline.bench.report import n0, n1, stats_cells, table
from harvest_pipeline.bench.spec import bench_provider, provider_trouble

TARGET_MB = 250.0  # issue 10: any window size
FLAT_RATIO = 1.25  # "flat": the big window's peak within 25% of the small one's


def _phase_peak(summary: Summary, *phases: str) -> float | None:
    vals = [max((s.data.get("rss_phases_mb") or {}).get(p, 0) for p in phases) for s in summary.ok]
    vals = [v for v in vals if v]
    return max(vals) if vals else None


def _split_at_peak(summary: Summary) -> str:
    """anon / file MB of the highest sample of the run with the highest peak."""
    runs = [s for s in summary.ok if s.data.get("rss_split_mb")]
    if not runs:
        return ""
    split = max(runs, key=lambda s: s.data.get("rss_peak_mb") or 0).data["rss_split_mb"]
    return f"{split['anon']:,.0f} / {split['file']:,.0f}"


def run(args, workdir: Path, *, log=print) -> dict:
    sizes = [int(x) for x in str(args.rss_sizes).split(",") if x.strip()]
    runs = getattr(args, "rss_runs", None) or 1
    cap = getattr(args, "rss_cap_mb", None) or 8000.0
    what_if_raw = getattr(args, "rss_what_if", None)
    what_if = None if what_if_raw in ("none", "") else json.loads(what_if_raw or '{"memory_limit": "256MB"}')
    variants = [("as-is", None)] + ([("what-if " + ",".join(f"{k}={v}" for k, v in what_if.items()), what_if)]
                                    if what_if else [])
    rows, out = [], {"sizes": {}, "page_size": args.rss_page_size, "runs": runs, "cap_mb": cap}
    workdir.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        log(f"rss: window of {n:,} records, page size {args.rss_page_size}")
        t = time.perf_counter()
        with bench_provider(records_per_day=n, page_size=args.rss_page_size, workdir=workdir) as (provider, spec):
            log(f"  provider ready in {time.perf_counter() - t:.1f} s, window holds {spec.expected:,}")
            spec_file = spec.write(workdir / f"spec-{n}.json")
            again = [("again", None)] if getattr(args, "rss_again", "yes") != "no" else []
            for label, settings in variants[:1] + again + variants[1:]:
                summary = Summary(f"harvest {n} {label}")
                catalogue_mb = []  # the catalogue file after each run: what the window costs on disk
                for r in range(runs):
                    env = {DUCKDB_CONFIG_ENV: json.dumps(settings)} if settings else None
                    run_spec = spec_file
                    if label == "again":  # into the catalogue of the as-is run r
                        first = sorted((workdir / f"{n}-as-is-{r}").glob("catalogue-*/harvest.duckdb"))
                        if not first:
                            continue
                        spec.extra["db_path"] = str(first[0])
                        run_spec = spec.write(workdir / f"spec-{n}-again-{r}.json")
                        spec.extra.pop("db_path")
                    run_dir = workdir / f"{n}-{label.split()[0]}-{r}"
                    s = run_child("harvest", run_spec, run_dir, timeout=args.timeout,
                                  env=env, rss_cap_mb=cap)
                    check_count(s, spec)
                    trouble = provider_trouble(provider)
                    if trouble:
                        raise RuntimeError(f"{trouble}; {n:,}-record {label} run: {s.error or 'ok'}")
                    summary.samples.append(s)
                    written = first if label == "again" else sorted(run_dir.glob("catalogue-*/harvest.duckdb"))
                    if written and written[0].exists():
                        catalogue_mb.append(written[0].stat().st_size / 1e6)
                    log(f"  {label}: " + (f"ERROR {s.error}" if s.error else
                                          f"{s.records:,} records in {s.seconds:.1f} s, peak RSS {s.data.get('rss_peak_mb')} MB"))
                killed = any(s.data.get("killed") for s in summary.samples)
                peak = summary.rss_peak_mb
                rows.append([
                    f"{n:,}", label, n0(summary.records) if summary.ok else "ERROR",
                    *stats_cells(summary.rate),
                    (f"> {cap:,.0f} (killed)" if killed else n1(peak)),
                    n1(_phase_peak(summary, "token_loop")), n1(_phase_peak(summary, "merge", "after_merge")),
                    _split_at_peak(summary),
                    n1(statistics.median(catalogue_mb)) if catalogue_mb else "",
                    (summary.errors[-1][:90] if summary.errors else ""),
                ])
                out["sizes"].setdefault(str(n), {})[label] = {
                    "peak_mb": peak, "killed": killed, "summary": summary.as_dict(),
                    "token_loop_mb": _phase_peak(summary, "token_loop"),
                    "merge_mb": _phase_peak(summary, "merge", "after_merge"),
                    "anon_file_mb_at_peak": _split_at_peak(summary),
                    "catalogue_mb": statistics.median(catalogue_mb) if catalogue_mb else None,
                }
    print()
    print(f"== Peak RSS of harvest_window on one window (page size {args.rss_page_size}, {runs} run(s) each) ==")
    print(table(["window", "variant", "records", "rec/s median", "min", "max", "peak RSS MB",
                 "token loop MB", "merge MB", "anon / file MB", "catalogue MB", "error"], rows,
                right={2, 3, 4, 5, 6, 7, 8, 9, 10}))
    print("peak RSS = VmHWM of the child; token loop / merge = peaks sampled every 50 ms in each phase;\n"
          "anon / file = the highest sample split into the process's own memory and file-backed pages\n"
          "(mostly shared libraries' code, shared with every other process that maps them);\n"
          "catalogue MB = the DuckDB file after the run (again: the first run's file, written twice).")
    out["target"] = _target(sizes, out)
    return out


def _target(sizes: list[int], out: dict) -> dict:
    name = "1M-record window peak RSS < 250 MB"
    if not sizes:
        return {"name": name, "verdict": "n/a", "numbers": "no sizes"}
    big, small = max(sizes), min(sizes)
    b = out["sizes"][str(big)]["as-is"]
    s = out["sizes"][str(small)]["as-is"]
    note = "" if big >= 1_000_000 else f" (measured at {big:,}, not 1M)"
    if b["killed"]:
        return {"name": name, "verdict": "MISS", "numbers": f"{big:,}-record window passed the {out['cap_mb']:,.0f} MB cap{note}"}
    if not b["peak_mb"] or b["summary"]["errors"]:
        errors = b["summary"]["errors"]
        return {"name": name, "verdict": "n/a", "numbers": f"the {big:,}-record run failed: {errors[-1] if errors else '?'}"}
    flat = (s["peak_mb"] and not s["killed"] and b["peak_mb"] <= FLAT_RATIO * s["peak_mb"])
    ok = b["peak_mb"] < TARGET_MB and (flat or big == small)
    ratio = f", {b['peak_mb'] / s['peak_mb']:.2f}x the {small:,} window's {s['peak_mb']:.0f} MB" if s["peak_mb"] and big != small else ""
    again = out["sizes"][str(big)].get("again")
    if again:  # the same window harvested again: the same target (any catalogue)
        failed = again["killed"] or not again["peak_mb"] or again["summary"]["errors"]
        ok = ok and not failed and again["peak_mb"] < TARGET_MB
        ratio += "; again: " + ("failed" if failed else f"{again['peak_mb']:.0f} MB")
    return {"name": name, "verdict": "PASS" if ok else "MISS",
            "numbers": f"{big:,} records: {b['peak_mb']:.0f} MB{ratio} (flat = <= {FLAT_RATIO}x){note}"}

