"""Plain data shapes of the CSW client (no behaviour beyond small lookups, no Dagster).

Records and pages reuse the OAI-PMH shapes (:class:`~harvest_pipeline.pages.HarvestedRecord`,
:class:`~harvest_pipeline.pages.ListPage`) so the window pipeline stays protocol-agnostic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class CswOperation:
    """One ows:Operation of the capabilities document."""

    name: str
    get_urls: tuple[str, ...] = ()
    post_urls: tuple[str, ...] = ()
    # ows:Parameter name -> its allowed values (names as the server wrote them)
    parameters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # ows:Constraint name -> its values
    constraints: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def parameter(self, name: str) -> tuple[str, ...]:
        """Values of a parameter, matched case-insensitively (servers spell them variously)."""
        want = name.lower()
        for key, values in self.parameters.items():
            if key.lower() == want:
                return values
        return ()


@dataclass(frozen=True, slots=True)
class CswCapabilities:
    """What a GetCapabilities answer says, reduced to what a harvester needs."""

    url: str
    version: str | None
    title: str | None
    operations: dict[str, CswOperation]
    output_schemas: tuple[str, ...]  # of GetRecords (empty when not advertised)
    type_names: tuple[str, ...]  # of GetRecords (empty when not advertised)
    constraint_languages: tuple[str, ...]  # e.g. ("FILTER", "CQL_TEXT")
    result_types: tuple[str, ...]
    element_set_names: tuple[str, ...]
    # The page-size cap: ows:Constraint MaxRecordDefault / DefaultMaxRecords / MaxRecords, from
    # the GetRecords operation first, then from OperationsMetadata. None when not advertised.
    max_records: int | None
    comparison_operators: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def supports(self, operation: str) -> bool:
        return operation in self.operations

    def offers_output_schema(self, schema: str) -> bool:
        """True when the schema is advertised, or when the server advertises none (cannot tell)."""
        return not self.output_schemas or schema in self.output_schemas

    def offers_type_name(self, type_name: str) -> bool:
        """Compared by local name: prefixes are the server's choice (gmd:MD_Metadata == MD_Metadata)."""
        if not self.type_names:
            return True
        local = type_name.rpartition(":")[2]
        return any(t.rpartition(":")[2] == local for t in self.type_names)


@dataclass(frozen=True, slots=True)
class WindowConstraint:
    """The GetRecords constraint of one harvest window: ``start <= modified < end`` AND extra.

    ``start``/``end`` are tz-aware datetimes or ISO 8601 strings (``Z`` or an offset); either
    may be None (open). ``extra_filter`` is an OGC Filter Encoding 1.1 fragment (one or more
    ogc:* elements, or a whole ogc:Filter) ANDed with the window.
    """

    start: datetime | str | None = None
    end: datetime | str | None = None
    modified_queryable: str = "dct:modified"
    extra_filter: str | None = None


@dataclass(frozen=True, slots=True)
class SearchResults:
    """The csw:SearchResults envelope of one GetRecords answer (records not included)."""

    matched: int
    returned: int
    next_record: int | None  # None when the server left the attribute out
    record_schema: str | None = None
    element_set: str | None = None
    timestamp: str | None = None  # csw:SearchStatus/@timestamp
