"""Repairing bodies that are almost XML, and salvaging the good records of a broken page.

Real servers send control characters (0x0B, 0x1A) inside records and bytes invalid in the
declared encoding. Those make the whole page unparseable, so we repair them and count every
repair for the window's report (never silently): characters XML 1.0 forbids are removed (they
carry no text; removing them restores what the author typed), bytes invalid in the declared
encoding become U+FFFD (the text they stood for is unknown, so the mark stays visible).

A page with one truly broken record is split at its records' boundaries, so the other records
are kept and only the broken one is quarantined. The boundaries come from the page's element
structure, read tag by tag with namespaces resolved: a record is a `record` element in the
root's namespace directly under the verb's element, so a `<record>` inside the metadata
(MARCXML's, whatever its prefix) is never taken for one. Each record is then parsed on its own by
the hardened parser; only the ones that fail are quarantined.

Record identifiers are the exception: removing a NUL from `nul\x00byte` would merge that record
into a real `nulbyte`. Inside a header's <identifier>, each C0 control character becomes its
Unicode control picture instead (U+2400 + its code: NUL -> U+2400, 0x0B -> U+240B), so the
repaired identifier stays apart, shows what was there, and maps back one to one. Each one is
reported (:attr:`Repairs.identifiers`).
"""

from __future__ import annotations

import codecs
import re
import threading
from dataclasses import dataclass, field

_DECL = re.compile(rb"^(\xef\xbb\xbf)?\s*<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"'][^>]*\?>")
# Characters XML 1.0 forbids (tab, LF and CR are allowed), plus the non-characters U+FFFE/U+FFFF.
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_REPLACEMENT = "\ufffd"
_CONTROL_PICTURE = re.compile("[\u2400-\u241f]")
_PREFIX = r"(?:[A-Za-z_][\w.-]*:)?"
# A header's <identifier> element and its text; the header ends before any other identifier
# (dc:identifier in the metadata must keep the ordinary repair).
_HEADER_IDENTIFIER = re.compile(
    rf"(<{_PREFIX}header[\s>](?:(?!</{_PREFIX}header\s*>).)*?<{_PREFIX}identifier(?:\s[^>]*)?>)([^<]*)",
    re.S,
)


@dataclass
class Repairs:
    control_chars: int = 0
    invalid_bytes: int = 0
    # (identifier as stored, identifier as sent) for header identifiers that carried illegal characters
    identifiers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.control_chars + self.invalid_bytes

    def describe(self) -> str:
        text = (
            f"repaired the response: removed {self.control_chars} character(s) illegal in XML 1.0, "
            f"replaced {self.invalid_bytes} byte(s) invalid in the declared encoding with U+FFFD"
        )
        if self.identifiers:
            shown = ", ".join(repr(stored) for stored, _ in self.identifiers[:5])
            text += (
                f"; {len(self.identifiers)} record identifier(s) carried such characters and are stored with "
                f"them as control pictures (U+2400-U+241F), kept apart from identifiers without them: {shown}"
            )
        return text


def escape_identifier(identifier: str) -> str:
    """Control pictures for the C0 controls; other characters XML forbids become U+FFFD."""
    return _ILLEGAL.sub(lambda m: chr(0x2400 + ord(m.group())) if m.group() < " " else _REPLACEMENT, identifier)


def unescape_identifier(identifier: str) -> str:
    """The identifier as the server sent it (the inverse of escape_identifier for C0 controls)."""
    return _CONTROL_PICTURE.sub(lambda m: chr(ord(m.group()) - 0x2400), identifier)


def declared_encoding(content: bytes) -> str:
    m = _DECL.match(content)
    return m.group(2).decode("ascii") if m else "utf-8"


# One codec error handler for the process; the bytes it replaces are counted per thread (pages are
# repaired in prefetch threads of their own).
_COUNTS = threading.local()
_HANDLER = "harvest_pipeline_count_invalid_bytes"


def _count_and_replace(err: UnicodeDecodeError):
    _COUNTS.invalid_bytes += err.end - err.start
    return (_REPLACEMENT * (err.end - err.start), err.end)


codecs.register_error(_HANDLER, _count_and_replace)


def repair(content: bytes) -> tuple[bytes, Repairs]:
    """Return the body as clean UTF-8 (declaration rewritten) and what was repaired."""
    repairs = Repairs()
    encoding = declared_encoding(content)
    try:
        codecs.lookup(encoding)
    except LookupError:
        encoding = "utf-8"

    _COUNTS.invalid_bytes = 0
    text = content.decode(encoding, errors=_HANDLER)
    repairs.invalid_bytes = _COUNTS.invalid_bytes

    def illegal(m: re.Match) -> str:
        repairs.control_chars += 1
        return ""

    def escape_in_identifier(m: re.Match) -> str:
        sent = m.group(2)
        if not _ILLEGAL.search(sent):
            return m.group(0)
        stored = escape_identifier(sent)
        repairs.control_chars += len(_ILLEGAL.findall(sent))
        repairs.identifiers.append((stored.strip(), sent.strip()))
        return m.group(1) + stored

    if _ILLEGAL.search(text):
        text = _HEADER_IDENTIFIER.sub(escape_in_identifier, text)
        text = _ILLEGAL.sub(illegal, text)
    text = re.sub(r"^\ufeff?\s*<\?xml[^>]*\?>", '<?xml version="1.0" encoding="UTF-8"?>', text, count=1)
    return text.encode("utf-8"), repairs


# --- salvaging a ListRecords page --------------------------------------------------------
# One piece of markup: a comment, CDATA, a processing instruction or declaration, an end tag
# (group 1: its name) or a start tag (group 2: name, 3: attributes, 4: "/" when empty).
_MARKUP = re.compile(
    rb"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<\?.*?\?>|<![^>]*>"
    rb"|</\s*([^\s>]+)\s*>"
    rb"|<([^\s/>!?]+)((?:[^>\"']|\"[^\"]*\"|'[^']*')*?)(/?)>",
    re.S,
)
_XMLNS = re.compile(rb"""\sxmlns(?::([A-Za-z_][\w.-]*))?\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_IDENTIFIER = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?identifier[^>]*>\s*([^<]+?)\s*</", re.S)


@dataclass
class RecordChunk:
    raw: bytes
    identifier: str | None  # the first identifier in it (the header's), for the quarantine


@dataclass
class _Open:
    qname: bytes
    namespaces: dict[bytes, bytes]  # prefix (b"" for the default) -> namespace in scope


def _resolve(qname: bytes, namespaces: dict[bytes, bytes]) -> tuple[bytes | None, bytes]:
    prefix, _, local = qname.rpartition(b":")
    return namespaces.get(prefix), local


def _chunk(content: bytes, start: int, end: int) -> RecordChunk:
    raw = content[start:end]
    ident = _IDENTIFIER.search(raw)
    return RecordChunk(raw, ident.group(1).decode("utf-8", "replace") if ident else None)


def split_records(content: bytes) -> tuple[bytes, list[RecordChunk], bytes]:
    """The page without its records, the records' raw bytes, and the root's xmlns declarations.

    A record is a `record` element in the root element's namespace, a child of the root's child
    (the verb's element). Tags are matched by name as a tolerant parser would: an end tag closes
    the innermost open element of that name (anything opened inside it and left open is closed
    with it), a stray end tag is ignored, and a record still open when its parent closes ends
    there.
    """
    stack: list[_Open] = []
    chunks: list[RecordChunk] = []
    spans: list[tuple[int, int]] = []
    root_ns: bytes | None = None
    decls = b""
    record_at: int | None = None  # where the open record starts

    def end_record(at: int) -> None:
        nonlocal record_at
        spans.append((record_at, at))
        chunks.append(_chunk(content, record_at, at))
        record_at = None
        del stack[2:]

    for m in _MARKUP.finditer(content):
        end_name, start_name, attributes, empty = m.groups()
        if start_name is not None:
            namespaces = dict(stack[-1].namespaces) if stack else {b"xml": b"http://www.w3.org/XML/1998/namespace"}
            for d in _XMLNS.finditer(attributes):
                namespaces[d.group(1) or b""] = d.group(2) if d.group(2) is not None else d.group(3)
            ns, local = _resolve(start_name, namespaces)
            if not stack:
                root_ns = ns
                decls = b"".join(d.group(0) for d in _XMLNS.finditer(attributes))
            is_record = local == b"record" and ns == root_ns and root_ns is not None
            if is_record and len(stack) == 2:
                if empty:
                    chunks.append(_chunk(content, m.start(), m.end()))
                    spans.append((m.start(), m.end()))
                    continue
                record_at = m.start()
            if not empty:
                stack.append(_Open(start_name, namespaces))
        elif end_name is not None:
            depth = next((i for i in range(len(stack) - 1, -1, -1) if stack[i].qname == end_name), None)
            if depth is None:
                continue  # a stray end tag
            if record_at is not None and depth == 2:
                end_record(m.end())
            elif record_at is not None and depth < 2:
                end_record(m.start())  # the verb's element closes around an unclosed record
                del stack[depth:]
            else:
                del stack[depth:]
    if record_at is not None:
        end_record(len(content))
    envelope, at = [], 0
    for start, end in spans:
        envelope.append(content[at:start])
        at = end
    envelope.append(content[at:])
    return b"".join(envelope), chunks, decls


def wrap_record(chunk: bytes, decls: bytes) -> bytes:
    """A record's bytes inside a minimal envelope carrying the page's namespace declarations."""
    if b"xmlns=" not in decls:
        decls += b' xmlns="http://www.openarchives.org/OAI/2.0/"'
    return b"<ListRecords" + decls + b">" + chunk + b"</ListRecords>"
