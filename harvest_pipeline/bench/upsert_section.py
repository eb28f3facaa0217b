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

Then the merge cost of a small window against the catalogue's size (``--upsert-window`` W rows,
default 150, into ``--upsert-window-existing`` S stored rows of the same source, default
2,000,000, built directly in SQL with ~1.3 KB of metadata per row and a history of one row per record,
then merged into once untimed, as a harvested source has been): the same W-row window merged
into an empty catalogue, into a catalogue holding one earlier window of W records, as new records
into the big one, and as new versions of W records spread over the big one. Target: into S stored
records at most 2x the merge into an empty catalogue (the column against the catalogue holding W
records shows what grows with the catalogue apart from what any non-empty table costs).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import resource
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from harvest_pipeline.bench.measure import Stats
from harvest_pipeline.bench.report import n2, stats_cells, table

LOG = logging.getLogger(__name__)
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


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)  # the process: DuckDB's worker threads included
    return ru.ru_utime + ru.ru_stime


CLOSE_SECONDS: list[float] = []  # the last merge_into's close of the catalogue (its checkpoint)


def merge_into(db: Path, staging: Path, *, window: int = 0) -> tuple[float, object, float]:
    """merge_staging + COMMIT on the catalogue; returns (seconds, MergeCounts, CPU seconds).

    The close that follows (DuckDB checkpoints the file then) is timed apart, in CLOSE_SECONDS:
    a run's process keeps the catalogue open while its windows follow each other and closes it
    once idle (store/session.py), so one checkpoint serves a burst of windows."""
    from contextlib import nullcontext

    from harvest_pipeline.store import connect
    from harvest_pipeline.store.backend import run_write
    from harvest_pipeline.store.merge import merge_staging

    start = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(days=window)

    def merge(con):
        return merge_staging(con, staging, source_id="bench", window_start=start,
                             window_end=start + timedelta(days=1), run_id=f"bench-{window}",
                             attempt_id=f"bench-{window}")

    with connect(db) as con:
        t, cpu = time.perf_counter(), _cpu_seconds()
        # As the harvest merges: one transaction, run again once if its writes ran out of memory at
        # the lower limit (the time then includes both attempts, and the log says so).
        counts = run_write(lambda: nullcontext(con), merge, what=f"bench merge {window}", log=LOG)
        result = time.perf_counter() - t, counts, _cpu_seconds() - cpu
        closing = time.perf_counter()
    CLOSE_SECONDS[:] = [time.perf_counter() - closing]
    return result


WINDOW_TARGET = 2.0  # a small window into a big source: at most this many times its merge into an empty one


def build_big_source(db: Path, rows: int) -> None:
    """A catalogue whose source 'bench' holds `rows` records and their history, inserted in SQL
    (fast), shaped like synthetic_page's rows: identifiers oai:bench.upsert:<10 digits>, version 0."""
    from harvest_pipeline.store import connect
    from harvest_pipeline.store.columns import identifier_key_sql

    with connect(db) as con:
        con.execute("SET memory_limit = '2GB'")  # building only: one insert of millions of keys
        con.execute(
            f"""
            INSERT INTO records (source_id, identifier, datestamp, datestamp_raw, deleted, set_specs, metadata_prefix,
                                 metadata_xml, content_hash, format_name, title, creators, description, doi,
                                 first_seen_at, written_at, written_by_run, identifier_key)
            SELECT 'bench', id, ts, strftime(ts, '%Y-%m-%dT%H:%M:%SZ'), false, ['physics'], 'oai_dc',
                   '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/"><dc:title>Synthetic record '
                   || i || ' version 0</dc:title><dc:description>' || {_sql_text(_XML_PAD)} || '</dc:description></oai_dc:dc>',
                   md5(id), 'oai_dc', 'Synthetic record ' || i || ' version 0', ['Bench, Anna'], {_sql_text(_XML_PAD)},
                   '10.5072/bench.' || i, now(), now(), 'bench-base', {identifier_key_sql('id')}
            FROM (SELECT i, 'oai:bench.upsert:' || lpad(i::VARCHAR, 10, '0') AS id,
                         TIMESTAMP '2020-01-01' + to_seconds(i % 86400) AS ts FROM range(?) t(i))
            """,
            [rows],
        )
        # Its history, as a harvest leaves it: each record's version 'created', with its XML. (Without
        # it the bench hid what a window of new records cost a real catalogue: the merge read the
        # whole history for them, 107 of 200 ms at 2,000,000 records.)
        con.execute(
            """
            INSERT INTO record_history
            SELECT source_id, identifier, datestamp, deleted, content_hash, 'created', TIMESTAMP '2020-01-01',
                   TIMESTAMP '2020-01-02', 'bench-base', 'bench-base', 1, metadata_xml, first_seen_at
            FROM records
            """
        )
        con.execute("CHECKPOINT")


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def run_window_cost(args, workdir: Path, *, log=print) -> dict:
    """A W-row window merged into an empty catalogue vs into a source of S stored rows."""
    w, big, runs = args.upsert_window, args.upsert_window_existing, args.runs
    big_db = workdir / "window-big" / "harvest.duckdb"
    big_db.parent.mkdir(parents=True, exist_ok=True)
    log(f"upsert window cost: building a source of {big:,} stored rows")
    t = time.perf_counter()
    build_big_source(big_db, big)
    log(f"  built in {time.perf_counter() - t:.1f} s")
    # The source's first merge (untimed, reported): it writes the source's row tally, reading the
    # whole history once (store/row_tally.py), as the first merge after an upgrade to it does.
    first = build_staging(workdir / "win-first-big.stage", big + 5_000_000, big + 5_000_000 + w, version=0)
    first_seconds = merge_into(big_db, first, window=5_000)[0]
    shutil.rmtree(first, ignore_errors=True)
    log(f"  the source's first merge (writes its row tally, reads its whole history once): {first_seconds * 1000:.0f} ms")
    # New versions of W stored records spread over the whole source (every (S // W)-th one).
    stride = max(big // w, 1)
    # Besides the target's baseline (an empty catalogue), a catalogue holding one earlier window: a
    # table that already holds rows costs its COMMIT more (DuckDB appends to each column's stored
    # data, about 0.2 ms per column), whatever its size; this case shows that part apart.
    held = f"new records into {w:,} stored"
    secs: dict[str, list[float]] = {"empty catalogue": [], held: [], f"new records into {big:,}": [],
                                    f"new versions into {big:,}": []}
    # CPU seconds of the process in the same merges: on a shared machine the wall clock also
    # measures the neighbours; the CPU ratio does much less.
    cpu: dict[str, list[float]] = {key: [] for key in secs}
    closes: dict[str, list[float]] = {key: [] for key in secs}
    classed: dict[str, object] = {}
    for r in range(runs):
        lo = big + r * w  # identifiers the big source does not hold yet, new ones every run
        stg_new = build_staging(workdir / f"win-new-{r}.stage", lo, lo + w, version=0)
        empty = workdir / f"win-empty-{r}" / "harvest.duckdb"
        empty.parent.mkdir(parents=True, exist_ok=True)
        from harvest_pipeline.store import connect

        with connect(empty):
            pass  # the schema exists before the clock starts, as in any harvest after the first
        s_empty, c_empty, cpu_empty = merge_into(empty, stg_new, window=20_000 + r)
        closes["empty catalogue"] += CLOSE_SECONDS
        small = workdir / f"win-small-{r}" / "harvest.duckdb"
        small.parent.mkdir(parents=True, exist_ok=True)
        stg_first = build_staging(workdir / f"win-first-{r}.stage", big + 1_000_000 + r * w,
                                  big + 1_000_000 + (r + 1) * w, version=0)
        merge_into(small, stg_first, window=10_000 + r)  # the earlier window (not timed)
        s_small, c_small, cpu_small = merge_into(small, stg_new, window=20_000 + r)
        closes[held] += CLOSE_SECONDS
        s_new, c_new, cpu_new = merge_into(big_db, stg_new, window=30_000 + r)
        closes[f"new records into {big:,}"] += CLOSE_SECONDS
        # Other records every run: an updated row leaves its row group (DuckDB writes it anew at the
        # table's end), so the records of an earlier run would be found together, not spread.
        stg_upd = build_spread_staging(workdir / f"win-upd-{r}.stage", w, stride, version=r + 1, offset=r)
        s_upd, c_upd, cpu_upd = merge_into(big_db, stg_upd, window=40_000 + r)
        closes[f"new versions into {big:,}"] += CLOSE_SECONDS
        for key, s_, c_, cpu_ in zip(secs, (s_empty, s_small, s_new, s_upd), (c_empty, c_small, c_new, c_upd),
                                     (cpu_empty, cpu_small, cpu_new, cpu_upd)):
            secs[key].append(s_)
            cpu[key].append(cpu_)
            classed[key] = c_
        log(f"  run {r + 1}: empty {s_empty * 1000:.0f} ms, into {w:,} stored {s_small * 1000:.0f} ms, "
            f"new into {big:,} {s_new * 1000:.0f} ms, new versions into {big:,} {s_upd * 1000:.0f} ms")
        for folder in (empty.parent, small.parent, stg_new, stg_first, stg_upd):
            shutil.rmtree(folder, ignore_errors=True)
    base = Stats.of(secs["empty catalogue"]).median
    held_base = Stats.of(secs[held]).median
    cpu_base = Stats.of(cpu["empty catalogue"]).median
    rows, out = [], {"window": w, "existing": big, "runs": runs, "cases": {}}
    for key, values in secs.items():
        st, cpu_st = Stats.of(values), Stats.of(cpu[key])
        c = classed[key]
        what = ", ".join(f"{a} {getattr(c, a)}" for a in ("created", "updated") if getattr(c, a, 0))
        rows.append([key, f"{w:,}", f"{st.median * 1000:.0f}", f"{st.min * 1000:.0f}", f"{st.max * 1000:.0f}",
                     f"{st.median / base:.2f}x", f"{st.median / held_base:.2f}x", f"{cpu_st.median * 1000:.0f}",
                     f"{cpu_st.median / cpu_base:.2f}x", f"{Stats.of(closes[key]).median * 1000:.0f}", what])
        out["cases"][key] = {"seconds": st.as_dict(), "ratio_to_empty": st.median / base,
                             "ratio_to_held": st.median / held_base,
                             "cpu_seconds": cpu_st.as_dict(), "cpu_ratio_to_empty": cpu_st.median / cpu_base,
                             "close_seconds": Stats.of(closes[key]).as_dict()}
    worst = max(Stats.of(v).median for v in secs.values()) / base
    worst_cpu = max(Stats.of(v).median for v in cpu.values()) / cpu_base
    print()
    print(f"== Merge cost of a {w}-record window: empty catalogue vs a source of {big:,} stored records"
          f" ({runs} run(s) each) ==")
    print(table(["merged into", "rows", "ms median", "min", "max", "x empty", f"x {w:,} stored", "CPU ms",
                 "CPU x empty", "close ms", "classed"], rows))
    print(f"x {w:,} stored = against the same window merged into a catalogue holding one earlier window of {w:,}\n"
          "records: its COMMIT appends to stored rows, as every merge after a catalogue's first does (not the target's baseline).\n"
          "CPU ms = this process's CPU time (all its threads) in merge_staging + COMMIT, median.\n"
          "close ms = the catalogue's close after the merge (DuckDB's checkpoint), not in the ratio: a run closes\n"
          "it once idle, after a burst of windows (store/session.py).")
    out["first_merge_seconds"] = first_seconds
    print(f"The big source's first merge, untimed above: {first_seconds * 1000:.0f} ms (it writes the source's row tally,"
          " reading its whole history once; store/row_tally.py).")
    out["target"] = {"name": f"{w}-record window into {big:,} stored <= {WINDOW_TARGET:g}x into empty",
                     "verdict": "PASS" if worst <= WINDOW_TARGET else "MISS",
                     "numbers": f"worst case {worst:.2f}x ({base * 1000:.0f} ms into empty); CPU {worst_cpu:.2f}x; "
                                f"{worst * base / held_base:.2f}x a catalogue holding {w:,}"}
    return out


def build_spread_staging(path: Path, rows: int, stride: int, *, version: int, offset: int = 0) -> Path:
    """A staging folder with new versions of `rows` stored records, every `stride`-th identifier
    from `offset` on."""
    from harvest_pipeline.store.columns import PAGE_SCHEMA
    from harvest_pipeline.store.staging import StagingWindow

    st = StagingWindow(path)
    try:
        st.start_attempt("bench-upsert", f"bench|spread|{rows}|{stride}|{version}|{offset}")
        pages = [synthetic_page(PAGE_SCHEMA, offset + i * stride, offset + i * stride + 1, version=version,
                                page_number=i + 1)
                 for i in range(rows)]
        _write_page(st, pa.concat_tables(pages).set_column(
            PAGE_SCHEMA.get_field_index("seq"), "seq", pa.array(range(rows), pa.int32())), None)
    finally:
        st.close()
    return path


def run(args, workdir: Path, *, log=print) -> dict:
    out = run_throughput(args, workdir, log=log) if args.upsert_rows else {}
    if getattr(args, "upsert_window", 0):
        out["window_cost"] = run_window_cost(args, workdir / "window-cost", log=log)
        out["target"] = out["window_cost"]["target"]
    return out


def run_throughput(args, workdir: Path, *, log=print) -> dict:
    n, m, runs = args.upsert_rows, args.upsert_existing, args.runs
    workdir.mkdir(parents=True, exist_ok=True)
    base = workdir / "base" / "harvest.duckdb"
    base.parent.mkdir(parents=True, exist_ok=True)
    log(f"upsert: building a catalogue of {m:,} rows")
    t = time.perf_counter()
    step = 100_000  # one merge per 100k rows keeps this process near 2 GB (merge memory grows with N)
    for w, a in enumerate(range(0, m, step)):
        b = min(a + step, m)
        stg = build_staging(workdir / f"base-stg-{w}.stage", a, b, version=0)
        merge_into(base, stg, window=w)
        shutil.rmtree(stg, ignore_errors=True)
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
        stg = build_staging(workdir / f"stg-{name}.stage", lo, hi, version=version)
        secs, counts = [], None
        for r in range(runs):
            db = workdir / f"run-{name}-{r}" / "harvest.duckdb"
            db.parent.mkdir(parents=True, exist_ok=True)
            for suffix in ("", ".wal"):
                src = base.with_name(base.name + suffix)
                if src.exists():
                    shutil.copyfile(src, db.with_name(db.name + suffix))
            s, counts, _ = merge_into(db, stg, window=10_000 + r)
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
