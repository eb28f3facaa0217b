"""CSW 2.0.2 request documents: GetRecords with an OGC Filter Encoding 1.1 window constraint.

The window ``[start, end)`` becomes

    <ogc:And>
      <ogc:PropertyIsGreaterThanOrEqualTo> modified >= start
      <ogc:PropertyIsLessThan>             modified <  end
      ...the source's extra filter, if any...
    </ogc:And>

with ``<ogc:SortBy>`` on the same queryable, ascending, so offset paging walks a stable order.

How instants are written: ISO 8601 in UTC with a ``Z`` (``2026-11-01T00:00:00Z``; fractional
seconds only when the instant has them). Why:

* an explicit ``Z`` keeps servers from reading the literal in their own local time zone (a bare
  ``2026-11-01T00:00:00`` is "local" in ISO 8601, and catalogues disagree on whose local);
* servers backed by text columns (pycsw on SQLite, several GeoNetwork setups) compare the
  literal *as a string* with stored ``YYYY-MM-DDThh:mm:ssZ`` values: one fixed-width UTC form
  makes string order and time order the same thing;
* the half-open window is expressed exactly (``< end``), so no ``end - 1 s`` arithmetic and no
  granularity assumption: sub-second modification dates are neither lost nor counted twice.
"""

from __future__ import annotations

from datetime import datetime, timezone

from lxml import etree

from harvest_pipeline.csw.models import WindowConstraint
from harvest_pipeline.dates import parse_datestamp
from harvest_pipeline.xmlsafe import parse_xml

CSW_NS = "http://www.opengis.net/cat/csw/2.0.2"
OGC_NS = "http://www.opengis.net/ogc"
OWS_NS = "http://www.opengis.net/ows"
OWS11_NS = "http://www.opengis.net/ows/1.1"
GML_NS = "http://www.opengis.net/gml"
DC_NS = "http://purl.org/dc/elements/1.1/"
DCT_NS = "http://purl.org/dc/terms/"
GMD_NS = "http://www.isotc211.org/2005/gmd"
GCO_NS = "http://www.isotc211.org/2005/gco"
GMI_NS = "http://www.isotc211.org/2005/gmi"
APISO_NS = "http://www.opengis.net/cat/csw/apiso/1.0"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"

#: Prefixes declared on every request document: type names (``gmd:MD_Metadata``) and queryables
#: (``dct:modified``, ``apiso:Modified``) are QNames whose prefixes must be in scope.
NAMESPACES: dict[str, str] = {
    "csw": CSW_NS,
    "ogc": OGC_NS,
    "ows": OWS_NS,
    "gml": GML_NS,
    "dc": DC_NS,
    "dct": DCT_NS,
    "gmd": GMD_NS,
    "apiso": APISO_NS,
    "xsi": XSI_NS,
}

CSW_SCHEMA_LOCATION = f"{CSW_NS} http://schemas.opengis.net/csw/2.0.2/CSW-discovery.xsd"
OUTPUT_FORMAT = "application/xml"
ELEMENT_SETS = ("brief", "summary", "full")


def _q(prefix: str, local: str) -> str:
    return f"{{{NAMESPACES[prefix]}}}{local}"


def check_qname(value: str, what: str) -> str:
    """A ``prefix:local`` whose prefix we declare (or an unprefixed name); ValueError otherwise."""
    value = (value or "").strip()
    prefix, sep, local = value.rpartition(":")
    if not local or (sep and prefix not in NAMESPACES) or " " in value:
        known = ", ".join(sorted(NAMESPACES))
        raise ValueError(f"{what} {value!r} must be a name like dct:modified with a known prefix ({known})")
    return value


def format_instant(value: datetime | str) -> str:
    """An instant as ``YYYY-MM-DDThh:mm:ss[.ffffff]Z`` (UTC). Strings are parsed and normalized."""
    if isinstance(value, str):
        try:
            value = parse_datestamp(value.strip())
        except ValueError:
            raise ValueError(f"not an ISO 8601 instant with a time zone: {value!r}") from None
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime or an ISO 8601 string, not {type(value).__name__}")
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: give a tz-aware UTC instant")
    value = value.astimezone(timezone.utc)
    if value.microsecond:
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_extra_filter(fragment: str) -> list[etree._Element]:
    """The ogc:* elements of a Filter Encoding 1.1 fragment (or of a whole ``<ogc:Filter>``).

    The fragment is parsed (with the hardened parser) inside a wrapper that declares the usual
    prefixes (ogc, gml, dc, dct, apiso, ...), so a YAML value need not repeat them.
    """
    decls = " ".join(f'xmlns:{p}="{ns}"' for p, ns in NAMESPACES.items())
    doc = f"<extra_filter {decls}>{fragment}</extra_filter>".encode("utf-8")
    try:
        wrapper = parse_xml(doc, url=None)
    except Exception as exc:  # noqa: BLE001 - re-raised as a config-style message
        raise ValueError(f"csw.extra_filter is not a well-formed Filter Encoding fragment: {exc}") from None
    if (wrapper.text or "").strip():
        raise ValueError("csw.extra_filter has text outside of its elements")
    elements = []
    for child in wrapper:
        if not isinstance(child.tag, str):
            continue  # comments
        if (child.tail or "").strip():
            raise ValueError("csw.extra_filter has text outside of its elements")
        if child.tag == _q("ogc", "Filter"):
            elements.extend(c for c in child if isinstance(c.tag, str))
        elif child.tag.startswith(f"{{{OGC_NS}}}"):
            elements.append(child)
        else:
            raise ValueError(f"csw.extra_filter: {child.tag} is not an OGC Filter Encoding 1.1 (ogc:) element")
    if not elements:
        raise ValueError("csw.extra_filter is empty")
    return elements


def _comparison(op: str, queryable: str, literal: str) -> etree._Element:
    el = etree.Element(_q("ogc", op))
    etree.SubElement(el, _q("ogc", "PropertyName")).text = queryable
    etree.SubElement(el, _q("ogc", "Literal")).text = literal
    return el


def build_filter(constraint: WindowConstraint | None) -> etree._Element | None:
    """The ``<ogc:Filter>`` of a window constraint; None when it constrains nothing."""
    if constraint is None:
        return None
    queryable = check_qname(constraint.modified_queryable, "csw.modified_queryable")
    terms: list[etree._Element] = []
    if constraint.start is not None:
        terms.append(_comparison("PropertyIsGreaterThanOrEqualTo", queryable, format_instant(constraint.start)))
    if constraint.end is not None:
        terms.append(_comparison("PropertyIsLessThan", queryable, format_instant(constraint.end)))
    if constraint.extra_filter:
        terms.extend(parse_extra_filter(constraint.extra_filter))
    if not terms:
        return None
    flt = etree.Element(_q("ogc", "Filter"))
    if len(terms) == 1:
        flt.append(terms[0])
    else:
        conj = etree.SubElement(flt, _q("ogc", "And"))
        for term in terms:
            conj.append(term)
    return flt


def build_get_records(
    *,
    type_names: str,
    output_schema: str,
    element_set: str = "full",
    constraint: WindowConstraint | None = None,
    start_position: int = 1,
    max_records: int = 100,
    sort_by: str | None = None,
    sort_order: str = "ASC",
    result_type: str = "results",
) -> bytes:
    """A GetRecords request document (UTF-8 bytes with an XML declaration)."""
    if element_set not in ELEMENT_SETS:
        raise ValueError(f"element_set must be one of {ELEMENT_SETS}, not {element_set!r}")
    if result_type not in ("results", "hits"):
        raise ValueError(f"result_type must be 'results' or 'hits', not {result_type!r}")
    if start_position < 1 or max_records < 0:
        raise ValueError("start_position must be >= 1 and max_records >= 0")
    if sort_order not in ("ASC", "DESC"):
        raise ValueError("sort_order must be ASC or DESC")
    names = [check_qname(t, "csw.type_names") for t in type_names.split()]
    if not names:
        raise ValueError("type_names is empty")
    root = etree.Element(_q("csw", "GetRecords"), nsmap=NAMESPACES)
    root.set("service", "CSW")
    root.set("version", "2.0.2")
    root.set("resultType", result_type)
    root.set("startPosition", str(start_position))
    root.set("maxRecords", str(max_records))
    root.set("outputFormat", OUTPUT_FORMAT)
    root.set("outputSchema", output_schema)
    root.set(f"{{{XSI_NS}}}schemaLocation", CSW_SCHEMA_LOCATION)
    query = etree.SubElement(root, _q("csw", "Query"))
    query.set("typeNames", " ".join(names))
    etree.SubElement(query, _q("csw", "ElementSetName")).text = element_set
    flt = build_filter(constraint)
    if flt is not None:
        wrap = etree.SubElement(query, _q("csw", "Constraint"))
        wrap.set("version", "1.1.0")
        wrap.append(flt)
    if sort_by:
        sort = etree.SubElement(query, _q("ogc", "SortBy"))
        prop = etree.SubElement(sort, _q("ogc", "SortProperty"))
        etree.SubElement(prop, _q("ogc", "PropertyName")).text = check_qname(sort_by, "sort property")
        etree.SubElement(prop, _q("ogc", "SortOrder")).text = sort_order
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def build_get_record_by_id(ids: list[str], *, output_schema: str, element_set: str = "full") -> bytes:
    """A GetRecordById request document (POST form; the client sends the KVP form by default)."""
    if element_set not in ELEMENT_SETS:
        raise ValueError(f"element_set must be one of {ELEMENT_SETS}, not {element_set!r}")
    root = etree.Element(_q("csw", "GetRecordById"), nsmap=NAMESPACES)
    root.set("service", "CSW")
    root.set("version", "2.0.2")
    root.set("outputFormat", OUTPUT_FORMAT)
    root.set("outputSchema", output_schema)
    for ident in ids:
        etree.SubElement(root, _q("csw", "Id")).text = ident
    etree.SubElement(root, _q("csw", "ElementSetName")).text = element_set
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")
