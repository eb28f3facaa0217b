"""Drift audit: does the catalogue still hold as many records as the server says it has?

Per source, at most two small list requests after Identify:

* the size of the whole list: the first page of an unwindowed ListIdentifiers (ListRecords when
  ListIdentifiers is refused) and its completeListSize; a list that fits one page is counted.
  CSW: a GetRecords with ``resultType=hits`` (numberOfRecordsMatched);
* the size of what changed since the watermark (the same request with ``from`` = watermark):
  records the catalogue may not have yet, because their windows are not harvested.

Records the server counts: its live records, plus its deleted ones when it keeps persistent
deletions (they are listed, so completeListSize counts them). The catalogue is compared the same
way (live, plus tombstones for a persistent server). With T the server's total and R the part
changed since the watermark, a catalogue in step holds between T - R and T records:

* more than T: records were deleted upstream without a tombstone: reconcile;
* fewer than T - R: records from before the watermark are missing: a full harvest.

Nothing is written: the verdict goes to the Dagster asset check `drift/<source>` (defs/drift.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from harvest_pipeline.errors import HTTPStatusError, OAIError
from harvest_pipeline.harvest.listers import Lister, lister_for
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect as store_connect
from harvest_pipeline.store import ledger
from harvest_pipeline.store.drift import catalogue_counts

_FALLBACK_CODES = ("badVerb", "badArgument", "cannotDisseminateFormat")


@dataclass
class ListSize:
    size: int | None  # None: the server gave no completeListSize for a multi-page list
    verb: str
    url: str | None


@dataclass
class DriftAudit:
    source_id: str
    deleted_record: str | None
    counts_deletions: bool  # the server's size includes its (persistent) deletions
    upstream: ListSize
    recent: ListSize | None  # changed since the watermark; None: no watermark yet
    watermark: datetime | None
    local_live: int
    local_deleted: int
    notes: list[str] = field(default_factory=list)

    @property
    def local(self) -> int:
        return self.local_live + (self.local_deleted if self.counts_deletions else 0)

    @property
    def expected_range(self) -> tuple[int, int] | None:
        """(fewest, most) records a catalogue in step holds; None when the server gave no size."""
        total = self.upstream.size
        if total is None:
            return None
        recent = self.recent.size if self.recent is not None and self.recent.size is not None else total
        return max(0, total - recent), total

    @property
    def passed(self) -> bool | None:
        """True in step, False drifted, None cannot tell (no size from the server)."""
        bounds = self.expected_range
        return None if bounds is None else bounds[0] <= self.local <= bounds[1]

    @property
    def what(self) -> str:
        return "live and deleted" if self.counts_deletions else "live"

    def summary(self) -> str:
        bounds = self.expected_range
        if bounds is None:
            return (f"the server gave no completeListSize for {self.upstream.verb} ({self.upstream.url}); the catalogue "
                    f"holds {self.local} {self.what} record(s); drift cannot be measured")
        low, high = bounds
        since = (f"; {self.recent.size} changed since the watermark {self.watermark:%Y-%m-%dT%H:%M:%SZ}"
                 if self.recent is not None and self.recent.size is not None else "")
        said = f"the server counts {high} {self.what} record(s){since}; the catalogue holds {self.local}"
        return said if low == high else f"{said} (in step: {low}..{high})"

    def advice(self) -> str:
        bounds = self.expected_range
        if bounds is None or self.passed:
            return "nothing to do"
        low, high = bounds
        sid = self.source_id
        if self.local > high:
            lost = "" if not self.counts_deletions else (
                " although it says deletedRecord persistent (its deletions were lost)")
            return (f"{self.local - high} record(s) more than the server counts: records were deleted upstream without "
                    f"a tombstone{lost}. Reconcile: materialize reconcile/{sid} (job reconcile), which "
                    "tombstones what the server no longer lists")
        return (f"at least {low - self.local} record(s) fewer than the server lists from before the watermark: "
                f"records are missing. Run a full harvest: `harvest-pipeline harvest {sid} --full` (job "
                f"harvest_full); if windows failed, see `harvest-pipeline status`")


def audit_drift(
    source: SourceConfig, *, db_path: str | Path, connect=None, lister: Lister | None = None,
) -> DriftAudit:
    """Ask the server for its list sizes and compare them with the catalogue (see the module doc)."""
    connect = connect or (lambda: store_connect(db_path))
    lister = lister or lister_for(source, state_dir=Path(db_path).parent / "hosts")
    described = lister.describe()
    with connect() as con:
        watermark = ledger.get_watermark(con, source.id)  # naive UTC, as stored
        live, deleted = catalogue_counts(con, source.id)
    deleted_record = described.get("deleted_record")
    notes: list[str] = []
    upstream = _list_size(source, lister, None)
    recent = None
    if watermark is not None:
        watermark = watermark.replace(tzinfo=timezone.utc)
        from_param = lister.bounds(watermark, watermark + timedelta(seconds=1))[0]
        try:
            recent = _list_size(source, lister, from_param)
        except OAIError as exc:  # a server that refuses from: the lower bound is unknown
            notes.append(f"the count since the watermark was refused ({exc.message})")
    return DriftAudit(
        source_id=source.id, deleted_record=deleted_record, counts_deletions=deleted_record == "persistent",
        upstream=upstream, recent=recent, watermark=watermark, local_live=live, local_deleted=deleted, notes=notes,
    )


def _list_size(source: SourceConfig, lister: Lister, from_param: str | None) -> ListSize:
    if source.protocol == "csw":
        client = lister.client
        s = source.csw
        size = client.hits(type_names=s.type_names, output_schema=s.output_schema,
                           constraint=lister.constraint(from_param, None))
        return ListSize(size, "GetRecords resultType=hits", client.url)
    client = lister.client
    pages = client.list_identifiers_pages(source.metadata_prefix, set_=source.set, from_=from_param)
    verb = "ListIdentifiers"
    try:
        page = next(pages, None)
    except (OAIError, HTTPStatusError) as exc:
        if getattr(exc, "code", None) not in _FALLBACK_CODES and getattr(exc, "status_code", 0) < 500:
            raise
        verb = "ListRecords"
        page = next(client.list_records_pages(source.metadata_prefix, set_=source.set, from_=from_param), None)
    if page is None or page.empty_list:
        return ListSize(0, verb, page.url if page is not None else None)
    size = page.resumption.complete_list_size
    if size is None and page.next_token is None:
        size = len(page.records) + len(page.quarantined)  # the whole list in one page
    return ListSize(size, verb, page.url)
