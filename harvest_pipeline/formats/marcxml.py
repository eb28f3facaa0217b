"""MARC 21 slim (MARCXML) mapper: `marc:record`, or a `marc:collection` holding exactly one record.

One pass over the record's children collects the leader, control fields and data fields;
subfields are then read with C-level `iterchildren`. Field choices:
  title       245 $a $b $n $p; `titles` adds 246 $a $b, then 240/130 $a; a record with none of
              these names a meeting (INSPIRE's conference records: a 111 only), and takes its 111 $a
  creators    100/110/111 and 700/710/711 $a, document order
  subjects    600/610/611/630/650/651/653 $a, document order
  description first 520 $a
  date        264 (2nd indicator 1, publication) $c, else 260 $c, else 008/07-10, else other 264
              $c; `dates` = 260/264 $c in order, then 008/07-10
  language    008/35-37 (unless blank, "und" or "mul"), else the first 041 $a code
  identifiers 024 $a, 020 $a (ISBN, qualifier like "(pbk.)" cut), 022 $a (ISSN), 856 $u
              (related-resource links, 2nd indicator 2, last); `doi` from 024 with $2 doi first
  type        leader/06 as its MARC 21 name ("Language material", "Cartographic material"...)
  rights      506 $a, 540 $a and 540 $u
  bbox        the first 034 whose $d $e $f $g (west, east, north, south) all read, else the
              first 255 $c statement of coordinates that reads (coordinates.py: the notations)
ISBD punctuation that MARC puts at the end of subfields (" /", " :", ",", final ".") is trimmed
from titles, names, subjects and dates. Parts outside the record's namespace (a prefixed
`<marc:record>` with unprefixed children) are matched by local name when that is unambiguous.
"""

from __future__ import annotations

import re

from .coordinates import bbox_from_coded, bbox_from_statement
from .identifiers import pick_doi, pick_url
from .model import NormalizedRecord
from .text import block_text, dedupe, first, only_child, text

MARC_NS = "http://www.loc.gov/MARC21/slim"

# Leader/06 (type of record), MARC 21 Bibliographic names.
RECORD_TYPES = {
    "a": "Language material",
    "c": "Notated music",
    "d": "Manuscript notated music",
    "e": "Cartographic material",
    "f": "Manuscript cartographic material",
    "g": "Projected medium",
    "i": "Nonmusical sound recording",
    "j": "Musical sound recording",
    "k": "Two-dimensional nonprojectable graphic",
    "m": "Computer file",
    "o": "Kit",
    "p": "Mixed materials",
    "r": "Three-dimensional artifact or naturally occurring object",
    "t": "Manuscript language material",
}

_CREATOR_TAGS = frozenset({"100", "110", "111", "700", "710", "711"})
_SUBJECT_TAGS = frozenset({"600", "610", "611", "630", "650", "651", "653"})
_RIGHTS_TAGS = frozenset({"506", "540"})
_DATE_TAGS = frozenset({"260", "264"})
_LANG_CODE = re.compile(r"[a-z]{3}")
_YEAR = re.compile(r"\d{4}")
# A final "." that belongs to an initial or abbreviation ("Smith, J.", "U.S.A.") is kept.
_INITIAL_END = re.compile(r"(?:^|[\s.,])\w\.$")
_ISBD_END = " /:;,="


def _trim(value: str | None) -> str | None:
    """Drop the ISBD punctuation MARC leaves at the end of a subfield."""
    if not value:
        return None
    value = value.rstrip(_ISBD_END)
    if value.endswith(".") and not value.endswith("..") and not _INITIAL_END.search(value):
        value = value[:-1].rstrip(_ISBD_END)
    return value or None


_TAGS: dict[str, tuple[str, str, str, str]] = {}
_PARTS = frozenset({"leader", "controlfield", "datafield"})


def _namespace(tag: str) -> str:
    return tag[1: tag.index("}")] if tag[:1] == "{" else ""


def _tags_in(ns: str) -> tuple[str, str, str, str]:
    """(leader, controlfield, datafield, subfield) Clark tags in namespace `ns`."""
    tags = _TAGS.get(ns)
    if tags is None:
        p = f"{{{ns}}}" if ns else ""
        tags = _TAGS[ns] = (f"{p}leader", f"{p}controlfield", f"{p}datafield", f"{p}subfield")
    return tags


def _only_namespace(elements, locals_: frozenset[str]) -> str | None:
    """The one namespace the elements named `locals_` use, or None if none or several."""
    found = {_namespace(e.tag) for e in elements if e.tag.__class__ is str and e.tag.rpartition("}")[2] in locals_}
    return found.pop() if len(found) == 1 else None


def _tags_for(record) -> tuple[str, str, str, str]:
    """The Clark tags this record's parts are written with.

    Normally the record's own namespace. Some servers prefix only `<marc:record>`, so its
    unprefixed children fall into the envelope's default namespace (Hindawi's OAI-PMH puts them
    in the OAI-PMH namespace). Then the parts are matched by local name, when they all use one
    namespace; with several, nothing is guessed (and the record maps to nothing, which the
    registry reports).
    """
    tags = _tags_in(_namespace(record.tag))
    own = frozenset(tags[:3])
    for child in record:
        if child.tag in own:
            return tags  # the usual case: decided by the first part (the leader)
    ns = _only_namespace(record, _PARTS)
    if ns is None:
        return tags
    leader, control, data, sub = _tags_in(ns)
    field = next(record.iterchildren(data), None)
    if field is not None and next(field.iterchildren(sub), None) is None:
        sub_ns = _only_namespace(field, frozenset({"subfield"}))
        sub = _tags_in(sub_ns)[3] if sub_ns is not None else sub
    return leader, control, data, sub


def _subs(field, sf_tag: str, codes: str) -> list[str]:
    """Cleaned values of the subfields whose code is in `codes`, in document order."""
    out = []
    for sf in field.iterchildren(sf_tag):
        code = sf.get("code")
        if code and code in codes:
            value = text(sf)
            if value:
                out.append(value)
    return out


def _sub(field, sf_tag: str, code: str) -> str | None:
    for sf in field.iterchildren(sf_tag):
        if sf.get("code") == code:
            value = text(sf)
            if value:
                return value
    return None


def map_marc(record) -> NormalizedRecord:
    """Map a MARCXML `record` element."""
    leader_tag, cf_tag, df_tag, sf_tag = _tags_for(record)
    leader = ""
    control: dict[str, str] = {}
    fields: list[tuple[str, object]] = []  # (tag, datafield) in document order
    by_tag: dict[str, list] = {}
    for child in record:
        tag = child.tag
        if tag == df_tag:
            ftag = child.get("tag") or ""
            fields.append((ftag, child))
            by_tag.setdefault(ftag, []).append(child)
        elif tag == cf_tag:
            control.setdefault(child.get("tag") or "", child.text or "")
        elif tag == leader_tag:
            leader = child.text or ""

    def each(tag: str) -> list:
        return by_tag.get(tag, [])

    # Titles
    titles = [_trim(" ".join(_subs(f, sf_tag, "abnp"))) for f in each("245")]
    titles += [_trim(" ".join(_subs(f, sf_tag, "ab"))) for f in each("246")]
    titles += [_trim(_sub(f, sf_tag, "a")) for f in each("240") + each("130")]
    titles = dedupe(titles) or dedupe(_trim(_sub(f, sf_tag, "a")) for f in each("111"))

    # Dates
    f008 = control.get("008", "")
    date1 = f008[7:11] if _YEAR.fullmatch(f008[7:11]) else None
    published = other = None
    dates = []
    for ftag, f in fields:
        if ftag in _DATE_TAGS:
            for value in _subs(f, sf_tag, "c"):
                value = _trim(value)
                if not value:
                    continue
                dates.append(value)
                if ftag == "260" or f.get("ind2") == "1":
                    published = published or value
                else:
                    other = other or value
    if date1:
        dates.append(date1)

    # Language
    lang008 = f008[35:38]
    lang041 = first(_sub(f, sf_tag, "a") for f in each("041"))
    if lang041 and len(lang041) > 3 and len(lang041) % 3 == 0 and lang041.isalpha():
        lang041 = lang041[:3]  # pre-2001 records run several codes together ("engfre")
    language = None
    if _LANG_CODE.fullmatch(lang008) and lang008 not in ("und", "mul"):
        language = lang008
    language = language or lang041 or (lang008 if _LANG_CODE.fullmatch(lang008) else None)

    # Identifiers
    doi_024 = None
    ids = []
    for f in each("024"):
        value = _sub(f, sf_tag, "a")
        ids.append(value)
        if doi_024 is None and (_sub(f, sf_tag, "2") or "").lower() == "doi":
            doi_024 = pick_doi([value or ""])
    for f in each("020"):
        value = _sub(f, sf_tag, "a")
        ids.append(value.split()[0] if value else None)
    ids += [_sub(f, sf_tag, "a") for f in each("022")]
    links = each("856")
    ids += [u for f in links if f.get("ind2") != "2" for u in _subs(f, sf_tag, "u")]
    ids += [u for f in links if f.get("ind2") == "2" for u in _subs(f, sf_tag, "u")]
    identifiers = dedupe(ids)

    return NormalizedRecord(
        title=titles[0] if titles else None,
        titles=titles,
        creators=dedupe(_trim(_sub(f, sf_tag, "a")) for t, f in fields if t in _CREATOR_TAGS),
        subjects=dedupe(_trim(_sub(f, sf_tag, "a")) for t, f in fields if t in _SUBJECT_TAGS),
        description=first(block_text(sf) for f in each("520") for sf in f.iterchildren(sf_tag) if sf.get("code") == "a"),
        dates=dedupe(dates),
        date=published or date1 or other,
        type=RECORD_TYPES.get(leader[6:7]),
        language=language,
        identifiers=identifiers,
        doi=doi_024 or pick_doi(identifiers),
        url=pick_url(identifiers),
        rights=dedupe(v for t, f in fields if t in _RIGHTS_TAGS for v in _subs(f, sf_tag, "au")),
        bbox=_bbox(each("034"), each("255"), sf_tag),
        format_name="marcxml",
    )


def _bbox(coded_fields: list, statement_fields: list, sf_tag: str):
    """The first 034 that reads, else the first 255 $c that does (the coded form is exact)."""
    boxes = (bbox_from_coded(*(_sub(f, sf_tag, code) for code in "defg")) for f in coded_fields)
    statements = (bbox_from_statement(_sub(f, sf_tag, "c")) for f in statement_fields)
    return first(boxes) or first(statements)


def map_collection(collection) -> NormalizedRecord:
    """A `collection` wrapper is accepted only around a single record (one OAI item = one record)."""
    record_tag = collection.tag[: -len("collection")] + "record"
    return map_marc(only_child(collection, record_tag, "MARCXML <collection>"))


REGISTRATIONS = (
    (MARC_NS, "record", map_marc, "marcxml"),
    (MARC_NS, "collection", map_collection, "marcxml"),
)
