"""Switchable, deterministic fault modes of the demo provider (every one off by default).

Real endpoints misbehave; these modes let tests and benchmarks reproduce each misbehaviour on
demand. Every mode is a field of :class:`FaultOptions`, which :class:`~.server.ServerOptions`
extends, so each is settable

* at start: ``python -m harvest_pipeline.demo --fault fail_every=3 --fault retry_after=date:1``
  (repeatable), or a preset: ``--faults all-recoverable``;
* at runtime: ``POST /admin/options`` with JSON ``{"fail_every": 3}`` (or
  ``DemoProcess.set_options(fail_every=3)``); the pseudo-option ``faults`` applies a preset,
  which first switches every fault off (``set_options(faults="none")`` just does that), then
  the other options of the same call apply on top;
* from tests: ``start_demo_provider(fault={"fail_every": 3})``, ``start_demo_provider(
  fail_every=3)`` or ``start_demo_provider(faults="all-recoverable")``.

``GET /admin/options`` shows every field; ``GET /admin/faults`` shows the request counter and
when the first and the latest counted request arrived (epoch seconds, null before any).

Determinism: "every Nth" counts OAI-PMH requests (``/oai`` only, retries included), starting at
1, since the options were last changed; request ``k`` is affected when ``k % N == 0``. So
``fail_every=2`` fails requests 2, 4, 6... and the retry of a failed request (``k + 1``) is
answered normally. Record-level modes pick records by their number within their creation day
(``n % N == 0``), so the same records are affected on every request.

Network (``/oai`` only; checked in this order, the first that applies wins)
    ``slow_ms`` + ``slow_every`` (default 1)
        Sleep ``slow_ms`` before answering every ``slow_every``-th request (combines with the
        rest).
    ``fail_every`` + ``fail_status`` (503; or 429, 500, 502, 504) + ``retry_after``
        Every Nth request is answered with ``fail_status`` and a short text body.
        ``retry_after``: ``""`` (no header), ``"N"`` (delta-seconds) or ``"date:N"`` (an HTTP-date
        at least N seconds ahead: the next whole second plus N).
    ``gzip_bomb`` (``"off"`` | ``"header"`` | ``"sniff"``) + ``gzip_bomb_mb`` (2048)
        Every request gets a ~2 MB gzip body that inflates to ``gzip_bomb_mb`` MB of spaces,
        with ``Content-Encoding: gzip`` ("header") or without it ("sniff"). The stream is one
        precomputed 1 MB deflate block repeated, so nothing is inflated or allocated in full.
    ``empty_body_every``
        Every Nth request is answered ``200`` with an empty body.
    ``truncate_every`` + ``truncate_style`` (``"length"`` | ``"chunked"``)
        Every Nth request sends half its body, then closes the connection: "length" declares
        the full Content-Length; "chunked" sends one chunk and never the final zero chunk.
    ``gzip`` (``"off"`` | ``"header"`` | ``"sniff"``)
        "header": compress with ``Content-Encoding: gzip`` when the request accepts gzip.
        "sniff": always compress, and send no Content-Encoding (a misconfigured server).

XML
    ``control_chars`` N
        Records with ``n % N == 0`` carry ``\\x0b`` and ``\\x1a`` (illegal in XML 1.0) at the end
        of their first text element (the title in oai_dc). Stripping them restores the record.
    ``bad_bytes`` N
        Records with ``n % N == 0`` carry the bytes ``\\xff\\xfe`` (never valid UTF-8) there.
    ``broken_record_every`` N
        In every Nth request that is a ListRecords page, the first record with metadata gets
        an unclosed ``<broken>`` element inside ``<metadata>``; the rest of the page is intact.
        GetRecord for that record is served well-formed.
    ``malformed_page_every`` N
        Every Nth request that is a list page (ListRecords/ListIdentifiers) is cut in the
        middle (the Content-Length matches the cut body: the page itself is broken).
    ``entity_attack`` (``"off"`` | ``"laughs"`` | ``"xxe"`` | ``"external_dtd"``)
        Every response starts with a DOCTYPE: a billion-laughs entity cascade, an external
        entity ``SYSTEM "file:///etc/passwd"`` (both referenced in ``<request>``), or an
        external DTD ``SYSTEM "http://127.0.0.1:9/oai-pmh.dtd"``.

Pagination and dates (lists only)
    ``repeat_token`` k
        From page k + 1 on, every page carries the token it was requested with: the client
        gets the same page and the same token forever.
    ``restart_list``
        The last page carries a token that restarts the list from its first page (pycsw 2.x
        in OAI-PMH mode ends its lists this way). A harvester that has received the whole list
        (completeListSize) can tell the list ended; without completeListSize it cannot.
    ``restart_list_at`` k
        Page k, before the end, carries a token that restarts the list from its first page:
        the list never ends and a harvester must stop.
    ``no_complete_list_size``
        ``resumptionToken`` elements carry no completeListSize.
    ``wrong_cursor``
        The cursor attribute is the 0-based page number instead of the record offset.
    ``no_final_token_element``
        The last page of a multi-page list has no resumptionToken element at all.
    ``extra_empty_page``
        The last page carries a token; that token gets a page with no records and an empty
        token.
    ``reject_token_only``
        A continuation with only verb + resumptionToken gets badArgument; repeating the
        original arguments (metadataPrefix, from, until, set) next to the token works.
    ``date_only_datestamps``
        Record datestamps are written ``YYYY-MM-DD`` while Identify says seconds.
    ``clamp_until`` N
        An ``until`` later than the server clock minus N seconds is clamped to it; the
        ``<request>`` element echoes the clamped value.
    ``out_of_window_records`` N
        The first page of a list with from/until also carries up to N records from the week
        before ``from`` and up to N after ``until`` (not counted in completeListSize).
    ``reject_dates``
        Any ``from``/``until`` gets badArgument.
    ``ignore_dates``
        ``from``/``until`` are silently ignored: the whole corpus is listed.
    ``index_lag_seconds`` N
        Records with a datestamp after the clock minus N seconds are invisible to lists.
    ``token_expires_after_pages`` k
        A continuation for page k + 1 or later answers badResumptionToken ("expired"): a list
        longer than k pages can never be traversed, only a smaller range can (tokens that expire
        before a slow harvest reaches the end of a big window).
    ``gateway_timeout_over_seconds`` N
        A list request whose date range spans more than N seconds (a missing ``from`` counts
        from the earliest record, a missing ``until`` to the clock) answers HTTP 504 Gateway
        Timeout, every time: a server whose database times out on large ranges.
    ``dates_to_whole_days``
        ``from``/``until`` are read by their date only (``until=2026-01-05T10:00:00Z`` lists
        the whole of 2026-01-05) while Identify says seconds.
    ``reject_set_with_dates``
        ``set`` together with ``from``/``until`` gets badArgument (each alone works).

Network, wrong headers
    ``gzip_wrong_length``
        Compress with ``Content-Encoding: gzip``, but declare the Content-Length of the
        uncompressed body and close the connection after the shorter compressed one (pycsw 2.x
        behind a gzip filter). List pages only, so Identify still answers a client that
        does not survive it.

The ``all-recoverable`` preset (:data:`PRESETS`) switches on every fault that a correct
harvester survives in a single pass while still ending with exactly the records of a clean
harvest: transient network failures at coprime small counts (503 every 7th request, a
truncated body every 11th, an empty body every 13th, a 50 ms stall every 5th), gzip with a
proper header, control characters in every 10th record (strip them), one broken record in
every 17th ListRecords page (quarantine it, fetch it again with GetRecord, which is served
intact), no completeListSize, wrong cursors, no final token element, an extra empty page,
token-only continuations rejected (repeat the original arguments), day-only record
datestamps, and 2 + 2 out-of-window records per list (they belong to other windows; keep or
drop them, but do not count them).

Not in the preset, and why:

* ``gzip_bomb``, ``entity_attack``, ``bad_bytes``: a correct harvester refuses them (the
  response or record is rejected), so the records cannot come out the same;
* ``malformed_page_every``: the page is broken as served; only a harvester that re-requests
  pages that fail to parse gets past it (ours fails the window, and a later run fixes it);
* ``repeat_token``, ``restart_list_at``: the list never ends; a correct harvester must stop and
  fail the window;
* ``restart_list``: the list ends only for a harvester that can prove it received the whole
  list, which needs the completeListSize the preset switches off;
* ``reject_dates``, ``ignore_dates``: selective harvesting is impossible; a correct harvester
  must notice and fail (or fall back to a full harvest, a different run);
* ``clamp_until``, ``index_lag_seconds``: records at the recent edge stay invisible until the
  server's clock moves on; they arrive only in a later pass (``overlap_seconds``);
* ``token_expires_after_pages``, ``gateway_timeout_over_seconds``: a window larger than the
  limit never finishes whole; only a harvester that splits it into smaller ranges gets it;
* ``dates_to_whole_days``, ``reject_set_with_dates``: quirks for ``probe`` to detect;
  ``gzip_wrong_length``: a truncated-looking body that is whole (a transport concern);
* ``gzip="sniff"`` is survivable but not a preset member, because ``gzip="header"`` is;
  ``retry_after`` is off so the preset stays fast (the transport tests cover it).
"""

from __future__ import annotations

import email.utils
import gzip as _gzip
import math
import re
import struct
import threading
import time
import zlib
from dataclasses import dataclass, fields

__all__ = [
    "BAD_BYTES",
    "BAD_BYTES_PLACEHOLDER",
    "FAULT_CHECKS",
    "PRESETS",
    "FaultOptions",
    "FaultState",
    "GatewayTimeout",
    "NetworkPlan",
    "active_faults",
    "apply_entity_attack",
    "bomb_length",
    "bomb_stream",
    "break_metadata",
    "fault_field_names",
    "gzip_bytes",
    "malform_page",
    "network_plan",
    "retry_after_value",
    "taint_metadata",
]

FAIL_STATUSES = (429, 500, 502, 503, 504)
_MODES = ("off", "header", "sniff")
_ATTACKS = ("off", "laughs", "xxe", "external_dtd")
_RETRY_AFTER_RE = re.compile(r"(?:\d+|date:\d+)\Z")

CONTROL_CHARS = "\x0b\x1a"
# A private-use pair that never occurs in the corpus; replaced by BAD_BYTES after encoding.
BAD_BYTES_PLACEHOLDER = "\ue000\ue001"
BAD_BYTES = b"\xff\xfe"


@dataclass(frozen=True)
class FaultOptions:
    """Every fault mode, off by default (see the module doc for what each does)."""

    # network
    fail_every: int = 0
    fail_status: int = 503
    retry_after: str = ""
    slow_ms: int = 0
    slow_every: int = 1
    truncate_every: int = 0
    truncate_style: str = "length"
    empty_body_every: int = 0
    gzip: str = "off"
    gzip_bomb: str = "off"
    gzip_bomb_mb: int = 2048
    # XML
    control_chars: int = 0
    bad_bytes: int = 0
    broken_record_every: int = 0
    malformed_page_every: int = 0
    entity_attack: str = "off"
    # pagination and dates
    repeat_token: int = 0
    restart_list: bool = False
    restart_list_at: int = 0
    no_complete_list_size: bool = False
    wrong_cursor: bool = False
    no_final_token_element: bool = False
    extra_empty_page: bool = False
    reject_token_only: bool = False
    date_only_datestamps: bool = False
    clamp_until: int = 0
    out_of_window_records: int = 0
    reject_dates: bool = False
    ignore_dates: bool = False
    index_lag_seconds: int = 0
    token_expires_after_pages: int = 0
    gateway_timeout_over_seconds: int = 0
    dates_to_whole_days: bool = False
    reject_set_with_dates: bool = False
    gzip_wrong_length: bool = False


def fault_field_names() -> list[str]:
    return [f.name for f in fields(FaultOptions)]


def _non_negative(name, v):
    if v < 0:
        raise ValueError(f"{name} must be >= 0 (0 = off)")


def _positive(name, v):
    if v < 1:
        raise ValueError(f"{name} must be >= 1")


def _one_of(*allowed):
    def check(name, v):
        if v not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {v!r}")

    return check


def _retry_after_spec(name, v):
    if v and not _RETRY_AFTER_RE.match(v):
        raise ValueError(f"{name} must be '' (none), 'N' (seconds) or 'date:N' (an HTTP-date N "
                         f"seconds ahead), got {v!r}")


FAULT_CHECKS = {
    **{name: _non_negative for name in (
        "fail_every", "slow_ms", "truncate_every", "empty_body_every", "control_chars",
        "bad_bytes", "broken_record_every", "malformed_page_every", "repeat_token", "restart_list_at",
        "clamp_until", "out_of_window_records", "index_lag_seconds", "token_expires_after_pages",
        "gateway_timeout_over_seconds")},
    "slow_every": _positive,
    "gzip_bomb_mb": _positive,
    "fail_status": _one_of(*FAIL_STATUSES),
    "retry_after": _retry_after_spec,
    "truncate_style": _one_of("length", "chunked"),
    "gzip": _one_of(*_MODES),
    "gzip_bomb": _one_of(*_MODES),
    "entity_attack": _one_of(*_ATTACKS),
}

# Preset name -> option changes. "none" restores every fault to its default.
PRESETS: dict[str, dict] = {
    "none": {f.name: f.default for f in fields(FaultOptions)},
    "all-recoverable": {
        "fail_every": 7,
        "fail_status": 503,
        "truncate_every": 11,
        "empty_body_every": 13,
        "slow_ms": 50,
        "slow_every": 5,
        "gzip": "header",
        "control_chars": 10,
        "broken_record_every": 17,
        "no_complete_list_size": True,
        "wrong_cursor": True,
        "no_final_token_element": True,
        "extra_empty_page": True,
        "reject_token_only": True,
        "date_only_datestamps": True,
        "out_of_window_records": 2,
    },
}


def preset(name: str) -> dict:
    """Option changes for a preset: every fault off, then the preset's faults on."""
    if name not in PRESETS:
        raise ValueError(f"unknown fault preset {name!r} (known: {', '.join(PRESETS)})")
    return {**PRESETS["none"], **PRESETS[name]}


def active_faults(opts) -> dict:
    """The fault fields of ``opts`` that differ from their defaults."""
    return {f.name: getattr(opts, f.name) for f in fields(FaultOptions)
            if getattr(opts, f.name) != f.default}


class GatewayTimeout(Exception):
    """Raised by the provider for ``gateway_timeout_over_seconds``; the HTTP layer answers 504."""


class FaultState:
    """The OAI request counter behind every "every Nth" mode (thread-safe), with the arrival times
    (epoch seconds) of the first and the latest request counted: the bench tells from them when
    a harvester started asking and when it asked last."""

    def __init__(self):
        self._lock = threading.Lock()
        self._n = 0
        self.first_at: float | None = None
        self.last_at: float | None = None

    def next(self) -> int:
        now = time.time()
        with self._lock:
            self._n += 1
            if self.first_at is None:
                self.first_at = now
            self.last_at = now
            return self._n

    def reset(self) -> None:
        with self._lock:
            self._n = 0
            self.first_at = self.last_at = None

    @property
    def requests(self) -> int:
        return self._n


def every(n: int, k: int) -> bool:
    """Request number n is hit by a mode set to every k (0 = off)."""
    return k > 0 and n > 0 and n % k == 0


# ---- network -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NetworkPlan:
    """What the HTTP layer does to request number ``n`` before/after the provider answers."""

    slow_seconds: float = 0.0
    fail_status: int | None = None
    retry_after: str | None = None
    bomb: str | None = None  # "header" | "sniff"
    empty: bool = False
    truncate: str | None = None  # "length" | "chunked"
    gzip: str | None = None  # "header" | "sniff"


def retry_after_value(spec: str, now: float | None = None) -> str | None:
    """The Retry-After header for a ``retry_after`` spec ("", "N", "date:N")."""
    if not spec:
        return None
    if spec.startswith("date:"):
        now = time.time() if now is None else now
        return email.utils.formatdate(math.ceil(now) + int(spec[5:]), usegmt=True)
    return spec


def network_plan(opts, n: int, accepts_gzip: bool) -> NetworkPlan:
    slow = opts.slow_ms / 1000 if opts.slow_ms and every(n, opts.slow_every) else 0.0
    if every(n, opts.fail_every):
        return NetworkPlan(slow, fail_status=opts.fail_status,
                           retry_after=retry_after_value(opts.retry_after))
    if opts.gzip_bomb != "off":
        return NetworkPlan(slow, bomb=opts.gzip_bomb)
    if every(n, opts.empty_body_every):
        return NetworkPlan(slow, empty=True)
    gz = None
    if opts.gzip == "sniff" or (opts.gzip == "header" and accepts_gzip):
        gz = opts.gzip
    truncate = opts.truncate_style if every(n, opts.truncate_every) else None
    return NetworkPlan(slow, truncate=truncate, gzip=gz)


def gzip_bytes(body: bytes) -> bytes:
    return _gzip.compress(body, compresslevel=5, mtime=0)


_MB = 1 << 20
_bomb_cache: dict[str, bytes] = {}


def _bomb_block() -> bytes:
    """1 MB of spaces as one self-contained deflate segment (ends byte-aligned, no history
    carried over), so repeating it yields a valid deflate stream of k MB of spaces."""
    block = _bomb_cache.get("block")
    if block is None:
        c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        block = c.compress(b" " * _MB) + c.flush(zlib.Z_FULL_FLUSH)
        _bomb_cache["block"] = block
    return block


_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
_DEFLATE_END = b"\x03\x00"  # a final, empty, fixed-Huffman block


def bomb_length(mb: int) -> int:
    return len(_GZIP_HEADER) + mb * len(_bomb_block()) + len(_DEFLATE_END) + 8


def bomb_stream(mb: int):
    """The gzip bomb in pieces: header, ``mb`` copies of the block, end block and trailer.

    The CRC of the inflated data is computed only if a (careless) client reads to the end."""
    block = _bomb_block()
    yield _GZIP_HEADER
    for _ in range(mb):
        yield block
    yield _DEFLATE_END + struct.pack("<II", _spaces_crc(mb), (mb * _MB) & 0xFFFFFFFF)


def _gf2_times(mat: list[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A + B from crc(A), crc(B) and len(B) (zlib's crc32_combine, in Python)."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # the operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:  # apply len2 zero bytes to crc1
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def _spaces_crc(mb: int) -> int:
    """CRC-32 of ``mb`` MB of spaces without hashing them all: combine by binary doubling."""
    power_crc, power_len = zlib.crc32(b" " * _MB), _MB  # crc of 2**k MB, k = 0, 1, ...
    crc, k = 0, mb
    while k:
        if k & 1:
            crc = crc32_combine(crc, power_crc, power_len)
        k >>= 1
        if k:
            power_crc = crc32_combine(power_crc, power_crc, power_len)
            power_len *= 2
    return crc & 0xFFFFFFFF


# ---- XML ---------------------------------------------------------------------------------


def _insert_before_first_close(md: str, insert: str) -> str:
    i = md.find("</")
    return md if i < 0 else md[:i] + insert + md[i:]


def taint_metadata(md: str, n: int, opts) -> str:
    """Control characters / bad-byte placeholders in the first text element of a record."""
    if opts.control_chars and n % opts.control_chars == 0:
        md = _insert_before_first_close(md, CONTROL_CHARS)
    if opts.bad_bytes and n % opts.bad_bytes == 0:
        md = _insert_before_first_close(md, BAD_BYTES_PLACEHOLDER)
    return md


def break_metadata(md: str) -> str:
    """An unclosed element inside the record's metadata."""
    return _insert_before_first_close(md, "<broken>")


def malform_page(body: bytes) -> bytes:
    return body[: len(body) // 2]


_DOCTYPES = {
    "laughs": ('<!DOCTYPE OAI-PMH [\n <!ENTITY lol "lol">\n'
               + "".join(f' <!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n'
                         for i in range(1, 10))
               + "]>\n", "&lol9;"),
    "xxe": ('<!DOCTYPE OAI-PMH [\n <!ENTITY xxe SYSTEM "file:///etc/passwd">\n]>\n', "&xxe;"),
    "external_dtd": ('<!DOCTYPE OAI-PMH SYSTEM "http://127.0.0.1:9/oai-pmh.dtd">\n', ""),
}


def apply_entity_attack(body: bytes, kind: str) -> bytes:
    """Put the attack's DOCTYPE after the XML declaration and reference its entity in
    ``<request>``."""
    doctype, ref = _DOCTYPES[kind]
    decl_end = body.find(b"?>") + 2 if body.startswith(b"<?xml") else 0
    body = body[:decl_end] + b"\n" + doctype.encode() + body[decl_end:].lstrip(b"\n")
    if ref:
        i = body.find(b"<request")
        j = body.find(b">", i) + 1 if i >= 0 else -1
        if j > 0:
            body = body[:j] + ref.encode() + body[j:]
    return body
