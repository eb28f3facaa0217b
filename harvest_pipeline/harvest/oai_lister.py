"""The Lister of OAI-PMH sources: ListRecords pages of a window, GetRecord, ListIdentifiers.

* ``describe()``: Identify (granularity, earliest datestamp, deletion policy), asked once.
* ``bounds(start, end)``: inclusive from/until at the server's granularity
  (:func:`harvest_pipeline.dates.window_to_oai_bounds`).
* ``pages()``: ListRecords from the first request or a stored resumption token. A server that
  refuses from/until (badArgument) is listed whole instead, and the quirk remembered.
* ``identifiers()``: ListIdentifiers (ListRecords where that fails) for reconciliation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from harvest_pipeline.dates import window_to_oai_bounds
from harvest_pipeline.errors import HTTPStatusError, OAIError
from harvest_pipeline.harvest.listers import transport_kwargs
from harvest_pipeline.oai.client import QUIRK_CONTINUATION_NEEDS_ARGUMENTS, OAIClient
from harvest_pipeline.pages import HarvestedRecord, ListPage
from harvest_pipeline.sources import SourceConfig

QUIRK_DATES_REJECTED = "dates-rejected"


class OaiLister:
    """The Lister of `protocol: oai-pmh` sources (the default)."""

    def __init__(self, source: SourceConfig, client: OAIClient | None = None, state_dir: Path | None = None):
        self.source = source
        if client is None:
            client = OAIClient(source.url, max_token_bytes=source.traversal.max_token_bytes,
                               **transport_kwargs(source, state_dir))
        self.client = client
        self._identify = None
        self._assumed: dict | None = None
        self._record_warnings: list[str] = []  # what GetRecord responses needed, until drained

    def assume(self, described: dict) -> None:
        self._assumed = {k: described.get(k) for k in ("granularity", "earliest_datestamp", "deleted_record")}

    def describe(self) -> dict:
        if self._identify is None and self._assumed is not None:
            return dict(self._assumed)
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
        """What the transport went through since the last call (retries, waits), and what the
        GetRecord responses since then needed (repairs), one line each."""
        drained, self._record_warnings = self._record_warnings, []
        return self.client.transport.drain_warnings() + drained

    def get_record(self, identifier: str) -> HarvestedRecord:
        """One record by identifier (GetRecord in the source's prefix): a re-harvest, or a record
        that came unreadable inside a list page. IdDoesNotExist when the server lacks it."""
        noticed: list[str] = []
        try:
            return self.client.get_record(identifier, self.source.metadata_prefix, warnings=noticed)
        finally:
            self._record_warnings += [f"GetRecord {identifier}: {w}" for w in noticed]

    @property
    def quirks(self) -> set[str]:
        """Non-conforming behaviour worked around so far (persisted per source by the caller)."""
        return self.client.quirks

    def apply_quirks(self, quirks: Iterable[str]) -> None:
        """Start from what earlier runs learned about this server."""
        quirks = set(quirks or ())
        self.client.quirks |= quirks & {QUIRK_CONTINUATION_NEEDS_ARGUMENTS, QUIRK_DATES_REJECTED}
        if QUIRK_CONTINUATION_NEEDS_ARGUMENTS in quirks:
            self.client.continuation_with_arguments = True

    def pages(self, *, from_param, until_param, resume_token) -> Iterator[ListPage]:
        """ListRecords pages of the window. Their records' metadata_xml is written by page_rows
        (harvest/rows.py), after the next page was asked for: see oai.parse.serialize_records."""
        dated = from_param is not None or until_param is not None
        if dated and QUIRK_DATES_REJECTED in self.client.quirks:
            yield from self._undated_pages(resume_token)
            return
        pages = self.client.list_records_pages(
            self.source.metadata_prefix, from_=from_param, until=until_param, set_=self.source.set,
            resumption_token=resume_token, serialize=False,
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
                self.source.metadata_prefix, set_=self.source.set, resumption_token=resume_token,
                serialize=False,
            )
        ):
            if n == 0:
                page.warnings.append(note)
            yield page

    identifiers_verb: str | None = None  # which verb served the last identifiers() listing
    record_verb = "GetRecord"

    def identifiers(self) -> Iterator[ListPage]:
        """Every header of the source (its prefix and set, no from/until), one page at a time.

        ListIdentifiers; when its first request fails with badVerb, badArgument,
        cannotDisseminateFormat or an HTTP 5xx, ListRecords instead (heavier, same headers).
        Used by reconciliation; `identifiers_verb` says which verb served the listing.
        """
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
