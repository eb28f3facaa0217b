"""Protocol adapters: how a window's pages are listed, one class per protocol.

The window pipeline (staging, merge, checks) is the same for every protocol; a lister only knows
how to turn a window into request bounds and how to walk its pages from a resume point. Pages
are `ListPage`s: records, the token of the next page (None at the end) and the total size the
server announced (OAI-PMH completeListSize, CSW numberOfRecordsMatched).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Protocol

from harvest_pipeline.dates import window_to_oai_bounds
from harvest_pipeline.errors import OAIError
from harvest_pipeline.oai.client import QUIRK_CONTINUATION_NEEDS_ARGUMENTS, OAIClient
from harvest_pipeline.pages import ListPage
from harvest_pipeline.sources import SourceConfig


QUIRK_DATES_REJECTED = "dates-rejected"


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


class Lister(Protocol):
    def describe(self) -> dict:
        """What the server says about itself, for `source_state` (granularity, earliest, deletions)."""

    def bounds(self, start, end) -> tuple[str | None, str | None]:
        """The request's from/until for [start, end); (None, None) lists everything."""

    def pages(self, *, from_param: str | None, until_param: str | None, resume_token: str | None) -> Iterator[ListPage]:
        """Pages from the first request (resume_token None) or from a stored token."""


class OaiLister:
    def __init__(self, source: SourceConfig, client: OAIClient | None = None, state_dir: Path | None = None):
        self.source = source
        if client is None:
            client = OAIClient(source.url, max_token_bytes=source.traversal.max_token_bytes,
                               **transport_kwargs(source, state_dir))
        self.client = client
        self._identify = None

    def describe(self) -> dict:
        if self._identify is None:
            self._identify = self.client.identify()
        info = self._identify
        return {
            "granularity": info.granularity,
            "earliest_datestamp": info.earliest_datestamp,
            "deleted_record": info.deleted_record,
        }

    def bounds(self, start, end) -> tuple[str | None, str | None]:
        granularity = self.describe()["granularity"]
        b = window_to_oai_bounds(start, end, granularity)
        return b[0], b[1]

    def drain_warnings(self) -> list[str]:
        """What the transport went through since the last call (retries, waits), one line each."""
        return self.client.transport.drain_warnings()

    def fetch_record(self, identifier: str):
        """One record again (GetRecord), e.g. after it came unreadable inside a list page."""
        return self.client.get_record(identifier, self.source.metadata_prefix)

    @property
    def quirks(self) -> set[str]:
        """Non-conforming behaviour worked around so far (persisted per source by the caller)."""
        return self.client.quirks

    def apply_quirks(self, quirks) -> None:
        """Start from what earlier runs learned about this server."""
        quirks = set(quirks or ())
        self.client.quirks |= quirks & {QUIRK_CONTINUATION_NEEDS_ARGUMENTS, QUIRK_DATES_REJECTED}
        if QUIRK_CONTINUATION_NEEDS_ARGUMENTS in quirks:
            self.client.continuation_with_arguments = True

    def pages(self, *, from_param, until_param, resume_token) -> Iterator[ListPage]:
        dated = from_param is not None or until_param is not None
        if dated and QUIRK_DATES_REJECTED in self.client.quirks:
            yield from self._undated_pages(resume_token)
            return
        pages = self.client.list_records_pages(
            self.source.metadata_prefix, from_=from_param, until=until_param, set_=self.source.set,
            resumption_token=resume_token,
        )
        try:
            first = next(pages, None)
        except OAIError as exc:
            # Fallback strategy for servers that refuse from/until: list the whole source for the
            # window; records outside it are kept (idempotent upserts) and reported.
            if not (dated and resume_token is None and exc.code == "badArgument"):
                raise
            self.client.quirks.add(QUIRK_DATES_REJECTED)
            yield from self._undated_pages(None, reason=exc.message)
            return
        if first is not None:
            yield first
            yield from pages

    def _undated_pages(self, resume_token, reason: str | None = None) -> Iterator[ListPage]:
        note = (
            "the server rejects from/until"
            + (f" ({reason})" if reason else " (learned earlier)")
            + ": listed the whole source for this window; records outside it are kept and counted"
        )
        for n, page in enumerate(
            self.client.list_records_pages(
                self.source.metadata_prefix, set_=self.source.set, resumption_token=resume_token
            )
        ):
            if n == 0:
                page.warnings.append(note)
            yield page

    identifiers_verb: str | None = None  # which verb served the last identifiers() listing

    def identifiers(self) -> Iterator[ListPage]:
        """Every header of the source (its prefix and set, no from/until), one page at a time.

        ListIdentifiers; when its first request fails with badVerb, badArgument,
        cannotDisseminateFormat or an HTTP 5xx, ListRecords instead (heavier, same headers).
        Used by reconciliation; `identifiers_verb` says which verb served the listing.
        """
        from harvest_pipeline.errors import HTTPStatusError, OAIError

        pages = self.client.list_identifiers_pages(self.source.metadata_prefix, set_=self.source.set)
        try:
            first = next(pages, None)
        except (OAIError, HTTPStatusError) as exc:
            if getattr(exc, "code", None) not in ("badVerb", "badArgument", "cannotDisseminateFormat") and getattr(exc, "status_code", 0) < 500:
                raise
            self.identifiers_verb = "ListRecords"
            yield from self.client.list_records_pages(self.source.metadata_prefix, set_=self.source.set)
            return
        self.identifiers_verb = "ListIdentifiers"
        if first is not None:
            yield first
            yield from pages


def lister_for(source: SourceConfig, state_dir: Path | None = None) -> Lister:
    """The lister of the source's protocol; `state_dir` holds the per-host politeness locks."""
    if source.protocol == "csw":
        from harvest_pipeline.harvest.csw_lister import CswLister

        return CswLister(source, state_dir=state_dir)
    return OaiLister(source, state_dir=state_dir)
