"""Plain data shapes only the OAI-PMH client returns (no behaviour, no Dagster).

Records and pages, which CSW shares, are in :mod:`harvest_pipeline.pages`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IdentifyInfo:
    repository_name: str
    base_url: str
    protocol_version: str
    earliest_datestamp: str  # as the server wrote it
    deleted_record: str  # "no" | "transient" | "persistent"
    granularity: str  # dates.GRANULARITY_DAY or dates.GRANULARITY_SECONDS
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
