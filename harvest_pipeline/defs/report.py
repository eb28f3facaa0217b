"""How a window report shows in Dagster: progress lines, warnings, and materialization metadata."""

import time

import dagster as dg

from harvest_pipeline.harvest.progress import notify
from harvest_pipeline.harvest.window import WindowReport


LOG_EVERY_SECONDS = 5.0


def progress_logger(context, source_id: str):
    """A progress callback that tells CLI listeners of every page and logs one line every few
    seconds (each log line is an event written to the instance; one per page costs ~2 s per
    100,000 records)."""
    last = [float("-inf")]

    def progress(event: dict) -> None:
        notify(event)
        now = time.monotonic()
        if now - last[0] < LOG_EVERY_SECONDS:
            return
        last[0] = now
        total = event.get("complete_list_size")
        context.log.info(
            f"{source_id} {event.get('window')}: page {event.get('pages')}, {event.get('received')}"
            f" of {total if total is not None else '?'} records"
        )

    return progress


def report_metadata(context, report: WindowReport) -> dict:
    """Log the report's warnings and return the metadata the UI shows and plots per window."""
    for text in report.warnings[:50]:
        context.log.warning(f"{report.source_id} {report.window.key}: {text}")
    counts = report.counts
    return {
        "status": report.status,
        "records": counts.received,
        "upserts": counts.upserted,
        "created": counts.created,
        "updated": counts.updated,
        "unchanged": counts.unchanged,
        "deletions": counts.deleted,
        "revived": counts.revived,
        "restored": counts.restored,
        "quarantined": counts.quarantined,
        "repaired_chars": report.repaired,
        "pages": report.pages,
        "seconds": round(report.seconds, 3),
        "from": report.from_param or "(none)",
        "until": report.until_param or "(none)",
        "resumed": report.resumed,
        "restarts": report.restarts,
        "warnings": len(report.warnings),
        "what_the_server_did": dg.MetadataValue.md(
            "\n".join(f"- {w}" for w in report.warnings[:20]) or "nothing unusual"
        ),
        # Only numbers plot; a window whose server gave none simply has no point here.
        **({"completeListSize": report.complete_list_size} if report.complete_list_size is not None else {}),
    }
