"""How a window report shows in Dagster: progress lines, warnings, and materialization metadata."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import dagster as dg

from harvest_pipeline.harvest.progress import notify

if TYPE_CHECKING:  # the harvest core is imported when a run needs it, not when definitions load
    from harvest_pipeline.harvest.window import WindowReport


LOG_EVERY_SECONDS = 5.0
# (catalogue, source) pairs known to hold a tombstone: a process may harvest into more than one file.
_SOURCES_WITH_DELETIONS: set[tuple[str, str]] = set()
# (catalogue, source) -> the run that found it without one: asked once per run. The run holds the
# source's lock (harvest/source_lock.py), so only its own merges, whose counts say so, can add a
# tombstone meanwhile. One entry per source, however many runs a process serves.
_RUN_WITHOUT_DELETIONS: dict[tuple[str, str], str] = {}
CHANGES_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("identifier", "string"),
        dg.TableColumn("datestamp", "string", description="UTC"),
        dg.TableColumn("action", "string", description="created, updated, deleted, revived or restored"),
        dg.TableColumn("title", "string", description="the record's current title (none for a deleted record)"),
    ]
)


def progress_logger(context, source_id: str | None, *, log=None, every: float | None = None):
    """A progress callback that tells CLI listeners of every page and logs one line every few
    seconds (each log line is an event written to the instance; one per page costs ~2 s per
    100,000 records). `log` writes the line (default: context.log.info, in the caller's thread);
    a batch run shares one callback among its sources and hands the line to its events thread."""
    last = [float("-inf")]
    log = log or context.log.info
    every = LOG_EVERY_SECONDS if every is None else every

    def progress(event: dict) -> None:
        notify(event)
        now = time.monotonic()
        if now - last[0] < every:
            return
        last[0] = now
        total = event.get("complete_list_size")
        log(
            f"{event.get('source_id') or source_id} {event.get('window')}: page {event.get('pages')}, {event.get('received')}"
            f" of {total if total is not None else '?'} records"
        )

    return progress


def report_metadata(context, report: WindowReport) -> dict:
    """Log the report's warnings and return the metadata the UI shows and plots per window.

    The asset's Plots tab draws every int or float entry of each partition's latest
    materialization. So only what describes the window and stays true when it is harvested
    again is numeric: records received, live and deleted records in the window, pages,
    seconds. What this run changed (created, deletions, ...) would drop to 0 on a re-run, so
    those counts are text: shown with the event, never plotted.
    """
    return reports_metadata(context, [report])[0]


def reports_metadata(context, reports: list[WindowReport]) -> list[dict]:
    """`report_metadata` of several windows, their catalogue facts read through one open of the
    catalogue (a batch run's events thread takes the windows merged together at once)."""
    facts = _catalogue_facts(context, reports)
    metadata = [_metadata(report, window, changes) for report, (window, changes) in zip(reports, facts)]
    # Logged once all are built: a caller whose windows' metadata failed part way builds each
    # window's alone (defs/assets.py EventRecorder), and would log the first ones' warnings twice.
    for report in reports:
        for text in report.warnings[:50]:
            context.log.warning(f"{report.source_id} {report.window.key}: {text}")
    return metadata


def _metadata(report: WindowReport, window: dict, changes: dict) -> dict:
    counts = report.counts
    this_run = {
        "upserts": counts.upserted,
        "created": counts.created,
        "updated": counts.updated,
        "unchanged": counts.unchanged,
        "deletions": counts.deleted,
        "revived": counts.revived,
        "restored": counts.restored,
        "quarantined": counts.quarantined,
        "repaired_chars": report.repaired,
        "restarts": report.restarts,
        "warnings": len(report.warnings),
        "completeListSize": report.complete_list_size,
    }
    return {
        "status": report.status,
        "records": counts.received,
        **window,
        "pages": report.pages,
        "seconds": round(report.seconds, 3),
        **{k: dg.MetadataValue.text(str(v)) for k, v in this_run.items() if v is not None},
        "from": report.from_param or "(none)",
        "until": report.until_param or "(none)",
        "resumed": report.resumed,
        "what_the_server_did": dg.MetadataValue.md(
            "\n".join(f"- {w}" for w in report.warnings[:20]) or "nothing unusual"
        ),
        **changes,
    }


def _catalogue_facts(context, reports: list[WindowReport]) -> list[tuple[dict, dict]]:
    """Per report: (live and deleted records in its window, a preview of the records its run
    changed). One open of the catalogue for all, their windows' counts in one statement."""
    resource = getattr(context.resources, "duckdb", None)
    if resource is None:
        return [({}, {}) for _ in reports]
    try:
        from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
        from harvest_pipeline.store.preview import windows_record_counts

        path = str(catalogue_path(resource))
        with catalogue_connector(resource)() as con:
            windows = windows_record_counts(con, [(r.source_id, r.window.start, r.window.end) for r in reports])
            read = [(window, *_changes_read(con, report, path)) for report, window in zip(reports, windows)]
    except Exception as exc:  # noqa: BLE001 - the windows are merged and verified already: never fail them here
        # A busy catalogue (another process's merge) must not cost a window its materialization:
        # the ledger says verified, so nothing would ever harvest it again.
        for report in reports:
            context.log.warning(f"{report.source_id} {report.window.key}: the catalogue's counts and preview were not read ({exc})")
        busy = {"changed_records": dg.MetadataValue.text(f"not read: the catalogue was busy ({type(exc).__name__})")}
        return [({}, dict(busy)) for _ in reports]
    return [_shown(report, window, rows, has_deletions) for report, (window, rows, has_deletions) in zip(reports, read)]


def _changes_read(con, report: WindowReport, path: str) -> tuple[list, bool]:
    """(the preview rows of the records the report's run changed, whether its source has tombstones)."""
    from harvest_pipeline.harvest.split import SPLIT_ATTEMPT_PREFIX
    from harvest_pipeline.store.merge import PREVIEW_ROWS
    from harvest_pipeline.store.preview import changed_records, preview_rows, source_has_deletions

    counts = report.counts
    split = report.attempt_id.startswith(SPLIT_ATTEMPT_PREFIX)
    seen = (path, report.source_id)
    # What the merge counted (a split window's sums its sub-windows'): no history to scan. The
    # merge's own preview when it took one; read back otherwise (a split window's).
    rows = (preview_rows(counts.changed_preview) if counts.changed_preview is not None else changed_records(
        con, report.source_id, report.window.start, report.window.end, limit=PREVIEW_ROWS,
        **({"run_id": report.run_id} if split else {"attempt_id": report.attempt_id}),
    )) if counts.changed else []
    # Whether to plot deletions: asked once per run until the source shows a tombstone, then
    # not again (a source without any, a CSW one say, was asked after every window: a scan of
    # its whole `deleted` column).
    asked_this_run = _RUN_WITHOUT_DELETIONS.get(seen) == report.run_id
    has_deletions = (seen in _SOURCES_WITH_DELETIONS or counts.deleted > 0
                     or (not asked_this_run and source_has_deletions(con, report.source_id)))
    if has_deletions:
        _SOURCES_WITH_DELETIONS.add(seen)
    else:
        _RUN_WITHOUT_DELETIONS[seen] = report.run_id
    return rows, has_deletions


def _shown(report: WindowReport, window: dict, rows: list, has_deletions: bool) -> tuple[dict, dict]:
    changed = report.counts.changed
    if changed == 0:
        changes = {"changed_records": dg.MetadataValue.text("none: every record received was already stored as is")}
    else:
        changes = {
            "changed_records": dg.MetadataValue.table(records=[dg.TableRecord(r) for r in rows], schema=CHANGES_SCHEMA),
            "changed_records_shown": dg.MetadataValue.text(f"{len(rows)} of {changed}, newest datestamps first"),
        }
    if not has_deletions:
        window.pop("deleted")  # no tombstone anywhere in the source (CSW, say): a flat zero plot
    return window, changes
