"""Which failures are retried, how long to wait (backoff, Retry-After), and the events they make.

A request is attempted at most ``1 + max_retries`` times. Retried: connection errors,
connect/read timeouts, truncated bodies (fewer bytes than Content-Length, a chunked body cut off,
a gzip stream that stops early), an empty body where one is expected, and HTTP 429, 500, 502, 503
and 504. The wait before attempt ``k + 1`` is full-jitter exponential backoff,
``uniform(0, min(backoff_max_seconds, backoff_base_seconds * 2**(k-1)))``, unless the answer
carried ``Retry-After`` (delta-seconds or an HTTP-date): then exactly that long. A Retry-After
longer than ``retry_after_cap_seconds`` is not waited out: the request raises
:class:`~harvest_pipeline.errors.DeferredError` (``.retry_after_seconds``) at once, so the caller
can mark the window deferred instead of failed. Any other non-2xx raises
:class:`~harvest_pipeline.errors.HTTPStatusError` at once. When retries run out, the last failure
is raised (an ``HTTPStatusError`` for a status), its message naming the URL, the attempts and
every reason.

Every retry, every request that succeeded only after retries, every give-up and every deferral
becomes a :class:`TransportEvent`.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harvest_pipeline.sources.registry import HttpSettings

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Reason phrases for the retried statuses, for servers that send none.
STATUS_REASONS = {
    429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
}


class Retryable(Exception):
    """One failed attempt that may be retried; ``error`` is what to raise if it is the last."""

    def __init__(self, reason: str, error: Exception, *, status_code: int | None = None,
                 retry_after: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.error = error
        self.status_code = status_code
        self.retry_after = retry_after


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


def backoff_seconds(http: HttpSettings, attempt: int, rng) -> float:
    """Full-jitter exponential backoff after failed attempt ``attempt`` (1-based)."""
    ceiling = min(http.backoff_max_seconds, http.backoff_base_seconds * (2 ** (attempt - 1)))
    return rng() * ceiling


def count_reasons(reasons: list[str]) -> str:
    """``"HTTP 503 x2, ReadTimeout x1"``: each reason once, with how often it happened."""
    out: dict[str, int] = {}
    for r in reasons:
        out[r] = out.get(r, 0) + 1
    return ", ".join(f"{r} x{n}" for r, n in out.items())


@dataclass(frozen=True)
class TransportEvent:
    """Something the caller may want to record about one request.

    ``kind``: ``"retry"`` (attempt ``attempt`` failed, the next starts in ``delay_seconds``),
    ``"recovered"`` (the request succeeded on attempt ``attempt`` after the failures in
    ``reasons``), ``"gave_up"`` (all attempts failed; the error follows), ``"deferred"`` (the
    server's Retry-After exceeds the cap; DeferredError follows), ``"redirect"`` (the request
    was redirected; ``reason`` says from where to where) or ``"quirk"`` (a server bug was worked
    around; ``reason`` names it). ``url`` is redacted.
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
            return f"retried {n}x ({count_reasons(list(self.reasons))}), then succeeded: {where}"
        if self.kind == "gave_up":
            return (f"gave up after {self.attempt} attempts "
                    f"({count_reasons(list(self.reasons))}): {where}")
        if self.kind in ("redirect", "quirk"):
            return f"{self.reason}: {where}"
        if self.kind == "deferred":
            return (f"deferred: the server asked to come back in {self.delay_seconds:.0f} s "
                    f"(Retry-After: {self.retry_after}): {where}")
        return f"{self.kind}: {self.reason}: {where}"
