"""A small, strict OGC CSW 2.0.2 client for harvesting (requests + lxml, no Dagster).

    client = CSWClient("https://example.org/csw")
    caps = client.get_capabilities()
    for page in client.get_records_pages(
        type_names="csw:Record", output_schema=CSW_NS,
        constraint=WindowConstraint(start, end, "dct:modified"), page_size=100,
    ):
        ...  # page.records, page.next_token (str(nextRecord) or None), page.warnings

Paging (``startPosition`` / ``nextRecord``):

* every page is a POST GetRecords (``resultType=results``) with the window filter and
  ``SortBy`` on the modified queryable, ascending; ``startPosition`` starts at 1 (or at a stored
  token) and then follows ``nextRecord``;
* the list ends when ``nextRecord`` is 0 or past ``numberOfRecordsMatched``;
* a server that silently caps ``maxRecords`` (ask 100, get 25) is detected and paged by what
  it returned: when its ``nextRecord`` would jump past records it did not send, or when it
  ends the list while fewer than ``numberOfRecordsMatched`` were delivered, the next page
  starts right after the last record received. Records are never skipped;
* a ``nextRecord`` that does not advance (or goes backwards), or that advances with no records
  returned, raises :class:`~harvest_pipeline.errors.ProtocolError` naming guard
  ``'csw-next-record'``: following it would loop or skip;
* a change of ``numberOfRecordsMatched`` during the traversal (records added, changed or
  removed while paging by offset) is reported as a warning on the page that saw it; pages
  carry the FIRST page's count as ``complete_list_size``, so the window's completeness check
  compares what arrived with what was promised at the start.

All HTTP goes through :meth:`CSWClient._send` (one door, like ``OAIClient._get``) and the shared
:class:`~harvest_pipeline.http.Transport` (retries, politeness, size caps).
Credentials never appear in URLs or messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import requests
from requests.models import PreparedRequest

from harvest_pipeline.csw.build import CSW_NS, build_get_records, format_instant
from harvest_pipeline.csw.models import CswCapabilities, SearchResults, WindowConstraint
from harvest_pipeline.csw.parse import (
    CSWException,
    parse_capabilities,
    parse_get_record_by_id,
    parse_search_results,
    to_record,
)
from harvest_pipeline.errors import ProtocolError
from harvest_pipeline.http import Transport, TransportEvent, strip_credentials
from harvest_pipeline.pages import HarvestedRecord, ListPage, ResumptionInfo

if TYPE_CHECKING:
    from harvest_pipeline.sources.registry import HttpSettings

__all__ = ["CSWClient", "CSWException", "DEFAULT_USER_AGENT", "GUARD_NEXT_RECORD", "GUARD_MATCHED_CHANGED"]

DEFAULT_USER_AGENT = "harvest_pipeline/0.1 (+CSW harvester)"
GUARD_NEXT_RECORD = "csw-next-record"
GUARD_MATCHED_CHANGED = "csw-matched-changed"

# queryable of the record identifier, per output schema (for a stable order of identifier lists)
IDENTIFIER_QUERYABLES = {CSW_NS: "dc:identifier", "http://www.isotc211.org/2005/gmd": "apiso:Identifier"}


def _next_position(position: int, requested: int, env: SearchResults, url: str) -> tuple[int | None, str | None]:
    """Where the next page starts (None: the list is over) and a note when the server capped."""
    returned, nxt, matched = env.returned, env.next_record, env.matched
    delivered = position - 1 + returned
    capped = returned < requested
    if nxt is None:  # no nextRecord attribute: page by what was returned
        return (position + returned if returned and delivered < matched else None), None
    if nxt == 0 or nxt > matched:
        if returned and capped and delivered < matched:
            return position + returned, (
                f"the server returned {returned} records for maxRecords={requested} and ended the list "
                f"(nextRecord={nxt}) although {matched} match and {delivered} were delivered: it caps the "
                "page size; continuing right after the records it returned"
            )
        return None, None
    if nxt <= position:
        raise ProtocolError(
            f"guard '{GUARD_NEXT_RECORD}': nextRecord={nxt} does not advance past startPosition={position} "
            f"({returned} returned, {matched} matched); following it would loop",
            url=url,
            hint="the catalogue's paging is broken; report it to its maintainers",
        )
    if returned == 0:
        raise ProtocolError(
            f"guard '{GUARD_NEXT_RECORD}': no records returned at startPosition={position} but "
            f"nextRecord={nxt} ({matched} matched); following it would skip records",
            url=url,
            hint="the catalogue's paging is broken; report it to its maintainers",
        )
    if nxt > position + returned:
        return position + returned, (
            f"the server returned {returned} records for maxRecords={requested} but answered "
            f"nextRecord={nxt}, which would skip {nxt - position - returned}: it caps the page size; "
            "paging by what it returned"
        )
    if capped:
        return nxt, f"the server returned {returned} records for maxRecords={requested}: it caps the page size"
    return nxt, None


class CSWClient:
    """CSW 2.0.2 client for one catalogue endpoint URL.

    ``session``: a requests.Session (kept for keep-alive; created when None). ``headers`` are sent
    with every request (User-Agent defaults to ``user_agent``). ``auth`` is anything requests
    accepts; ``user:password@`` in the URL is moved into it and stripped from the URL.

    Transport: the same :class:`~harvest_pipeline.http.Transport` as the OAI-PMH client.
    ``http`` is the source's HttpSettings (retries, backoff, Retry-After cap, per-host politeness,
    response cap; None: one attempt), ``state_dir`` holds the per-host lock files, ``timeout``
    overrides ``http.timeout_seconds``. What the transport had to retry is added to the
    warnings of the page it served.
    """

    def __init__(
        self,
        url: str,
        *,
        session: requests.Session | None = None,
        headers: dict | None = None,
        auth=None,
        timeout: float | None = 60,
        user_agent: str = DEFAULT_USER_AGENT,
        http: HttpSettings | None = None,
        state_dir: Path | str | None = None,
        max_body_bytes: int | None = None,
        on_event: Callable[[TransportEvent], None] | None = None,
    ):
        clean, url_auth = strip_credentials(url)
        self.url = clean
        self.session = session if session is not None else requests.Session()
        self.headers = {"User-Agent": user_agent, **(headers or {})}
        self.auth = auth if auth is not None else url_auth
        self.transport = Transport(
            http, session=self.session, headers=self.headers, auth=self.auth, state_dir=state_dir,
            user_agent=user_agent, timeout=timeout, max_body_bytes=max_body_bytes, on_event=on_event,
        )
        self.timeout = self.transport.timeout

    def __repr__(self) -> str:
        return f"CSWClient({self.url!r})"

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> CSWClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------- HTTP (the one door)

    def url_for(self, params: Mapping[str, str]) -> str:
        p = PreparedRequest()
        p.prepare_url(self.url, dict(params))
        return p.url

    def _send(self, method: str, *, params: Mapping[str, str] | None = None, body: bytes | None = None) -> tuple[str, bytes]:
        """One request through the transport: GET with KVP ``params`` or POST of an XML ``body``.

        Returns (url, body bytes). The transport retries what is worth retrying and raises
        TransportError, HTTPStatusError (non-2xx), ResponseTooLarge or DeferredError (see
        :mod:`harvest_pipeline.http`). An ows:ExceptionReport answered with HTTP 200
        (the CSW 2.0.2 / OWS 1.0 custom) is raised by the parsers as CSWException.
        """
        if method == "GET":
            url = self.url_for(params or {})
            resp = self.transport.request("GET", url, display_url=url)
        else:
            url = self.url
            resp = self.transport.request(
                "POST", url, data=body, headers={"Content-Type": "application/xml; charset=UTF-8"},
                display_url=url,
            )
        return url, resp.content

    # ------------------------------------------------------------------------ operations

    def get_capabilities(self) -> CswCapabilities:
        url, content = self._send(
            "GET", params={"service": "CSW", "request": "GetCapabilities", "acceptVersions": "2.0.2"}
        )
        return parse_capabilities(content, url)

    def get_records_pages(
        self,
        *,
        type_names: str = "csw:Record",
        output_schema: str = CSW_NS,
        element_set: str = "full",
        constraint: WindowConstraint | None = None,
        page_size: int = 100,
        start_position: int = 1,
        sort_by: str | None = None,
    ) -> Iterator[ListPage]:
        """GetRecords, one :class:`ListPage` per response (see the module doc for the paging rules).

        ``sort_by`` defaults to the constraint's modified queryable (``dct:modified`` without a
        constraint). Lazy: nothing is fetched until iterated.
        """
        if sort_by is None:
            sort_by = constraint.modified_queryable if constraint is not None else "dct:modified"
        return (page for page, _ in self._traverse(
            type_names=type_names, output_schema=output_schema, element_set=element_set,
            constraint=constraint, page_size=page_size, start_position=start_position, sort_by=sort_by,
        ))

    def get_records(self, **kw) -> Iterator[HarvestedRecord]:
        """GetRecords flattened into records (same arguments as :meth:`get_records_pages`)."""
        for page in self.get_records_pages(**kw):
            yield from page.records

    def hits(self, *, type_names: str = "csw:Record", output_schema: str = CSW_NS,
             constraint: WindowConstraint | None = None) -> int:
        """numberOfRecordsMatched of a ``resultType=hits`` GetRecords (no records transferred)."""
        body = build_get_records(
            type_names=type_names, output_schema=output_schema, element_set="brief", constraint=constraint,
            max_records=0, result_type="hits",
        )
        url, content = self._send("POST", body=body)
        env, _ = parse_search_results(content, url)
        return env.matched

    def get_record_by_id(self, ids, output_schema: str = CSW_NS, element_set: str = "full", *,
                         warnings: list[str] | None = None) -> list[HarvestedRecord]:
        """GetRecordById (KVP GET); unknown ids are simply absent from the answer. What the answer's
        records needed (one skipped without an identifier, an unreadable date) is appended to
        `warnings` when given."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        if not ids:
            return []
        if any("," in i for i in ids):
            raise ValueError("identifiers containing ',' cannot be sent in one KVP GetRecordById")
        url, content = self._send("GET", params={
            "service": "CSW", "version": "2.0.2", "request": "GetRecordById", "id": ",".join(ids),
            "outputSchema": output_schema, "elementSetName": element_set,
        })
        warnings = [] if warnings is None else warnings
        out = []
        for pos, el in enumerate(parse_get_record_by_id(content, url), start=1):
            rec = to_record(el, warnings, pos)
            if rec is not None:
                out.append(rec)
        return out

    def list_identifiers_pages(
        self,
        *,
        type_names: str = "csw:Record",
        output_schema: str = CSW_NS,
        constraint: WindowConstraint | None = None,
        page_size: int = 100,
        sort_by: str | None = None,
        strict: bool = True,
    ) -> Iterator[ListPage]:
        """Every record the catalogue holds as brief records (``elementSetName=brief``), one page at a time.

        For reconciliation (deletion by absence). Sorted by the identifier queryable
        (``dc:identifier`` / ``apiso:Identifier``), an order that edits do not change. With
        ``strict`` (the default) a change of numberOfRecordsMatched during the listing raises
        ProtocolError (guard ``'csw-matched-changed'``): offsets may then have shifted, an
        identifier may have been skipped, and deleting by absence from such a list would
        tombstone live records.
        """
        if sort_by is None:
            sort_by = IDENTIFIER_QUERYABLES.get(output_schema, "dc:identifier")
        first = None
        for page, env in self._traverse(
            type_names=type_names, output_schema=output_schema, element_set="brief", constraint=constraint,
            page_size=page_size, start_position=1, sort_by=sort_by,
        ):
            if first is None:
                first = env.matched
            elif strict and env.matched != first:
                raise ProtocolError(
                    f"guard '{GUARD_MATCHED_CHANGED}': numberOfRecordsMatched changed from {first} to "
                    f"{env.matched} while listing identifiers; the list may have skipped records",
                    url=page.url,
                    hint="the catalogue changed during the listing; run the reconciliation again later",
                )
            yield page

    def list_identifiers(self, **kw) -> Iterator[str]:
        """:meth:`list_identifiers_pages` flattened into identifiers (same arguments)."""
        for page in self.list_identifiers_pages(**kw):
            for rec in page.records:
                yield rec.identifier

    def earliest_modified(
        self,
        *,
        type_names: str = "csw:Record",
        output_schema: str = CSW_NS,
        modified_queryable: str = "dct:modified",
        extra_filter: str | None = None,
    ) -> datetime | None:
        """The oldest modification date, or None when it cannot be established.

        One GetRecords with maxRecords=1 sorted ascending, then a ``hits`` count of records
        modified before it, which must be 0: a catalogue that ignores SortBy would otherwise make
        a later record look like the first one.
        """
        base = WindowConstraint(None, None, modified_queryable, extra_filter)
        pages = self._traverse(
            type_names=type_names, output_schema=output_schema, element_set="full", constraint=base,
            page_size=1, start_position=1, sort_by=modified_queryable,
        )
        page, _ = next(pages)
        pages.close()
        candidates = [r.datestamp_utc for r in page.records if r.datestamp_utc is not None]
        if not candidates:
            return None
        candidate = candidates[0]
        if self.hits(type_names=type_names, output_schema=output_schema,
                     constraint=replace(base, end=candidate)) != 0:
            return None
        return candidate

    # ---------------------------------------------------------------------------- paging

    def _traverse(
        self,
        *,
        type_names: str,
        output_schema: str,
        element_set: str,
        constraint: WindowConstraint | None,
        page_size: int,
        start_position: int,
        sort_by: str | None,
    ) -> Iterator[tuple[ListPage, SearchResults]]:
        if page_size < 1:
            raise ValueError("page_size must be >= 1")
        if start_position < 1:
            raise ValueError("start_position must be >= 1")
        base_params = {
            "request": "GetRecords", "typeNames": type_names, "outputSchema": output_schema,
            "elementSetName": element_set, "maxRecords": str(page_size),
        }
        if constraint is not None:
            base_params["modified"] = constraint.modified_queryable
            if constraint.start is not None:
                base_params["from"] = format_instant(constraint.start)
            if constraint.end is not None:
                base_params["until"] = format_instant(constraint.end)
        position = start_position
        first_matched = last_matched = None
        capped_noted = False
        page_number = 0
        while True:
            page_number += 1
            body = build_get_records(
                type_names=type_names, output_schema=output_schema, element_set=element_set,
                constraint=constraint, start_position=position, max_records=page_size, sort_by=sort_by,
            )
            url, content = self._send("POST", body=body)
            env, elements = parse_search_results(content, url)
            warnings: list[str] = list(self.transport.drain_warnings())
            if first_matched is None:
                first_matched = env.matched
            elif env.matched != last_matched:
                warnings.append(
                    f"numberOfRecordsMatched changed from {last_matched} to {env.matched} at startPosition "
                    f"{position}: records were added, changed or removed while paging"
                )
            last_matched = env.matched
            next_position, note = _next_position(position, page_size, env, url)
            if note and not capped_noted:
                warnings.append(note)
                capped_noted = True
            records = []
            for offset, el in enumerate(elements):
                rec = to_record(el, warnings, position + offset)
                if rec is not None:
                    records.append(rec)
            page = ListPage(
                url=url,
                params={**base_params, "startPosition": str(position)},
                response_date=env.timestamp,
                records=records,
                resumption=ResumptionInfo(
                    token=str(next_position) if next_position is not None else None,
                    complete_list_size=first_matched,
                    cursor=position - 1,
                    present=True,
                ),
                page_number=page_number,
                byte_size=len(content),
                empty_list=env.matched == 0 and not records,
                warnings=warnings,
            )
            yield page, env
            if next_position is None:
                return
            position = next_position
