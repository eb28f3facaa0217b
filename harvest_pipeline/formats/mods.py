"""MODS mapper: `mods:mods` (MODS 3.x, the `mods` prefix of library and museum repositories) and a
`mods:modsCollection` holding one record.

Only the record's own top-level elements are read: a `relatedItem` (the host collection, a series,
another version) carries its own titleInfo, name and originInfo, and those describe that other
item, not this one. Field choices follow the Library of Congress MODS -> Dublin Core crosswalk:
  title       the first titleInfo without a type (else the first titleInfo): nonSort + title,
              ": " subTitle, ". " partNumber / partName; `titles` = that one, then the others
  creators    each name: its displayForm, else "family, given" from typed nameParts, else its
              untyped nameParts joined; names whose role is creator / author come first
  subjects    subject's topic, geographic, temporal, occupation, genre, name and title parts,
              then classification
  description the first abstract, else the first note without a type (typed notes say who owns
              the item, how it was digitized ...)
  date        the originInfo date marked keyDate="yes", else dateIssued, dateCreated,
              copyrightDate, dateCaptured, dateOther, dateValid, dateModified (first found);
              `dates` = all of them in document order
  type        typeOfResource, else the first genre
  language    the first languageTerm of type "code", else the first languageTerm
  identifiers each identifier, then each location url; `doi` from them (identifier type="doi"
              first); `url` prefers a url marked usage="primary display" or access="object in
              context", never a preview (thumbnail)
  rights      each accessCondition
  bbox        the first subject/cartographics/coordinates that reads as a statement of
              coordinates or as MARC 034's coded values (coordinates.py: the notations)
"""

from __future__ import annotations

from .coordinates import bbox_from_statement
from .identifiers import pick_doi, pick_url
from .model import NormalizedRecord
from .text import block_text, child_text, dedupe, first, grandchildren, only_child, text

MODS_NS = "http://www.loc.gov/mods/v3"
_P = f"{{{MODS_NS}}}"

# Clark tags of the elements read, built once.
TITLE_INFO, NAME, SUBJECT, ABSTRACT, NOTE, ORIGIN_INFO = (_P + n for n in (
    "titleInfo", "name", "subject", "abstract", "note", "originInfo"))
TYPE_OF_RESOURCE, GENRE, LANGUAGE, LANGUAGE_TERM, IDENTIFIER, LOCATION, URL = (_P + n for n in (
    "typeOfResource", "genre", "language", "languageTerm", "identifier", "location", "url"))
ACCESS_CONDITION, CLASSIFICATION, NAME_PART, DISPLAY_FORM, ROLE, ROLE_TERM = (_P + n for n in (
    "accessCondition", "classification", "namePart", "displayForm", "role", "roleTerm"))
NON_SORT, TITLE, SUB_TITLE, PART_NUMBER, PART_NAME, MODS = (_P + n for n in (
    "nonSort", "title", "subTitle", "partNumber", "partName", "mods"))
CARTOGRAPHICS, COORDINATES = _P + "cartographics", _P + "coordinates"

# originInfo's dates, in the order the main date is chosen from when none is keyDate="yes".
_DATE_RANK = tuple(_P + n for n in (
    "dateIssued", "dateCreated", "copyrightDate", "dateCaptured", "dateOther", "dateValid", "dateModified"))
_DATES = frozenset(_DATE_RANK)
# subject's children that are terms (a subject name or title is read from its parts).
_SUBJECT_TERMS = frozenset(_P + n for n in ("topic", "geographic", "temporal", "occupation", "genre"))
# roleTerm values (text or MARC relator code) that make a name a creator.
_CREATOR_ROLES = frozenset({"creator", "author", "cre", "aut"})


def _title(info) -> str | None:
    """One titleInfo as a display title: "The Title: subtitle. Part 2. Part name"."""
    main = child_text(info, TITLE)
    if not main:
        return None
    non_sort = child_text(info, NON_SORT)
    if non_sort:
        # nonSort keeps its own trailing space in MODS ("The "); an apostrophe-ending one ("L'") none.
        main = non_sort + ("" if non_sort.endswith(("'", "’")) else " ") + main
    sub = child_text(info, SUB_TITLE)
    if sub:
        main = f"{main}: {sub}"
    for part in info.iterchildren(PART_NUMBER, PART_NAME):
        value = text(part)
        if value:
            main = f"{main}. {value}"
    return main


def _name(el) -> str | None:
    display = child_text(el, DISPLAY_FORM)
    if display:
        return display
    typed: dict[str, str] = {}
    untyped: list[str] = []
    for part in el.iterchildren(NAME_PART):
        value = text(part)
        if value:
            kind = part.get("type")
            if kind:
                typed.setdefault(kind, value)
            else:
                untyped.append(value)
    family, given = typed.get("family"), typed.get("given")
    if family and given:
        return f"{family}, {given}"
    return family or given or (" ".join(untyped) if untyped else None)


def _is_creator(el) -> bool:
    return any((text(term) or "").lower().rstrip(".") in _CREATOR_ROLES
               for role in el.iterchildren(ROLE) for term in role.iterchildren(ROLE_TERM))


def _subject_terms(subject):
    for child in subject:
        tag = child.tag
        if tag in _SUBJECT_TERMS:
            yield text(child)
        elif tag == NAME:
            yield _name(child)
        elif tag == TITLE_INFO:
            yield _title(child)


def map_mods(mods) -> NormalizedRecord:
    """Map one `mods:mods` element."""
    untyped_titles, typed_titles = [], []
    for info in mods.iterchildren(TITLE_INFO):
        (typed_titles if info.get("type") else untyped_titles).append(_title(info))
    titles = dedupe(untyped_titles + typed_titles)

    creators, others = [], []
    for el in mods.iterchildren(NAME):
        (creators if _is_creator(el) else others).append(_name(el))

    subject_elements = list(mods.iterchildren(SUBJECT))
    subjects = [term for subject in subject_elements for term in _subject_terms(subject)]
    subjects += [text(el) for el in mods.iterchildren(CLASSIFICATION)]

    dates, key_date, ranked = [], None, {}
    for origin in mods.iterchildren(ORIGIN_INFO):
        for el in origin:
            if el.tag in _DATES:
                value = text(el)
                if value:
                    dates.append(value)
                    ranked.setdefault(el.tag, value)
                    if key_date is None and el.get("keyDate") == "yes":
                        key_date = value
    date = key_date or next((ranked[tag] for tag in _DATE_RANK if tag in ranked), None)

    language = None
    for lang in mods.iterchildren(LANGUAGE):
        terms = list(lang.iterchildren(LANGUAGE_TERM))
        coded = [t for t in terms if t.get("type") == "code"] or terms
        language = first(text(t) for t in coded)
        if language:
            break

    ids_by_type = [(el.get("type") or "", text(el)) for el in mods.iterchildren(IDENTIFIER)]
    identifiers = [value for _, value in ids_by_type]
    preferred, links = [], []
    for location in mods.iterchildren(LOCATION):
        for url in location.iterchildren(URL):
            value = text(url)
            if not value or url.get("access") == "preview":
                continue
            main = url.get("usage") == "primary display" or url.get("access") == "object in context"
            (preferred if main else links).append(value)
    identifiers = dedupe(identifiers + preferred + links)

    return NormalizedRecord(
        title=titles[0] if titles else None,
        titles=titles,
        creators=dedupe(creators + others),
        subjects=dedupe(subjects),
        description=first(block_text(el) for el in mods.iterchildren(ABSTRACT))
        or first(block_text(el) for el in mods.iterchildren(NOTE) if not el.get("type")),
        dates=dedupe(dates),
        date=date,
        type=child_text(mods, TYPE_OF_RESOURCE) or child_text(mods, GENRE),
        language=language,
        identifiers=identifiers,
        doi=pick_doi((v for kind, v in ids_by_type if v and kind.lower() == "doi"), identifiers),
        url=pick_url(preferred, identifiers),
        rights=dedupe(text(el) for el in mods.iterchildren(ACCESS_CONDITION)),
        bbox=first(bbox_from_statement(text(c)) for s in subject_elements
                   for c in grandchildren(s, CARTOGRAPHICS, COORDINATES)),
        format_name="mods",
    )


def map_mods_collection(collection) -> NormalizedRecord:
    """Map a `modsCollection` that wraps one record (some servers send every record so)."""
    return map_mods(only_child(collection, MODS, "a modsCollection"))


REGISTRATIONS = (
    (MODS_NS, "mods", map_mods, "mods"),
    (MODS_NS, "modsCollection", map_mods_collection, "mods"),
)
