"""Record datestamps later than the server's own clock: kept, flagged, and not allowed to win.

The merge never lets an older version overwrite a newer one, by datestamp. A version stamped
9999-01-01 (a typo, a placeholder, a bad migration) would therefore turn every later real
update into `stale`. A datestamp later than the response's `responseDate` plus
:data:`CLOCK_SKEW` cannot be true, so such a version is stored with the responseDate as its
datestamp: the latest time it can really have been made, since the server was serving it then.
A later real update is dated after that and wins; an older version is still `stale`.
`datestamp_raw` keeps what the server sent, and each one gets a `quarantine` row of kind
`datestamp` and a warning on the window.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from harvest_pipeline.dates import parse_datestamp
from harvest_pipeline.pages import ListPage

# Servers that write local time with a "Z" can be up to 14 hours ahead; anything beyond a day
# is not clock trouble.
CLOCK_SKEW = timedelta(days=1)
QUARANTINE_KIND = "datestamp"


def _server_now(page: ListPage) -> tuple[datetime, str]:
    if page.response_date:
        try:
            return parse_datestamp(page.response_date), f"responseDate {page.response_date}"
        except ValueError:
            pass
    now = datetime.now(timezone.utc).replace(microsecond=0)
    return now, f"the harvester's clock ({now:%Y-%m-%dT%H:%M:%SZ}; the response has no usable responseDate)"


def cap_future_datestamps(page: ListPage) -> tuple[list[str], list[tuple]]:
    """Re-date the page's records stamped after the server's clock; (warnings, quarantine entries).

    Quarantine entries have the shape `page_rows` returns: (page_number, identifier, kind,
    error, raw bytes); `raw` is the datestamp as sent.
    """
    if not page.records:
        return [], []
    server_now, said = _server_now(page)
    limit = server_now + CLOCK_SKEW
    capped = []
    for rec in page.records:
        if rec.datestamp_utc is not None and rec.datestamp_utc > limit:
            capped.append(rec)
            rec.datestamp_utc = server_now
    if not capped:
        return [], []
    entries = [
        (page.page_number, rec.identifier, QUARANTINE_KIND,
         f"datestamp {rec.datestamp!r} is later than the server's clock ({said}); stored as "
         f"{server_now:%Y-%m-%dT%H:%M:%SZ} so that later real updates win", rec.datestamp.encode())
        for rec in capped
    ]
    examples = ", ".join(f"{rec.identifier} ({rec.datestamp})" for rec in capped[:3])
    warning = (
        f"page {page.page_number}: {len(capped)} record(s) dated later than the server's clock ({said}), "
        f"e.g. {examples}; stored with that time as datestamp (datestamp_raw keeps the sent value) so later "
        "real updates are not taken for stale; see the quarantine table, kind 'datestamp'"
    )
    return [warning], entries
