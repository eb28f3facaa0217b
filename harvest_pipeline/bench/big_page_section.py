"""--big-page: peak RSS of reading ONE page near the body-size cap (issue 10, item 1).

A demo provider serves one closed day as a single ListRecords page of about ``--big-page-mb`` MB
(page size = the day's records). A child process (contender ``page-rows``) does with it what the
harvest's page pipeline does: fetch through the transport, parse, map, build the Arrow rows (no
staging, no merge). The table shows the child's peak RSS (VmHWM), its RSS after the imports, and
the difference in multiples of the page's bytes: the blow-up. Pages above
``oai.parse.STREAM_PAGE_BYTES`` are parsed as a stream.
"""

from __future__ import annotations

import time
from pathlib import Path

from harvest_pipeline.bench.measure import Summary, check_count, run_child
from harvest_pipeline.bench.report import n0, n1, table
from harvest_pipeline.bench.spec import bench_provider, provider_trouble

# Bytes of one demo oai_dc record in a ListRecords page (measured on the demo corpus).
DEMO_RECORD_BYTES = 1306


def run(args, workdir: Path, *, log=print) -> dict:
    mb = float(args.big_page_mb)
    records = max(1, int(mb * 1e6 / DEMO_RECORD_BYTES))
    runs = args.big_page_runs or 1
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"big page: one page of {records:,} records (about {mb:g} MB)")
    t = time.perf_counter()
    summary = Summary("page-rows")
    with bench_provider(records_per_day=records, page_size=records, workdir=workdir) as (provider, spec):
        log(f"  provider ready in {time.perf_counter() - t:.1f} s, window holds {spec.expected:,}")
        spec_file = spec.write(workdir / "spec.json")
        for r in range(runs):
            s = run_child("page-rows", spec_file, workdir / f"run-{r}", timeout=args.timeout)
            check_count(s, spec)
            trouble = provider_trouble(provider)
            if trouble:
                raise RuntimeError(f"{trouble}; big-page run: {s.error or 'ok'}")
            summary.samples.append(s)
            log("  " + (f"ERROR {s.error}" if s.error else
                        f"{s.records:,} records, {s.data.get('mb')} MB in {s.data.get('pages')} page(s), "
                        f"{s.seconds:.1f} s, peak RSS {s.data.get('rss_peak_mb')} MB"))
    rows, out = [], {"records": records, "runs": []}
    for s in summary.samples:
        peak, base, page_mb = s.data.get("rss_peak_mb"), s.data.get("rss_base_mb"), s.data.get("mb")
        grew = peak - base if peak and base else None
        ratio = grew / page_mb if grew and page_mb else None
        rows.append([n0(s.records), n1(page_mb), s.data.get("pages"), n1(s.seconds), n1(base), n1(peak), n1(grew),
                     f"{ratio:.1f}x" if ratio else "", (s.error or "")[:80]])
        out["runs"].append({"page_mb": page_mb, "pages": s.data.get("pages"), "seconds": s.seconds, "rss_base_mb": base,
                            "rss_peak_mb": peak, "grew_mb": grew, "blowup": ratio, "error": s.error})
    print()
    print(f"== One big page: fetch, parse, map and Arrow rows of a single ListRecords page ({runs} run(s)) ==")
    print(table(["records", "page MB", "pages", "seconds", "RSS after imports MB", "peak RSS MB", "grew MB",
                 "grew / page", "error"], rows, right={0, 1, 2, 3, 4, 5, 6, 7}))
    print("peak RSS = VmHWM of the child; grew = peak minus the RSS after its imports; grew / page = the blow-up.")
    return out
