"""Dublin Core mapper: OAI-PMH `oai_dc:dc` and CSW `csw:Record` / `SummaryRecord` / `BriefRecord`.

Both are flat lists of dc: (and, in CSW, dct:) elements, so one pass over the root's children
with a tag -> slot table maps them. Which element feeds which field:
  title       dc:title, then dct:alternative
  description dct:abstract first, else dc:description
  date        first of dct:issued, dc:date, dct:created, dct:available, dct:modified, other dct
              dates; `dates` lists them all in document order
  rights      dc:rights, dct:rights, dct:accessRights, dct:license
  url         first http(s) dc:identifier, else dct:references / dc:URI links
  bbox        first usable ows:BoundingBox / ows:WGS84BoundingBox (axis order: see geo.py),
              else the first dc:coverage / dcterms:spatial holding a DCMI Box or DCMI Point
Children without a namespace are read as Dublin Core too: some servers drop the dc namespace.
Any other root whose element children are mostly dc: and dcterms: elements (Dublin Core
application profiles: DSpace's `qdc`, NSDL's `nsdl_dc`) is read the same way, as `dublin_core`.
"""

from __future__ import annotations

from .coordinates import bbox_from_dcmi
from .geo import LON_LAT, axis_order, bbox_from_corners
from .identifiers import pick_doi, pick_url
from .model import NormalizedRecord
from .text import block_text, child_text, first, text

OAI_DC_NS = "http://www.openarchives.org/OAI/2.0/oai_dc/"
DC_NS = "http://purl.org/dc/elements/1.1/"
DCT_NS = "http://purl.org/dc/terms/"
CSW_NS = "http://www.opengis.net/cat/csw/2.0.2"
CSW3_NS = "http://www.opengis.net/cat/csw/3.0"
OWS_NAMESPACES = ("http://www.opengis.net/ows", "http://www.opengis.net/ows/1.1", "http://www.opengis.net/ows/2.0")

# Order of preference for the main date (slot names below).
_DATE_RANK = ("issued", "date", "created", "available", "modified", "date_other")
_DATE_SLOTS = frozenset(_DATE_RANK)
_BLOCK_SLOTS = frozenset({"abstract", "description"})  # keep paragraph breaks

_DC_ELEMENTS = {
    "title": "title",
    "creator": "creator",
    "subject": "subject",
    "description": "description",
    "date": "date",
    "type": "type",
    "language": "language",
    "identifier": "identifier",
    "rights": "rights",
    "URI": "link",  # GeoNetwork CSW output carries links as dc:URI
    "coverage": "coverage",
}
_DCT_ELEMENTS = {
    **_DC_ELEMENTS,
    "alternative": "alternative",
    "abstract": "abstract",
    "issued": "issued",
    "created": "created",
    "available": "available",
    "modified": "modified",
    "dateAccepted": "date_other",
    "dateCopyrighted": "date_other",
    "dateSubmitted": "date_other",
    "valid": "date_other",
    "accessRights": "rights",
    "license": "rights",
    "references": "link",
    "spatial": "coverage",
}

# Clark tag -> slot, built once: dispatch is a dict lookup per child.
_SLOTS: dict[str, str] = {}
for _local, _slot in _DC_ELEMENTS.items():
    _SLOTS[f"{{{DC_NS}}}{_local}"] = _slot
    _SLOTS[_local] = _slot  # unqualified
for _local, _slot in _DCT_ELEMENTS.items():
    _SLOTS.setdefault(f"{{{DCT_NS}}}{_local}", _slot)
    _SLOTS.setdefault(_local, _slot)

# ows bbox Clark tag -> (LowerCorner tag, UpperCorner tag, always lon/lat?)
_BBOX_TAGS: dict[str, tuple[str, str, bool]] = {}
for _ns in OWS_NAMESPACES:
    _BBOX_TAGS[f"{{{_ns}}}BoundingBox"] = (f"{{{_ns}}}LowerCorner", f"{{{_ns}}}UpperCorner", False)
    _BBOX_TAGS[f"{{{_ns}}}WGS84BoundingBox"] = (f"{{{_ns}}}LowerCorner", f"{{{_ns}}}UpperCorner", True)
del _local, _slot, _ns


def _ows_bbox(el, spec: tuple[str, str, bool]):
    lower_tag, upper_tag, wgs84 = spec
    order = LON_LAT if wgs84 else axis_order(el.get("crs"))
    if order is None:  # projected CRS: not degrees
        return None
    return bbox_from_corners(child_text(el, lower_tag), child_text(el, upper_tag), order)


def map_dc(element) -> NormalizedRecord:
    """Map a Dublin Core record (oai_dc:dc or csw:*Record) element."""
    # The hot loop of a harvest (once per field of every record): text() and clean() are
    # inlined for leaf elements, which is what Dublin Core fields nearly always are.
    slots: dict[str, list[str]] = {}
    dates: list[str] = []
    bbox = None
    slot_of = _SLOTS.get
    for child in element:
        tag = child.tag  # a comment's tag is a function: not in either table
        slot = slot_of(tag)
        if slot is None:
            if bbox is None and tag in _BBOX_TAGS:
                bbox = _ows_bbox(child, _BBOX_TAGS[tag])
            continue
        if slot in _BLOCK_SLOTS:
            value = block_text(child)
        elif len(child):
            value = text(child)
        else:
            value = child.text
            value = " ".join(value.split()) if value else None
        if not value:
            continue
        values = slots.get(slot)
        if values is None:
            slots[slot] = [value]
        else:
            values.append(value)
        if slot in _DATE_SLOTS:
            dates.append(value)

    # Every collected value is a non-empty string: dedupe is dict.fromkeys, first is [0].
    get = slots.get
    titles = get("title")
    alternative = get("alternative")
    if alternative:
        titles = (titles or []) + alternative
    titles = list(dict.fromkeys(titles)) if titles else []
    identifiers = get("identifier")
    identifiers = list(dict.fromkeys(identifiers)) if identifiers else []
    links = get("link", ())
    description = get("abstract") or get("description")
    main_date = None
    for s in _DATE_RANK:
        values = get(s)
        if values:
            main_date = values[0]
            break
    kind, language = get("type"), get("language")
    if bbox is None and "coverage" in slots:
        bbox = first(map(bbox_from_dcmi, slots["coverage"]))
    return NormalizedRecord(
        title=titles[0] if titles else None,
        titles=titles,
        creators=_unique(get("creator")),
        subjects=_unique(get("subject")),
        description=description[0] if description else None,
        dates=list(dict.fromkeys(dates)) if dates else [],
        date=main_date,
        type=kind[0] if kind else None,
        language=language[0] if language else None,
        identifiers=identifiers,
        doi=pick_doi(identifiers, links),
        url=pick_url(identifiers, links),
        rights=_unique(get("rights")),
        bbox=bbox,
        format_name="oai_dc",
    )


def _unique(values: list[str] | None) -> list[str]:
    return list(dict.fromkeys(values)) if values else []


_DC_PREFIXES = (f"{{{DC_NS}}}", f"{{{DCT_NS}}}")


def holds_dublin_core(element) -> bool:
    """A root no format names whose element children are mostly Dublin Core (dc:, dcterms:)."""
    dc = other = 0
    for child in element:
        tag = child.tag
        if tag.__class__ is not str:  # a comment or processing instruction
            continue
        if tag.startswith(_DC_PREFIXES):
            dc += 1
        else:
            other += 1
    return dc > 0 and dc >= other


FALLBACKS = ((holds_dublin_core, map_dc, "dublin_core"),)

REGISTRATIONS = (
    (OAI_DC_NS, "dc", map_dc, "oai_dc"),
    *((ns, root, map_dc, "csw_record") for ns in (CSW_NS, CSW3_NS) for root in ("Record", "SummaryRecord", "BriefRecord")),
)
