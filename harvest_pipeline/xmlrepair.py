"""Repairing bodies that are almost XML, and salvaging the good records of a broken page.

Real servers send control characters (0x0B, 0x1A) inside records and bytes invalid in the
declared encoding. Those make the whole page unparseable, so we repair them and count every
repair for the window's report (never silently): characters XML 1.0 forbids are removed (they
carry no text; removing them restores what the author typed), bytes invalid in the declared
encoding become U+FFFD (the text they stood for is unknown, so the mark stays visible). A page with one truly broken record is split at its <record> boundaries so the other
records are kept and only the broken one is quarantined.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_DECL = re.compile(rb"^(\xef\xbb\xbf)?\s*<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"'][^>]*\?>")
# Characters XML 1.0 forbids (tab, LF and CR are allowed), plus the non-characters U+FFFE/U+FFFF.
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_REPLACEMENT = "\ufffd"


@dataclass
class Repairs:
    control_chars: int = 0
    invalid_bytes: int = 0

    @property
    def total(self) -> int:
        return self.control_chars + self.invalid_bytes

    def describe(self) -> str:
        return (
            f"repaired the response: removed {self.control_chars} character(s) illegal in XML 1.0, "
            f"replaced {self.invalid_bytes} byte(s) invalid in the declared encoding with U+FFFD"
        )


def declared_encoding(content: bytes) -> str:
    m = _DECL.match(content)
    return m.group(2).decode("ascii") if m else "utf-8"


def repair(content: bytes) -> tuple[bytes, Repairs]:
    """Return the body as clean UTF-8 (declaration rewritten) and what was repaired."""
    repairs = Repairs()
    encoding = declared_encoding(content)
    try:
        codecs.lookup(encoding)
    except LookupError:
        encoding = "utf-8"

    def count_and_replace(err: UnicodeDecodeError):
        repairs.invalid_bytes += err.end - err.start
        return (_REPLACEMENT * (err.end - err.start), err.end)

    handler = f"harvest_pipeline_count_{id(repairs)}"
    codecs.register_error(handler, count_and_replace)
    text = content.decode(encoding, errors=handler)

    def illegal(m: re.Match) -> str:
        repairs.control_chars += 1
        return ""

    text = _ILLEGAL.sub(illegal, text)
    text = re.sub(r"^\ufeff?\s*<\?xml[^>]*\?>", '<?xml version="1.0" encoding="UTF-8"?>', text, count=1)
    return text.encode("utf-8"), repairs


# --- salvaging a ListRecords page --------------------------------------------------------
_RECORD = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?record[\s>].*?</(?:[A-Za-z_][\w.-]*:)?record\s*>", re.S)
_IDENTIFIER = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?identifier[^>]*>\s*([^<]+?)\s*</", re.S)
_ROOT_START = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?OAI-PMH\b[^>]*>", re.S)
_XMLNS = re.compile(rb"""\sxmlns(?::[A-Za-z_][\w.-]*)?\s*=\s*("[^"]*"|'[^']*')""")


@dataclass
class RecordChunk:
    raw: bytes
    identifier: str | None


def split_records(content: bytes) -> tuple[bytes, list[RecordChunk], bytes]:
    """The page without its <record> elements, the records' raw bytes, and the root's xmlns decls."""
    chunks = []
    for m in _RECORD.finditer(content):
        raw = m.group(0)
        ident = _IDENTIFIER.search(raw)
        chunks.append(RecordChunk(raw, ident.group(1).decode("utf-8", "replace") if ident else None))
    envelope = _RECORD.sub(b"", content)
    root = _ROOT_START.search(content)
    decls = b"".join(d.group(0) for d in _XMLNS.finditer(root.group(0))) if root else b""
    return envelope, chunks, decls


def wrap_record(chunk: bytes, decls: bytes) -> bytes:
    """A record's bytes inside a minimal envelope carrying the page's namespace declarations."""
    if b"xmlns=" not in decls:
        decls += b' xmlns="http://www.openarchives.org/OAI/2.0/"'
    return b"<ListRecords" + decls + b">" + chunk + b"</ListRecords>"
