"""The session and request entry point: one logical request in, the whole body (or one error) out.

:class:`Transport` sends one logical request (GET or POST) and returns the whole body as bytes,
or raises one :class:`~harvest_pipeline.errors.HarvestError`. It puts the package's concerns
together around each attempt: the retry loop (:mod:`.retries`), the per-host gate
(:mod:`.politeness`), the body reader (:mod:`.body`) and redaction (:mod:`.redaction`).

Each attempt has one wall-clock deadline, headers and body included
(``http.request_deadline_seconds``, see :mod:`.deadline`); a caller bounding a whole traversal
sets :meth:`Transport.set_time_budget`, and no attempt, retry or wait then runs past it.

Redirects are followed here, not by requests: same-origin ones (and ``http`` -> ``https`` on the
same host), or any when ``http.allow_cross_origin_redirects`` is set; a redirect to another
origin never carries the source's secrets (secret headers, auth, secret query values). Every
redirect is an event, hence a warning on the window (a permanent one says to update the URL).

Events go to the ``on_event`` callback (if given), to the logger ``harvest_pipeline.http``
(WARNING for retries and give-ups), and into ``Transport.events``.
``Transport.drain_warnings()`` returns (and forgets) one line per affected request, e.g.
``"retried 3x (HTTP 503 x3), then succeeded: GET http://..."``, ready to be stored as a window
warning. ``Transport.stats`` counts requests, attempts, retries and seconds spent waiting.

One :class:`requests.Session` per transport (keep-alive); a session passed in keeps its
headers and adapters, except that requests' default adapters are replaced by the deadline-aware
:class:`~.deadline.DeadlineAdapter` (headers go with each request), and that the environment
(proxies, CA bundle, netrc) is read once per origin by :mod:`.environment`, not by requests on
each request.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import requests

from harvest_pipeline.errors import BudgetExceeded, DeferredError, HTTPStatusError, TransportError
from harvest_pipeline.http import deadline as deadlines
from harvest_pipeline.http.body import BodyReader, DeadlinePassed, TransportResponse
from harvest_pipeline.http.environment import OriginEnvironment
from harvest_pipeline.http.politeness import SlotTimeout, gate_for, host_key
from harvest_pipeline.http.redaction import (
    HARMLESS_HEADERS,
    Redactor,
    is_secret_name,
    redact_library_logs,
    redact_text,
    strip_credentials,
)
from harvest_pipeline.http.retries import (
    RETRY_STATUSES,
    STATUS_REASONS,
    Retryable,
    TransportEvent,
    backoff_seconds,
    count_reasons,
    parse_retry_after,
)

if TYPE_CHECKING:
    from harvest_pipeline.sources.registry import HttpSettings

log = logging.getLogger("harvest_pipeline.http")

DEFAULT_USER_AGENT = "harvest_pipeline/0.1 (+OAI-PMH harvester)"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
PERMANENT_REDIRECTS = frozenset({301, 308})
MAX_REDIRECTS = 10
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL, the port made explicit."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


def same_origin(a: str, b: str) -> bool:
    """Same scheme, host and port; an upgrade from http to https on the same host counts too."""
    oa, ob = origin(a), origin(b)
    if oa == ob:
        return True
    return (oa[0], ob[0]) == ("http", "https") and oa[1] == ob[1] and (oa[2], ob[2]) == (80, 443)


def without_secret_params(url: str) -> str:
    """``url`` without the query parameters that carry secrets (by name or registered value)."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if not is_secret_name(k) and redact_text(v) == v]
    if len(kept) == len(pairs):
        return url
    return urlunsplit(parts._replace(query=urlencode(kept)))


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
        self._gate = gate_for(self.state_dir)
        self.slot_wait_seconds = (
            slot_wait_seconds if slot_wait_seconds is not None else max(300.0, 12 * self.timeout)
        )
        self._sleep = sleep
        self._rng = rng
        self.events: deque[TransportEvent] = deque(maxlen=10_000)
        self.stats = {"requests": 0, "attempts": 0, "retries": 0, "polite_wait_seconds": 0.0,
                      "retry_wait_seconds": 0.0}
        self._redactor = Redactor()
        self._redactor.collect(self.auth, self.headers)
        self._body = BodyReader(self.max_body_bytes, self.timeout, sniff_gzip, self.redact)
        # One attempt's wall-clock limit (default 10x the silence limit this transport uses).
        self.deadline_seconds = (float(http.request_deadline_seconds)
                                 if http.request_deadline_seconds is not None else 10 * self.timeout)
        self.not_after: float | None = None  # time.monotonic() value: the caller's time budget
        self._budget_label = ""
        # Proxies, CA bundle and netrc from the environment, once per origin, not per request.
        self._environment = OriginEnvironment(self.session, lambda found: self._redactor.collect(found, None))
        deadlines.install(self.session)
        redact_library_logs()

    def __repr__(self) -> str:
        return f"Transport(max_retries={self.http.max_retries}, state_dir={self.state_dir})"

    def close(self) -> None:
        if self._own_session:
            self.session.close()

    # ------------------------------------------------------------------------- redaction

    def redact(self, text: str) -> str:
        """``text`` without credentials (see :mod:`harvest_pipeline.http.redaction`)."""
        return self._redactor.redact(text)

    # ----------------------------------------------------------------------- time budget

    def set_time_budget(self, not_after: float | None, label: str = "the time budget") -> None:
        """No attempt, retry or wait of this transport runs past ``not_after`` (a
        ``time.monotonic()`` value; None lifts it). ``label`` names the budget in the error,
        e.g. ``"traversal.max_seconds (21600 s)"``."""
        self.not_after = not_after
        self._budget_label = label

    def _budget_error(self, shown: str, what: str) -> BudgetExceeded:
        return BudgetExceeded(
            "time-limit", f"{self._budget_label} ran out {what}", url=shown,
            hint="the server is too slow for this budget: run the window again later (the "
                 "pages already received are kept), or raise traversal.max_seconds",
        )

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
            self._redactor.collect(url_auth, None)
        req_headers = {**self.headers, **dict(headers or {})}
        req_headers["Accept-Encoding"] = "gzip, deflate"
        if headers:
            self._redactor.collect(None, headers)
        if display_url is None:
            display_url = self._display_url(method, url, params, data)
        shown = self.redact(strip_credentials(display_url)[0])
        key = host_key(url)
        http = self.http
        max_attempts = http.max_retries + 1
        reasons: list[str] = []
        self.stats["requests"] += 1
        for attempt in range(1, max_attempts + 1):
            if self.not_after is not None and time.monotonic() >= self.not_after:
                raise self._budget_error(shown, "before this request" if attempt == 1 else
                                         f"after {attempt - 1} attempt(s) ({count_reasons(reasons)})")
            self.stats["attempts"] += 1
            try:
                resp = self._attempt(method, url, params, data, req_headers, auth, shown,
                                     expect_body, key)
            except Retryable as r:
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
                delay = asked if asked is not None else backoff_seconds(self.http, attempt, self._rng)
                if self.not_after is not None and time.monotonic() + delay >= self.not_after:
                    raise self._budget_error(
                        shown, f"before the retry after attempt {attempt} ({count_reasons(reasons)})"
                    ) from r.error
                self.stats["retries"] += 1
                self.stats["retry_wait_seconds"] += delay
                self._emit(TransportEvent("retry", method, shown, attempt, max_attempts,
                                          reason=r.reason, status_code=r.status_code,
                                          retry_after=r.retry_after, delay_seconds=delay))
                if delay > 0:
                    self._sleep(delay)
                continue
            resp.attempts = attempt
            for hop in resp.redirects:
                self._emit(TransportEvent("redirect", method, shown, attempt, max_attempts, reason=hop))
            for quirk in resp.quirks:
                self._emit(TransportEvent("quirk", method, shown, attempt, max_attempts, reason=quirk))
            if reasons:
                self._emit(TransportEvent("recovered", method, shown, attempt, max_attempts,
                                          reasons=tuple(reasons)))
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _display_url(method: str, url: str, params, data) -> str:
        if params:
            p = requests.models.PreparedRequest()
            p.prepare_url(url, dict(params))
            return p.url
        if method == "POST" and isinstance(data, Mapping) and data:
            return url + ("&" if "?" in url else "?") + urlencode(list(data.items()))
        return url

    def _final_error(self, r: Retryable, reasons: list[str], max_attempts: int,
                     shown: str) -> Exception:
        """The last attempt's error, its message extended with the retry history."""
        err = r.error
        if max_attempts > 1 and isinstance(err, TransportError):
            err.message = (f"{err.message}; gave up after {max_attempts} attempts "
                           f"({count_reasons(reasons)})")
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
        except SlotTimeout as e:
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
        """One attempt, redirects included, under one wall-clock deadline."""
        at = time.monotonic() + self.deadline_seconds
        cut_by_budget = self.not_after is not None and self.not_after < at
        if cut_by_budget:
            at = self.not_after
        phase = {"name": "the response headers"}
        with deadlines.armed(at) as dl:
            try:
                return self._exchange(method, url, params, data, headers, auth, shown,
                                      expect_body, dl, phase)
            except Exception as e:
                # requests' own timeout is set to the time left, so it can fire a moment before
                # the deadline's timer does: past (or within 20 ms of) the deadline is the deadline.
                if not (dl.fired or isinstance(e, DeadlinePassed) or time.monotonic() >= at - 0.02):
                    raise
                if cut_by_budget:
                    raise self._budget_error(shown, f"while waiting for {phase['name']}") from None
                raise Retryable("deadline", TransportError(
                    f"no complete answer within the request deadline of "
                    f"{self.deadline_seconds:g} s (still waiting for {phase['name']})", url=shown,
                    hint="the server sends very slowly (it trickles the headers or the body); "
                         "retry later, or raise http.request_deadline_seconds for this source",
                )) from None

    def _exchange(self, method, url, params, data, headers, auth, shown, expect_body, dl,
                  phase) -> TransportResponse:
        """Send, follow redirects (see the module doc), read the body of the final answer."""
        hops: list[str] = []
        crossed = False  # once another origin is involved, no secret goes along any more
        for _ in range(MAX_REDIRECTS + 1):
            wait = max(0.001, min(self.timeout, dl.remaining()))
            phase["name"] = "the response headers"
            reach = self._environment.reach(url)
            try:
                resp = self.session.request(
                    method, url, params=params, data=data, headers=headers,
                    auth=auth if auth is not None or self.session.auth else reach.netrc_auth,
                    proxies=reach.proxies, verify=reach.verify,
                    timeout=(wait, wait), stream=True, allow_redirects=False,
                )
            except requests.Timeout as e:
                what = "could not connect" if isinstance(e, requests.ConnectTimeout) else "no answer"
                raise Retryable(type(e).__name__, TransportError(
                    f"{what} within {self.timeout:g} s ({type(e).__name__})", url=shown,
                    hint="the server may be slow on big pages; retry later or raise "
                         "http.timeout_seconds",
                )) from e
            except requests.RequestException as e:
                raise Retryable(type(e).__name__, TransportError(
                    self.redact(f"request failed: {type(e).__name__}: {e}"), url=shown,
                    hint="check that the server is up and the URL is right",
                )) from e
            try:
                status = resp.status_code
                location = resp.headers.get("Location")
                if status in REDIRECT_STATUSES and location:
                    current = resp.url or url
                    target = urljoin(current, location.strip())
                    cross = not same_origin(current, target)
                    kind = "permanent" if status in PERMANENT_REDIRECTS else "temporary"
                    if cross and not self.http.allow_cross_origin_redirects:
                        raise TransportError(
                            self.redact(f"the server redirected (HTTP {status}, {kind}) to "
                                        f"another origin, {target}; not followed"),
                            url=shown,
                            hint="if that is the server's new address, update the source's url; "
                                 "to follow such redirects set http.allow_cross_origin_redirects: "
                                 "true (the source's secrets are never sent to another origin)",
                        )
                    advice = "; update the source's url" if kind == "permanent" else ""
                    hops.append(self.redact(
                        f"redirected (HTTP {status}, {kind}) from {current} to {target}"
                        + (" (another origin: sent without the source's secrets)" if cross else "")
                        + advice))
                    if cross or crossed:
                        crossed = True
                        headers = {k: v for k, v in headers.items()
                                   if k.lower() in HARMLESS_HEADERS}
                        auth = None
                        target = without_secret_params(target)
                    if status == 303 and method != "HEAD":
                        method, data = "GET", None
                    url, params = target, None
                    continue
                if not 200 <= status < 300:
                    return self._status_error(resp, status, shown)
                if not dl.fired:  # a cut-off header block can parse as a short one
                    phase["name"] = "the rest of the body"
                out = self._body.read(resp, shown, expect_body, dl.at)
                out.redirects = hops
                return out
            finally:
                resp.close()
        raise TransportError(f"more than {MAX_REDIRECTS} redirects", url=shown,
                             hint="the server redirects in a loop; check the source's url")

    def _status_error(self, resp, status: int, shown: str):
        retry_after = resp.headers.get("Retry-After")
        reason = (resp.reason or STATUS_REASONS.get(status, "")).strip()
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
            raise Retryable(f"HTTP {status}", err, status_code=status, retry_after=retry_after)
        raise err
