"""DataCite mapper: kernel-2.x/3/4 `resource` (the `datacite` prefix) and the `oai_datacite` wrapper.

`oai_datacite` (oai-1.0 / oai-1.1) wraps the resource as `<oai_datacite><payload><resource>`; the
resource's own namespace says its kernel version, and its children are read in that namespace.
A `<resource>` in no namespace (pycsw's OAI-PMH `datacite` output drops the kernel namespace, its
schemaLocation still naming it) is read as DataCite when it has DataCite's parts.
Field choices:
  title       the first title without titleType; `titles` = that one, then the others in order
  creators    creatorName, else "familyName, givenName" (either part alone if that is all)
  description first descriptionType="Abstract", else the first description
  date        first dateType="Issued" date, else publicationYear, else the first date;
              `dates` = every date in order, then publicationYear
  type        resourceType/@resourceTypeGeneral, else the resourceType text
  identifiers the identifier, then alternateIdentifiers; `doi` prefers the main identifier
  rights      each rights text, then its rightsURI
  bbox        first geoLocationBox (kernel-4 bound elements or kernel-3 "S W N E" text), else
              the first geoLocationPoint as a zero-size box
"""

from __future__ import annotations

from types import SimpleNamespace

from .errors import MappingError
from .geo import make_bbox
from .identifiers import pick_doi, pick_url
from .model import NormalizedRecord
from .text import block_text, child_text, dedupe, first, grandchildren, text

KERNEL_NAMESPACES = (
    "http://datacite.org/schema/kernel-4",
    "http://datacite.org/schema/kernel-3",
    "http://datacite.org/schema/kernel-2.2",
    "http://datacite.org/schema/kernel-2.1",
)
OAI_DATACITE_NAMESPACES = ("http://schema.datacite.org/oai/oai-1.1/", "http://schema.datacite.org/oai/oai-1.0/")


# Every element name the mapper reads; tags are built once per namespace, not per record.
_LOCAL_NAMES = (
    "identifier alternateIdentifiers alternateIdentifier titles title creators creator creatorName "
    "givenName familyName subjects subject descriptions description dates date publicationYear "
    "resourceType language rightsList rights geoLocations geoLocation geoLocationBox "
    "westBoundLongitude eastBoundLongitude southBoundLatitude northBoundLatitude geoLocationPoint "
    "pointLongitude pointLatitude payload"
).split()

_TAGS: dict[str, SimpleNamespace] = {}


def _tags_for(tag: str) -> SimpleNamespace:
    """Clark tags (`t.title` -> "{ns}title") in the namespace of the element tagged `tag`."""
    ns = tag[1 : tag.index("}")] if tag[:1] == "{" else ""
    t = _TAGS.get(ns)
    if t is None:
        prefix = f"{{{ns}}}" if ns else ""
        t = SimpleNamespace(**{local: prefix + local for local in _LOCAL_NAMES})
        if len(_TAGS) < 32:  # bounded: a wrapper's payload may carry any namespace
            _TAGS[ns] = t
    return t


def _creator(el, t: SimpleNamespace) -> str | None:
    name = child_text(el, t.creatorName)
    if name:
        return name
    family, given = child_text(el, t.familyName), child_text(el, t.givenName)
    if family and given:
        return f"{family}, {given}"
    return family or given


def _geo_bbox(resource, t: SimpleNamespace):
    point = None
    for loc in grandchildren(resource, t.geoLocations, t.geoLocation):
        for box in loc.iterchildren(t.geoLocationBox):
            if len(box):  # kernel-4: bound elements
                bbox = make_bbox(
                    child_text(box, t.westBoundLongitude),
                    child_text(box, t.southBoundLatitude),
                    child_text(box, t.eastBoundLongitude),
                    child_text(box, t.northBoundLatitude),
                )
            else:  # kernel-2/3: "south west north east" (two lat lon corners)
                parts = (box.text or "").split()
                bbox = make_bbox(parts[1], parts[0], parts[3], parts[2]) if len(parts) == 4 else None
            if bbox:
                return bbox
        if point is None:
            for pt in loc.iterchildren(t.geoLocationPoint):
                if len(pt):
                    lon, lat = child_text(pt, t.pointLongitude), child_text(pt, t.pointLatitude)
                else:  # kernel-2/3: "lat lon"
                    parts = (pt.text or "").split()
                    lat, lon = (parts[0], parts[1]) if len(parts) == 2 else (None, None)
                point = make_bbox(lon, lat, lon, lat)
                if point:
                    break
    return point


def map_resource(resource) -> NormalizedRecord:
    """Map a DataCite `resource` element (any kernel version)."""
    t = _tags_for(resource.tag)

    main_ids = [text(el) for el in resource.iterchildren(t.identifier)]
    alt_ids = [text(el) for el in grandchildren(resource, t.alternateIdentifiers, t.alternateIdentifier)]
    identifiers = dedupe(main_ids + alt_ids)

    main_titles, other_titles = [], []
    for el in grandchildren(resource, t.titles, t.title):
        (other_titles if el.get("titleType") else main_titles).append(text(el))
    titles = dedupe(main_titles + other_titles)

    abstracts, descriptions = [], []
    for el in grandchildren(resource, t.descriptions, t.description):
        (abstracts if el.get("descriptionType") == "Abstract" else descriptions).append(block_text(el))
    description = first(abstracts + descriptions)

    issued, dates = None, []
    for el in grandchildren(resource, t.dates, t.date):
        value = text(el)
        if value:
            dates.append(value)
            if issued is None and el.get("dateType") == "Issued":
                issued = value
    year = child_text(resource, t.publicationYear)
    if year:
        dates.append(year)
    dates = dedupe(dates)

    rtype = None
    for el in resource.iterchildren(t.resourceType):
        rtype = (el.get("resourceTypeGeneral") or "").strip() or text(el)
        break

    rights = []
    for el in grandchildren(resource, t.rightsList, t.rights):
        rights.append(text(el))
        rights.append((el.get("rightsURI") or "").strip())

    return NormalizedRecord(
        title=titles[0] if titles else None,
        titles=titles,
        creators=dedupe(_creator(el, t) for el in grandchildren(resource, t.creators, t.creator)),
        subjects=dedupe(text(el) for el in grandchildren(resource, t.subjects, t.subject)),
        description=description,
        dates=dates,
        date=issued or year or (dates[0] if dates else None),
        type=rtype,
        language=child_text(resource, t.language),
        identifiers=identifiers,
        doi=pick_doi(filter(None, main_ids), identifiers),
        url=pick_url(identifiers),
        rights=dedupe(rights),
        bbox=_geo_bbox(resource, t),
        format_name="datacite",
    )


def map_oai_datacite(wrapper) -> NormalizedRecord:
    """Map `<oai_datacite>`: find `payload/resource` and read it."""
    t = _tags_for(wrapper.tag)
    for payload in wrapper.iterchildren(t.payload):
        for child in payload:
            # Any kernel version: map_resource reads children in the resource's own namespace.
            if isinstance(child.tag, str) and (child.tag == "resource" or child.tag.endswith("}resource")):
                record = map_resource(child)
                record.format_name = "oai_datacite"
                return record
        raise MappingError("oai_datacite <payload> holds no DataCite <resource>")
    raise MappingError("oai_datacite record has no <payload>")


def map_unqualified_resource(resource) -> NormalizedRecord:
    """Map a `<resource>` in no namespace, if it is DataCite's: an `identifier` with an
    `identifierType`, or `titles` or `creators` (a root this common may be anyone's)."""
    t = _tags_for(resource.tag)
    if not any(el.get("identifierType") for el in resource.iterchildren(t.identifier)) and \
            next(resource.iterchildren(t.titles, t.creators), None) is None:
        raise MappingError("a <resource> in no namespace without DataCite's identifier, titles or creators: "
                           "not read as DataCite")
    return map_resource(resource)


REGISTRATIONS = (
    *((ns, "resource", map_resource, "datacite") for ns in KERNEL_NAMESPACES),
    ("", "resource", map_unqualified_resource, "datacite"),
    *((ns, "oai_datacite", map_oai_datacite, "oai_datacite") for ns in OAI_DATACITE_NAMESPACES),
)
