"""Plain-text tables: the contender table, the sections' tables and the PASS/MISS targets."""

from __future__ import annotations

from dataclasses import dataclass

from harvest_pipeline.bench.contenders import BASELINE, CONTENDERS
from harvest_pipeline.bench.measure import Stats, Summary

# The header of the contender table; the smoke test looks for it.
CONTENDER_HEADER = ["contender", "records", "rec/s median", "min", "max", "peak RSS MB", "x fetch-only"]


def table(headers: list[str], rows: list[list], *, right: set[int] | None = None) -> str:
    """A fixed-width table; columns in `right` (default: all but the first) are right-aligned."""
    right = set(range(1, len(headers))) if right is None else right
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(r):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(cells[0]), rule, *(fmt(r) for r in cells[1:])])


def n0(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def n1(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def n2(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}"


def contender_table(summaries: dict[str, Summary]) -> str:
    base = summaries.get(BASELINE)
    base_rate = base.rate.median if base and base.rate else None
    rows = []
    for name, s in summaries.items():
        label = f"{name} ({CONTENDERS[name].label})" if name in CONTENDERS else name
        r = s.rate
        if r is None:
            err = s.errors[-1] if s.errors else "no result"
            rows.append([label, "ERROR", err[:70], "", "", n1(s.rss_peak_mb), ""])
            continue
        ratio = f"{r.median / base_rate:.2f}" if base_rate else "-"
        note = f" ({len(s.errors)} failed)" if s.errors else ""
        rows.append([label, f"{s.records:,}{note}", n0(r.median), n0(r.min), n0(r.max), n1(s.rss_peak_mb), ratio])
    return table(CONTENDER_HEADER, rows)


def dagster_overhead(summaries: dict[str, Summary]) -> str | None:
    """Dagster's cost per window: run time minus the direct harvest_window time (medians)."""
    d, h = summaries.get("dagster"), summaries.get("harvest")
    if not d or not d.seconds:
        return None
    lines = []
    inner = d.extra_median("harvest_s")
    setup = d.extra_median("setup_s")
    if h and h.seconds:
        lines.append(
            f"Dagster overhead per window: {d.seconds.median - h.seconds.median:.2f} s "
            f"(execute_in_process median {d.seconds.median:.2f} s vs harvest_window direct {h.seconds.median:.2f} s)"
        )
    if inner is not None:
        lines.append(f"  = run machinery {d.seconds.median - inner:.2f} s (execute_in_process minus harvest_window's own"
                     f" clock inside the run, {inner:.2f} s)")
        if h and h.seconds:
            lines.append(f"  + harvest_window slower inside the run by {inner - h.seconds.median:.2f} s (the asset's "
                         "per-page progress: context.log.info -> the instance's event log, plus the DuckDB resource)")
    if setup is not None:
        lines.append(f"  once per process (not timed above): build_definitions + instance {setup:.2f} s")
    return "\n".join(lines)


@dataclass
class Target:
    name: str
    verdict: str  # PASS | MISS | n/a
    numbers: str


def _cmp(summaries, a, b, factor=1.0):
    sa, sb = summaries.get(a), summaries.get(b)
    if not sa or not sb or not sa.rate or not sb.rate:
        return None
    return sa.rate.median, sb.rate.median * factor


def targets(summaries: dict[str, Summary], sections: dict) -> list[Target]:
    out: list[Target] = []

    def rate_target(name, a, b, factor, what):
        got = _cmp(summaries, a, b, factor)
        if got is None:
            out.append(Target(name, "n/a", f"needs contenders {a} and {b}"))
            return
        va, vb = got
        out.append(Target(name, "PASS" if va >= vb else "MISS",
                          f"{a} {va:,.0f} rec/s vs {what} {vb:,.0f} rec/s ({va / vb:.2f}x of the bar)"))

    rate_target("full harvest >= Sickle iterating", "harvest", "sickle", 1.0, "sickle")
    rate_target("our client >= 2x Sickle", "client", "sickle", 2.0, "2 x sickle")
    rate_target("full harvest >= 60% of fetch-only", "harvest", "fetch-only", 0.6, "0.6 x fetch-only")

    rss = sections.get("rss")
    if rss and rss.get("target"):
        out.append(Target(**rss["target"]))
    else:
        out.append(Target("1M-record window peak RSS < 250 MB", "n/a", "run with --rss"))
    upsert = sections.get("upsert")
    if upsert and upsert.get("target"):
        out.append(Target(**upsert["target"]))
    else:
        out.append(Target("150-record window into 2,000,000 stored <= 2x into empty", "n/a", "run with --upsert"))
    backfill = sections.get("backfill")
    if backfill and backfill.get("target"):
        out.append(Target(**backfill["target"]))
    else:
        out.append(Target("365-window backfill < 5 min", "n/a", "run with --backfill"))
    for section in sections.values():  # sections with more than one target list them here
        for item in (section or {}).get("targets", []) if isinstance(section, dict) else []:
            out.append(Target(**item))
    conc = sections.get("sources")
    if conc and conc.get("target"):
        out.append(Target(**conc["target"]))
    else:
        out.append(Target("throughput grows with sources until CPU saturates", "n/a", "run with --sources"))
    return out


def targets_table(items: list[Target]) -> str:
    return table(["target", "verdict", "measured"], [[t.name, t.verdict, t.numbers] for t in items], right=set())


def stats_cells(st: Stats | None, fmt=n0) -> list[str]:
    return [fmt(st.median), fmt(st.min), fmt(st.max)] if st else ["-", "-", "-"]
