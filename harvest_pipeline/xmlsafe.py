"""The one hardened XML parser of the project.

Every response body the harvester reads goes through :func:`parse_xml`. It

* parses **bytes**, never decoded text, so the encoding declared in the document (or its BOM)
  wins over whatever `requests` guessed from the HTTP headers;
* refuses any document that carries a document type declaration (``<!DOCTYPE ...>``), which is
  the only place where entity declarations can live. The check runs on the raw prolog *before*
  libxml2 sees the document, so billion-laughs expansions, external entities (``file://`` or
  ``http://``) and external DTDs are never expanded or fetched. OAI-PMH responses never need a
  DTD (they are described by an XML Schema), so nothing legitimate is lost;
* as a second line of defence, parses with a parser that does not resolve entities, does not
  load DTDs and does not touch the network, and re-checks the parsed document for a DTD;
* turns lxml's syntax errors into :class:`~harvest_pipeline.errors.MalformedXMLError` carrying
  the URL and lxml's message (with line and column).
"""

from __future__ import annotations

import threading

from lxml import etree

from harvest_pipeline.errors import MalformedXMLError, XMLSecurityError

__all__ = ["make_parser", "parse_xml", "has_doctype"]


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


def _decode_if_wide(content: bytes) -> str | None:
    """Decode UTF-16/UTF-32 documents (by BOM or by the ``<?`` pattern); None for 8-bit ones."""
    head = content[:4]
    codec = None
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        codec = "utf-32"
    elif head.startswith((b"\xff\xfe", b"\xfe\xff")):
        codec = "utf-16"
    elif head == b"<\x00\x00\x00":
        codec = "utf-32-le"
    elif head == b"\x00\x00\x00<":
        codec = "utf-32-be"
    elif head.startswith(b"<\x00"):
        codec = "utf-16-le"
    elif head.startswith(b"\x00<"):
        codec = "utf-16-be"
    if codec is None:
        return None
    return content.decode(codec, errors="replace")


def has_doctype(content: bytes) -> bool:
    """True when the document's prolog carries a ``<!DOCTYPE ...>`` (or other ``<!`` declaration).

    Only the prolog is scanned, so ``<!DOCTYPE`` text inside CDATA or comments of the body does
    not count. 8-bit encodings (UTF-8, ISO-8859-x, windows-125x, ...) are scanned as bytes;
    UTF-16/32 documents are decoded first.
    """
    wide = _decode_if_wide(content)
    if wide is not None:
        return _prolog_has_markup_decl(wide)
    return _prolog_has_markup_decl(content)


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
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise TypeError(
            "parse_xml() takes the raw response bytes (response.content), not decoded text: "
            "the document's own encoding declaration must decide how it is decoded"
        )
    content = bytes(content)
    if has_doctype(content):
        raise _refuse(url)
    if not content or content.isspace():
        raise MalformedXMLError(
            "the server sent an empty response body instead of XML",
            url=url,
            hint="repositories often do this during outages; retry later",
        )
    try:
        root = etree.fromstring(content, _parser())
    except etree.XMLSyntaxError as e:
        raise MalformedXMLError(f"the response is not well-formed XML: {e.msg}", url=url) from e
    docinfo = root.getroottree().docinfo
    if docinfo.internalDTD is not None or docinfo.externalDTD is not None or docinfo.doctype:
        # Only reachable for encodings the prolog scan cannot read (e.g. EBCDIC); even then the
        # parser options above kept entities unexpanded and nothing was fetched.
        raise _refuse(url)
    return root
