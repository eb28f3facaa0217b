"""An OGC CSW 2.0.2 endpoint over the demo corpus, mounted at /csw next to /oai.

Same records, same clock, same admin endpoints as the OAI-PMH provider; only the protocol
differs:

* **GET** (KVP): ``request=GetCapabilities`` and ``request=GetRecordById&id=a,b``.
* **POST** (XML): ``csw:GetRecords``, ``csw:GetRecordById``, ``csw:GetCapabilities``.
* **GetRecords**: ``resultType`` results|hits (spec default hits), ``startPosition`` (1-based),
  ``maxRecords`` (default 10, at most :data:`HARD_MAX_RECORDS`, which the capabilities advertise
  as ``MaxRecordDefault``), ``elementSetName`` brief|summary|full, ``outputSchema`` csw:Record
  (Dublin Core with dct:modified, dct:abstract, ows:BoundingBox) or ISO 19139 gmd:MD_Metadata.
  ``typeNames`` csw:Record or gmd:MD_Metadata.
* **Filter** (Filter Encoding 1.1, parsed with the hardened parser): ``And`` of
  ``PropertyIsGreaterThanOrEqualTo`` / ``GreaterThan`` / ``LessThan`` / ``LessThanOrEqualTo`` /
  ``EqualTo`` on the modification date (``dct:modified``, ``apiso:Modified``), and
  ``PropertyIsLike`` on ``dc:subject``/``apiso:Subject`` (keywords), ``dc:title``, ``csw:AnyText``.
  Anything else is an ``InvalidParameterValue`` exception. ``SortBy`` on the modification date
  or the identifier, ASC or DESC (default: modification date, ascending).
* The modification date is the record's datestamp (creation, update or runtime touch); deleted
  records are simply absent (CSW has no tombstones).
* Exceptions are ``ows:ExceptionReport`` documents with HTTP 200 (the OWS 1.0 custom).

Paging is by offset over the live result set, as real catalogues do: a record modified during a
traversal shifts the offsets and ``numberOfRecordsMatched`` changes (no snapshot).

Fault modes (``ServerOptions``, settable through POST /admin/options):

* ``csw_max_records_cap`` (> 0): serve at most that many records per page, *silently*: the
  capabilities still say :data:`HARD_MAX_RECORDS`, and ``nextRecord`` is computed as if the
  requested ``maxRecords`` had been served (so a client that trusts it skips records, and ends
  early when that points past the end);
* ``csw_stuck_next_record``: ``nextRecord`` repeats ``startPosition`` instead of advancing.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from datetime import date, datetime, timezone
from urllib.parse import parse_qsl
from xml.sax.saxutils import unescape

from harvest_pipeline.xmlsafe import parse_xml

from .corpus import _PUBLISHER, _Content, RecordView, format_ts, xml_escape

CSW_PATH = "/csw"
HARD_MAX_RECORDS = 1000
DEFAULT_MAX_RECORDS = 10

CSW_NS = "http://www.opengis.net/cat/csw/2.0.2"
OGC_NS = "http://www.opengis.net/ogc"
OWS_NS = "http://www.opengis.net/ows"
DC_NS = "http://purl.org/dc/elements/1.1/"
DCT_NS = "http://purl.org/dc/terms/"
GMD_NS = "http://www.isotc211.org/2005/gmd"
GCO_NS = "http://www.isotc211.org/2005/gco"
XLINK_NS = "http://www.w3.org/1999/xlink"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"
OUTPUT_SCHEMAS = (CSW_NS, GMD_NS)
TYPE_NAMES = {f"{{{CSW_NS}}}Record": "csw:Record", f"{{{GMD_NS}}}MD_Metadata": "gmd:MD_Metadata"}
ELEMENT_SETS = ("brief", "summary", "full")

_ROOT_NS = (f'xmlns:csw="{CSW_NS}" xmlns:dc="{DC_NS}" xmlns:dct="{DCT_NS}" xmlns:ows="{OWS_NS}" '
            f'xmlns:gmd="{GMD_NS}" xmlns:gco="{GCO_NS}" xmlns:xsi="{XSI_NS}"')
_XML_DECL = '<?xml version="1.0" encoding="UTF-8"?>\n'
_CTYPE = "application/xml; charset=utf-8"

# Queryables by local name (any prefix): which record property a PropertyName means.
_MODIFIED = {"modified", "datestamp", "revisiondate"}
_IDENTIFIER = {"identifier", "fileidentifier"}
_LIKE_FIELDS = {"subject": "subject", "keyword": "subject", "keywords": "subject", "title": "title",
                "anytext": "anytext"}
_COMPARISONS = {
    "PropertyIsGreaterThanOrEqualTo", "PropertyIsGreaterThan", "PropertyIsLessThan",
    "PropertyIsLessThanOrEqualTo", "PropertyIsEqualTo",
}


class CswError(Exception):
    """Answered as an ows:ExceptionReport."""

    def __init__(self, code: str, text: str, locator: str | None = None):
        super().__init__(text)
        self.code, self.text, self.locator = code, text, locator


def _local(tag) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _text(el) -> str:
    return (el.text or "").strip() if el is not None else ""


def _plain(escaped: str) -> str:
    """Corpus vocabulary is stored XML-escaped; matching works on the plain text."""
    return unescape(escaped, {"&quot;": '"'})


def _instant(value: str, locator: str) -> float:
    """Epoch seconds (float) of an ISO 8601 literal; naive means UTC; a bare date is midnight."""
    s = value.strip()
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", s):
            dt = datetime.combine(date.fromisoformat(s), datetime.min.time(), timezone.utc)
        else:
            dt = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith("Z") else s)
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=timezone.utc)
    except ValueError:
        raise CswError("InvalidParameterValue", f"{value!r} is not an ISO 8601 date or date-time", locator) from None
    return dt.timestamp()


# ---- filters --------------------------------------------------------------------------------

class _Query:
    """A compiled filter: an inclusive range of whole epoch seconds plus text predicates."""

    def __init__(self):
        self.lo = 0
        self.hi: int | None = None
        self.likes: list[tuple[str, re.Pattern]] = []

    def key(self) -> tuple:
        return (self.lo, self.hi, tuple((f, p.pattern, p.flags) for f, p in self.likes))

    def narrow(self, op: str, t: float) -> None:
        if op in ("PropertyIsGreaterThanOrEqualTo", "PropertyIsEqualTo"):
            self.lo = max(self.lo, math.ceil(t))
        if op == "PropertyIsGreaterThan":
            self.lo = max(self.lo, math.floor(t) + 1)
        if op in ("PropertyIsLessThanOrEqualTo", "PropertyIsEqualTo"):
            hi = math.floor(t)
            self.hi = hi if self.hi is None else min(self.hi, hi)
        if op == "PropertyIsLessThan":
            hi = math.ceil(t) - 1
            self.hi = hi if self.hi is None else min(self.hi, hi)

    def accepts(self, v: RecordView) -> bool:
        if not self.likes:
            return True
        c = _Content(v)
        for field, pattern in self.likes:
            if field == "subject":
                values = c.subjects
            elif field == "title":
                values = [c.title]
            else:
                values = [c.title, c.description, *c.subjects, *(cr[0] for cr in c.creators)]
            if not any(pattern.search(_plain(x)) for x in values):
                return False
        return True


def _like_regex(el) -> re.Pattern:
    wild = el.get("wildCard", "*")
    single = el.get("singleChar", "?")
    escape = el.get("escapeChar", el.get("escape", "\\"))
    literal = None
    for child in el:
        if _local(child.tag) == "Literal":
            literal = child.text or ""
    if literal is None:
        raise CswError("InvalidParameterValue", "PropertyIsLike needs an ogc:Literal", "Constraint")
    out, i = [], 0
    while i < len(literal):
        ch = literal[i]
        if escape and ch == escape and i + 1 < len(literal):
            out.append(re.escape(literal[i + 1]))
            i += 2
            continue
        if ch == wild:
            out.append(".*")
        elif ch == single:
            out.append(".")
        else:
            out.append(re.escape(ch))
        i += 1
    case = (el.get("matchCase") or "false").lower() == "true"
    return re.compile("^" + "".join(out) + "$", 0 if case else re.IGNORECASE | re.DOTALL)


def _property(el) -> str:
    for child in el:
        if _local(child.tag) == "PropertyName":
            return _text(child).rpartition(":")[2].rpartition("/")[2].lower()
    raise CswError("InvalidParameterValue", f"{_local(el.tag)} needs an ogc:PropertyName", "Constraint")


def _compile(el, q: _Query) -> None:
    op = _local(el.tag)
    if el.tag == f"{{{OGC_NS}}}And":
        for child in el:
            if isinstance(child.tag, str):
                _compile(child, q)
        return
    if el.tag.startswith(f"{{{OGC_NS}}}") and op in _COMPARISONS:
        children = [c for c in el if isinstance(c.tag, str)]
        if [_local(c.tag) for c in children] != ["PropertyName", "Literal"]:
            raise CswError("InvalidParameterValue", f"{op}: expected ogc:PropertyName then ogc:Literal", "Constraint")
        prop = _property(el)
        if prop not in _MODIFIED:
            raise CswError("InvalidParameterValue",
                           f"{op} is supported on the modification date only, not {_text(children[0])!r}", "Constraint")
        q.narrow(op, _instant(_text(children[1]), "Constraint"))
        return
    if el.tag == f"{{{OGC_NS}}}PropertyIsLike":
        prop = _property(el)
        field = _LIKE_FIELDS.get(prop)
        if field is None:
            raise CswError("InvalidParameterValue", f"PropertyIsLike is not supported on {prop!r}", "Constraint")
        q.likes.append((field, _like_regex(el)))
        return
    raise CswError("InvalidParameterValue", f"filter operator {op!r} is not supported by this catalogue", "Constraint")


# ---- rendering ------------------------------------------------------------------------------

def _bbox_ows(c: _Content) -> str:
    if c.box is None:
        return ""
    w, e, s, n = c.box
    # EPSG:4326 in its URN form is latitude first.
    return ('<ows:BoundingBox crs="urn:ogc:def:crs:EPSG::4326">'
            f"<ows:LowerCorner>{s:.4f} {w:.4f}</ows:LowerCorner><ows:UpperCorner>{n:.4f} {e:.4f}</ows:UpperCorner>"
            "</ows:BoundingBox>")


def render_dc(v: RecordView, element_set: str) -> str:
    c = _Content(v)
    ident = f"<dc:identifier>{xml_escape(v.identifier)}</dc:identifier>"
    title = f"<dc:title>{c.title}</dc:title>"
    rtype = f"<dc:type>{c.rtype.lower()}</dc:type>"
    modified = f"<dct:modified>{format_ts(v.datestamp)}</dct:modified>"
    abstract = f"<dct:abstract>{c.description}</dct:abstract>"
    bbox = _bbox_ows(c)
    if element_set == "brief":
        return f"<csw:BriefRecord>{ident}{title}{rtype}{bbox}</csw:BriefRecord>"
    subjects = "".join(f"<dc:subject>{s}</dc:subject>" for s in c.subjects)
    if element_set == "summary":
        return f"<csw:SummaryRecord>{ident}{title}{rtype}{subjects}{modified}{abstract}{bbox}</csw:SummaryRecord>"
    creators = "".join(f"<dc:creator>{cr[0]}</dc:creator>" for cr in c.creators)
    return (f"<csw:Record>{ident}{title}{creators}{subjects}{rtype}"
            f"<dc:publisher>{_PUBLISHER}</dc:publisher><dc:language>{c.lang}</dc:language>"
            f"<dc:rights>{c.rights[0]}</dc:rights>{modified}<dct:created>{format_ts(v.created, True)}</dct:created>"
            f"{abstract}<dct:references scheme=\"WWW:LINK\">{c.landing}</dct:references>"
            f"<dct:references scheme=\"DOI\">https://doi.org/{c.doi}</dct:references>{bbox}</csw:Record>")


def _cs(value: str) -> str:
    return f"<gco:CharacterString>{value}</gco:CharacterString>"


def _code(name: str, value: str) -> str:
    return (f'<gmd:{name} codeList="http://standards.iso.org/iso/19139/resources/gmxCodelists.xml#{name}" '
            f'codeListValue="{value}">{value}</gmd:{name}>')


def render_iso(v: RecordView, element_set: str) -> str:
    c = _Content(v)
    scope = "dataset"
    head = (f"<gmd:fileIdentifier>{_cs(xml_escape(v.identifier))}</gmd:fileIdentifier>"
            f"<gmd:language>{_cs(c.lang)}</gmd:language>"
            f"<gmd:hierarchyLevel>{_code('MD_ScopeCode', scope)}</gmd:hierarchyLevel>")
    contact = (f"<gmd:contact><gmd:CI_ResponsibleParty><gmd:organisationName>{_cs(_PUBLISHER)}</gmd:organisationName>"
               f"<gmd:role>{_code('CI_RoleCode', 'pointOfContact')}</gmd:role></gmd:CI_ResponsibleParty></gmd:contact>")
    stamp = f"<gmd:dateStamp><gco:DateTime>{format_ts(v.datestamp)}</gco:DateTime></gmd:dateStamp>"
    extent = ""
    if c.box is not None:
        w, e, s, n = c.box
        extent = ("<gmd:extent><gmd:EX_Extent><gmd:geographicElement><gmd:EX_GeographicBoundingBox>"
                  f"<gmd:westBoundLongitude><gco:Decimal>{w:.4f}</gco:Decimal></gmd:westBoundLongitude>"
                  f"<gmd:eastBoundLongitude><gco:Decimal>{e:.4f}</gco:Decimal></gmd:eastBoundLongitude>"
                  f"<gmd:southBoundLatitude><gco:Decimal>{s:.4f}</gco:Decimal></gmd:southBoundLatitude>"
                  f"<gmd:northBoundLatitude><gco:Decimal>{n:.4f}</gco:Decimal></gmd:northBoundLatitude>"
                  "</gmd:EX_GeographicBoundingBox></gmd:geographicElement></gmd:EX_Extent></gmd:extent>")
    title = f"<gmd:title>{_cs(c.title)}</gmd:title>"
    if element_set == "brief":
        return (f"<gmd:MD_Metadata>{head}{contact}{stamp}<gmd:identificationInfo><gmd:MD_DataIdentification>"
                f"<gmd:citation><gmd:CI_Citation>{title}</gmd:CI_Citation></gmd:citation>"
                f"<gmd:abstract>{_cs('')}</gmd:abstract>{extent}"
                "</gmd:MD_DataIdentification></gmd:identificationInfo></gmd:MD_Metadata>")
    created = (f"<gmd:date><gmd:CI_Date><gmd:date><gco:Date>{format_ts(v.created, True)}</gco:Date></gmd:date>"
               f"<gmd:dateType>{_code('CI_DateTypeCode', 'creation')}</gmd:dateType></gmd:CI_Date></gmd:date>")
    keywords = ("<gmd:descriptiveKeywords><gmd:MD_Keywords>"
                + "".join(f"<gmd:keyword>{_cs(s)}</gmd:keyword>" for s in c.subjects)
                + "</gmd:MD_Keywords></gmd:descriptiveKeywords>")
    parties = ""
    rights = distribution = doi = ""
    if element_set == "full":
        doi = (f"<gmd:identifier><gmd:MD_Identifier><gmd:code>{_cs('https://doi.org/' + c.doi)}</gmd:code>"
               "</gmd:MD_Identifier></gmd:identifier>")
        parties = "".join(
            f"<gmd:citedResponsibleParty><gmd:CI_ResponsibleParty><gmd:individualName>{_cs(cr[0])}</gmd:individualName>"
            f"<gmd:role>{_code('CI_RoleCode', 'author')}</gmd:role></gmd:CI_ResponsibleParty></gmd:citedResponsibleParty>"
            for cr in c.creators)
        rights = (f"<gmd:resourceConstraints><gmd:MD_LegalConstraints><gmd:useLimitation>{_cs(c.rights[0])}"
                  "</gmd:useLimitation></gmd:MD_LegalConstraints></gmd:resourceConstraints>")
        distribution = ("<gmd:distributionInfo><gmd:MD_Distribution><gmd:transferOptions><gmd:MD_DigitalTransferOptions>"
                        f"<gmd:onLine><gmd:CI_OnlineResource><gmd:linkage><gmd:URL>{c.landing}</gmd:URL></gmd:linkage>"
                        "</gmd:CI_OnlineResource></gmd:onLine></gmd:MD_DigitalTransferOptions></gmd:transferOptions>"
                        "</gmd:MD_Distribution></gmd:distributionInfo>")
    return (f"<gmd:MD_Metadata>{head}{contact}{stamp}<gmd:identificationInfo><gmd:MD_DataIdentification>"
            f"<gmd:citation><gmd:CI_Citation>{title}{created}{doi}{parties}</gmd:CI_Citation></gmd:citation>"
            f"<gmd:abstract>{_cs(c.description)}</gmd:abstract>{keywords}{rights}"
            f"<gmd:language>{_cs(c.lang)}</gmd:language>{extent}"
            f"</gmd:MD_DataIdentification></gmd:identificationInfo>{distribution}</gmd:MD_Metadata>")


def render(v: RecordView, schema: str, element_set: str) -> str:
    return render_iso(v, element_set) if schema == GMD_NS else render_dc(v, element_set)


# ---- documents ------------------------------------------------------------------------------

def exception_report(e: CswError) -> bytes:
    locator = f' locator="{xml_escape(e.locator)}"' if e.locator else ""
    return (f'{_XML_DECL}<ows:ExceptionReport xmlns:ows="{OWS_NS}" version="1.0.0" language="en">'
            f'<ows:Exception exceptionCode="{xml_escape(e.code)}"{locator}>'
            f"<ows:ExceptionText>{xml_escape(e.text)}</ows:ExceptionText></ows:Exception>"
            "</ows:ExceptionReport>\n").encode("utf-8")


def capabilities(base_url: str, title: str) -> bytes:
    u = xml_escape(base_url)
    get_post = f'<ows:DCP><ows:HTTP><ows:Get xlink:href="{u}"/><ows:Post xlink:href="{u}"/></ows:HTTP></ows:DCP>'
    post = f'<ows:DCP><ows:HTTP><ows:Post xlink:href="{u}"/></ows:HTTP></ows:DCP>'

    def param(name, *values):
        return f'<ows:Parameter name="{name}">' + "".join(f"<ows:Value>{v}</ows:Value>" for v in values) + "</ows:Parameter>"

    def constraint(name, *values):
        return f'<ows:Constraint name="{name}">' + "".join(f"<ows:Value>{v}</ows:Value>" for v in values) + "</ows:Constraint>"

    schemas = param("outputSchema", *OUTPUT_SCHEMAS)
    esn = param("ElementSetName", *ELEMENT_SETS)
    ops = (
        f'<ows:Operation name="GetCapabilities">{get_post}'
        + param("sections", "ServiceIdentification", "ServiceProvider", "OperationsMetadata", "Filter_Capabilities")
        + "</ows:Operation>"
        f'<ows:Operation name="GetRecords">{post}'
        + param("resultType", "hits", "results")
        + param("outputFormat", "application/xml")
        + schemas
        + param("typeNames", "csw:Record", "gmd:MD_Metadata")
        + param("CONSTRAINTLANGUAGE", "FILTER")
        + esn
        + constraint("SupportedDublinCoreQueryables", "dc:identifier", "dc:title", "dc:subject", "dct:modified", "csw:AnyText")
        + constraint("SupportedISOQueryables", "apiso:Identifier", "apiso:Title", "apiso:Subject", "apiso:Modified", "apiso:AnyText")
        + "</ows:Operation>"
        f'<ows:Operation name="GetRecordById">{get_post}'
        + schemas + param("outputFormat", "application/xml") + esn
        + "</ows:Operation>"
    )
    comparisons = "".join(f"<ogc:ComparisonOperator>{c}</ogc:ComparisonOperator>"
                          for c in ("EqualTo", "LessThan", "GreaterThan", "LessThanEqualTo", "GreaterThanEqualTo", "Like"))
    return (
        f'{_XML_DECL}<csw:Capabilities xmlns:csw="{CSW_NS}" xmlns:ows="{OWS_NS}" xmlns:ogc="{OGC_NS}" '
        f'xmlns:xlink="{XLINK_NS}" version="2.0.2">'
        f"<ows:ServiceIdentification><ows:Title>{xml_escape(title)} (CSW)</ows:Title>"
        "<ows:Abstract>The demo corpus as an OGC CSW 2.0.2 catalogue.</ows:Abstract>"
        "<ows:ServiceType>CSW</ows:ServiceType><ows:ServiceTypeVersion>2.0.2</ows:ServiceTypeVersion>"
        "</ows:ServiceIdentification>"
        f"<ows:ServiceProvider><ows:ProviderName>{xml_escape(title)}</ows:ProviderName></ows:ServiceProvider>"
        f"<ows:OperationsMetadata>{ops}"
        + param("service", "CSW") + param("version", "2.0.2")
        + constraint("MaxRecordDefault", str(HARD_MAX_RECORDS)) + constraint("PostEncoding", "XML")
        + "</ows:OperationsMetadata>"
        "<ogc:Filter_Capabilities><ogc:Scalar_Capabilities><ogc:LogicalOperators/>"
        f"<ogc:ComparisonOperators>{comparisons}</ogc:ComparisonOperators></ogc:Scalar_Capabilities>"
        "<ogc:Id_Capabilities><ogc:EID/><ogc:FID/></ogc:Id_Capabilities></ogc:Filter_Capabilities>"
        "</csw:Capabilities>\n"
    ).encode("utf-8")


# ---- the endpoint ---------------------------------------------------------------------------

class CswEndpoint:
    """Answers CSW requests for one OAIProvider's corpus and options (thread-safe)."""

    def __init__(self, provider):
        self.provider = provider
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple, list[RecordView]] = OrderedDict()

    # -- result sets ---------------------------------------------------------------------

    def _matches(self, q: _Query, sort: str, descending: bool) -> list[RecordView]:
        corpus = self.provider.corpus
        key = (q.key(), sort, descending, corpus.mutation_seq, corpus.now_ts())
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        out: list[RecordView] = []
        if q.hi is None or q.lo <= q.hi:
            after = None
            while True:
                page = corpus.list_page(q.lo, q.hi, None, after, 2000)
                out.extend(v for v in page if not v.deleted and q.accepts(v))
                if len(page) < 2000:
                    break
                after = (page[-1].datestamp, page[-1].identifier)
        if sort == "identifier":
            out.sort(key=lambda v: v.identifier)
        if descending:
            out.reverse()
        with self._lock:
            self._cache[key] = out
            while len(self._cache) > 16:
                self._cache.popitem(last=False)
        return out

    # -- requests ------------------------------------------------------------------------

    def handle(self, method: str, query: str, body: bytes, base_url: str) -> tuple[int, bytes, str]:
        try:
            if method == "POST" and body.strip():
                return 200, self._post(body, base_url), _CTYPE
            return 200, self._get(query, base_url), _CTYPE
        except CswError as e:
            return 200, exception_report(e), _CTYPE

    def _get(self, query: str, base_url: str) -> bytes:
        try:
            kvp = {k.lower(): v for k, v in parse_qsl(query, keep_blank_values=True, errors="strict")}
        except UnicodeDecodeError:
            raise CswError("InvalidParameterValue", "the query string is not UTF-8") from None
        request = kvp.get("request")
        if not request:
            raise CswError("MissingParameterValue", "the request parameter is missing", "request")
        if kvp.get("service", "CSW").upper() != "CSW":
            raise CswError("InvalidParameterValue", f"service={kvp['service']!r}: this is a CSW", "service")
        if request == "GetCapabilities":
            return capabilities(base_url, self.provider.options.repository_name)
        if request == "GetRecordById":
            ids = [i for i in (kvp.get("id") or "").split(",") if i]
            if not ids:
                raise CswError("MissingParameterValue", "GetRecordById needs id", "id")
            return self._by_id(ids, kvp.get("outputschema") or CSW_NS, kvp.get("elementsetname") or "summary")
        if request == "GetRecords":
            raise CswError("OperationNotSupported", "GetRecords is offered with POST (XML) only", "request")
        raise CswError("OperationNotSupported", f"request {request!r} is not supported", "request")

    def _post(self, body: bytes, base_url: str) -> bytes:
        try:
            root = parse_xml(body, url=None)
        except Exception as e:  # noqa: BLE001 - hardened parser: DTDs, malformed XML
            raise CswError("NoApplicableCode", f"the request body is not acceptable XML: {getattr(e, 'message', e)}") from None
        if root.get("service", "CSW") != "CSW":
            raise CswError("InvalidParameterValue", f"service={root.get('service')!r}: this is a CSW", "service")
        tag = root.tag
        if tag == f"{{{CSW_NS}}}GetCapabilities":
            return capabilities(base_url, self.provider.options.repository_name)
        if root.get("version", "2.0.2") != "2.0.2":
            raise CswError("VersionNegotiationFailed", f"version {root.get('version')!r}: only 2.0.2", "version")
        if tag == f"{{{CSW_NS}}}GetRecordById":
            ids = [_text(el) for el in root if _local(el.tag) == "Id" and _text(el)]
            if not ids:
                raise CswError("MissingParameterValue", "GetRecordById needs csw:Id", "Id")
            esn = next((_text(el) for el in root if _local(el.tag) == "ElementSetName"), "summary")
            return self._by_id(ids, root.get("outputSchema") or CSW_NS, esn)
        if tag == f"{{{CSW_NS}}}GetRecords":
            return self._get_records(root)
        raise CswError("OperationNotSupported", f"request {_local(tag)!r} is not supported", "request")

    @staticmethod
    def _schema_and_esn(schema: str, esn: str) -> tuple[str, str]:
        if schema not in OUTPUT_SCHEMAS:
            raise CswError("InvalidParameterValue", f"outputSchema {schema!r} is not offered", "outputSchema")
        if esn not in ELEMENT_SETS:
            raise CswError("InvalidParameterValue", f"ElementSetName {esn!r} is not one of {ELEMENT_SETS}", "ElementSetName")
        return schema, esn

    def _by_id(self, ids: list[str], schema: str, esn: str) -> bytes:
        schema, esn = self._schema_and_esn(schema, esn)
        corpus = self.provider.corpus
        views = [v for v in (corpus.get(i) for i in ids) if v is not None and not v.deleted]
        body = "".join(render(v, schema, esn) for v in views)
        return f"{_XML_DECL}<csw:GetRecordByIdResponse {_ROOT_NS}>{body}</csw:GetRecordByIdResponse>\n".encode("utf-8")

    @staticmethod
    def _int(root, name: str, default: int, minimum: int) -> int:
        raw = root.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise CswError("InvalidParameterValue", f"{name}={raw!r} is not an integer", name) from None
        if value < minimum:
            raise CswError("InvalidParameterValue", f"{name} must be >= {minimum}", name)
        return value

    def _get_records(self, root) -> bytes:
        opts = self.provider.options
        result_type = root.get("resultType", "hits")
        if result_type not in ("hits", "results", "validate"):
            raise CswError("InvalidParameterValue", f"resultType {result_type!r}", "resultType")
        fmt = root.get("outputFormat", "application/xml")
        if fmt not in ("application/xml", "text/xml"):
            raise CswError("InvalidParameterValue", f"outputFormat {fmt!r} is not offered", "outputFormat")
        start = self._int(root, "startPosition", 1, 1)
        asked = self._int(root, "maxRecords", DEFAULT_MAX_RECORDS, 0)
        queries = [el for el in root if el.tag == f"{{{CSW_NS}}}Query"]
        if len(queries) != 1:
            raise CswError("MissingParameterValue", "GetRecords needs exactly one csw:Query", "Query")
        query = queries[0]
        type_names = (query.get("typeNames") or "").split()
        if not type_names:
            raise CswError("MissingParameterValue", "csw:Query needs typeNames", "typeNames")
        for name in type_names:
            prefix, _, local = name.rpartition(":")
            ns = query.nsmap.get(prefix or None)
            if f"{{{ns}}}{local}" not in TYPE_NAMES:
                raise CswError("InvalidParameterValue", f"typeNames {name!r} is not offered", "typeNames")
        esn = "summary"
        q, sort, descending = _Query(), "modified", False
        for el in query:
            local = _local(el.tag)
            if local == "ElementSetName":
                esn = _text(el)
            elif local == "ElementName":
                raise CswError("InvalidParameterValue", "ElementName is not supported; use ElementSetName", "ElementName")
            elif local == "Constraint":
                kids = [c for c in el if isinstance(c.tag, str)]
                if len(kids) != 1 or kids[0].tag != f"{{{OGC_NS}}}Filter":
                    raise CswError("InvalidParameterValue", "only an ogc:Filter constraint (FILTER) is supported", "Constraint")
                for term in kids[0]:
                    if isinstance(term.tag, str):
                        _compile(term, q)
            elif local == "SortBy":
                props = [p for p in el if _local(p.tag) == "SortProperty"]
                if len(props) != 1:
                    raise CswError("InvalidParameterValue", "SortBy takes one SortProperty here", "SortBy")
                prop = _property(props[0])
                order = next((_text(c).upper() for c in props[0] if _local(c.tag) == "SortOrder"), "ASC")
                if prop in _MODIFIED:
                    sort = "modified"
                elif prop in _IDENTIFIER:
                    sort = "identifier"
                else:
                    raise CswError("InvalidParameterValue", f"cannot sort by {prop!r}", "SortBy")
                if order not in ("ASC", "DESC"):
                    raise CswError("InvalidParameterValue", f"SortOrder {order!r}", "SortBy")
                descending = order == "DESC"
        schema, esn = self._schema_and_esn(root.get("outputSchema") or CSW_NS, esn)

        matches = self._matches(q, sort, descending)
        matched = len(matches)
        now = format_ts(self.provider.corpus.now_ts())
        if result_type != "results":
            records, nxt = [], 0
        else:
            limit = min(asked, HARD_MAX_RECORDS)
            served = limit
            cap = opts.csw_max_records_cap
            if cap and cap > 0:
                served = min(served, cap)
            records = matches[start - 1:start - 1 + served]
            if cap and cap > 0:  # silent cap: nextRecord as if `limit` records had been served
                nxt = start + limit if start - 1 + limit < matched else 0
            else:
                nxt = start + len(records) if start - 1 + len(records) < matched else 0
            if nxt and opts.csw_stuck_next_record:
                nxt = start
        body = "".join(render(v, schema, esn) for v in records)
        return (
            f"{_XML_DECL}<csw:GetRecordsResponse {_ROOT_NS} version=\"2.0.2\">"
            f'<csw:SearchStatus timestamp="{now}"/>'
            f'<csw:SearchResults numberOfRecordsMatched="{matched}" numberOfRecordsReturned="{len(records)}" '
            f'nextRecord="{nxt}" recordSchema="{schema}" elementSet="{esn}">{body}</csw:SearchResults>'
            "</csw:GetRecordsResponse>\n"
        ).encode("utf-8")


_ENDPOINTS_LOCK = threading.Lock()


def endpoint_for(provider) -> CswEndpoint:
    """The provider's CSW endpoint, created on first use."""
    with _ENDPOINTS_LOCK:
        ep = getattr(provider, "_csw_endpoint", None)
        if ep is None:
            ep = provider._csw_endpoint = CswEndpoint(provider)
        return ep


def serve_csw(provider, method: str, query: str, body: bytes, base_url: str) -> tuple[int, bytes, str]:
    """One HTTP request to /csw -> (status, body, content type). Used by server.py's router."""
    return endpoint_for(provider).handle(method, query, body, base_url)
