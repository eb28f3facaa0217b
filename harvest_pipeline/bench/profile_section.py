"""--profile: where our full harvest spends its time, on one window (default 50,000 records).

Runs the ``harvest`` contender (``--profile-contender dagster`` for the Dagster path) once in a child under cProfile (default) or pyinstrument
(``--profiler pyinstrument``; ``pip install pyinstrument``), then prints:

* the time split by stage, from cumulative times of the project's own functions (HTTP fetch incl.
  waiting for the server, XML parse, format mapping, content hash, Arrow rows, staging writes,
  cursor reads, merge, catalogue opens);
* the top functions by self time and by cumulative time;
* suggestions, each tied to the measured share of its stage.

cProfile cannot see inside DuckDB (a pybind11 module): time spent in DuckDB shows up as the
*self* time of the project function that called ``con.execute`` (``write_page``, ``merge_staging``,
``harvest_window`` for the merge's COMMIT). cProfile also inflates pure-Python stages (mapping,
parsing loops) relative to C ones; pyinstrument (sampling) is the cross-check.
"""

from __future__ import annotations

import os
import pstats
from pathlib import Path

from harvest_pipeline.bench.measure import check_count, run_child
from harvest_pipeline.bench.report import table
from harvest_pipeline.bench.run_one import PROFILE_ENV, PROFILER_ENV
from harvest_pipeline.bench.spec import bench_provider

# (stage, [(path suffix, function name), ...]) -> cumulative seconds (first match that exists wins).
STAGES = [
    ("HTTP fetch (request + wait for server + read)", [("oai/client.py", "_get"), ("http/transport.py", "request")]),
    ("page handed over by the prefetch thread (writer waits)", [("harvest/prefetch.py", "prefetch")]),
    ("XML parse + record extraction (lxml, tostring)", [("oai/parse.py", "parse_list_records")]),
    ("metadata serialization (exclusive C14N, in page_rows)", [("oai/parse.py", "serialize_records")]),
    ("format mapping (formats/, map_record)", [("formats/registry.py", "map_record")]),
    ("content hash (blake2b)", [("harvest/rows.py", "content_hash")]),
    ("staging commit (a Parquet file + the cursor, synced)", [("store/staging.py", "commit_pages")]),
    ("cursor read per page (progress events, in memory)", [("store/staging.py", "cursor")]),
    ("merge_staging (DuckDB classify/upsert/history)", [("store/merge.py", "merge_staging")]),
    ("catalogue/staging opens + schema", [("store/connection.py", "connect"), ("store/connection.py", "open_with_retry")]),
]
ROWS = ("harvest/rows.py", "page_rows")  # includes mapping and hash; its remainder is Arrow/row building
WINDOW = ("harvest/window.py", "harvest_window")


def _find(stats: pstats.Stats, suffix: str, func: str) -> tuple[float, float, int] | None:
    """(cumulative s, self s, calls) of a function, or None."""
    best = None
    for (filename, _line, name), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        if name == func and filename.replace(os.sep, "/").endswith(suffix) and (best is None or ct > best[0]):
            best = (ct, tt, nc)
    return best


def stage_times(stats: pstats.Stats, total: float) -> list[tuple[str, float, str]]:
    out = []
    found: dict[str, float] = {}
    for stage, candidates in STAGES:
        hit = None
        for suffix, func in candidates:
            hit = _find(stats, suffix, func)
            if not hit:
                continue
            out.append((stage, hit[0], f"{func} x{hit[2]}"))
            found[stage] = hit[0]
            break
    rows = _find(stats, *ROWS)
    if rows:
        mapped = sum(t for name, t in found.items() if name.startswith(("format mapping", "content hash", "metadata serial")))
        out.append(("Arrow/row building in page_rows (excl. serialization, mapping, hash)", max(rows[0] - mapped, 0.0),
                    f"page_rows x{rows[2]}"))
    win = _find(stats, *WINDOW)
    if win:
        out.append(("harvest_window self (merge COMMIT, BEGINs; DuckDB)", win[1], "self time"))
    accounted = sum(t for _, t, _ in out)
    out.append(("everything else", max(total - accounted, 0.0), ""))
    return out


def suggestions(stages: list[tuple[str, float, str]], total: float, wall_s: float, cpu_s: float | None,
                prefetching: bool = False) -> list[str]:
    share = {name: t / total for name, t, _ in stages} if total else {}

    def pct(prefix: str) -> float:
        return 100 * sum(v for k, v in share.items() if k.startswith(prefix))

    out = []
    if prefetching:
        out.append(
            f"Fetch + parse + rows already run in a prefetch thread (harvest/prefetch.py), so the writer thread's"
            f" {pct('staging commit') + pct('cursor read') + pct('merge_staging') + pct('harvest_window self'):.0f}%"
            " (staging files, DuckDB) is now the critical path: CPU "
            + (f"{cpu_s:.1f} s in {wall_s:.1f} s wall. " if cpu_s and wall_s else ". ")
            + "The next overlap is to let the prefetch depth cover a whole staging batch (see 2), and to move"
            " mapping/Arrow building off the GIL-holding path (a process pool) if the writer still waits.")
    else:
        idle = max(0.0, (1 - cpu_s / wall_s) * 100) if cpu_s and wall_s else None
        out.append(
            f"Overlap fetching with parse+write: HTTP is {pct('HTTP'):.0f}% of the profile"
            + (f" and the harvest process is idle {idle:.0f}% of the wall time (CPU {cpu_s:.1f} s of {wall_s:.1f} s)"
               if idle is not None else "")
            + ". A one-page prefetch thread (bounded queue of 1-2 pages) lets the socket read of page k+1 run while"
            " page k is parsed, mapped and committed; requests and lxml release the GIL while waiting/parsing. The"
            " durable cursor is unaffected if only the fetch is ahead, never the commit.")
    out.append(
        f"Staging commits are {pct('staging commit'):.0f}% (a Parquet file and the cursor per commit, each"
        " synced; commits batch pages up to HARVEST_STAGING_COMMIT_ROWS rows or 2 s), the cursor read for"
        f" progress events {pct('cursor read'):.0f}% (in memory).")
    out.append(
        f"Format mapping is {pct('format mapping'):.0f}%: it walks the lxml tree in Python per field (text(), clean(),"
        " dedupe()). Options: one pass over the children dispatching on tag (instead of one lookup per field),"
        " cache namespace-qualified tag names, skip normalization of fields the catalogue does not index, or"
        " map in a worker process (the element would have to be re-parsed from metadata_xml there).")
    out.append(
        f"Arrow construction is {pct('Arrow'):.0f}%: page_rows appends to 28 Python lists per record via dict"
        " lookups. Build each column with one list comprehension over the page's records, or accumulate"
        " several pages and call pa.table once per batch; let DuckDB compute in_window from datestamp in SQL.")
    out.append(
        f"XML parse + extraction is {pct('XML parse'):.0f}% and the exclusive C14N of every <metadata> child"
        f" {pct('metadata serial'):.0f}% (in page_rows for the harvest; inside the parse for the client). Storing"
        " the raw bytes of each <metadata> child instead would change every stored record's bytes, and so its"
        " fingerprint in the merge: an upgrade would then need the merge to compare canonical forms.")
    out.append(
        f"Merge: merge_staging + its COMMIT are {pct('merge_staging') + pct('harvest_window self'):.0f}% and its"
        " temp tables copy every column (incoming = SELECT * with a window function, classified = i.* + action),"
        " so memory grows with the window (see --rss). Classify on a narrow projection (identifier, page_number,"
        " seq, datestamp, deleted, content_hash), then INSERT ... SELECT the wide columns straight from the"
        " attached staging table joined to that; SET memory_limit / temp_directory on the catalogue connection;"
        " for million-record windows merge in identifier-hash chunks inside the same transaction.")
    out.append(
        f"Opens: catalogue/staging connects + ensure_schema are {pct('catalogue'):.0f}% per window (more for small"
        " windows: it is per-window overhead). Cache 'schema is current' per process after the first check.")
    return out


def run(args, workdir: Path, *, log=print) -> dict:
    n = args.profile_records
    workdir.mkdir(parents=True, exist_ok=True)
    profiler = getattr(args, "profiler", "cprofile")
    contender = getattr(args, "profile_contender", None) or "harvest"
    suffix = "txt" if profiler == "pyinstrument" else "prof"
    path = workdir / f"{contender}.{suffix}"
    log(f"profile: {contender} on a window of {n:,} records under {profiler}")
    with bench_provider(records_per_day=n, page_size=args.page_size, workdir=workdir) as (_provider, spec):
        spec_file = spec.write(workdir / "spec.json")
        sample = run_child(contender, spec_file, workdir / "run", timeout=args.timeout,
                           env={PROFILE_ENV: str(path), PROFILER_ENV: profiler})
        check_count(sample, spec)
    if sample.error:
        raise RuntimeError(f"profiled run failed: {sample.error}")
    wall, cpu = sample.seconds, sample.data.get("cpu_s")
    out: dict = {"records": sample.records, "seconds": wall, "cpu_s": cpu, "profiler": profiler, "contender": contender}
    print()
    print(f"== Profile of the {contender} contender on one window of {sample.records:,} records (page size {args.page_size},"
          f" {profiler}): {wall:.1f} s wall under the profiler, {cpu or 0:.1f} s CPU in the harvest process ==")
    if profiler == "pyinstrument":
        text = path.read_text()
        lines = text.splitlines()
        print("\n".join(lines[:80]) + ("\n..." if len(lines) > 80 else ""))
        out["pyinstrument"] = text
        return out
    stats = pstats.Stats(str(path))
    try:
        threads = int(Path(str(path) + ".threads").read_text())
    except (OSError, ValueError):
        threads = 1
    prefetching = _find(stats, "harvest/prefetch.py", "work") is not None or threads > 1
    total = stats.total_tt
    stages = stage_times(stats, total)
    rows = [[name, f"{t:.2f}", f"{100 * t / total:.1f}" if total else "-", how] for name, t, how in stages]
    print(f"{threads} thread(s) profiled" + (" (the harvest fetches/parses in a prefetch thread: seconds below add up"
                                              " over threads, so their sum exceeds the wall time)" if threads > 1 else ""))
    print(table(["stage", "seconds", "% of profiled time", "measured as"], rows, right={1, 2}))
    top_self = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:15]
    print("\nTop 15 by self time (DuckDB work shows as the self time of its caller):")
    print(table(["function", "calls", "self s", "cum s"],
                [[_short(k), v[1], f"{v[2]:.3f}", f"{v[3]:.3f}"] for k, v in top_self], right={1, 2, 3}))
    project = [(k, v) for k, v in stats.stats.items() if "harvest_pipeline" in k[0] and "/bench/" not in k[0]]
    top_cum = sorted(project, key=lambda kv: kv[1][3], reverse=True)[:15]
    print("\nTop 15 project functions by cumulative time:")
    print(table(["function", "calls", "self s", "cum s"],
                [[_short(k), v[1], f"{v[2]:.3f}", f"{v[3]:.3f}"] for k, v in top_cum], right={1, 2, 3}))
    print("\nSuggestions (not implemented; numbers from this profile):")
    tips = suggestions(stages, total, wall, cpu, prefetching)
    for i, tip in enumerate(tips, 1):
        print(f"  {i}. {tip}")
    out.update({"stages": [{"stage": s, "seconds": t, "how": h} for s, t, h in stages], "suggestions": tips,
                "top_self": [[_short(k), v[1], v[2], v[3]] for k, v in top_self]})
    return out


def _short(key) -> str:
    filename, line, name = key
    f = filename.replace(os.sep, "/")
    for marker in ("/harvest_pipeline/", "/site-packages/", "/lib/python"):
        if marker in f:
            f = f.split(marker, 1)[1]
            break
    return f"{name} ({f}:{line})" if filename != "~" else name
