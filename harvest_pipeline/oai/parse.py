"""Pure functions from OAI-PMH response bytes to the data shapes of :mod:`.models`.

No HTTP here: :mod:`.client` fetches, these functions read. Each response is parsed once with
the hardened parser (:func:`harvest_pipeline.xmlsafe.parse_xml`); records are read by direct
child iteration against precomputed Clark-notation tag names (no XPath, no re-parsing).

OAI-PMH ``<error code="...">`` answers raise :class:`~harvest_pipeline.errors.OAIError`
subclasses carrying the URL: ``badResumptionToken`` -> BadResumptionToken, ``noRecordsMatch``
-> NoRecordsMatch (unless ``empty_on_no_records_match=True`` turns it into an empty page),
``idDoesNotExist`` -> IdDoesNotExist, any other code -> OAIError with ``.code``.

Functions whose result has no ``warnings`` list (ListSets, GetRecord, ListMetadataFormats)
accept an optional ``warnings`` list that they append their observations to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from types import SimpleNamespace

from lxml import etree

from harvest_pipeline.dates import (
    GRANULARITY_DAY, GRANULARITY_SECONDS, format_datestamp, normalize_granularity, parse_basic_datestamp,
    parse_datestamp,
)
from harvest_pipeline.errors import (
    BadResumptionToken,
    IdDoesNotExist,
    MalformedXMLError,
    NoRecordsMatch,
    OAIError,
    ProtocolError,
)
from harvest_pipeline.oai.models import IdentifyInfo, MetadataFormat, OAISet
from harvest_pipeline.pages import HarvestedRecord, ListPage, QuarantinedRecord, ResumptionInfo
from harvest_pipeline.xmlrepair import repair, split_records, wrap_record
from harvest_pipeline.xmlsafe import iterparse_xml, parse_xml

__all__ = [
    "OAI_NS",
    "parse_identify",
    "parse_list_metadata_formats",
    "parse_list_sets",
    "parse_list_records",
    "parse_list_identifiers",
    "parse_get_record",
    "parse_resumption_token",
    "raise_for_oai_errors",
    "serialize_metadata",
    "serialize_records",
]

OAI_NS = "http://www.openarchives.org/OAI/2.0/"

_LOCAL_NAMES = (
    "OAI-PMH responseDate request error "
    "Identify ListRecords ListIdentifiers ListSets ListMetadataFormats GetRecord "
    "record header metadata about identifier datestamp setSpec resumptionToken "
    "repositoryName baseURL protocolVersion adminEmail earliestDatestamp deletedRecord "
    "granularity compression description "
    "metadataFormat metadataPrefix schema metadataNamespace set setName setDescription"
).split()


@lru_cache(maxsize=8)
def _tags(ns: str) -> SimpleNamespace:
    """Clark-notation tag names (``{ns}local``) for one namespace, as attributes."""
    prefix = "{%s}" % ns if ns else ""
    return SimpleNamespace(**{name.replace("-", "_"): prefix + name for name in _LOCAL_NAMES})


_ERROR_CLASSES: dict[str, type[OAIError]] = {
    "badResumptionToken": BadResumptionToken,
    "noRecordsMatch": NoRecordsMatch,
    "idDoesNotExist": IdDoesNotExist,
}

_ERROR_HINTS = {
    "badResumptionToken": "the token expired or is unknown to the server: restart the window "
    "from its beginning (with the original arguments)",
    "badArgument": "the server rejected the request arguments (check from/until granularity, "
    "set and metadataPrefix against Identify/ListSets/ListMetadataFormats)",
    "badVerb": "the base URL may not be an OAI-PMH endpoint",
    "cannotDisseminateFormat": "the repository does not offer this metadataPrefix; "
    "check ListMetadataFormats",
    "noSetHierarchy": "the repository does not support sets; harvest without a set",
    "noMetadataFormats": "no metadata formats are available for this item",
}


def _text(el) -> str:
    t = el.text
    return t.strip() if t else ""


def raise_for_oai_errors(error_elements, url: str | None) -> None:
    """Raise the OAIError subclass for a list of ``<error>`` elements (no-op when empty).

    With several errors the most specific one wins (badResumptionToken, idDoesNotExist, ...);
    noRecordsMatch is only raised when it is the sole code, so it never hides a real error.
    All codes and messages are kept in the exception message.
    """
    if not error_elements:
        return
    pairs = [((e.get("code") or "").strip(), _text(e)) for e in error_elements]
    codes = [c for c, _ in pairs]
    code = pairs[0][0]
    for special in ("badResumptionToken", "idDoesNotExist"):
        if special in codes:
            code = special
            break
    else:
        if code == "noRecordsMatch":
            others = [c for c in codes if c != "noRecordsMatch"]
            if others:
                code = others[0]
    message = next(m for c, m in pairs if c == code)
    extra = [f"{c}: {m}".rstrip(": ") for c, m in pairs if c != code]
    if extra:
        message = f"{message} (also: {'; '.join(extra)})"
    cls = _ERROR_CLASSES.get(code, OAIError)
    raise cls(code or "(no code)", message, url=url, hint=_ERROR_HINTS.get(code))


class _Response:
    """The envelope of one parsed response."""

    __slots__ = ("root", "T", "response_date", "body", "stray_token", "warnings", "no_records", "repaired",
                 "repaired_identifiers")


def _parse_repairing(content: bytes, url: str | None):
    """Parse; if that fails, repair illegal characters / invalid bytes and parse again."""
    try:
        return parse_xml(content, url=url), None
    except MalformedXMLError:
        repaired, repairs = repair(content)
        if not repairs.total:
            raise
        return parse_xml(repaired, url=url), repairs


def _open(
    content: bytes, url: str | None, verb: str, *, allow_no_records: bool = False
) -> _Response:
    """Parse the envelope; raise for OAI errors (``allow_no_records``: noRecordsMatch alone is
    returned as ``r.no_records`` = its message instead of raised)."""
    root, repairs = _parse_repairing(content, url)
    return _envelope(root, repairs, url, verb, allow_no_records=allow_no_records)


def _envelope(root, repairs, url: str | None, verb: str, *, allow_no_records: bool = False) -> _Response:
    """`_open` on a parsed root (`repairs`: what was repaired to parse it, or None)."""
    tag = root.tag
    if not isinstance(tag, str):
        raise ProtocolError("the response has no root element", url=url)
    ns, _, local = tag[1:].partition("}") if tag.startswith("{") else ("", "", tag)
    if local != "OAI-PMH":
        raise ProtocolError(
            f"the response is not an OAI-PMH document (root element <{local}>"
            + (f" in namespace {ns}" if ns else "")
            + ")",
            url=url,
            hint="check that the base URL points at the OAI-PMH endpoint",
        )
    r = _Response()
    r.warnings = []
    r.repaired = repairs.total if repairs else 0
    r.repaired_identifiers = repairs.identifiers if repairs else []
    if repairs:
        r.warnings.append(repairs.describe())
    if ns != OAI_NS:
        r.warnings.append(
            f"root element <OAI-PMH> is in namespace {ns!r}, not {OAI_NS!r}; read it anyway"
        )
    T = _tags(ns)
    r.root, r.T, r.response_date, r.body, r.stray_token = root, T, None, None, None
    r.no_records = None
    errors = []
    verb_tag = getattr(T, verb)
    for child in root:
        t = child.tag
        if t == verb_tag:
            r.body = child
        elif t == T.responseDate:
            r.response_date = _text(child) or None
        elif t == T.error:
            errors.append(child)
        elif t == T.resumptionToken:
            r.stray_token = child
    if errors:
        if allow_no_records and all(
            (e.get("code") or "").strip() == "noRecordsMatch" for e in errors
        ):
            r.no_records = "; ".join(filter(None, (_text(e) for e in errors))) or "noRecordsMatch"
            return r
        raise_for_oai_errors(errors, url)
    if r.body is None:
        raise ProtocolError(
            f"the response has neither <{verb}> nor <error>", url=url, hint="the server broke"
        )
    return r


def _parse_count(value: str | None, name: str, warnings: list[str]) -> int | None:
    if value is None:
        return None
    v = value.strip()
    if v.isascii() and v.isdigit():
        return int(v)
    warnings.append(f"resumptionToken {name}={value!r} is not a non-negative integer; ignored")
    return None


def parse_resumption_token(el, warnings: list[str] | None = None) -> ResumptionInfo:
    """Read a ``<resumptionToken>`` element (None -> the element was absent)."""
    if el is None:
        return ResumptionInfo(token=None, present=False)
    w = warnings if warnings is not None else []
    token = _text(el) or None
    exp = el.get("expirationDate")
    return ResumptionInfo(
        token=token,
        complete_list_size=_parse_count(el.get("completeListSize"), "completeListSize", w),
        cursor=_parse_count(el.get("cursor"), "cursor", w),
        expiration_date=exp.strip() if exp is not None else None,
        present=True,
    )


def _resumption(r: _Response, el, warnings: list[str]) -> ResumptionInfo:
    if el is None and r.stray_token is not None:
        warnings.append("<resumptionToken> sits outside the verb element; used anyway")
        el = r.stray_token
    return parse_resumption_token(el, warnings)


def _read_header(header, T, warnings: list[str]) -> tuple[str, str, tuple[str, ...], bool] | None:
    identifier = None
    datestamp = ""
    specs = []
    t_id, t_ds, t_ss = T.identifier, T.datestamp, T.setSpec
    for c in header:
        t = c.tag
        if t == t_id:
            identifier = c.text
        elif t == t_ds:
            datestamp = c.text
        elif t == t_ss:
            s = c.text
            if s:
                s = s.strip()
                if s:
                    specs.append(s)
    if identifier:
        identifier = identifier.strip()
    if not identifier:
        warnings.append("a record header without <identifier> was skipped")
        return None
    datestamp = datestamp.strip() if datestamp else ""
    status = header.get("status")
    deleted = False
    if status is not None:
        if status.strip() == "deleted":
            deleted = True
        else:
            warnings.append(f"record {identifier}: unknown header status {status!r}; not deleted")
    return identifier, datestamp, tuple(specs), deleted


def _utc(identifier: str, datestamp: str, warnings: list[str]):
    try:
        return parse_datestamp(datestamp)
    except ValueError:
        return _nonconforming_utc(identifier, datestamp, warnings)


def _nonconforming_utc(identifier: str, datestamp: str, warnings: list[str]):
    """A datestamp OAI-PMH's form does not allow: read if it is ISO 8601's basic form, else None;
    either way the window's warnings say so."""
    try:
        utc = parse_basic_datestamp(datestamp)
    except ValueError:
        warnings.append(f"record {identifier}: unparseable datestamp {datestamp!r}")
        return None
    warnings.append(f"record {identifier}: datestamp {datestamp!r} is not in OAI-PMH's form (YYYY-MM-DD"
                    f"[Thh:mm:ssZ]); read as {format_datestamp(utc, GRANULARITY_SECONDS)}")
    return utc


def _read_records(body, T, append, warnings: list[str], counters: list[int], serialize: bool = True):
    """The hot loop of ListRecords (inlined on purpose: it runs once per record).

    Appends an HarvestedRecord per usable <record> and returns the <resumptionToken> element (or
    None). Also used for GetRecord. `serialize=False`: metadata_xml is left None for
    `serialize_records` (the records keep their element).
    """
    t_rec, t_tok, t_h, t_m = T.record, T.resumptionToken, T.header, T.metadata
    t_id, t_ds, t_ss = T.identifier, T.datestamp, T.setSpec
    tostring = etree.tostring
    parse_ds = parse_datestamp
    Record = HarvestedRecord
    tok_el = None
    for rec in body:
        tag = rec.tag
        if tag != t_rec:
            if tag == t_tok:
                tok_el = rec
            continue
        header = md = None
        for c in rec:
            tag = c.tag
            if tag == t_h:
                header = c
            elif tag == t_m:
                md = c
        if header is None:
            warnings.append("a <record> without <header> was skipped")
            continue
        identifier = None
        datestamp = ""
        specs = []
        for c in header:
            tag = c.tag
            if tag == t_ss:
                specs.append(c.text)
            elif tag == t_id:
                identifier = c.text
            elif tag == t_ds:
                datestamp = c.text
        if identifier:
            identifier = identifier.strip()
        if not identifier:
            warnings.append("a record header without <identifier> was skipped")
            continue
        datestamp = datestamp.strip() if datestamp else ""
        if specs:
            specs = tuple([v.strip() for v in specs if v])
            if "" in specs:
                specs = tuple([v for v in specs if v])
        else:
            specs = ()
        status = header.get("status")
        deleted = False
        if status is not None:
            if status.strip() == "deleted":
                deleted = True
            else:
                warnings.append(
                    f"record {identifier}: unknown header status {status!r}; not deleted"
                )
        metadata = metadata_xml = utf8 = None
        if md is not None:
            if deleted:
                counters[0] += 1
            else:
                for c in md:
                    if c.tag.__class__ is str:
                        if metadata is None:
                            metadata = c
                        else:
                            counters[1] += 1
                            break
                if metadata is not None and serialize:
                    utf8 = tostring(metadata, method="c14n", exclusive=True)  # serialize_metadata, inlined
                    metadata_xml = utf8.decode()
        if metadata is None and not deleted:
            warnings.append(f"record {identifier}: not deleted but has no metadata")
        try:
            utc = parse_ds(datestamp)
        except ValueError:
            utc = _nonconforming_utc(identifier, datestamp, warnings)
        append(Record(identifier, datestamp, utc, specs, deleted, metadata_xml, metadata, utf8))
    return tok_el


def serialize_metadata(element) -> bytes:
    """The stored form of a record's metadata element: exclusive C14N, UTF-8 (every in-scope
    namespace it uses declared, so it parses on its own; the merge fingerprints these bytes)."""
    return etree.tostring(element, method="c14n", exclusive=True)


def serialize_records(page: ListPage) -> None:
    """Write the metadata_xml of a page parsed with ``serialize=False`` from its records' elements."""
    if not page.unserialized:
        return
    for record in page.records:
        if record.metadata is not None and record.metadata_xml is None and not record.deleted:
            record.metadata_utf8 = utf8 = serialize_metadata(record.metadata)
            record.metadata_xml = utf8.decode()
    page.unserialized = False


def _finish_counters(counters: list[int], warnings: list[str]) -> None:
    if counters[0]:
        warnings.append(
            f"{counters[0]} deleted record(s) carried <metadata>; ignored (deleted wins)"
        )
    if counters[1]:
        warnings.append(
            f"{counters[1]} record(s) had more than one element inside <metadata>; "
            "kept the first"
        )


def _early_token(r: _Response) -> str | None:
    """The page's resumption token, read from the end of the verb element before the records are:
    the same one :func:`_read_records` keeps (the last in document order), or the stray one."""
    t_tok, t_rec, t_header = r.T.resumptionToken, r.T.record, r.T.header
    for child in reversed(r.body):
        tag = child.tag
        if tag == t_tok:
            return _text(child) or None
        if tag == t_rec or tag == t_header:
            break
    if r.body.find(t_tok) is not None:  # a token among the records: leave it to the full read
        return None
    return (_text(r.stray_token) or None) if r.stray_token is not None else None


def _list_page(
    content: bytes,
    url: str,
    params: Mapping[str, str] | None,
    page_number: int,
    verb: str,
    empty_on_no_records_match: bool,
    on_token=None,
    serialize: bool = True,
) -> ListPage:
    params = dict(params) if params else {}
    if verb == "ListRecords" and len(content) > STREAM_PAGE_BYTES:
        try:
            return _streamed_list_records(content, url, params, page_number, empty_on_no_records_match, on_token)
        except MalformedXMLError:
            pass  # the whole-tree path below repairs the page or salvages its readable records
    try:
        r = _open(content, url, verb, allow_no_records=empty_on_no_records_match)
    except MalformedXMLError as exc:
        if verb != "ListRecords":
            raise
        return _salvage_list_records(content, url, params, page_number, exc)
    return _list_page_of(r, content, url, params, page_number, verb, on_token, serialize=serialize)


def _list_page_of(r: _Response, content: bytes, url: str, params: dict, page_number: int, verb: str, on_token,
                  streamed: tuple[list, list, list] | None = None, serialize: bool = True) -> ListPage:
    """The ListPage of an opened response. `streamed`: (records, their warnings, counters) already
    read from the page by `_streamed_list_records` (its verb element then holds no records)."""
    if r.no_records is not None:
        page = ListPage(
            url=url,
            params=params,
            response_date=r.response_date,
            records=[],
            resumption=ResumptionInfo(token=None, present=False),
            page_number=page_number,
            byte_size=len(content),
            empty_list=True,
            warnings=r.warnings,
        )
        if "resumptionToken" in params:
            page.warnings.append(
                f"noRecordsMatch answered a continuation request ({r.no_records}); "
                "the list ends here"
            )
        return page
    warnings = r.warnings
    T = r.T
    body = r.body
    records: list[HarvestedRecord] = []
    counters = [0, 0]
    if streamed is not None:
        records, record_warnings, counters = streamed
        warnings += record_warnings
    append = records.append
    t_tok = T.resumptionToken
    tok_el = None
    if on_token is not None and streamed is None:
        token = _early_token(r)
        if token:
            on_token(token)
    if verb == "ListRecords":
        tok_el = _read_records(body, T, append, warnings, counters, serialize)
    else:
        t_h = T.header
        for child in body:
            t = child.tag
            if t == t_tok:
                tok_el = child
            elif t == t_h:
                h = _read_header(child, T, warnings)
                if h is not None:
                    identifier, datestamp, specs, deleted = h
                    append(
                        HarvestedRecord(
                            identifier=identifier,
                            datestamp=datestamp,
                            datestamp_utc=_utc(identifier, datestamp, warnings),
                            set_specs=specs,
                            deleted=deleted,
                            metadata_xml=None,
                            metadata=None,
                        )
                    )
    _finish_counters(counters, warnings)
    resumption = _resumption(r, tok_el, warnings)
    return ListPage(
        url=url,
        params=params,
        response_date=r.response_date,
        records=records,
        resumption=resumption,
        page_number=page_number,
        byte_size=len(content),
        empty_list=False,
        warnings=warnings,
        repaired=r.repaired,
        repaired_identifiers=list(r.repaired_identifiers),
        unserialized=verb == "ListRecords" and not serialize and streamed is None,
    )


# Pages larger than this are parsed as a stream (`_streamed_list_records`): a parsed tree takes
# about 8x the page's bytes, so a page near the 40 MB body cap would need some 300 MB at once.
# Normal pages (200 records of a few KB) stay on the faster whole-tree path.
STREAM_PAGE_BYTES = 4 * 1024 * 1024


def _streamed_list_records(content: bytes, url: str, params: dict, page_number: int,
                           empty_on_no_records_match: bool, on_token) -> ListPage:
    """`_list_page` for a big ListRecords page, holding one record's tree at a time.

    Each <record> is read when its end tag is parsed, then removed from the tree. Its records
    carry ``metadata=None``: their mapper parses ``metadata_xml`` again, one at a time (see
    `harvest/rows.py`). What the records say, the warnings and the token are the same as on the
    whole-tree path. A page that does not parse goes to that path (repair, salvage).
    """
    T = None

    def tags_for(root_tag: str) -> tuple[str, ...]:
        nonlocal T
        ns = root_tag[1:].partition("}")[0] if root_tag.startswith("{") else ""
        T = _tags(ns)
        return (T.record,)

    events, root = iterparse_xml(content, tags_for, url=url)
    records: list[HarvestedRecord] = []
    record_warnings: list[str] = []
    counters = [0, 0]
    for rec in events:
        parent = rec.getparent()
        if parent is None or parent.tag != T.ListRecords:
            continue  # a <record> elsewhere: left to the envelope's checks
        before = len(records)
        _read_records((rec,), T, records.append, record_warnings, counters)
        if len(records) > before:
            # The element goes with its tree, now; the bytes too (the text is kept: a big page's
            # records would otherwise hold their metadata twice until the rows are built).
            records[-1].metadata = records[-1].metadata_utf8 = None
        rec.clear()
        parent.remove(rec)
    r = _envelope(root(), None, url, "ListRecords", allow_no_records=empty_on_no_records_match)
    return _list_page_of(r, content, url, params, page_number, "ListRecords", on_token,
                         streamed=(records, record_warnings, counters))


def _salvage_list_records(
    content: bytes, url: str, params: dict, page_number: int, error: MalformedXMLError
) -> ListPage:
    """A page that does not parse: keep every record that does, quarantine the others.

    The page minus its <record> elements must parse (it carries the token); if it does not, the
    page is broken beyond one record and the original error is raised.
    """
    body_bytes, repairs = repair(content)
    envelope, chunks, decls = split_records(body_bytes)
    if not chunks:
        raise error
    try:
        page = _list_page(envelope, url, params, page_number, "ListRecords", False)
    except MalformedXMLError:
        raise error from None  # the page as received: its error names the real line and column
    default_ns = re.search(rb'xmlns="([^"]*)"', decls)
    T = _tags(default_ns.group(1).decode() if default_ns else OAI_NS)
    counters = [0, 0]
    for chunk in chunks:
        try:
            body = parse_xml(wrap_record(chunk.raw, decls), url=url)
        except MalformedXMLError as exc:
            page.quarantined.append(QuarantinedRecord(chunk.identifier, chunk.raw, exc.message))
            continue
        _read_records(body, T, page.records.append, page.warnings, counters)
    _finish_counters(counters, page.warnings)
    page.byte_size = len(content)
    page.repaired += repairs.total
    page.repaired_identifiers += repairs.identifiers
    if repairs.total:
        page.warnings.append(repairs.describe())
    page.warnings.append(
        f"page {page_number} did not parse as a whole: kept {len(page.records)} record(s), "
        f"quarantined {len(page.quarantined)}"
    )
    return page


def parse_list_records(
    content: bytes,
    url: str = "",
    params: Mapping[str, str] | None = None,
    page_number: int = 1,
    *,
    empty_on_no_records_match: bool = False,
    on_token=None,
    serialize: bool = True,
) -> ListPage:
    """Parse one ListRecords response into a :class:`ListPage`.

    Deleted records (``status="deleted"``) get ``metadata=None`` and ``metadata_xml=None`` even
    if the server sent metadata. ``metadata_xml`` is the single child of ``<metadata>``
    serialized with every in-scope namespace declaration, so it parses on its own.
    ``noRecordsMatch`` raises NoRecordsMatch, or with ``empty_on_no_records_match=True``
    returns a page with ``empty_list=True`` and no records.
    ``on_token(token)`` is called with the page's non-empty resumption token as soon as the
    document is parsed, before its records are read (the client's read-ahead); the page's
    ``next_token`` is then that token. It is not called when the token sits among the records,
    nor for a page parsed as a stream (larger than ``STREAM_PAGE_BYTES``).
    ``serialize=False`` leaves ``metadata_xml`` None and the page ``unserialized``: the caller
    writes it later with :func:`serialize_records` (the harvest does, after it has asked for the
    next page: the serialization is most of the work of reading a page after the parse itself).
    A page parsed as a stream or salvaged is serialized anyway.
    """
    return _list_page(content, url, params, page_number, "ListRecords", empty_on_no_records_match, on_token,
                      serialize)


def parse_list_identifiers(
    content: bytes,
    url: str = "",
    params: Mapping[str, str] | None = None,
    page_number: int = 1,
    *,
    empty_on_no_records_match: bool = False,
    on_token=None,
) -> ListPage:
    """Parse one ListIdentifiers response; records carry headers only (metadata None)."""
    return _list_page(
        content, url, params, page_number, "ListIdentifiers", empty_on_no_records_match, on_token
    )


def parse_get_record(
    content: bytes, url: str | None = None, *, warnings: list[str] | None = None
) -> HarvestedRecord:
    """Parse a GetRecord response. idDoesNotExist raises IdDoesNotExist."""
    w = warnings if warnings is not None else []
    r = _open(content, url, "GetRecord")
    w.extend(r.warnings)
    counters = [0, 0]
    records: list[HarvestedRecord] = []
    _read_records(r.body, r.T, records.append, w, counters)
    _finish_counters(counters, w)
    if not records:
        raise ProtocolError("GetRecord response without a usable <record>", url=url)
    return records[0]


def parse_list_sets(
    content: bytes, url: str | None = None, *, warnings: list[str] | None = None
) -> tuple[list[OAISet], ResumptionInfo]:
    """Parse one ListSets response into its sets and its resumption token."""
    w = warnings if warnings is not None else []
    r = _open(content, url, "ListSets")
    w.extend(r.warnings)
    T = r.T
    sets = []
    tok_el = None
    for s in r.body:
        if s.tag == T.resumptionToken:
            tok_el = s
        if s.tag != T.set:
            continue
        spec = name = None
        for c in s:
            if c.tag == T.setSpec:
                spec = _text(c)
            elif c.tag == T.setName:
                name = _text(c)
        if not spec:
            w.append("a <set> without <setSpec> was skipped")
            continue
        sets.append(OAISet(spec=spec, name=name or ""))
    return sets, _resumption(r, tok_el, w)


def parse_list_metadata_formats(
    content: bytes, url: str | None = None, *, warnings: list[str] | None = None
) -> list[MetadataFormat]:
    """Parse a ListMetadataFormats response (noMetadataFormats raises OAIError)."""
    w = warnings if warnings is not None else []
    r = _open(content, url, "ListMetadataFormats")
    w.extend(r.warnings)
    T = r.T
    out = []
    for f in r.body:
        if f.tag != T.metadataFormat:
            continue
        vals = {T.metadataPrefix: "", T.schema: "", T.metadataNamespace: ""}
        for c in f:
            if c.tag in vals:
                vals[c.tag] = _text(c)
        prefix = vals[T.metadataPrefix]
        if not prefix:
            w.append("a <metadataFormat> without <metadataPrefix> was skipped")
            continue
        out.append(
            MetadataFormat(
                prefix=prefix, schema=vals[T.schema], namespace=vals[T.metadataNamespace]
            )
        )
    return out


_DELETED_VALUES = ("no", "transient", "persistent")


def parse_identify(content: bytes, url: str | None = None) -> IdentifyInfo:
    """Parse an Identify response.

    Missing or unknown values do not raise; they are recorded in ``IdentifyInfo.warnings``:
    an unknown or missing granularity becomes GRANULARITY_DAY (every repository must support
    it); a missing deletedRecord becomes "no" (deletions cannot be relied on).
    """
    r = _open(content, url, "Identify")
    w = list(r.warnings)
    T = r.T
    one: dict[str, str | None] = {
        T.repositoryName: None,
        T.baseURL: None,
        T.protocolVersion: None,
        T.earliestDatestamp: None,
        T.deletedRecord: None,
        T.granularity: None,
    }
    emails: list[str] = []
    compression: list[str] = []
    for c in r.body:
        t = c.tag
        if t in one:
            if one[t] is None:
                one[t] = _text(c)
        elif t == T.adminEmail:
            v = _text(c)
            if v:
                emails.append(v)
        elif t == T.compression:
            v = _text(c)
            if v:
                compression.append(v)

    def req(tag: str, name: str) -> str:
        v = one[tag]
        if not v:
            w.append(f"Identify has no <{name}>")
            return ""
        return v

    raw_gran = one[T.granularity]
    try:
        granularity = normalize_granularity(raw_gran or "")
        if raw_gran != granularity:
            w.append(f"granularity {raw_gran!r} read as {granularity!r}")
    except ValueError:
        granularity = GRANULARITY_DAY
        w.append(
            f"granularity {raw_gran!r} is missing or unknown; using {GRANULARITY_DAY!r} "
            "(every repository must support it)"
        )
    deleted = (one[T.deletedRecord] or "").lower()
    if deleted not in _DELETED_VALUES:
        w.append(
            f"deletedRecord {one[T.deletedRecord]!r} is missing or unknown; "
            "treated as 'no' (deletions cannot be relied on)"
        )
        deleted = "no"
    return IdentifyInfo(
        repository_name=req(T.repositoryName, "repositoryName"),
        base_url=req(T.baseURL, "baseURL"),
        protocol_version=req(T.protocolVersion, "protocolVersion"),
        earliest_datestamp=req(T.earliestDatestamp, "earliestDatestamp"),
        deleted_record=deleted,
        granularity=granularity,
        admin_emails=tuple(emails),
        response_date=r.response_date,
        compression=tuple(compression),
        warnings=tuple(w),
    )
