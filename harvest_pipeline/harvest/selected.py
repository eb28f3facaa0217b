"""Re-harvest of selected records by identifier (GetRecord), staged and merged like a window.

Each identifier is fetched with GetRecord; the records go through a staging folder of their own
(`data/staging/<source>/selected-<run_id>.stage/`) and are merged with the window merge, under a
pseudo-window [now, now): history rows carry the run id and attempt_id 'selected:<run_id>'.

An identifier the server answers with idDoesNotExist is reported and its local record is left
untouched: absence is the reconciliation's business, with its mass-deletion guard, not a
one-off fetch's.

A stop request (SIGTERM/SIGINT under the CLI, harvest/stop.py) ends the fetching after the current
record: the records fetched are merged (each GetRecord answer is a whole version) and the others
are reported as not fetched, for the operator to run again.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb

from harvest_pipeline.errors import ConfigError, HarvestError, IdDoesNotExist
from harvest_pipeline.harvest import stop
from harvest_pipeline.harvest.listers import Lister, lister_for
from harvest_pipeline.harvest.plausibility import cap_future_datestamps
from harvest_pipeline.harvest.rows import page_rows
from harvest_pipeline.harvest.window import Window, one_off_window, record_format_label
from harvest_pipeline.pages import HarvestedRecord, ListPage, ResumptionInfo
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect as store_connect
from harvest_pipeline.store.backend import noting_retries, run_write
from harvest_pipeline.store.history import actions_for_attempt
from harvest_pipeline.store.merge import MergeCounts, merge_staging
from harvest_pipeline.store.staging import StagingWindow

log = logging.getLogger(__name__)

Connect = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]
Progress = Callable[[dict], None]

SELECTED_MARKER = "selected:"  # record_history.attempt_id of a selected-record re-harvest
PAGE_SIZE = 100  # records per staged page


@dataclass
class SelectedReport:
    source_id: str
    run_id: str
    window: Window
    requested: list[str]
    not_found: list[str]
    actions: dict[str, str]  # identifier -> created | updated | unchanged | deleted | revived | restored | stale
    counts: MergeCounts
    seconds: float
    warnings: list[str] = field(default_factory=list)
    not_fetched: list[str] = field(default_factory=list)  # left when a stop was requested
    stopped_by: int | None = None  # the signal that stopped the fetching
    verb: str = "GetRecord"  # what fetched the records (GetRecordById for CSW)

    @property
    def fetched(self) -> int:
        return len(self.requested) - len(self.not_found) - len(self.not_fetched)


def _unique(identifiers: list[str]) -> list[str]:
    out = list(dict.fromkeys(i.strip() for i in identifiers if i and i.strip()))
    if not out:
        raise ConfigError("no identifiers given", hint="pass at least one identifier")
    return out


def harvest_selected(
    source: SourceConfig,
    identifiers: list[str],
    *,
    db_path: str | Path,
    run_id: str | None = None,
    connect: Connect | None = None,
    lister: Lister | None = None,
    progress: Progress | None = None,
) -> SelectedReport:
    """GetRecord each identifier of `source` and merge the versions into the catalogue."""
    run_id = run_id or uuid.uuid4().hex
    connect = connect or (lambda: store_connect(db_path))
    requested = _unique(identifiers)
    window = one_off_window("selected")  # zero length, at the time it ran
    attempt_id = SELECTED_MARKER + run_id
    started = time.monotonic()
    ctx = dict(source_id=source.id, window=window.key)

    staging = StagingWindow(Path(db_path).parent / "staging" / source.id / f"selected-{run_id}.stage")
    try:
        staging.start_attempt(attempt_id, "selected")
        try:
            lister = lister or lister_for(source, state_dir=Path(db_path).parent / "hosts")
            not_found: list[str] = []
            batch: list[HarvestedRecord] = []
            page_number = 0
            not_fetched: list[str] = []
            for n, identifier in enumerate(requested, 1):
                if stop.requested() is not None:
                    not_fetched = requested[n - 1:]
                    break
                try:
                    batch.append(lister.get_record(identifier))
                except IdDoesNotExist:
                    not_found.append(identifier)
                if len(batch) >= PAGE_SIZE:
                    page_number += 1
                    _stage(staging, source, window, batch, page_number, lister)
                    batch = []
                if progress is not None:
                    progress({"source_id": source.id, "window": window.key, "fetched": n, "requested": len(requested)})
            if batch:
                _stage(staging, source, window, batch, page_number + 1, lister)
        except HarvestError as exc:
            raise exc.with_context(**ctx, hint="nothing was merged; run the re-harvest again") from None
        # Retries and repaired responses after the last staged batch are reported too.
        warnings = list(staging.cursor().warnings) + lister.drain_warnings()
        staging.close()

        merged_again: list[str] = []  # "merged twice: …" when an earlier attempt was rolled back

        def merge(con):
            counts = merge_staging(
                con, staging.path, source_id=source.id, window_start=window.start, window_end=window.end,
                run_id=run_id, attempt_id=attempt_id,
            )
            return counts, actions_for_attempt(con, source.id, attempt_id)

        # run_write: one transaction, run again when worth it (a large merge's writes out of memory).
        counts, actions = run_write(connect, noting_retries(merge, merged_again),
                                    what=f"source {source.id}, re-harvest of {window.key}: merge", log=log)
        warnings += merged_again
    finally:
        staging.remove()
    return SelectedReport(
        source_id=source.id, run_id=run_id, window=window, requested=requested, not_found=not_found,
        actions=actions, counts=counts, seconds=time.monotonic() - started, warnings=warnings,
        not_fetched=not_fetched, stopped_by=stop.requested() if not_fetched else None, verb=lister.record_verb,
    )


def _stage(staging: StagingWindow, source: SourceConfig, window: Window, records: list[HarvestedRecord], page_number: int,
           lister: Lister) -> None:
    """Stage one batch of records `lister` fetched as a page, with what fetching them went through."""
    page = ListPage(
        url=source.url, params={"verb": lister.record_verb}, response_date=None, records=records,
        resumption=ResumptionInfo(token=None, present=False), page_number=page_number,
    )
    warnings, capped = cap_future_datestamps(page)
    warnings = lister.drain_warnings() + warnings
    # The same format label as the window harvest's rows (a CSW source's outputSchema), or the
    # merge would see every re-harvested record as edited and rewrite it as 'restored'.
    rows, quarantined = page_rows(page, metadata_prefix=record_format_label(source), window_start=window.start,
                                  window_end=window.end)
    staging.write_page(
        rows, next_token=None, complete_list_size=None, response_date=None, warnings=warnings, quarantined=quarantined + capped,
    )
