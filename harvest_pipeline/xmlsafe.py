"""The one hardened XML parser of the project.

Every response body the harvester reads goes through :func:`parse_xml`. It

* parses **bytes**, never decoded text, so the encoding declared in the document (or its BOM)
  wins over whatever `requests` guessed from the HTTP headers;
* refuses any document that carries a document type declaration (``<!DOCTYPE ...>``), which is
  the only place where entity declarations can live. The check runs on the prolog *before*
  libxml2 sees the document, so billion-laughs expansions, external entities (``file://`` or
  ``http://``) and external DTDs are never expanded, opened or fetched. OAI-PMH responses never
  need a DTD (they are described by an XML Schema), so nothing legitimate is lost;
* settles the encoding itself, so the scan sees exactly the markup libxml2 will: documents in
  an encoding where every ASCII character is its own byte (UTF-8, ISO-8859-x, windows-125x ...)
  are scanned as bytes and handed over unchanged; any other (UTF-16/32, UTF-7, ISO-2022-x ...)
  is decoded strictly by Python, scanned as text, and handed to libxml2 as UTF-8 with its
  declaration rewritten, so libxml2 never decodes an encoding we did not scan. An encoding
  Python does not know, EBCDIC and UCS-4 in unusual byte orders are refused;
* as a second line of defence, parses with a parser that does not resolve entities, does not
  load DTDs and does not touch the network, and re-checks the parsed document for a DTD;
* turns lxml's syntax errors into :class:`~harvest_pipeline.errors.MalformedXMLError` carrying
  the URL and lxml's message (with line and column).
"""

from __future__ import annotations

import codecs
import io
import re
import threading

from lxml import etree

from harvest_pipeline.errors import MalformedXMLError, XMLSecurityError

__all__ = ["make_parser", "parse_xml", "iterparse_xml", "has_doctype"]


def make_parser() -> etree.XMLParser:
    """A new hardened parser.

    The options that matter for safety:

    * ``resolve_entities=False``: entity references stay unexpanded (no billion laughs, no XXE);
    * ``load_dtd=False`` / ``dtd_validation=False``: external DTDs (and external parameter
      entities) are never loaded;
    * ``no_network=True``: even if something asked libxml2 for a URL, it would not fetch it;
    * ``huge_tree=False``: keeps libxml2's limits on text node size and tree depth.

    ``remove_blank_text=False`` keeps metadata whitespace as sent; ``collect_ids=False`` skips
    building an xml:id hash table that nobody uses (and is slightly faster).
    """
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_blank_text=False,
        collect_ids=False,
    )


# lxml serialises concurrent use of one parser with a lock; one parser per thread avoids that
# contention when several harvests run in threads.
_local = threading.local()


def _parser() -> etree.XMLParser:
    p = getattr(_local, "parser", None)
    if p is None:
        p = _local.parser = make_parser()
    return p


_WS = frozenset(b" \t\r\n")


def _prolog_has_markup_decl(data: bytes | str) -> bool:
    """True when the prolog (before the root element) contains ``<!`` markup other than comments.

    Works on bytes of an ASCII-compatible encoding, or on already decoded text. Linear time:
    only the prolog is looked at, the scan stops at the first element start tag.
    """
    if isinstance(data, bytes):
        ws = _WS
        lt, pi_open, pi_close, c_open, c_close, decl = b"<", b"<?", b"?>", b"<!--", b"-->", b"<!"
        i = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    else:
        ws = frozenset(" \t\r\n")
        lt, pi_open, pi_close, c_open, c_close, decl = "<", "<?", "?>", "<!--", "-->", "<!"
        i = 1 if data.startswith("\ufeff") else 0
    n = len(data)
    while i < n:
        if data[i] in ws:
            i += 1
            continue
        if data.startswith(pi_open, i):
            j = data.find(pi_close, i + 2)
            if j < 0:
                return False  # unterminated: not well-formed, the parser will say so
            i = j + 2
            continue
        if data.startswith(c_open, i):
            j = data.find(c_close, i + 4)
            if j < 0:
                return False
            i = j + 3
            continue
        if data.startswith(decl, i):
            return True  # <!DOCTYPE (or any other markup declaration) in the prolog
        if data.startswith(lt, i):
            return False  # the root element starts: no DTD can follow
        return False  # text before the root: not well-formed, the parser will say so
    return False


def _wide_codec(content: bytes) -> str | None:
    """UTF-16/UTF-32 by BOM or by the ``<`` pattern of the first bytes; None for 8-bit documents."""
    head = content[:4]
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "utf-32"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    if head == b"<\x00\x00\x00":
        return "utf-32-le"
    if head == b"\x00\x00\x00<":
        return "utf-32-be"
    if head.startswith(b"<\x00"):
        return "utf-16-le"
    if head.startswith(b"\x00<"):
        return "utf-16-be"
    return None


# Signatures libxml2 recognises but Python cannot decode for us (EBCDIC `<?xm`, UCS-4 2143/3412).
_UNSUPPORTED_SIGNATURES = {
    b"\x4c\x6f\xa7\x94": "EBCDIC",
    b"\x00\x00<\x00": "UCS-4 (byte order 2143)",
    b"\x00<\x00\x00": "UCS-4 (byte order 3412)",
}

# Encodings in which every ASCII character is its own single byte and no other character uses a
# byte below 0x80: a byte scan sees exactly the markup libxml2 will decode from them.
_ASCII_TRANSPARENT = re.compile(
    r"(?:utf-?8|us-ascii|ascii|iso[-_]?8859[-_]\d{1,2}|latin-?[1-9]|l[1-9]|windows-125\d|cp125\d|koi8-[ru])",
    re.IGNORECASE,
)
_XML_DECL = re.compile(rb"\A(?:\xef\xbb\xbf)?<\?xml[ \t\r\n][^>]*?\?>")
_DECL_ENCODING = re.compile(r"""[ \t\r\n]encoding[ \t\r\n]*=[ \t\r\n]*(["'])(.*?)\1""")
_TEXT_DECL = re.compile(r"\A\ufeff?<\?xml[ \t\r\n][^>]*?\?>")
_DECL_VERSION = re.compile(r"""version[ \t\r\n]*=[ \t\r\n]*(["'])(1\.[0-9]+)\1""")


def _declared_encoding(content: bytes) -> str | None:
    """The encoding named by an ASCII XML declaration at the very start, or None."""
    decl = _XML_DECL.match(content)
    if decl is None:
        return None
    m = _DECL_ENCODING.search(decl.group(0).decode("ascii", "replace"))
    return m.group(2) if m else None


def _unsupported(what: str, url: str | None) -> MalformedXMLError:
    return MalformedXMLError(
        f"the response is in an encoding we do not read ({what}); it is refused before parsing so "
        "that no DTD hidden in it can act",
        url=url,
        hint="ask the repository to serve UTF-8 (OAI-PMH requires it)",
    )


def _settle_encoding(content: bytes, url: str | None) -> tuple[bytes, bytes | str]:
    """(the bytes libxml2 will parse, what to scan for a DTD): both say the same thing.

    Bytes in an ASCII-transparent encoding are scanned and parsed as they are. Anything else is
    decoded strictly here and handed to libxml2 as UTF-8, so libxml2 never picks a decoder (for
    instance UTF-7, where ``+ADw-`` is ``<``) that the scan did not use.
    """
    codec = _wide_codec(content)
    if codec is None:
        for signature, what in _UNSUPPORTED_SIGNATURES.items():
            if content.startswith(signature):
                raise _unsupported(what, url)
        declared = _declared_encoding(content)
        if declared is None or _ASCII_TRANSPARENT.fullmatch(declared):
            return content, content
        codec = "utf-8" if content.startswith(b"\xef\xbb\xbf") else declared
    try:
        codecs.lookup(codec)
        text = content.decode(codec)
    except LookupError:
        raise _unsupported(f"encoding {codec!r} is unknown", url) from None
    except UnicodeError as e:  # UnicodeDecodeError, and codecs such as "undefined" that always refuse
        where = f" at offset {e.start}" if isinstance(e, UnicodeDecodeError) else ""
        raise MalformedXMLError(f"the response has bytes invalid in its encoding {codec!r}{where}", url=url) from e
    decl = _TEXT_DECL.match(text)
    if decl is not None:
        version = _DECL_VERSION.search(decl.group(0))
        head = f'<?xml version="{version.group(2) if version else "1.0"}" encoding="UTF-8"?>'
        text = head + text[decl.end():]
    return text.lstrip("\ufeff").encode("utf-8"), text


def has_doctype(content: bytes) -> bool:
    """True when the document's prolog carries a ``<!DOCTYPE ...>`` (or other ``<!`` declaration).

    Only the prolog is scanned, so ``<!DOCTYPE`` text inside CDATA or comments of the body does
    not count. Documents in an ASCII-transparent encoding are scanned as bytes, any other is
    decoded first (see :func:`_settle_encoding`); one that cannot be decoded counts as carrying
    a DTD, since what it holds is unknown.
    """
    try:
        _, scanned = _settle_encoding(content, None)
    except MalformedXMLError:
        return True
    return _prolog_has_markup_decl(scanned)


def _refuse(url: str | None) -> XMLSecurityError:
    return XMLSecurityError(
        "the server sent a document type declaration (DTD) and/or entity declarations, "
        "which we refuse to parse for safety (entity expansion, external entities)",
        url=url,
        hint="OAI-PMH responses never need a DTD; ask the repository to drop the <!DOCTYPE>",
    )


def parse_xml(content: bytes, *, url: str | None = None) -> etree._Element:
    """Parse a response body (bytes) with the hardened parser and return the root element.

    Raises :class:`XMLSecurityError` when the document carries a DTD / entity declarations
    (nothing is expanded or fetched), and :class:`MalformedXMLError` when it is not well-formed
    (the message has lxml's description with line and column).
    """
    content = _checked(content, url)
    try:
        root = etree.fromstring(content, _parser())
    except etree.XMLSyntaxError as e:
        raise MalformedXMLError(f"the response is not well-formed XML: {e.msg}", url=url) from e
    _refuse_parsed_dtd(root, url)
    return root


def iterparse_xml(content: bytes, tags_for, *, url: str | None = None):
    """Stream a response body through the hardened parser: ``(events, root)``.

    The same checks as :func:`parse_xml` (encoding, no DTD, same parser options), but the tree is
    built while ``events`` is iterated: it yields each element whose tag is in
    ``tags_for(root tag)`` when its end tag is read, so the caller can read it and remove it
    from the tree (a big page then never holds all its records' trees at once). ``root()``
    returns the root element once ``events`` is exhausted. Syntax errors are raised by the
    iteration as :class:`MalformedXMLError`.
    """
    content = _checked(content, url)
    options = dict(resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False,
                   huge_tree=False, remove_blank_text=False, collect_ids=False)
    try:  # the root's tag (namespace) first: it decides which tags to stream
        _, first = next(etree.iterparse(io.BytesIO(content), events=("start",), **options))
    except etree.XMLSyntaxError as e:
        raise MalformedXMLError(f"the response is not well-formed XML: {e.msg}", url=url) from e
    except StopIteration:
        raise MalformedXMLError("the response has no root element", url=url) from None
    parser = etree.iterparse(io.BytesIO(content), events=("end",), tag=tags_for(first.tag), **options)

    def events():
        try:
            for _, element in parser:
                yield element
        except etree.XMLSyntaxError as e:
            raise MalformedXMLError(f"the response is not well-formed XML: {e.msg}", url=url) from e

    def root():
        _refuse_parsed_dtd(parser.root, url)
        return parser.root

    return events(), root


def _refuse_parsed_dtd(root, url: str | None) -> None:
    docinfo = root.getroottree().docinfo
    if docinfo.internalDTD is not None or docinfo.externalDTD is not None or docinfo.doctype:
        # Defence in depth: the prolog scan should make this unreachable.
        raise _refuse(url)


def _checked(content: bytes, url: str | None) -> bytes:
    """The bytes libxml2 may parse: encoding settled, no DTD in the prolog, not empty."""
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise TypeError(
            "parse_xml() takes the raw response bytes (response.content), not decoded text: "
            "the document's own encoding declaration must decide how it is decoded"
        )
    content = bytes(content)
    content, scanned = _settle_encoding(content, url)
    if _prolog_has_markup_decl(scanned):
        raise _refuse(url)
    if not content or content.isspace():
        raise MalformedXMLError(
            "the server sent an empty response body instead of XML",
            url=url,
            hint="repositories often do this during outages; retry later",
        )
    return content
