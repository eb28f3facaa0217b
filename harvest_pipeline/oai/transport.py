"""The HTTP transport under every protocol client: retries, politeness, caps, redaction.

:class:`Transport` sends one logical request (GET or POST) and returns the whole body as bytes,
or raises one :class:`~harvest_pipeline.errors.HarvestError`. OAI-PMH's ``OAIClient._get`` uses
it; a CSW client can use it the same way (``transport.request("POST", url, data=xml, ...)``).
No Dagster, no XML: the transport never parses what it carries.

Retries
    A request is attempted at most ``1 + max_retries`` times. Retried: connection errors,
    connect/read timeouts, truncated bodies (fewer bytes than Content-Length, a chunked body cut
    off, a gzip stream that stops early), an empty body where one is expected, and HTTP 429, 500,
    502, 503 and 504. The wait before attempt ``k + 1`` is full-jitter exponential backoff,
    ``uniform(0, min(backoff_max_seconds, backoff_base_seconds * 2**(k-1)))``, unless the
    answer carried ``Retry-After`` (delta-seconds or an HTTP-date): then exactly that long. A
    Retry-After longer than ``retry_after_cap_seconds`` is not waited out: the request raises
    :class:`~harvest_pipeline.errors.DeferredError` (``.retry_after_seconds``) at once, so the
    caller can mark the window deferred instead of failed. Any other non-2xx raises
    :class:`~harvest_pipeline.errors.HTTPStatusError` at once. When retries run out, the last
    failure is raised (an ``HTTPStatusError`` for a status), its message naming the URL, the
    attempts and every reason.

Events
    Every retry, every request that succeeded only after retries, every give-up and every
    deferral becomes a :class:`TransportEvent`. Events go to the ``on_event`` callback (if
    given), to the logger ``harvest_pipeline.oai.transport`` (WARNING for retries and give-ups),
    and into ``Transport.events``. ``Transport.drain_warnings()`` returns (and forgets) one line
    per affected request, e.g. ``"retried 3x (HTTP 503 x3), then succeeded: GET http://..."``,
    ready to be stored as a window warning. ``Transport.stats`` counts requests, attempts,
    retries and seconds spent waiting.

Politeness per host (shared by every process that harvests that host)
    Requests to one host (``hostname``, plus ``_port`` when the URL names a port) hold one of
    ``max_concurrent_requests`` slots while they are in flight, and start at least
    ``min_request_interval_seconds`` after the previous request to that host started. With a
    ``state_dir`` (the harvester passes ``<catalogue dir>/hosts/``) both are file locks, so they
    hold across processes (each Dagster run is its own process):

    * slot ``i`` is ``<state_dir>/<host>.slot<i>.lock``; a request holds an exclusive
      ``fcntl.flock`` on one of them while it is sent and its body read. A process waiting
      for a slot polls the files (10-100 ms, jittered). The kernel drops a flock when its
      process dies, so a killed harvest never leaves a slot taken;
    * the interval uses ``<state_dir>/<host>.last``: under an exclusive flock, read the start
      time of the previous request, sleep out the rest of the interval while still holding
      the lock (so waiters queue up behind it), write the new start time, unlock.

    A slot is taken before the interval gate, so a request never waits for a slot after it has
    been stamped. Without a ``state_dir`` the same rules use in-process locks (threads of one
    process only). Waits for a slot are bounded (``slot_wait_seconds``); the error says which
    host and what to do.

Limits
    ``timeout_seconds`` bounds connecting and every silence while reading; a body that trickles
    in is also cut off after ``10 * timeout_seconds`` in total. We ask for
    ``Accept-Encoding: gzip, deflate`` and decode the body ourselves from the raw stream, so
    ``max_response_mb`` caps the *decompressed* bytes (a decompression bomb stops at the cap,
    it is never inflated in full). A body that is gzip-compressed without a Content-Encoding
    header (seen in the wild) is detected by its magic bytes and decompressed under the same
    cap. Going over the cap raises :class:`~harvest_pipeline.errors.ResponseTooLarge`; it is
    not retried.

Credentials
    ``user:password@`` in a URL is moved into the request's auth and never shown. Every message
    (exceptions, events, logs) is passed through :meth:`Transport.redact`, which removes userinfo
    in URLs, ``api_key``/``apikey``/``access_token`` query values, the basic-auth user and
    password, and the values of every request header except a few harmless ones (User-Agent,
    Accept, ...), such as ``Authorization`` or ``X-Api-Key``.

One :class:`requests.Session` per transport (keep-alive); a session passed in is used as is
and never mutated (headers go with each request).
"""

from __future__ import annotations

import email.utils
import errno
import fcntl
import http.client
import logging
import os
import random
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

import requests
import urllib3.exceptions

from harvest_pipeline.errors import (
    DeferredError,
    HTTPStatusError,
    ProtocolError,
    ResponseTooLarge,
    TransportError,
)

if TYPE_CHECKING:
    from harvest_pipeline.sources.registry import HttpSettings

__all__ = [
    "DEFAULT_USER_AGENT",
    "RETRY_STATUSES",
    "Transport",
    "TransportEvent",
    "TransportResponse",
    "host_key",
    "parse_retry_after",
    "redact_url",
    "strip_credentials",
]

log = logging.getLogger("harvest_pipeline.oai.transport")

DEFAULT_USER_AGENT = "harvest_pipeline/0.1 (+OAI-PMH harvester)"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 64 * 1024
_BODY_DEADLINE_FACTOR = 10
# Header values that are never secret and stay readable in messages.
_HARMLESS_HEADERS = frozenset({
    "user-agent", "accept", "accept-encoding", "accept-language", "content-type", "connection",
    "cache-control", "pragma", "if-modified-since", "if-none-match",
})
_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_SECRET_QUERY_RE = re.compile(r"(?i)([?&](?:api[_-]?key|apikey|access[_-]?token)=)[^&#\s]+")
_REASONS = {
    429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
}


# --------------------------------------------------------------------------- small helpers


def strip_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """Remove ``user:password@`` from a URL; return the clean URL and the (user, password)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    clean = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return clean, (unquote(user), unquote(password))


def redact_url(text: str) -> str:
    """Remove URL userinfo and API-key query values from any text."""
    text = _USERINFO_RE.sub(r"\1***@", text)
    return _SECRET_QUERY_RE.sub(r"\1***", text)


def host_key(url: str) -> str:
    """The politeness key of a URL: its hostname, plus ``_port`` when the URL names one.

    Safe as a file name (anything but ``[a-z0-9.-]`` becomes ``_``)."""
    parts = urlsplit(url)
    host = (parts.hostname or "unknown").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    key = f"{host}_{port}" if port else host
    return re.sub(r"[^a-z0-9.-]", "_", key)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or an HTTP-date); None if unusable.

    A date in the past gives 0. Fractional or negative deltas are tolerated (clamped at 0)."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # HTTP-dates are GMT; the obsolete forms parse as naive
        when = when.replace(tzinfo=UTC)
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def _count_reasons(reasons: list[str]) -> str:
    out: dict[str, int] = {}
    for r in reasons:
        out[r] = out.get(r, 0) + 1
    return ", ".join(f"{r} x{n}" for r, n in out.items())


# ---------------------------------------------------------------------------- data shapes


@dataclass(frozen=True)
class TransportEvent:
    """Something the caller may want to record about one request.

    ``kind``: ``"retry"`` (attempt ``attempt`` failed, the next starts in ``delay_seconds``),
    ``"recovered"`` (the request succeeded on attempt ``attempt`` after the failures in
    ``reasons``), ``"gave_up"`` (all attempts failed; the error follows) or ``"deferred"`` (the
    server's Retry-After exceeds the cap; DeferredError follows). ``url`` is redacted.
    """

    kind: str
    method: str
    url: str
    attempt: int
    max_attempts: int
    reason: str = ""
    reasons: tuple[str, ...] = ()
    status_code: int | None = None
    retry_after: str | None = None
    delay_seconds: float = 0.0
    at: float = field(default_factory=time.time)

    def __str__(self) -> str:
        where = f"{self.method} {self.url}"
        if self.kind == "retry":
            ra = f"; Retry-After: {self.retry_after}" if self.retry_after else ""
            return (f"attempt {self.attempt}/{self.max_attempts} failed ({self.reason}{ra}); "
                    f"retrying in {self.delay_seconds:.1f} s: {where}")
        if self.kind == "recovered":
            n = len(self.reasons)
            return f"retried {n}x ({_count_reasons(list(self.reasons))}), then succeeded: {where}"
        if self.kind == "gave_up":
            return (f"gave up after {self.attempt} attempts "
                    f"({_count_reasons(list(self.reasons))}): {where}")
        if self.kind == "deferred":
            return (f"deferred: the server asked to come back in {self.delay_seconds:.0f} s "
                    f"(Retry-After: {self.retry_after}): {where}")
        return f"{self.kind}: {self.reason}: {where}"


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


class _Retryable(Exception):
    """One failed attempt that may be retried; ``error`` is what to raise if it is the last."""

    def __init__(self, reason: str, error: Exception, *, status_code: int | None = None,
                 retry_after: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.error = error
        self.status_code = status_code
        self.retry_after = retry_after


# --------------------------------------------------------------------------- host gates


class _LocalGate:
    """Per-host slots and interval for the threads of this process (no state directory)."""

    _registry: ClassVar[dict[tuple[str, int], tuple]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def _host(self, key: str, limit: int):
        with self._registry_lock:
            entry = self._registry.get((key, limit))
            if entry is None:
                entry = (threading.BoundedSemaphore(limit), threading.Lock(), [0.0])
                self._registry[(key, limit)] = entry
            return entry

    @contextmanager
    def hold(self, key: str, limit: int, interval: float, max_wait: float, sleep) -> Iterator[float]:
        sem, lock, last = self._host(key, limit)
        started = time.monotonic()
        if not sem.acquire(timeout=max_wait):
            raise _SlotTimeout(key, limit, max_wait)
        try:
            waited = time.monotonic() - started
            if interval > 0:
                with lock:
                    wait = min(interval, last[0] + interval - time.time())
                    if wait > 0:
                        sleep(wait)
                        waited += wait
                    last[0] = time.time()
            yield waited
        finally:
            sem.release()


class _FileGate:
    """Per-host slots and interval shared by every process using the same state directory."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)

    def _path(self, name: str) -> str:
        # Made every time: someone may clean the folder while a long harvest runs.
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return str(self.state_dir / name)

    def _take_slot(self, key: str, limit: int, max_wait: float, sleep) -> int:
        deadline = time.monotonic() + max_wait
        pause = 0.01
        while True:
            for i in range(limit):
                fd = os.open(self._path(f"{key}.slot{i}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as e:
                    os.close(fd)
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                    continue
                return fd
            if time.monotonic() >= deadline:
                raise _SlotTimeout(key, limit, max_wait)
            sleep(pause * (0.5 + random.random()))
            pause = min(0.1, pause * 1.5)

    def _stamp(self, key: str, interval: float, sleep) -> float:
        fd = os.open(self._path(f"{key}.last"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 64, 0)
            try:
                last = float(raw.decode("ascii").strip() or 0)
            except (UnicodeDecodeError, ValueError):
                last = 0.0
            # min(interval, ...): a clock that stepped back must not block for longer.
            wait = min(interval, last + interval - time.time())
            if wait > 0:
                sleep(wait)
            stamp = f"{time.time():.6f}\n".encode("ascii")
            os.pwrite(fd, stamp.ljust(32), 0)
            return max(0.0, wait)
        finally:
            os.close(fd)  # closing drops the flock

    @contextmanager
    def hold(self, key: str, limit: int, interval: float, max_wait: float, sleep) -> Iterator[float]:
        started = time.monotonic()
        fd = self._take_slot(key, limit, max_wait, sleep)
        try:
            waited = time.monotonic() - started
            if interval > 0:
                waited += self._stamp(key, interval, sleep)
            yield waited
        finally:
            os.close(fd)


class _SlotTimeout(Exception):
    def __init__(self, key: str, limit: int, waited: float):
        super().__init__(key)
        self.key, self.limit, self.waited = key, limit, waited


# ------------------------------------------------------------------------------ transport


class Transport:
    """Sends requests with retries, per-host politeness and size caps (see the module doc).

    ``http``: an :class:`~harvest_pipeline.sources.registry.HttpSettings` (None: its defaults
    with ``max_retries=0``, i.e. one attempt). ``state_dir``: where the per-host lock files
    live (None: in-process locks). ``headers`` go with every request (User-Agent defaults to
    ``user_agent``); ``auth`` is anything requests accepts. ``on_event`` is called with each
    :class:`TransportEvent`. ``sleep`` and ``rng`` are injectable for tests.
    """

    def __init__(
        self,
        http: HttpSettings | None = None,
        *,
        session: requests.Session | None = None,
        headers: Mapping[str, str] | None = None,
        auth=None,
        state_dir: str | Path | None = None,
        user_agent: str = DEFAULT_USER_AGENT,
        timeout: float | None = None,
        max_body_bytes: int | None = None,
        sniff_gzip: bool = True,
        on_event: Callable[[TransportEvent], None] | None = None,
        slot_wait_seconds: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
    ):
        if http is None:
            from harvest_pipeline.sources.registry import HttpSettings

            http = HttpSettings(max_retries=0)
        self.http = http
        self.session = session if session is not None else requests.Session()
        self._own_session = session is None
        self.headers = {"User-Agent": user_agent, **dict(headers or {})}
        self.auth = auth
        self.timeout = float(timeout if timeout is not None else http.timeout_seconds)
        cap = int(http.max_response_mb * 1024 * 1024)
        self.max_body_bytes = min(cap, max_body_bytes) if max_body_bytes else cap
        self.sniff_gzip = sniff_gzip
        self.on_event = on_event
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self._gate = _FileGate(self.state_dir) if self.state_dir is not None else _LocalGate()
        self.slot_wait_seconds = (
            slot_wait_seconds if slot_wait_seconds is not None else max(300.0, 12 * self.timeout)
        )
        self._sleep = sleep
        self._rng = rng
        self.events: deque[TransportEvent] = deque(maxlen=10_000)
        self.stats = {"requests": 0, "attempts": 0, "retries": 0, "polite_wait_seconds": 0.0,
                      "retry_wait_seconds": 0.0}
        self._secrets: list[str] = []
        self._collect_secrets(self.auth, self.headers)

    def __repr__(self) -> str:
        return f"Transport(max_retries={self.http.max_retries}, state_dir={self.state_dir})"

    def close(self) -> None:
        if self._own_session:
            self.session.close()

    # ------------------------------------------------------------------------- redaction

    def _collect_secrets(self, auth, headers: Mapping[str, str] | None) -> None:
        found = []
        if isinstance(auth, tuple | list) and len(auth) == 2:
            found += [str(auth[0]), str(auth[1])]
        else:
            for attr in ("username", "password", "token", "key"):
                v = getattr(auth, attr, None)
                if isinstance(v, str | bytes):
                    found.append(v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
        for name, value in (headers or {}).items():
            if name.lower() in _HARMLESS_HEADERS or value is None:
                continue
            value = str(value)
            found.append(value)
            scheme, _, rest = value.partition(" ")  # "Bearer abc" -> also "abc"
            if rest and scheme.isalpha():
                found.append(rest)
        for s in found:
            if len(s) >= 3 and s not in self._secrets:
                self._secrets.append(s)
        self._secrets.sort(key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` without credentials: URL userinfo, API-key query values, auth and secret
        header values (see the module doc)."""
        text = redact_url(str(text))
        for s in self._secrets:
            if s in text:
                text = text.replace(s, "***")
        return text

    # ---------------------------------------------------------------------------- events

    def _emit(self, event: TransportEvent) -> None:
        self.events.append(event)
        level = logging.INFO if event.kind == "recovered" else logging.WARNING
        log.log(level, "%s", event)
        if self.on_event is not None:
            self.on_event(event)

    def drain_events(self) -> list[TransportEvent]:
        """Every event since the last drain (oldest first), and forget them."""
        out = list(self.events)
        self.events.clear()
        return out

    def drain_warnings(self) -> list[str]:
        """One line per request that needed retries, gave up or was deferred; then forget."""
        return [str(e) for e in self.drain_events() if e.kind != "retry"]

    # --------------------------------------------------------------------------- request

    def get(self, url: str, *, params=None, **kw) -> TransportResponse:
        return self.request("GET", url, params=params, **kw)

    def post(self, url: str, *, data=None, **kw) -> TransportResponse:
        return self.request("POST", url, data=data, **kw)

    def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        data=None,
        headers: Mapping[str, str] | None = None,
        expect_body: bool = True,
        display_url: str | None = None,
    ) -> TransportResponse:
        """Send one request with retries; return the complete response or raise.

        ``display_url`` is what messages show (default: the GET URL with ``params``, or the URL
        plus the form-encoded ``data`` for a POST of a mapping); credentials are always removed.
        ``expect_body``: an empty (or whitespace-only) 2xx body counts as a failed attempt.
        """
        method = method.upper()
        url, url_auth = strip_credentials(url)
        auth = self.auth if self.auth is not None else url_auth
        if url_auth:
            self._collect_secrets(url_auth, None)
        req_headers = {**self.headers, **dict(headers or {})}
        req_headers["Accept-Encoding"] = "gzip, deflate"
        if headers:
            self._collect_secrets(None, headers)
        if display_url is None:
            display_url = self._display_url(method, url, params, data)
        shown = self.redact(strip_credentials(display_url)[0])
        key = host_key(url)
        http = self.http
        max_attempts = http.max_retries + 1
        reasons: list[str] = []
        self.stats["requests"] += 1
        for attempt in range(1, max_attempts + 1):
            self.stats["attempts"] += 1
            try:
                resp = self._attempt(method, url, params, data, req_headers, auth, shown,
                                     expect_body, key)
            except _Retryable as r:
                reasons.append(r.reason)
                if r.retry_after is not None:
                    asked = parse_retry_after(r.retry_after)
                else:
                    asked = None
                if asked is not None and asked > http.retry_after_cap_seconds:
                    self._emit(TransportEvent("deferred", method, shown, attempt, max_attempts,
                                              reason=r.reason, reasons=tuple(reasons),
                                              status_code=r.status_code,
                                              retry_after=r.retry_after, delay_seconds=asked))
                    raise DeferredError(
                        f"the server asked us to come back later ({r.reason}, Retry-After: "
                        f"{r.retry_after}, i.e. in {asked:.0f} s), longer than the "
                        f"{http.retry_after_cap_seconds:g} s we wait in a run",
                        retry_after_seconds=asked,
                        url=shown,
                        hint="the window is deferred, not failed: run it again after that "
                             "time (the sensor retries it), or raise "
                             "http.retry_after_cap_seconds for this source",
                    ) from r.error
                if attempt >= max_attempts:
                    if max_attempts > 1:
                        self._emit(TransportEvent("gave_up", method, shown, attempt,
                                                  max_attempts, reason=r.reason,
                                                  reasons=tuple(reasons),
                                                  status_code=r.status_code,
                                                  retry_after=r.retry_after))
                    raise self._final_error(r, reasons, max_attempts, shown) from r.__cause__
                delay = asked if asked is not None else self._backoff(attempt)
                self.stats["retries"] += 1
                self.stats["retry_wait_seconds"] += delay
                self._emit(TransportEvent("retry", method, shown, attempt, max_attempts,
                                          reason=r.reason, status_code=r.status_code,
                                          retry_after=r.retry_after, delay_seconds=delay))
                if delay > 0:
                    self._sleep(delay)
                continue
            resp.attempts = attempt
            if reasons:
                self._emit(TransportEvent("recovered", method, shown, attempt, max_attempts,
                                          reasons=tuple(reasons)))
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    def _backoff(self, attempt: int) -> float:
        h = self.http
        ceiling = min(h.backoff_max_seconds, h.backoff_base_seconds * (2 ** (attempt - 1)))
        return self._rng() * ceiling

    @staticmethod
    def _display_url(method: str, url: str, params, data) -> str:
        if params:
            p = requests.models.PreparedRequest()
            p.prepare_url(url, dict(params))
            return p.url
        if method == "POST" and isinstance(data, Mapping) and data:
            return url + ("&" if "?" in url else "?") + urlencode(list(data.items()))
        return url

    def _final_error(self, r: _Retryable, reasons: list[str], max_attempts: int,
                     shown: str) -> Exception:
        """The last attempt's error, its message extended with the retry history."""
        err = r.error
        if max_attempts > 1 and isinstance(err, TransportError):
            err.message = (f"{err.message}; gave up after {max_attempts} attempts "
                           f"({_count_reasons(reasons)})")
            err.hint = ("the server kept failing; the window can simply be run again later "
                        "(the sensor retries it). If it persists, check the server, or raise "
                        "http.max_retries / http.timeout_seconds for this source")
        return err

    # --------------------------------------------------------------------------- attempt

    def _attempt(self, method, url, params, data, headers, auth, shown, expect_body,
                 key) -> TransportResponse:
        h = self.http
        try:
            with self._gate.hold(key, h.max_concurrent_requests, h.min_request_interval_seconds,
                                 self.slot_wait_seconds, self._sleep) as waited:
                self.stats["polite_wait_seconds"] += waited
                return self._send_and_read(method, url, params, data, headers, auth, shown,
                                           expect_body)
        except _SlotTimeout as e:
            raise TransportError(
                f"waited {e.waited:.0f} s for one of the {e.limit} request slot(s) of host "
                f"{e.key}, held by other harvests",
                url=shown,
                hint=f"other processes keep requests to this host in flight; let them finish, "
                     f"or raise http.max_concurrent_requests. Slot files: "
                     f"{self.state_dir or '(in-process)'}",
            ) from None

    def _send_and_read(self, method, url, params, data, headers, auth, shown,
                       expect_body) -> TransportResponse:
        started = time.monotonic()
        try:
            resp = self.session.request(
                method, url, params=params, data=data, headers=headers, auth=auth,
                timeout=(self.timeout, self.timeout), stream=True, allow_redirects=True,
            )
        except requests.Timeout as e:
            what = "could not connect" if isinstance(e, requests.ConnectTimeout) else "no answer"
            raise _Retryable(type(e).__name__, TransportError(
                f"{what} within {self.timeout:g} s ({type(e).__name__})", url=shown,
                hint="the server may be slow on big pages; retry later or raise "
                     "http.timeout_seconds",
            )) from e
        except requests.RequestException as e:
            raise _Retryable(type(e).__name__, TransportError(
                self.redact(f"request failed: {type(e).__name__}: {e}"), url=shown,
                hint="check that the server is up and the URL is right",
            )) from e
        try:
            status = resp.status_code
            if not 200 <= status < 300:
                return self._status_error(resp, status, shown)
            return self._read_body(resp, shown, expect_body, started)
        finally:
            resp.close()

    def _status_error(self, resp, status: int, shown: str):
        retry_after = resp.headers.get("Retry-After")
        reason = (resp.reason or _REASONS.get(status, "")).strip()
        msg = f"HTTP {status} {reason}".rstrip()
        if retry_after:
            msg += f" (Retry-After: {retry_after})"
        hint = None
        if status in (401, 403):
            hint = "check the credentials of this source (auth / headers_from_env)"
        elif status == 404:
            hint = "check the source's base URL"
        err = HTTPStatusError(self.redact(msg), status_code=status, retry_after=retry_after,
                              url=shown, hint=hint)
        if status in RETRY_STATUSES:
            raise _Retryable(f"HTTP {status}", err, status_code=status, retry_after=retry_after)
        raise err

    def _read_body(self, resp, shown: str, expect_body: bool, started: float) -> TransportResponse:
        cap = self.max_body_bytes
        encoding = (resp.headers.get("Content-Encoding") or "").strip().lower()
        declared = resp.headers.get("Content-Length")
        raw = getattr(resp, "raw", None)
        if raw is None or not hasattr(raw, "stream"):
            # An adapter that already holds the body (tests, caches): no wire-level checks.
            body = resp.content or b""
            raw_bytes = len(body)
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
            decoder = _Decoder(encoding, shown)
            parts: list[bytes] = []
            total = 0
            raw_bytes = 0
            deadline = started + self.timeout * _BODY_DEADLINE_FACTOR
            try:
                for chunk in raw.stream(_CHUNK, decode_content=False):
                    raw_bytes += len(chunk)
                    out = decoder.feed(chunk, cap - total + 1)
                    total += len(out)
                    if total > cap:
                        raise self._too_large(shown, cap, decoder.note)
                    parts.append(out)
                    if time.monotonic() > deadline:
                        raise _Retryable("body too slow", TransportError(
                            f"the body was still arriving after "
                            f"{self.timeout * _BODY_DEADLINE_FACTOR:g} s", url=shown,
                            hint="the server sends very slowly; retry later or raise "
                                 "http.timeout_seconds"))
                tail = decoder.finish(cap - total + 1)
            except urllib3.exceptions.ReadTimeoutError as e:
                raise _Retryable("ReadTimeout", TransportError(
                    f"no answer within {self.timeout:g} s while reading the body (ReadTimeout)",
                    url=shown, hint="the server stalled mid-body; retry later or raise "
                                    "http.timeout_seconds")) from e
            except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
                raise _Retryable("truncated body", TransportError(
                    self.redact(f"the connection broke while reading the body after "
                                f"{raw_bytes} bytes ({type(e).__name__}: {e})"),
                    url=shown, hint="a network or server hiccup; retry later")) from e
            total += len(tail)
            if total > cap:
                raise self._too_large(shown, cap, decoder.note)
            parts.append(tail)
            body = b"".join(parts)
            if declared is not None:
                try:
                    want = int(declared)
                except ValueError:
                    want = None
                if want is not None and raw_bytes < want:
                    raise _Retryable("truncated body", TransportError(
                        f"truncated body: {raw_bytes} of {want} bytes (Content-Length)",
                        url=shown, hint="a network or server hiccup; retry later"))
            if decoder.truncated:
                raise _Retryable("truncated body", TransportError(
                    f"truncated body: the {encoding} stream ends early", url=shown,
                    hint="a network or server hiccup; retry later"))
            decoded_as = decoder.encoding
            # Keep requests' view consistent (and let close() return the connection to the pool).
            resp._content = body
            resp._content_consumed = True
        sniffed = False
        if self.sniff_gzip and body[:2] == _GZIP_MAGIC:
            body = self._gunzip_sniffed(body, shown, cap)
            sniffed = True
        if expect_body and not body.strip():
            raise _Retryable("empty body", TransportError(
                "the server answered with an empty body", url=shown,
                hint="a server hiccup; retry later"))
        return TransportResponse(
            url=shown, status_code=resp.status_code, reason=resp.reason or "",
            headers=resp.headers, content=body, encoding=decoded_as, sniffed_gzip=sniffed,
            raw_bytes=raw_bytes,
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
            raise _Retryable("truncated body", TransportError(
                "truncated body: the gzip-compressed body (no Content-Encoding header) ends "
                "early", url=shown, hint="a network or server hiccup; retry later"))
        return out


class _Decoder:
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
