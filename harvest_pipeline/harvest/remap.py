"""A source's stored records mapped again from their raw XML: a mapper's improvement reaches the
records already harvested, without asking the server for anything.

Part by part (store/remap.py), each live record's stored XML goes through the same rows code a
harvest uses (harvest/rows.py). A record whose mapped columns (title ... bbox, mapping_error) come
out different is staged as the version it is (same datestamp, sets and XML) and merged like a
re-harvest, in one transaction at the end: the merge rewrites it as `restored` (the version the
server sent, its mapped columns as today's mappers read them), with a history row whose attempt
id is `remap:<run id>`. A record the harvest changed meanwhile is newer and stays (`stale`).
Records that map as they are stored are neither staged nor written, so a remap after no mapper
change writes nothing. With `dry_run`, nothing is written and the report says what would change.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import Callable

import duckdb

from harvest_pipeline.errors import WindowBusyError
from harvest_pipeline.harvest.rows import page_rows
from harvest_pipeline.harvest.window import Window, one_off_window
from harvest_pipeline.pages import HarvestedRecord, ListPage, ResumptionInfo
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect as store_connect
from harvest_pipeline.store.backend import noting_retries, run_write
from harvest_pipeline.store.merge import MergeCounts, merge_staging
from harvest_pipeline.store.remap import MAPPED_COLUMNS, VERSION_COLUMNS, live_versions_in, remap_parts
from harvest_pipeline.store.staging import StagingWindow

log = logging.getLogger(__name__)

Connect = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]
Progress = Callable[[dict], None]

REMAP_MARKER = "remap:"  # record_history.attempt_id of a remap
REMAP_STAGING = "remap.stage"  # the source's staging folder for remaps
EXAMPLES = 20  # changed identifiers kept in the report
_PREFIX_AT = VERSION_COLUMNS.index("metadata_prefix")


@dataclass
class RemapReport:
    source_id: str
    run_id: str
    window: Window
    examined: int = 0  # live records read
    changed: int = 0  # whose mapped columns came out different (written, unless dry_run)
    now_mapped: int = 0  # of those, records no mapper read before and one does now
    now_unmapped: int = 0  # of those, records that mapped before and do not now
    formats: Counter = field(default_factory=Counter)  # changed records by format, "before -> after"
    columns: Counter = field(default_factory=Counter)  # changed records by column that changed
    examples: list[str] = field(default_factory=list)  # the first changed identifiers
    counts: MergeCounts | None = None  # the merge's (None for a dry run or when nothing changed)
    dry_run: bool = False
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


def _record(row: tuple) -> HarvestedRecord:
    """The stored version as received. Its XML is parsed by the rows code (metadata None), which
    keeps a record it cannot parse or map as unmapped instead of failing the remap."""
    identifier, datestamp, datestamp_raw, set_specs, _, xml = row[:len(VERSION_COLUMNS)]
    return HarvestedRecord(
        identifier=identifier, datestamp=datestamp_raw,
        datestamp_utc=datestamp.replace(tzinfo=timezone.utc) if datestamp is not None else None,
        set_specs=tuple(set_specs or ()), deleted=False, metadata_xml=xml, metadata=None,
        metadata_utf8=xml.encode("utf-8", "surrogatepass"),
    )


def remap_source(
    source: SourceConfig,
    *,
    db_path: str | Path,
    run_id: str | None = None,
    connect: Connect | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> RemapReport:
    """Map every live record of `source` again from its stored XML; merge those that change."""
    run_id = run_id or uuid.uuid4().hex
    connect = connect or (lambda: store_connect(db_path))
    window = one_off_window("remap")  # zero length, at the time it ran
    attempt_id = REMAP_MARKER + run_id
    report = RemapReport(source.id, run_id, window, dry_run=dry_run)
    started = time.monotonic()
    # One staging folder per source, locked while a remap uses it: a second remap of the source at
    # the same time fails after a few seconds, and a killed remap's folder is taken over by the next one.
    try:
        staging = StagingWindow(Path(db_path).parent / "staging" / source.id / REMAP_STAGING)
    except WindowBusyError as exc:
        raise WindowBusyError(f"another remap of source {source.id} is running", source_id=source.id,
                              hint="wait for it to finish; a remap after it finds nothing left to change") from exc
    try:
        staging.start_attempt(attempt_id, "remap")
        page_number = 0
        with connect() as con:
            parts = remap_parts(con, source.id)
        for part in parts:
            # A connection per part: the catalogue is not held between parts (a harvest's merge
            # in another process waits for the file only while one part is read).
            with connect() as con:
                stored = live_versions_in(con, source.id, part)
            by_prefix: dict[str, list[tuple]] = {}
            for row in stored:
                by_prefix.setdefault(row[_PREFIX_AT], []).append(row)
            for prefix, rows in by_prefix.items():
                page_number += 1
                _compare_and_stage(report, staging, window, prefix, rows, page_number, dry_run)
            if progress is not None:
                progress({"source_id": source.id, "window": window.key, "examined": report.examined,
                          "changed": report.changed})
        staging.close()
        if report.changed and not dry_run:
            merged_again: list[str] = []

            def merge(con):
                return merge_staging(con, staging.path, source_id=source.id, window_start=window.start,
                                     window_end=window.end, run_id=run_id, attempt_id=attempt_id)

            report.counts = run_write(connect, noting_retries(merge, merged_again),
                                      what=f"source {source.id}, {window.key}: merge", log=log)
            report.warnings += merged_again
    finally:
        staging.remove()
        staging.release()
    report.seconds = time.monotonic() - started
    return report


def _compare_and_stage(report: RemapReport, staging: StagingWindow, window: Window, prefix: str, stored: list[tuple],
                       page_number: int, dry_run: bool) -> None:
    """Map one group of stored versions; stage those whose mapped columns differ from the stored ones."""
    records = [_record(row) for row in stored]
    page = ListPage(url="", params={"verb": "remap"}, response_date=None, records=records,
                    resumption=ResumptionInfo(token=None, present=False), page_number=page_number)
    table, quarantined = page_rows(page, metadata_prefix=prefix, window_start=window.start, window_end=window.end)
    fresh = {name: table.column(name).to_pylist() for name in MAPPED_COLUMNS}
    first_mapped = len(VERSION_COLUMNS)
    format_at = MAPPED_COLUMNS.index("format_name")
    error_at = MAPPED_COLUMNS.index("mapping_error")
    changed = []
    for i, row in enumerate(stored):
        before = row[first_mapped:]
        after = tuple(fresh[name][i] for name in MAPPED_COLUMNS)
        report.examined += 1
        if before == after:
            continue
        changed.append(i)
        report.changed += 1
        report.columns.update(name for name, b, a in zip(MAPPED_COLUMNS, before, after) if b != a)
        report.formats[f"{before[format_at] or '(unmapped)'} -> {after[format_at] or '(unmapped)'}"] += 1
        report.now_mapped += before[error_at] is not None and after[error_at] is None
        report.now_unmapped += before[error_at] is None and after[error_at] is not None
        if len(report.examples) < EXAMPLES:
            report.examples.append(row[0])
    if not changed or dry_run:
        return
    identifiers = {stored[i][0] for i in changed}
    staging.write_page(
        table.take(changed), next_token=None, complete_list_size=None, response_date=None, warnings=[],
        quarantined=[q for q in quarantined if q[1] in identifiers],
    )
