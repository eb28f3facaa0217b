"""--upsert: DuckDB merge throughput, N staged rows merged into a catalogue that holds M rows.

Uses the project's own pieces: rows are written with ``StagingWindow.write_page`` (Arrow pages of
the current ``PAGE_SCHEMA``, synthetic but realistically sized: ~1.3 KB of metadata XML per row)
and merged with ``merge_staging`` inside one transaction, exactly as ``harvest_window`` does.
The base catalogue (M rows) is built once; every measured run merges into a fresh copy of it.

Scenarios (N rows each):
  created    N new identifiers
  updated    N identifiers already stored, newer datestamp, different content
  unchanged  N identifiers already stored, identical versions (re-running a window)
Reported: rows/s = N / (merge_staging + COMMIT seconds), median/min/max over --runs.
"""

from __future__ import annotations

import hashlib
import inspect
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from harvest_pipeline.bench.measure import Stats
from harvest_pipeline.bench.report import n2, stats_cells, table

CHUNK = 50_000
BASE_TS = datetime(2020, 1, 1)
_XML_PAD = "Lorem ipsum dolor sit amet, consectetur adipiscing elit; " * 18  # ~1 KB


def _xml(i: int, version: int) -> str:
    return (
        '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
        'xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f"<dc:title>Synthetic record {i} version {version}</dc:title><dc:creator>Bench, Anna</dc:creator>"
        f"<dc:description>{_XML_PAD}</dc:description><dc:identifier>https://doi.org/10.5072/bench.{i}</dc:identifier>"
        "</oai_dc:dc>"
    )


def synthetic_page(schema: pa.Schema, lo: int, hi: int, *, version: int, page_number: int) -> pa.Table:
    """Rows lo..hi-1 for whatever PAGE_SCHEMA is today (unknown columns stay NULL)."""
    n = hi - lo
    idx = range(lo, hi)
    ts = [BASE_TS + timedelta(seconds=i % 86400, days=version) for i in idx]
    xml = [_xml(i, version) for i in idx]
    by_name = {
        "page_number": [page_number] * n,
        "seq": list(range(n)),
        "identifier": [f"oai:bench.upsert:{i:010d}" for i in idx],
        "datestamp": ts,
        "datestamp_raw": [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in ts],
        "deleted": [False] * n,
        "in_window": [True] * n,
        "set_specs": [["physics"]] * n,
        "metadata_prefix": ["oai_dc"] * n,
        "metadata_xml": xml,
        "content_hash": [hashlib.blake2b(x.encode(), digest_size=16).hexdigest() for x in xml],
        "format_name": ["oai_dc"] * n,
        "title": [f"Synthetic record {i} version {version}" for i in idx],
        "creators": [["Bench, Anna"]] * n,
        "subjects": [["Physics", "Optics"]] * n,
        "description": [_XML_PAD] * n,
        "date": ["2020-01-01"] * n,
        "type": ["Dataset"] * n,
        "language": ["en"] * n,
        "identifiers": [[f"https://doi.org/10.5072/bench.{i}"] for i in idx],
        "doi": [f"10.5072/bench.{i}" for i in idx],
        "url": [f"https://bench.example/{i}" for i in idx],
        "rights": [["CC-BY-4.0"]] * n,
        "bbox_west": [8.5] * n, "bbox_south": [47.3] * n, "bbox_east": [8.6] * n, "bbox_north": [47.4] * n,
    }
    cols = {}
    for f in schema:
        vals = by_name.get(f.name)
        if vals is None:
            cols[f.name] = pa.nulls(n, f.type)
        else:
            try:
                cols[f.name] = pa.array(vals, type=f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                cols[f.name] = pa.nulls(n, f.type)
    return pa.table(cols, schema=schema)


def _write_page(staging, rows: pa.Table, token: str | None) -> None:
    kwargs = dict(next_token=token, complete_list_size=None, response_date=None, warnings=[])
    params = inspect.signature(staging.write_page).parameters
    staging.write_page(rows, **{k: v for k, v in kwargs.items() if k in params})


def build_staging(path: Path, lo: int, hi: int, *, version: int) -> Path:
    from harvest_pipeline.store.columns import PAGE_SCHEMA
    from harvest_pipeline.store.staging import StagingWindow

    st = StagingWindow(path)
    try:
        st.start_attempt("bench-upsert", f"bench|{lo}|{hi}|{version}")
        for page, a in enumerate(range(lo, hi, CHUNK), 1):
            b = min(a + CHUNK, hi)
            _write_page(st, synthetic_page(PAGE_SCHEMA, a, b, version=version, page_number=page),
                        None if b >= hi else f"t{b}")
    finally:
        st.close()
    return path


def merge_into(db: Path, staging: Path, *, window: int = 0) -> tuple[float, object]:
    """merge_staging + COMMIT on the catalogue; returns (seconds, MergeCounts)."""
    from harvest_pipeline.store import connect
    from harvest_pipeline.store.merge import merge_staging

    start = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(days=window)
    with connect(db) as con:
        t = time.perf_counter()
        con.execute("BEGIN TRANSACTION")
        counts = merge_staging(con, staging, source_id="bench", window_start=start,
                               window_end=start + timedelta(days=1), run_id=f"bench-{window}",
                               attempt_id=f"bench-{window}")
        con.execute("COMMIT")
        return time.perf_counter() - t, counts


def run(args, workdir: Path, *, log=print) -> dict:
    n, m, runs = args.upsert_rows, args.upsert_existing, args.runs
    workdir.mkdir(parents=True, exist_ok=True)
    base = workdir / "base" / "harvest.duckdb"
    base.parent.mkdir(parents=True, exist_ok=True)
    log(f"upsert: building a catalogue of {m:,} rows")
    t = time.perf_counter()
    step = 100_000  # one merge per 100k rows keeps this process near 2 GB (merge memory grows with N)
    for w, a in enumerate(range(0, m, step)):
        b = min(a + step, m)
        stg = build_staging(workdir / f"base-stg-{w}.duckdb", a, b, version=0)
        merge_into(base, stg, window=w)
        stg.unlink(missing_ok=True)
    log(f"  built in {time.perf_counter() - t:.1f} s")
    n_upd = min(n, m)
    scenarios = {
        "created": (m, m + n, 0),  # new identifiers after the stored ones
        "updated": (0, n_upd, 1),  # stored identifiers, a newer version
        "unchanged": (0, n_upd, 0),  # stored identifiers, the very same version
    }
    rows, out = [], {"staged": n, "existing": m, "runs": runs, "scenarios": {}}
    for name, (lo, hi, version) in scenarios.items():
        if hi <= lo:
            continue
        stg = build_staging(workdir / f"stg-{name}.duckdb", lo, hi, version=version)
        secs, counts = [], None
        for r in range(runs):
            db = workdir / f"run-{name}-{r}" / "harvest.duckdb"
            db.parent.mkdir(parents=True, exist_ok=True)
            for suffix in ("", ".wal"):
                src = base.with_name(base.name + suffix)
                if src.exists():
                    shutil.copyfile(src, db.with_name(db.name + suffix))
            s, counts = merge_into(db, stg, window=10_000 + r)
            secs.append(s)
            shutil.rmtree(db.parent, ignore_errors=True)
            log(f"  {name}: {hi - lo:,} rows merged in {s:.2f} s = {(hi - lo) / s:,.0f} rows/s")
        rate = Stats.of((hi - lo) / s for s in secs)
        got = getattr(counts, name, None)
        rows.append([name, f"{hi - lo:,}", f"{m:,}", *stats_cells(rate), n2(Stats.of(secs).median),
                     "-" if got is None else f"{got:,}"])
        out["scenarios"][name] = {"rows": hi - lo, "rate": rate.as_dict(), "seconds": Stats.of(secs).as_dict(),
                                  "classified_as_expected": got}
    print()
    print(f"== DuckDB upsert: merge_staging of N staged rows into a catalogue of M rows ({runs} run(s) each) ==")
    print(table(["scenario", "N staged", "M stored", "rows/s median", "min", "max", "merge s", "rows so classed"], rows))
    print("rows/s = N / (merge_staging + COMMIT); synthetic rows ~1.3 KB metadata_xml each.")
    return out


__all__ = ["run", "synthetic_page"]
