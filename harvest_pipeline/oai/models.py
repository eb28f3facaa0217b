"""Plain data shapes the OAI-PMH client returns (no behaviour, no Dagster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

GRANULARITY_DAY = "YYYY-MM-DD"
GRANULARITY_SECONDS = "YYYY-MM-DDThh:mm:ssZ"


@dataclass(frozen=True, slots=True)
class IdentifyInfo:
    repository_name: str
    base_url: str
    protocol_version: str
    earliest_datestamp: str  # as the server wrote it
    deleted_record: str  # "no" | "transient" | "persistent"
    granularity: str  # GRANULARITY_DAY or GRANULARITY_SECONDS
    admin_emails: tuple[str, ...] = ()
    response_date: str | None = None
    compression: tuple[str, ...] = ()  # e.g. ("gzip", "deflate"); empty when none declared
    warnings: tuple[str, ...] = ()  # what was odd in the answer (missing/unknown values)


@dataclass(frozen=True, slots=True)
class MetadataFormat:
    prefix: str
    schema: str
    namespace: str


@dataclass(frozen=True, slots=True)
class OAISet:
    spec: str
    name: str


@dataclass(slots=True)
class OAIRecord:
    identifier: str
    datestamp: str  # raw, as the server wrote it
    datestamp_utc: datetime | None  # parsed, tz-aware UTC; None if unparseable
    set_specs: tuple[str, ...]
    deleted: bool
    metadata_xml: str | None  # the single child of <metadata>, serialized; None for deletions
    metadata: Any = None  # the lxml element of that child (for mappers); None for deletions


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    """A record we could not read: kept with its raw bytes instead of failing the window."""

    identifier: str | None
    raw: bytes
    error: str
    kind: str = "parse"  # "parse" | "recovered" | "map" | "identifier"


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
    """One response of a list verb (ListRecords / ListIdentifiers)."""

    url: str  # the request URL (credentials never included)
    params: dict[str, str]  # the request arguments
    response_date: str | None
    records: list[OAIRecord]
    resumption: ResumptionInfo
    page_number: int  # 1-based within this traversal
    byte_size: int = 0
    empty_list: bool = False  # the server said noRecordsMatch
    warnings: list[str] = field(default_factory=list)
    quarantined: list[QuarantinedRecord] = field(default_factory=list)
    repaired: int = 0  # characters / bytes replaced by U+FFFD to make the page parse
    # (identifier as stored, as sent) for identifiers whose illegal characters became control pictures
    repaired_identifiers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def next_token(self) -> str | None:
        tok = self.resumption.token
        return tok if tok else None
