"""Pure functions from CSW 2.0.2 response bytes to the shapes of :mod:`.models` (no HTTP here).

Every response is parsed once with the hardened parser (:func:`harvest_pipeline.xmlsafe.parse_xml`).
An ``ows:ExceptionReport`` (OWS 1.0 or 1.1 namespace) raises :class:`CSWException`, a
:class:`~harvest_pipeline.errors.ProtocolError` carrying ``exceptionCode``, ``locator``, the
exception text and the URL.

Records become :class:`~harvest_pipeline.pages.HarvestedRecord`\\ s:

* identifier: ``dc:identifier`` (csw:Record / SummaryRecord / BriefRecord), else
  ``gmd:fileIdentifier`` (gmd:MD_Metadata, gmi:MI_Metadata);
* datestamp: the modification date, ``dct:modified`` or ``gmd:dateStamp``. CSW servers often
  write it without a time zone (``2026-11-01T12:00:00``) or as a bare date: it is then read as
  UTC (the filter we send is UTC, see :mod:`.build`);
* ``deleted=False`` always (CSW has no tombstones), no sets;
* ``metadata`` is the record element itself, ``metadata_xml`` its standalone serialization (with
  the namespace declarations in scope, like the OAI-PMH client).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from lxml import etree

from harvest_pipeline.csw.build import CSW_NS, DC_NS, DCT_NS, GCO_NS, GMD_NS, GMI_NS, OGC_NS
from harvest_pipeline.csw.models import CswCapabilities, CswOperation, SearchResults
from harvest_pipeline.dates import parse_datestamp
from harvest_pipeline.errors import ProtocolError
from harvest_pipeline.pages import HarvestedRecord
from harvest_pipeline.xmlsafe import parse_xml

__all__ = [
    "CSWException",
    "open_response",
    "parse_capabilities",
    "parse_search_results",
    "parse_get_record_by_id",
    "record_identifier",
    "record_modified",
    "parse_modified",
    "to_record",
]

OWS_NAMESPACES = ("http://www.opengis.net/ows", "http://www.opengis.net/ows/1.1", "http://www.opengis.net/ows/2.0")
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"

_DC_RECORD_TAGS = frozenset(f"{{{CSW_NS}}}{n}" for n in ("Record", "SummaryRecord", "BriefRecord"))
_ISO_TAGS = frozenset({f"{{{GMD_NS}}}MD_Metadata", f"{{{GMI_NS}}}MI_Metadata"})
_DC_IDENTIFIER = f"{{{DC_NS}}}identifier"
_DCT_MODIFIED = f"{{{DCT_NS}}}modified"
_FILE_ID = f"{{{GMD_NS}}}fileIdentifier"
_DATESTAMP = f"{{{GMD_NS}}}dateStamp"
_GCO_VALUES = (f"{{{GCO_NS}}}CharacterString", f"{{{GCO_NS}}}DateTime", f"{{{GCO_NS}}}Date",
               "{http://www.isotc211.org/2005/gmx}Anchor")

_MAX_RECORD_CONSTRAINTS = ("maxrecorddefault", "defaultmaxrecords", "maxrecords")
_NAIVE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?\Z", re.ASCII)


class CSWException(ProtocolError):
    """The catalogue answered with an ows:ExceptionReport."""

    def __init__(self, code: str, text: str, *, locator: str | None = None, **kw):
        where = f" (locator {locator})" if locator else ""
        super().__init__(f"CSW exception {code}{where}: {text}".rstrip(": "), **kw)
        self.code = code
        self.locator = locator
        self.text = text


def _local(tag) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _ns(tag) -> str:
    return tag[1:].partition("}")[0] if isinstance(tag, str) and tag.startswith("{") else ""


def _text(el) -> str:
    return (el.text or "").strip() if el is not None else ""


def exception_from(root: etree._Element, url: str | None) -> CSWException | None:
    """The CSWException for an ows:ExceptionReport root, else None."""
    if _local(root.tag) != "ExceptionReport" or _ns(root.tag) not in OWS_NAMESPACES:
        return None
    excs = [e for e in root if _local(e.tag) == "Exception"]
    if not excs:
        return CSWException("(no code)", "empty ows:ExceptionReport", url=url)
    first = excs[0]
    texts = [" ".join(t.split()) for t in (_text(x) for x in first.iter() if _local(x.tag) == "ExceptionText") if t]
    text = "; ".join(texts) or "(no text)"
    if len(excs) > 1:
        text += f" (and {len(excs) - 1} more exception(s))"
    return CSWException(first.get("exceptionCode") or "(no code)", text, locator=first.get("locator"), url=url)


def open_response(content: bytes, url: str | None, expected: tuple[str, ...]) -> etree._Element:
    """Parse a body; raise CSWException for exception reports, ProtocolError for other roots."""
    root = parse_xml(content, url=url)
    exc = exception_from(root, url)
    if exc is not None:
        raise exc
    if _local(root.tag) not in expected:
        ns = _ns(root.tag)
        raise ProtocolError(
            f"expected a CSW {' or '.join(expected)} document, got <{_local(root.tag)}>"
            + (f" in namespace {ns}" if ns else ""),
            url=url,
            hint="check that the URL is the CSW 2.0.2 endpoint of the catalogue",
        )
    return root


# ------------------------------------------------------------------------------ capabilities

def _values(el) -> tuple[str, ...]:
    """Every ows:Value below a Parameter/Constraint (OWS 1.0 direct, OWS 1.1 in AllowedValues)."""
    return tuple(v for v in (_text(x) for x in el.iter() if _local(x.tag) == "Value") if v)


def _named(parent, local: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for el in parent:
        if _local(el.tag) == local and el.get("name"):
            out[el.get("name")] = out.get(el.get("name"), ()) + _values(el)
    return out


def _lookup(mapping: dict[str, tuple[str, ...]], *names: str) -> tuple[str, ...]:
    want = {n.lower() for n in names}
    for key, values in mapping.items():
        if key.lower() in want:
            return values
    return ()


def parse_capabilities(content: bytes, url: str | None) -> CswCapabilities:
    root = open_response(content, url, ("Capabilities",))
    warnings: list[str] = []
    title = None
    operations: dict[str, CswOperation] = {}
    global_params: dict[str, tuple[str, ...]] = {}
    global_constraints: dict[str, tuple[str, ...]] = {}
    comparison: list[str] = []
    for section in root:
        local = _local(section.tag)
        if local == "ServiceIdentification":
            for el in section:
                if _local(el.tag) == "Title" and _text(el):
                    title = _text(el)
                    break
        elif local == "OperationsMetadata":
            global_params = _named(section, "Parameter")
            global_constraints = _named(section, "Constraint")
            for op in section:
                if _local(op.tag) != "Operation" or not op.get("name"):
                    continue
                gets, posts = [], []
                for el in op.iter():
                    if _local(el.tag) in ("Get", "Post") and el.get(XLINK_HREF):
                        (gets if _local(el.tag) == "Get" else posts).append(el.get(XLINK_HREF).strip())
                operations[op.get("name")] = CswOperation(
                    name=op.get("name"), get_urls=tuple(gets), post_urls=tuple(posts),
                    parameters=_named(op, "Parameter"), constraints=_named(op, "Constraint"),
                )
        elif local == "Filter_Capabilities" and _ns(section.tag) == OGC_NS:
            comparison = [_text(el) or el.get("name", "") for el in section.iter()
                          if _local(el.tag) == "ComparisonOperator"]
    get_records = operations.get("GetRecords")
    if operations and get_records is None:
        warnings.append("the catalogue does not list a GetRecords operation")
    gr = get_records or CswOperation("GetRecords")

    def param(*names):
        return gr.parameter(names[0]) or _lookup(gr.parameters, *names) or _lookup(global_params, *names)

    max_records = None
    for source in (gr.constraints, global_constraints, gr.parameters, global_params):
        values = _lookup(source, *_MAX_RECORD_CONSTRAINTS)
        if not values:
            continue
        try:
            value = int(values[0])
        except ValueError:
            warnings.append(f"page-size cap {values[0]!r} is not an integer (ignored)")
            continue
        if value > 0:
            max_records = value
            break
    return CswCapabilities(
        url=url or "",
        version=root.get("version"),
        title=title,
        operations=operations,
        output_schemas=param("outputSchema"),
        type_names=param("typeNames", "TypeNames", "typeName"),
        constraint_languages=param("CONSTRAINTLANGUAGE", "constraintLanguage"),
        result_types=param("resultType"),
        element_set_names=param("ElementSetName", "elementSetName"),
        max_records=max_records,
        comparison_operators=tuple(c for c in comparison if c),
        warnings=tuple(warnings),
    )


# ------------------------------------------------------------------------------- GetRecords

def _int_attr(el, name: str, url: str | None, required: bool) -> int | None:
    raw = el.get(name)
    if raw is None or not raw.strip():
        if required:
            raise ProtocolError(f"csw:SearchResults has no {name} attribute", url=url)
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ProtocolError(f"csw:SearchResults {name}={raw!r} is not an integer", url=url) from None
    if value < 0:
        raise ProtocolError(f"csw:SearchResults {name}={raw!r} is negative", url=url)
    return value


def parse_search_results(content: bytes, url: str | None) -> tuple[SearchResults, list[etree._Element]]:
    """The envelope and the record elements (children of csw:SearchResults) of a GetRecords answer."""
    root = open_response(content, url, ("GetRecordsResponse",))
    status = results = None
    for el in root:
        local = _local(el.tag)
        if local == "SearchStatus":
            status = el
        elif local == "SearchResults":
            results = el
    if results is None:
        raise ProtocolError("the GetRecordsResponse has no csw:SearchResults", url=url)
    records = [el for el in results if isinstance(el.tag, str)]
    returned = _int_attr(results, "numberOfRecordsReturned", url, required=False)
    if returned is None:
        returned = len(records)
    elif returned != len(records):
        raise ProtocolError(
            f"csw:SearchResults says numberOfRecordsReturned={returned} but carries {len(records)} records",
            url=url,
        )
    envelope = SearchResults(
        matched=_int_attr(results, "numberOfRecordsMatched", url, required=True),
        returned=returned,
        next_record=_int_attr(results, "nextRecord", url, required=False),
        record_schema=results.get("recordSchema"),
        element_set=results.get("elementSet"),
        timestamp=status.get("timestamp") if status is not None else None,
    )
    return envelope, records


def parse_get_record_by_id(content: bytes, url: str | None) -> list[etree._Element]:
    root = open_response(content, url, ("GetRecordByIdResponse",))
    return [el for el in root if isinstance(el.tag, str)]


# ---------------------------------------------------------------------------------- records

def _gco_text(el) -> str:
    for child in el:
        if child.tag in _GCO_VALUES:
            return _text(child)
    return _text(el)


def record_identifier(el: etree._Element) -> str | None:
    """dc:identifier (DC records) or gmd:fileIdentifier (ISO records); None if absent."""
    tag = el.tag
    if tag in _ISO_TAGS:
        for child in el.iterchildren(_FILE_ID):
            return _gco_text(child) or None
        return None
    for child in el.iterchildren(_DC_IDENTIFIER):
        value = _text(child)
        if value:
            return value
    if tag in _DC_RECORD_TAGS:
        return None
    # Another output schema: the first identifier anywhere in it.
    for child in el.iter(_DC_IDENTIFIER, _FILE_ID):
        value = _gco_text(child) if child.tag == _FILE_ID else _text(child)
        if value:
            return value
    return None


def record_modified(el: etree._Element) -> str | None:
    """The raw modification date: dct:modified (DC) or gmd:dateStamp (ISO); None if absent."""
    if el.tag in _ISO_TAGS:
        for child in el.iterchildren(_DATESTAMP):
            return _gco_text(child) or None
        return None
    for child in el.iterchildren(_DCT_MODIFIED):
        value = _text(child)
        if value:
            return value
    return None


def parse_modified(raw: str | None) -> datetime | None:
    """A tz-aware UTC datetime; dates without a time zone are read as UTC; None if unreadable."""
    if not raw:
        return None
    try:
        return parse_datestamp(raw)
    except ValueError:
        pass
    if _NAIVE.match(raw.strip()):
        try:
            return datetime.fromisoformat(raw.strip()).replace(tzinfo=timezone.utc)
        except ValueError:
            return None
    return None


def to_record(el: etree._Element, warnings: list[str], position: int) -> HarvestedRecord | None:
    """One record element as an HarvestedRecord; None (and a warning) when it has no identifier."""
    identifier = record_identifier(el)
    if not identifier:
        warnings.append(f"record at position {position} ({_local(el.tag)}) has no identifier; skipped")
        return None
    raw = record_modified(el)
    parsed = parse_modified(raw)
    if raw and parsed is None:
        warnings.append(f"record {identifier}: unreadable modification date {raw!r}")
    return HarvestedRecord(
        identifier=identifier,
        datestamp=raw or "",
        datestamp_utc=parsed,
        set_specs=(),
        deleted=False,
        metadata_xml=etree.tostring(el, encoding="unicode", with_tail=False),
        metadata=el,
    )
