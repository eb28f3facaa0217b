"""The Lister protocol: how a window's pages are listed, one implementation per protocol.

The window pipeline (staging, merge, checks) is the same for every protocol; a lister knows how
to turn a window into request bounds, walk its pages from a resume point, fetch one record, and
list every identifier upstream. Pages are `ListPage`s: records, the token of the next page (None
at the end) and the total size the server announced (OAI-PMH completeListSize, CSW
numberOfRecordsMatched). Implementations: :class:`~harvest_pipeline.harvest.oai_lister.OaiLister`
and :class:`~harvest_pipeline.harvest.csw_lister.CswLister`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from harvest_pipeline.pages import HarvestedRecord, ListPage
from harvest_pipeline.sources import SourceConfig


def transport_kwargs(source: SourceConfig, state_dir: Path | None = None) -> dict:
    """What every protocol client of a source gets: its secrets, limits and politeness state."""
    from harvest_pipeline.store import default_db_path

    return dict(
        headers=source.http_headers(),
        auth=source.http_auth(),
        timeout=source.http.timeout_seconds,
        http=source.http,
        # Per-host politeness locks live beside the catalogue, shared by every run process.
        state_dir=state_dir or default_db_path().parent / "hosts",
    )


@runtime_checkable
class Lister(Protocol):
    identifiers_verb: str | None  # what served the last identifiers() listing (reconciliation ledger)
    record_verb: str  # what get_record() sends (GetRecord, GetRecordById), as reports name it

    def describe(self) -> dict:
        """What the server says about itself, for `source_state` (granularity, earliest, deletions)."""

    def assume(self, described: dict) -> None:
        """Take what the server said before (its stored server facts: granularity, earliest_datestamp,
        deleted_record, page_cap) as its description: describe() then asks the server nothing."""

    def bounds(self, start: datetime, end: datetime) -> tuple[str | None, str | None]:
        """The request's from/until for [start, end); (None, None) lists everything."""

    def pages(self, *, from_param: str | None, until_param: str | None, resume_token: str | None) -> Iterator[ListPage]:
        """Pages from the first request (resume_token None) or from a stored token."""

    def get_record(self, identifier: str) -> HarvestedRecord:
        """One record by identifier; IdDoesNotExist when the server does not hold it."""

    def identifiers(self) -> Iterator[ListPage]:
        """Every record upstream, at least its header, one page at a time (for reconciliation)."""

    @property
    def quirks(self) -> set[str]:
        """Non-conforming behaviour worked around so far (persisted per source by the caller)."""

    def apply_quirks(self, quirks: Iterable[str]) -> None:
        """Start from what earlier runs learned about this server."""

    def drain_warnings(self) -> list[str]:
        """What the transport went through since the last call (retries, waits), and what the
        single-record responses since then needed (repairs), one line each."""


def lister_for(source: SourceConfig, state_dir: Path | None = None) -> Lister:
    """The lister of the source's protocol; `state_dir` holds the per-host politeness locks."""
    if source.protocol == "csw":
        from harvest_pipeline.harvest.csw_lister import CswLister

        return CswLister(source, state_dir=state_dir)
    from harvest_pipeline.harvest.oai_lister import OaiLister

    return OaiLister(source, state_dir=state_dir)
