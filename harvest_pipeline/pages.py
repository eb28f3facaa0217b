"""The records and pages every protocol yields (OAI-PMH and CSW alike; no behaviour, no Dagster).

A lister turns a protocol's responses into :class:`ListPage` objects holding
:class:`HarvestedRecord` objects, so the window pipeline (staging, merge, checks) never knows which protocol it runs. The names
follow OAI-PMH, the first protocol: ``ResumptionInfo.token`` is a CSW source's next
``startPosition``, ``complete_list_size`` its ``numberOfRecordsMatched``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(slots=True)
class HarvestedRecord:
    """One record as listed or fetched: a header, and the metadata unless it is a deletion."""

    identifier: str
    datestamp: str  # raw, as the server wrote it
    datestamp_utc: datetime | None  # parsed, tz-aware UTC; None if unparseable
    set_specs: tuple[str, ...]
    deleted: bool
    metadata_xml: str | None  # the single child of <metadata>, serialized; None for deletions
    metadata: Any = None  # the lxml element of that child (for mappers); None for deletions
    # metadata_xml's UTF-8 bytes, when the parser still has them (its serializer writes bytes):
    # the rows take these instead of encoding the text again. None: encode metadata_xml.
    metadata_utf8: bytes | None = None


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    """A record we could not read: kept with its raw bytes instead of failing the window."""

    identifier: str | None
    raw: bytes
    error: str
    kind: str = "parse"  # "parse" | "recovered" | "map" | "identifier" | "datestamp"


@dataclass(frozen=True, slots=True)
class ResumptionInfo:
    """The <resumptionToken> element. `present=False` means the element was absent."""

    token: str | None  # None or "" both mean: the list is complete
    complete_list_size: int | None = None
    cursor: int | None = None
    expiration_date: str | None = None
    present: bool = True


@dataclass(slots=True)
class ListPage:
    """One response of a listing: OAI-PMH ListRecords / ListIdentifiers, or a CSW GetRecords page."""

    url: str  # the request URL (credentials never included)
    params: dict[str, str]  # the request arguments
    response_date: str | None
    records: list[HarvestedRecord]
    resumption: ResumptionInfo
    page_number: int  # 1-based within this traversal
    byte_size: int = 0
    empty_list: bool = False  # the server said noRecordsMatch
    warnings: list[str] = field(default_factory=list)
    quarantined: list[QuarantinedRecord] = field(default_factory=list)
    repaired: int = 0  # characters / bytes replaced by U+FFFD to make the page parse
    # (identifier as stored, as sent) for identifiers whose illegal characters became control pictures
    repaired_identifiers: list[tuple[str, str]] = field(default_factory=list)
    # The records' metadata_xml is still to be written from their elements (a ListRecords page
    # parsed with serialize=False; oai.parse.serialize_records does it, page_rows calls it).
    unserialized: bool = False

    @property
    def next_token(self) -> str | None:
        tok = self.resumption.token
        return tok if tok else None
