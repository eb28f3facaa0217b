"""The hardened parser refuses DTDs and entities, and reports malformed XML with the URL."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from lxml import etree

from harvest_pipeline.errors import MalformedXMLError, ProtocolError, XMLSecurityError
from harvest_pipeline.xmlsafe import has_doctype, make_parser, parse_xml

URL = "http://oai.test/provider?verb=Identify"

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>&lol9;</responseDate></OAI-PMH>
"""

XXE_FILE = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE OAI-PMH [ <!ENTITY xxe SYSTEM "file:///etc/passwd"> ]>
<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>&xxe;</responseDate></OAI-PMH>
"""


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802
        type(self).hits.append(self.path)
        body = b'<!ENTITY leak "LEAKED-FROM-HTTP">'
        self.send_response(200)
        self.send_header("Content-Type", "application/xml-dtd")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def dtd_server():
    """A real HTTP server on 127.0.0.1 that records every request made to it."""
    _CountingHandler.hits = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", _CountingHandler.hits
    finally:
        srv.shutdown()
        srv.server_close()


def test_billion_laughs_is_refused_quickly_and_names_the_url():
    t0 = time.perf_counter()
    with pytest.raises(XMLSecurityError) as ei:
        parse_xml(BILLION_LAUGHS, url=URL)
    assert time.perf_counter() - t0 < 1.0
    msg = str(ei.value)
    assert URL in msg
    assert "DTD" in msg and "entity" in msg and "refuse" in msg
    assert ei.value.url == URL


def test_hardened_parser_alone_does_not_expand_billion_laughs():
    # second line of defence: even without the prolog check nothing is expanded (libxml2
    # either keeps the references unexpanded or stops at its amplification limit)
    try:
        root = etree.fromstring(BILLION_LAUGHS, make_parser())
    except etree.XMLSyntaxError as e:
        assert "amplification" in str(e)
    else:
        assert len(etree.tostring(root)) < 500


def test_xxe_file_is_refused():
    with pytest.raises(XMLSecurityError) as ei:
        parse_xml(XXE_FILE, url=URL)
    assert "root:" not in str(ei.value)
    assert ei.value.url == URL


def test_hardened_parser_alone_does_not_read_local_files():
    root = etree.fromstring(XXE_FILE, make_parser())
    text = etree.tostring(root, encoding="unicode")
    assert "root:" not in text  # /etc/passwd content never appears
    assert "&xxe;" in text  # the reference stays an unexpanded reference


def test_external_dtd_over_http_is_refused_and_never_fetched(dtd_server):
    base, hits = dtd_server
    docs = [
        f'<?xml version="1.0"?><!DOCTYPE OAI-PMH SYSTEM "{base}/evil.dtd">'
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"/>',
        f'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY % p SYSTEM "{base}/param.dtd"> %p;]>'
        "<x>&leak;</x>",
        f'<!DOCTYPE x [<!ENTITY e SYSTEM "{base}/entity.txt">]><x>&e;</x>',
    ]
    for doc in docs:
        with pytest.raises(XMLSecurityError):
            parse_xml(doc.encode(), url=URL)
        # and the bare hardened parser does not fetch either (defence in depth)
        try:
            out = etree.tostring(etree.fromstring(doc.encode(), make_parser()))
        except etree.XMLSyntaxError:
            out = b""
        assert b"LEAKED" not in out
    time.sleep(0.2)
    assert hits == []


def test_doctype_after_comments_and_pis_is_refused():
    doc = b'\xef\xbb\xbf<?xml version="1.0"?>\n<!-- hi --><?pi x?>\n<!DOCTYPE a []><a/>'
    with pytest.raises(XMLSecurityError):
        parse_xml(doc, url=URL)


def test_doctype_in_utf16_document_is_refused():
    doc = '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>'
    with pytest.raises(XMLSecurityError):
        parse_xml(doc.encode("utf-16"), url=URL)
    assert has_doctype(doc.encode("utf-16-le"))
    assert has_doctype(doc.encode("utf-16-be"))


def test_doctype_text_inside_the_body_is_not_a_false_positive():
    doc = (
        b'<?xml version="1.0"?><a><![CDATA[<!DOCTYPE html><html/>]]><!-- <!DOCTYPE x> -->'
        b"<b>&lt;!DOCTYPE&gt;</b></a>"
    )
    root = parse_xml(doc, url=URL)
    assert root.text == "<!DOCTYPE html><html/>"
    assert root.find("b").text == "<!DOCTYPE>"


def test_malformed_xml_names_url_and_position():
    with pytest.raises(MalformedXMLError) as ei:
        parse_xml(b'<?xml version="1.0"?>\n<OAI-PMH>\n  <responseDate>x</wrong>\n</OAI-PMH>',
                  url=URL)
    msg = str(ei.value)
    assert URL in msg
    assert "line 3" in msg
    assert isinstance(ei.value, ProtocolError)


def test_control_character_is_malformed():
    with pytest.raises(MalformedXMLError) as ei:
        parse_xml(b"<a>bad \x0b char</a>", url=URL)
    assert "line 1" in str(ei.value)


def test_empty_body_is_malformed_with_a_clear_message():
    with pytest.raises(MalformedXMLError) as ei:
        parse_xml(b"  \n", url=URL)
    assert "empty" in str(ei.value)
    assert URL in str(ei.value)


def test_declared_latin1_bytes_are_decoded_by_the_declaration():
    doc = '<?xml version="1.0" encoding="ISO-8859-1"?><a>Müller ñ</a>'.encode("iso-8859-1")
    assert parse_xml(doc).text == "Müller ñ"


def test_text_input_is_rejected():
    with pytest.raises(TypeError):
        parse_xml("<a/>")  # type: ignore[arg-type]


# --- DTDs in documents whose bytes do not spell "<!DOCTYPE" in ASCII ------------------------

def _utf7_all_base64(text: str) -> bytes:
    """UTF-7 where every character is base64-shifted, so not one markup byte is ASCII."""
    import base64

    return b"+" + base64.b64encode(text.encode("utf-16-be")).rstrip(b"=") + b"-"


def _ucs4_2143(text: str) -> bytes:
    raw = text.encode("utf-32-be")
    return b"".join(raw[i + 1:i + 2] + raw[i:i + 1] + raw[i + 3:i + 4] + raw[i + 2:i + 3]
                    for i in range(0, len(raw), 4))


_HOSTILE_ENCODINGS = {
    "utf-7 shifted": lambda body: b'<?xml version="1.0" encoding="UTF-7"?>' + _utf7_all_base64(body),
    "utf-7 declared only": lambda body: ('<?xml version="1.0" encoding="UTF-7"?>' + body).encode("utf-7"),
    "utf-16 without a BOM": lambda body: ('<?xml version="1.0" encoding="UTF-16"?>' + body).encode("utf-16-be"),
    "utf-32 without a BOM": lambda body: ('<?xml version="1.0" encoding="UTF-32"?>' + body).encode("utf-32-le"),
    "utf-16 BOM, declared UTF-7": lambda body: ('<?xml version="1.0" encoding="UTF-7"?>' + body).encode("utf-16"),
    "ebcdic": lambda body: ('<?xml version="1.0" encoding="IBM037"?>' + body).encode("cp037"),
    "ucs-4 2143": lambda body: _ucs4_2143('<?xml version="1.0" encoding="UCS-4"?>' + body),
    "iso-2022-jp": lambda body: b'<?xml version="1.0" encoding="ISO-2022-JP"?>' + body.encode("iso-2022-jp"),
}


@pytest.fixture
def fifo_dtd(tmp_path):
    """A named pipe a DTD points at: the writer's open() returns only if someone opens it to read.

    That tells for certain whether libxml2 opened the file, whatever the file system's atime
    policy, and gives it nothing to read but a harmless entity if it did.
    """
    import os

    fifo = tmp_path / "probe.dtd"
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer():
        with open(fifo, "wb") as f:
            opened.set()
            f.write(b'<!ENTITY leak "LEAKED-FROM-FILE">')

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    yield str(fifo), opened
    if not opened.is_set():  # release the writer thread
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        t.join(2)
        os.close(fd)


@pytest.mark.parametrize("encoding", sorted(_HOSTILE_ENCODINGS))
def test_a_dtd_is_refused_in_any_encoding_before_libxml2_opens_what_it_names(fifo_dtd, encoding):
    path, opened = fifo_dtd
    body = f'<!DOCTYPE a SYSTEM "{path}"><a>&leak;</a>'
    doc = _HOSTILE_ENCODINGS[encoding](body)
    with pytest.raises((XMLSecurityError, MalformedXMLError)) as ei:
        parse_xml(doc, url=URL)
    assert URL in str(ei.value)
    time.sleep(0.2)
    assert not opened.is_set(), f"libxml2 opened the file a {encoding} DOCTYPE named"


@pytest.mark.parametrize(
    "encoding, word",
    [("UTF-7", "caf\u00e9"), ("UTF-16", "caf\u00e9"), ("UTF-32", "caf\u00e9"), ("ISO-2022-JP", "\u65e5\u672c"),
     ("ISO-8859-15", "caf\u00e9 \u20ac"), ("windows-1252", "caf\u00e9 \u20ac")],
)
def test_documents_in_other_encodings_without_a_dtd_still_parse(encoding, word):
    text = f'<?xml version="1.0" encoding="{encoding}"?><a x="1">{word} &amp; <b>{word}</b></a>'
    root = parse_xml(text.encode(encoding.lower().replace("windows-", "cp")), url=URL)
    assert (root.tag, root.get("x"), root.text, root.find("b").text) == ("a", "1", f"{word} & ", word)


def test_an_unknown_encoding_is_refused_with_a_clear_error():
    with pytest.raises(MalformedXMLError) as ei:
        parse_xml(b'<?xml version="1.0" encoding="X-NO-SUCH"?><a/>', url=URL)
    assert "X-NO-SUCH" in str(ei.value) and URL in str(ei.value)
