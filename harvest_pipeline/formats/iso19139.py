"""ISO 19139 mapper: `gmd:MD_Metadata` (and `gmi:MI_Metadata`, which has the same gmd content).

Paths are precompiled lxml XPath objects (compiled once at import). Field choices:
  identifiers fileIdentifier, dataSetURI, then citation identifier codes (text, then Anchor href)
  title       citation title (gco:CharacterString or gmx:Anchor); `titles` adds its PT_FreeText
              translations and the alternateTitles
  creators    citedResponsibleParty then pointOfContact: individualName, else organisationName;
              parties whose role makes them the resource's creators (author, originator,
              principalInvestigator, coAuthor) first, in that order of elements, then the others
              (publisher, custodian, distributor ...), as the MODS mapper puts authors first
  description abstract
  subjects    keywords, then topic categories
  date        citation date of type publication, else creation, else revision, else the first
              citation date, else dateStamp; `dates` = citation dates in order, then dateStamp
  type        hierarchyLevel (MD_ScopeCode codeListValue)
  language    resource language (identificationInfo), else metadata language
  rights      useLimitation and otherConstraints (text, then Anchor href)
  url         first http(s) identifier, else first online resource linkage
  bbox        first usable EX_GeographicBoundingBox
"""

from __future__ import annotations

from lxml import etree

from .geo import make_bbox
from .identifiers import is_http, pick_doi, pick_url
from .model import NormalizedRecord
from .text import block_text, dedupe, first, text

GMD_NS = "http://www.isotc211.org/2005/gmd"
GMI_NS = "http://www.isotc211.org/2005/gmi"
NS = {
    "gmd": GMD_NS,
    "gco": "http://www.isotc211.org/2005/gco",
    "gmx": "http://www.isotc211.org/2005/gmx",
    "srv": "http://www.isotc211.org/2005/srv",
}
_XLINK_HREF = "{http://www.w3.org/1999/xlink}href"


def _xp(path: str) -> etree.XPath:
    return etree.XPath(path, namespaces=NS)


_STR = "*[self::gco:CharacterString or self::gmx:Anchor]"  # a free-text value
_ID = "gmd:identificationInfo/*"  # MD_DataIdentification or SV_ServiceIdentification
_CIT = f"{_ID}/gmd:citation/gmd:CI_Citation"

_FILE_ID = _xp(f"gmd:fileIdentifier/{_STR}")
_DATASET_URI = _xp(f"gmd:dataSetURI/{_STR}")
_CIT_IDS = _xp(f"{_CIT}/gmd:identifier/*/gmd:code/{_STR}")
_TITLE = _xp(f"{_CIT}/gmd:title/{_STR}")
_TITLE_I18N = _xp(f"{_CIT}/gmd:title/gmd:PT_FreeText/gmd:textGroup/gmd:LocalisedCharacterString")
_ALT_TITLE = _xp(f"{_CIT}/gmd:alternateTitle/{_STR}")
_CIT_DATES = _xp(f"{_CIT}/gmd:date/gmd:CI_Date")
_DATE_VALUE = _xp("gmd:date/*[self::gco:Date or self::gco:DateTime]")
_DATE_TYPE = _xp("gmd:dateType/gmd:CI_DateTypeCode")
_DATESTAMP = _xp("gmd:dateStamp/*[self::gco:Date or self::gco:DateTime]")
_PARTIES = _xp(f"{_CIT}/gmd:citedResponsibleParty/gmd:CI_ResponsibleParty")
_CONTACTS = _xp(f"{_ID}/gmd:pointOfContact/gmd:CI_ResponsibleParty")
_INDIVIDUAL = _xp(f"gmd:individualName/{_STR}")
_ORGANISATION = _xp(f"gmd:organisationName/{_STR}")
_ROLE = _xp("gmd:role/gmd:CI_RoleCode")
# CI_RoleCode values (ISO 19115 and 19115-1) of the parties who made the resource.
_CREATOR_ROLES = frozenset({"author", "originator", "principalInvestigator", "coAuthor"})
_ABSTRACT = _xp(f"{_ID}/gmd:abstract/{_STR}")
_KEYWORDS = _xp(f"{_ID}/gmd:descriptiveKeywords/gmd:MD_Keywords/gmd:keyword/{_STR}")
_TOPICS = _xp(f"{_ID}/gmd:topicCategory/gmd:MD_TopicCategoryCode")
_SCOPE = _xp("gmd:hierarchyLevel/gmd:MD_ScopeCode")
_RES_LANGUAGE = _xp(f"{_ID}/gmd:language/*")
_MD_LANGUAGE = _xp("gmd:language/*")
_BBOXES = _xp(f"{_ID}/*[self::gmd:extent or self::srv:extent]/gmd:EX_Extent/gmd:geographicElement/gmd:EX_GeographicBoundingBox")
_WEST = _xp("gmd:westBoundLongitude/gco:Decimal")
_SOUTH = _xp("gmd:southBoundLatitude/gco:Decimal")
_EAST = _xp("gmd:eastBoundLongitude/gco:Decimal")
_NORTH = _xp("gmd:northBoundLatitude/gco:Decimal")
_RIGHTS = _xp(
    f"{_ID}/gmd:resourceConstraints/*/gmd:useLimitation/{_STR}"
    f" | {_ID}/gmd:resourceConstraints/*/gmd:otherConstraints/{_STR}"
)
# Online resources sit in transferOptions directly or under a distributor: search the subtree.
_LINKAGES = _xp("gmd:distributionInfo//gmd:CI_OnlineResource/gmd:linkage/gmd:URL")

# Preference for the main date among CI_DateTypeCode values.
_DATE_TYPE_RANK = ("publication", "creation", "revision")


def _texts(elements) -> list[str | None]:
    return [text(el) for el in elements]


def _with_hrefs(elements) -> list[str | None]:
    """Text of each value, then its gmx:Anchor xlink:href when that is a URL (e.g. a DOI link)."""
    out: list[str | None] = []
    for el in elements:
        out.append(text(el))
        href = (el.get(_XLINK_HREF) or "").strip()
        if href and is_http(href):
            out.append(href)
    return out


def _code(el) -> str | None:
    """A codelist value: the codeListValue attribute, else the element text."""
    return (el.get("codeListValue") or "").strip() or text(el)


def _first_text(xpath: etree.XPath, el) -> str | None:
    for hit in xpath(el):
        value = text(hit)
        if value:
            return value
    return None


def _party(el) -> str | None:
    return _first_text(_INDIVIDUAL, el) or _first_text(_ORGANISATION, el)


def _creators(md) -> list[str]:
    """Cited parties then points of contact, those with a creator's role first."""
    makers, others = [], []
    for party in _PARTIES(md) + _CONTACTS(md):
        role = first(_code(el) for el in _ROLE(party))
        (makers if role in _CREATOR_ROLES else others).append(_party(party))
    return dedupe(makers + others)


def _language(elements) -> str | None:
    # LanguageCode carries the code in codeListValue; gco:CharacterString has it as text.
    return first(_code(el) for el in elements)


def _links(md):
    """Online resource URLs, evaluated only if no identifier already gave the url."""
    for el in _LINKAGES(md):
        value = text(el)
        if value:
            yield value


def _bbox(md):
    for box in _BBOXES(md):
        bbox = make_bbox(_first_text(_WEST, box), _first_text(_SOUTH, box), _first_text(_EAST, box), _first_text(_NORTH, box))
        if bbox:
            return bbox
    return None


def map_iso19139(md) -> NormalizedRecord:
    """Map a gmd:MD_Metadata / gmi:MI_Metadata element."""
    titles = dedupe(_texts(_TITLE(md)) + _texts(_TITLE_I18N(md)) + _texts(_ALT_TITLE(md)))
    identifiers = dedupe(_texts(_FILE_ID(md)) + _texts(_DATASET_URI(md)) + _with_hrefs(_CIT_IDS(md)))

    dates: list[str] = []
    by_type: dict[str, str] = {}
    for ci_date in _CIT_DATES(md):
        value = _first_text(_DATE_VALUE, ci_date)
        if not value:
            continue
        dates.append(value)
        date_type = first(_code(el) for el in _DATE_TYPE(ci_date))
        if date_type:
            by_type.setdefault(date_type, value)
    stamp = _first_text(_DATESTAMP, md)
    main_date = first(by_type.get(k) for k in _DATE_TYPE_RANK) or (dates[0] if dates else stamp)
    if stamp:
        dates.append(stamp)

    return NormalizedRecord(
        title=titles[0] if titles else None,
        titles=titles,
        creators=_creators(md),
        subjects=dedupe(_texts(_KEYWORDS(md)) + [_code(el) for el in _TOPICS(md)]),
        description=first(block_text(el) for el in _ABSTRACT(md)),
        dates=dedupe(dates),
        date=main_date,
        type=first(_code(el) for el in _SCOPE(md)),
        language=_language(_RES_LANGUAGE(md)) or _language(_MD_LANGUAGE(md)),
        identifiers=identifiers,
        doi=pick_doi(identifiers),
        url=pick_url(identifiers, _links(md)),
        rights=dedupe(_with_hrefs(_RIGHTS(md))),
        bbox=_bbox(md),
        format_name="iso19139",
    )


REGISTRATIONS = (
    (GMD_NS, "MD_Metadata", map_iso19139, "iso19139"),
    (GMI_NS, "MI_Metadata", map_iso19139, "iso19139"),
)
