"""The normalized record every mapper produces, and its flat row form for the DuckDB catalogue."""

from __future__ import annotations

from dataclasses import dataclass, field

# The exact keys of NormalizedRecord.to_row(). The store stores every key but `dates` (columns
# declared with normalized=True in harvest_pipeline/store/columns.py): a new key needs a column
# there, and a migration.
ROW_KEYS: tuple[str, ...] = (
    "title",
    "creators",
    "subjects",
    "description",
    "date",
    "dates",
    "type",
    "language",
    "identifiers",
    "doi",
    "url",
    "rights",
    "bbox_west",
    "bbox_south",
    "bbox_east",
    "bbox_north",
    "format_name",
)


@dataclass(slots=True)
class NormalizedRecord:
    """One record's descriptive metadata, whatever format it was harvested in.

    All strings are whitespace-stripped and non-empty; lists keep document order without
    duplicates. Values are "as given" (no date or language re-formatting) except `doi`, which
    is normalized so records can be matched across sources.
    """

    title: str | None = None  # main title (== titles[0] when there is one)
    titles: list[str] = field(default_factory=list)  # all titles, main first
    creators: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    description: str | None = None
    dates: list[str] = field(default_factory=list)  # every date the record gives
    date: str | None = None  # the main (issued / publication) date, as given
    type: str | None = None
    language: str | None = None
    identifiers: list[str] = field(default_factory=list)  # as given: DOI, URL, handle, ISBN...
    doi: str | None = None  # lowercase "10.xxxx/..." from any identifier form
    url: str | None = None  # first http(s) identifier that is not a DOI resolver (or a link)
    rights: list[str] = field(default_factory=list)
    bbox: tuple[float, float, float, float] | None = None  # (west, south, east, north), WGS84 degrees
    format_name: str = ""  # the registered format that produced this record

    def to_row(self) -> dict:
        """Flat values for storage: keys are exactly ROW_KEYS; lists are fresh lists of str."""
        bbox = self.bbox
        return {
            "title": self.title,
            "creators": list(self.creators),
            "subjects": list(self.subjects),
            "description": self.description,
            "date": self.date,
            "dates": list(self.dates),
            "type": self.type,
            "language": self.language,
            "identifiers": list(self.identifiers),
            "doi": self.doi,
            "url": self.url,
            "rights": list(self.rights),
            "bbox_west": bbox[0] if bbox else None,
            "bbox_south": bbox[1] if bbox else None,
            "bbox_east": bbox[2] if bbox else None,
            "bbox_north": bbox[3] if bbox else None,
            "format_name": self.format_name,
        }
