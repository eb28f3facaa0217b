"""Reading a response body: streamed, decoded by us, capped, checked for truncation.

``timeout_seconds`` bounds connecting and every silence while reading; the whole attempt,
headers and body, is bounded by its deadline (:mod:`.deadline`; the transport arms it, this
reader also checks it between chunks). The transport asks for ``Accept-Encoding:
gzip, deflate`` and the body is decoded here from the raw stream, so ``max_response_mb`` caps the
*decompressed* bytes (a decompression bomb stops at the cap, it is never inflated in full). A body
that is gzip-compressed without a Content-Encoding header (seen in the wild) is detected by its
magic bytes and decompressed under the same cap. Going over the cap raises
:class:`~harvest_pipeline.errors.ResponseTooLarge`; it is not retried. A body cut short (fewer
bytes than Content-Length, a compressed stream that ends early) or empty where one is expected
raises :class:`~harvest_pipeline.http.retries.Retryable`.

One exception, a common server bug (pycsw 2.x behind gzip): ``Content-Encoding: gzip`` with the
Content-Length of the *uncompressed* body, the connection closed after the shorter compressed
one. A gzip member carries its own CRC-32 and length, so a complete member whose trailer checks
out proves the body whole: it is accepted, and :attr:`TransportResponse.quirks` names the quirk
(the transport turns it into a warning). A member cut short is still a truncated body.
"""

from __future__ import annotations

import http.client
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import urllib3.exceptions

from harvest_pipeline.errors import ProtocolError, ResponseTooLarge, TransportError
from harvest_pipeline.http.retries import Retryable

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 64 * 1024
QUIRK_GZIP_LENGTH = "gzip-content-length-uncompressed"


@dataclass
class TransportResponse:
    """A complete response: the body is fully read, decoded and within the cap."""

    url: str  # the display URL (credentials never included)
    status_code: int
    reason: str
    headers: Mapping[str, str]
    content: bytes
    attempts: int = 1
    encoding: str | None = None  # the Content-Encoding that was decoded, if any
    sniffed_gzip: bool = False
    raw_bytes: int = 0  # bytes on the wire (before decoding)
    quirks: list[str] = field(default_factory=list)  # server bugs worked around, one line each
    redirects: list[str] = field(default_factory=list)  # each redirect followed, one line each


@dataclass(frozen=True)
class BodyReader:
    """Reads bodies within ``cap`` decoded bytes and before the attempt's deadline.

    ``redact`` cleans the messages that quote a library's error text.
    """

    cap: int
    timeout: float
    sniff_gzip: bool
    redact: Callable[[str], str]

    def read(self, resp, shown: str, expect_body: bool, deadline: float) -> TransportResponse:
        """The whole body of the 2xx ``resp`` (requests, ``stream=True``), read before
        ``deadline`` (a ``time.monotonic()`` value)."""
        cap = self.cap
        encoding = (resp.headers.get("Content-Encoding") or "").strip().lower()
        declared = resp.headers.get("Content-Length")
        raw = getattr(resp, "raw", None)
        if raw is None or not hasattr(raw, "stream"):
            # An adapter that already holds the body (tests, caches): no wire-level checks.
            body = resp.content or b""
            raw_bytes = len(body)
            quirks = []
            if len(body) > cap:
                raise self._too_large(shown, cap)
            decoded_as = None
        else:
            if not encoding or encoding == "identity":
                try:
                    if declared is not None and int(declared) > cap:
                        raise self._too_large(shown, cap, f" (Content-Length: {declared})")
                except ValueError:
                    pass
            decoder = Decoder(encoding, shown)
            parts: list[bytes] = []
            total = 0
            raw_bytes = 0
            broken = None  # the error that ended the stream early, if any
            try:
                for chunk in raw.stream(_CHUNK, decode_content=False):
                    raw_bytes += len(chunk)
                    out = decoder.feed(chunk, cap - total + 1)
                    total += len(out)
                    if total > cap:
                        raise self._too_large(shown, cap, decoder.note)
                    parts.append(out)
                    if time.monotonic() > deadline:
                        raise DeadlinePassed()
            except urllib3.exceptions.ReadTimeoutError as e:
                raise Retryable("ReadTimeout", TransportError(
                    f"no answer within {self.timeout:g} s while reading the body (ReadTimeout)",
                    url=shown, hint="the server stalled mid-body; retry later or raise "
                                    "http.timeout_seconds")) from e
            except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
                broken = e
            tail = decoder.finish(cap - total + 1)
            quirks = []
            want = None
            if declared is not None:
                try:
                    want = int(declared)
                except ValueError:
                    want = None
            short = broken is not None or (want is not None and raw_bytes < want)
            if short and decoder.whole_gzip_member:
                # pycsw 2.x behind gzip: Content-Length of the uncompressed body, connection
                # closed after the compressed one. The member's CRC-32 and length checked out.
                quirks.append(
                    f"{QUIRK_GZIP_LENGTH}: the server sent Content-Encoding: gzip with "
                    f"Content-Length {declared} (the uncompressed size is "
                    f"{total + len(tail)}) and closed the connection after {raw_bytes} "
                    "compressed bytes; the gzip member is complete and its CRC-32 and length "
                    "check out, so the body was accepted (a known pycsw 2.x bug)")
            elif broken is not None:
                e = broken
                raise Retryable("truncated body", TransportError(
                    self.redact(f"the connection broke while reading the body after "
                                f"{raw_bytes} bytes ({type(e).__name__}: {e})"),
                    url=shown, hint="a network or server hiccup; retry later")) from e
            elif want is not None and raw_bytes < want:
                raise Retryable("truncated body", TransportError(
                    f"truncated body: {raw_bytes} of {want} bytes (Content-Length)",
                    url=shown, hint="a network or server hiccup; retry later"))
            total += len(tail)
            if total > cap:
                raise self._too_large(shown, cap, decoder.note)
            parts.append(tail)
            body = b"".join(parts)
            if decoder.truncated:
                raise Retryable("truncated body", TransportError(
                    f"truncated body: the {encoding} stream ends early", url=shown,
                    hint="a network or server hiccup; retry later"))
            decoded_as = decoder.encoding
            # Keep requests' view consistent (and let close() return the connection to the pool).
            resp._content = body
            resp._content_consumed = True
        sniffed = False
        if self.sniff_gzip and body[:2] == GZIP_MAGIC:
            body = self._gunzip_sniffed(body, shown, cap)
            sniffed = True
        if expect_body and not body.strip():
            raise Retryable("empty body", TransportError(
                "the server answered with an empty body", url=shown,
                hint="a server hiccup; retry later"))
        return TransportResponse(
            url=shown, status_code=resp.status_code, reason=resp.reason or "",
            headers=resp.headers, content=body, encoding=decoded_as, sniffed_gzip=sniffed,
            raw_bytes=raw_bytes, quirks=quirks,
        )

    def _too_large(self, shown: str, cap: int, note: str = "") -> ResponseTooLarge:
        mb = cap / (1024 * 1024)
        return ResponseTooLarge(
            f"the response body exceeds the cap of {mb:g} MB{note}; stopped reading",
            limit_bytes=cap, url=shown,
            hint="a decompression bomb or a runaway page: if the server's pages really are "
                 "this big, lower its page size or raise http.max_response_mb for this source",
        )

    def _gunzip_sniffed(self, body: bytes, shown: str, cap: int) -> bytes:
        """A body compressed without Content-Encoding: decompress it under the same cap."""
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(body, cap + 1)
        except zlib.error as e:
            raise ProtocolError(f"the body looks gzip-compressed but is not: {e}", url=shown,
                                hint="the server sends a broken body; report it to its "
                                     "operators") from e
        if len(out) > cap or d.unconsumed_tail:
            raise self._too_large(shown, cap, " (gzip-compressed without a Content-Encoding "
                                              "header)")
        if not d.eof:
            raise Retryable("truncated body", TransportError(
                "truncated body: the gzip-compressed body (no Content-Encoding header) ends "
                "early", url=shown, hint="a network or server hiccup; retry later"))
        return out


class DeadlinePassed(Exception):
    """The attempt's deadline passed while the body was arriving (the transport words it)."""


class Decoder:
    """Incremental Content-Encoding decoder with an output cap per feed (bomb-safe)."""

    def __init__(self, encoding: str, shown: str):
        self.shown = shown
        self.truncated = False
        self.note = ""
        self.encoding: str | None = None
        enc = encoding.split(",")[-1].strip() if encoding else ""
        if "," in encoding:
            raise ProtocolError(f"unsupported Content-Encoding {encoding!r} (several codings)",
                                url=shown, hint="we accept one coding: gzip or deflate")
        if enc in ("", "identity"):
            self._d = None
        elif enc in ("gzip", "x-gzip"):
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            self._d = zlib.decompressobj()
            self._raw_fallback = True
        else:
            raise ProtocolError(f"unsupported Content-Encoding {encoding!r}", url=shown,
                                hint="we ask for gzip or deflate only; the server ignored that")
        if self._d is not None:
            self.encoding = enc
            self.note = f" (after {enc} decompression)"
        self._started = False

    def feed(self, data: bytes, room: int) -> bytes:
        """Decoded bytes of ``data``; at most ``room`` of them (reaching it means: too large)."""
        if self._d is None:
            return data
        try:
            if self.encoding == "deflate" and not self._started:
                self._started = True
                try:
                    return self._d.decompress(data, room)
                except zlib.error:  # raw deflate without the zlib wrapper (common in the wild)
                    self._d = zlib.decompressobj(-zlib.MAX_WBITS)
            self._started = True
            return self._d.decompress(data, room)
        except zlib.error as e:
            raise ProtocolError(
                f"the body says Content-Encoding: {self.encoding} but does not decompress: {e}",
                url=self.shown, hint="the server sends a broken body; report it to its operators",
            ) from e

    @property
    def whole_gzip_member(self) -> bool:
        """A gzip stream that reached the end of its member: zlib checked its CRC-32 and ISIZE."""
        return self.encoding in ("gzip", "x-gzip") and self._d is not None and self._d.eof

    def finish(self, room: int) -> bytes:
        if self._d is None:
            return b""
        if self._d.unconsumed_tail:  # only possible when the cap was reached
            return b"\0" * room
        try:
            tail = self._d.flush()
        except zlib.error as e:
            raise ProtocolError(f"the {self.encoding} body does not decompress: {e}",
                                url=self.shown) from e
        if not self._d.eof:
            self.truncated = True
        return tail
