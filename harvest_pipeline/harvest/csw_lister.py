"""The Lister of `protocol: csw` sources (OGC CSW 2.0.2), behind the same window pipeline as OAI-PMH.

* ``describe()``: GetCapabilities (is GetRecords offered? the source's outputSchema and
  typeNames? the page-size cap) and a cheap discovery of the earliest modification date. CSW has
  no tombstones (``deleted_record = "no"``): deletions are found by reconciliation, which lists
  ``identifiers()``.
* ``bounds(start, end)``: the window as ISO 8601 UTC instants, ``start`` inclusive and ``end``
  **exclusive** (the filter is ``modified >= start AND modified < end``, see
  :mod:`harvest_pipeline.csw.build`). They are stored as the ledger's from/until.
* ``pages()``: GetRecords pages; the durable token is the next ``startPosition``.
* ``identifiers()``: brief-record pages of everything upstream (for reconciliation);
  ``get_record(identifier)``: GetRecordById (for re-harvests by identifier).
* No quirks are learned yet; the client adds its transport warnings to each page itself, so
  ``drain_warnings()`` only returns what came after: a GetRecordById's retries, and what its
  answer needed (a record skipped without an identifier, say).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timezone

from harvest_pipeline.csw import CswCapabilities, CSWClient, WindowConstraint
from harvest_pipeline.csw.build import build_get_records, format_instant
from harvest_pipeline.dates import GRANULARITY_SECONDS
from harvest_pipeline.errors import ConfigError, IdDoesNotExist, ProtocolError
from harvest_pipeline.harvest.listers import transport_kwargs
from harvest_pipeline.pages import HarvestedRecord, ListPage
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.sources.registry import CswSettings


class CswLister:
    """The Lister of `protocol: csw` sources."""

    def __init__(self, source: SourceConfig, client: CSWClient | None = None, state_dir=None):
        self.source = source
        self.settings: CswSettings = source.csw or CswSettings()
        if client is None:
            client = CSWClient(source.url, **transport_kwargs(source, state_dir))
        self.client = client
        self._caps: CswCapabilities | None = None
        self._described: dict | None = None
        self._assumed_cap: int | None = None
        self._record_warnings: list[str] = []  # what GetRecordById answers needed, until drained

    # -- what the server says ---------------------------------------------------------

    def capabilities(self) -> CswCapabilities:
        if self._caps is None:
            self._caps = self.client.get_capabilities()
        return self._caps

    def _check_capabilities(self, caps: CswCapabilities) -> None:
        s = self.settings
        if caps.operations and not caps.supports("GetRecords"):
            raise ProtocolError(
                "the catalogue does not offer GetRecords",
                url=self.client.url,
                hint="check that the source URL is the catalogue's CSW 2.0.2 endpoint",
            )
        if not caps.offers_output_schema(s.output_schema):
            raise ProtocolError(
                f"the catalogue does not offer outputSchema {s.output_schema}",
                url=self.client.url,
                hint=f"set csw.output_schema to one it offers: {', '.join(caps.output_schemas)}",
            )
        for name in s.type_names.split():
            if not caps.offers_type_name(name):
                raise ProtocolError(
                    f"the catalogue does not offer typeNames {name}",
                    url=self.client.url,
                    hint=f"set csw.type_names to one it offers: {', '.join(caps.type_names)}",
                )

    def earliest_datestamp(self) -> str | None:
        """The oldest modification date (YYYY-MM-DDThh:mm:ssZ, rounded down), or None.

        Best effort: a catalogue that cannot sort, or answers with an exception, gives None (and
        the source's partitions then need a configured `start`).
        """
        s = self.settings
        try:
            earliest = self.client.earliest_modified(
                type_names=s.type_names, output_schema=s.output_schema,
                modified_queryable=s.modified_queryable, extra_filter=s.extra_filter,
            )
        except ProtocolError:
            return None
        if earliest is None:
            return None
        return earliest.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")

    def assume(self, described: dict) -> None:
        # Capabilities were checked when these facts were learned (harvest/server_facts.py).
        self._described = {"granularity": GRANULARITY_SECONDS, "earliest_datestamp": described.get("earliest_datestamp"),
                           "deleted_record": "no"}
        self._assumed_cap = described.get("page_cap")

    def describe(self) -> dict:
        if self._described is None:
            self._check_capabilities(self.capabilities())
            self._described = {
                "granularity": GRANULARITY_SECONDS,
                "earliest_datestamp": self.earliest_datestamp(),
                "deleted_record": "no",
            }
        return dict(self._described)

    @property
    def quirks(self) -> set[str]:
        """Nothing worked around that needs remembering: CSW servers are checked by capabilities."""
        return set()

    def apply_quirks(self, quirks: Iterable[str]) -> None:
        """Nothing to apply: no CSW quirk is learned (see :attr:`quirks`)."""

    def drain_warnings(self) -> list[str]:
        """What the transport went through since the client last put it on a page, and what the
        GetRecordById answers since then needed, one line each."""
        drained, self._record_warnings = self._record_warnings, []
        return self.client.transport.drain_warnings() + drained

    # -- windows ----------------------------------------------------------------------

    def bounds(self, start: datetime, end: datetime) -> tuple[str | None, str | None]:
        return format_instant(start), format_instant(end)

    def page_size(self) -> int:
        """The configured page size, lowered to the advertised cap when capabilities are known."""
        size = self.settings.page_size
        cap = self._caps.max_records if self._caps is not None else self._assumed_cap
        return min(size, cap) if cap else size

    def constraint(self, from_param: str | None, until_param: str | None) -> WindowConstraint:
        s = self.settings
        return WindowConstraint(from_param, until_param, s.modified_queryable, s.extra_filter)

    def pages(self, *, from_param, until_param, resume_token) -> Iterator[ListPage]:
        start_position = 1
        if resume_token is not None:
            token = str(resume_token).strip()
            if not token.isdigit() or int(token) < 1:
                raise ProtocolError(
                    f"stored CSW cursor {resume_token!r} is not a startPosition",
                    url=self.client.url,
                    hint="the staging folder belongs to another protocol; delete it and run the window again",
                )
            start_position = int(token)
        s = self.settings
        constraint = self.constraint(from_param, until_param)
        args = dict(type_names=s.type_names, output_schema=s.output_schema, element_set="full", constraint=constraint)
        try:  # build one request now: a bad csw: setting fails here, not halfway through a window
            build_get_records(**args, start_position=start_position, max_records=1, sort_by=s.modified_queryable)
        except ValueError as exc:
            raise ConfigError(str(exc), source_id=self.source.id, hint="fix the source's csw: settings") from None
        return self.client.get_records_pages(
            **args, page_size=self.page_size(), start_position=start_position, sort_by=s.modified_queryable,
        )

    def get_record(self, identifier: str) -> HarvestedRecord:
        """One record by identifier (GetRecordById, full, the source's outputSchema).

        IdDoesNotExist when the catalogue does not hold it (for re-harvests by identifier).
        """
        noticed: list[str] = []
        try:
            found = [r for r in self.client.get_record_by_id([identifier], output_schema=self.settings.output_schema,
                                                             warnings=noticed)
                     if r.identifier == identifier]
        finally:
            self._record_warnings += [f"GetRecordById {identifier}: {w}" for w in noticed]
        if not found:
            raise IdDoesNotExist("idDoesNotExist", f"the catalogue holds no record {identifier!r}", url=self.client.url)
        return found[0]

    # -- reconciliation ---------------------------------------------------------------

    record_verb = "GetRecordById"  # what get_record() sends
    identifiers_verb = "GetRecords (brief)"  # what served identifiers(), for the reconciliation ledger

    def identifiers(self) -> Iterator[ListPage]:
        """Every record upstream (within `csw.extra_filter`) as brief records, one page at a time.

        Same shape as ``OaiLister.identifiers()``: pages whose records carry the identifiers
        (never deleted: CSW has no tombstones) and the first page's numberOfRecordsMatched as
        ``complete_list_size``. Raises ProtocolError (guard 'csw-matched-changed') if the
        catalogue's count changes during the listing: such a list may have skipped identifiers,
        and deleting by absence from it would tombstone live records.
        """
        s = self.settings
        constraint = WindowConstraint(None, None, s.modified_queryable, s.extra_filter) if s.extra_filter else None
        return self.client.list_identifiers_pages(
            type_names=s.type_names, output_schema=s.output_schema, constraint=constraint,
            page_size=self.page_size(),
        )
