"""Every error the harvester raises on purpose, each able to say where it happened and what to do."""

from __future__ import annotations


class HarvestError(Exception):
    """Base error. `str()` names source, window and URL when known, and a hint for the operator.

    `str()` is redacted: no configured secret (see :mod:`harvest_pipeline.http.redaction`) ever
    leaves through an error, whatever text the server echoed into it.
    """

    def __init__(
        self,
        message: str,
        *,
        source_id: str | None = None,
        window: str | None = None,
        url: str | None = None,
        hint: str | None = None,
    ):
        super().__init__(_redacted(message))
        self.message = message
        self.source_id = source_id
        self.window = window
        self.url = url
        self.hint = hint

    def with_context(self, *, source_id=None, window=None, url=None, hint=None) -> "HarvestError":
        """Fill in context that a lower layer did not know (keeps what is already set)."""
        self.source_id = self.source_id or source_id
        self.window = self.window or window
        self.url = self.url or url
        self.hint = self.hint or hint
        return self

    def __str__(self) -> str:
        parts = [self.message]
        where = []
        if self.source_id:
            where.append(f"source={self.source_id}")
        if self.window:
            where.append(f"window={self.window}")
        if self.url:
            where.append(f"url={self.url}")
        if where:
            parts.append("(" + ", ".join(where) + ")")
        if self.hint:
            parts.append("- " + self.hint)
        return _redacted(" ".join(parts))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


def _redacted(text: str) -> str:
    from harvest_pipeline.http.redaction import redact_text  # late: http imports this module

    return redact_text(text)


class ConfigError(HarvestError):
    """The sources file is wrong; the message names the source and the field."""


class ProtocolError(HarvestError):
    """The server answered something the protocol does not allow, or we cannot read."""


class OAIError(ProtocolError):
    """An OAI-PMH <error code="..."> answer."""

    def __init__(self, code: str, message: str, **kw):
        super().__init__(f"OAI-PMH error {code}: {message}".strip(), **kw)
        self.code = code


class BadResumptionToken(OAIError):
    """The server no longer accepts the token (expired or unknown): restart the window."""


class NoRecordsMatch(OAIError):
    """noRecordsMatch: an empty list, which the client turns into an empty window."""


class IdDoesNotExist(OAIError):
    """idDoesNotExist for GetRecord."""


class XMLSecurityError(ProtocolError):
    """The response carries a DTD or entity declarations; we refuse to parse it."""


class MalformedXMLError(ProtocolError):
    """The response is not well-formed XML."""


class TransportError(HarvestError):
    """HTTP-level failure (connection, timeout, status code)."""


class StoreLockedError(HarvestError):
    """The DuckDB file stayed locked by another process longer than we were willing to wait."""


class WindowBusyError(StoreLockedError):
    """Another run holds the window's lock: this run never owned the window and changes nothing."""


class HTTPStatusError(TransportError):
    """The server answered with a non-2xx HTTP status. Carries what a retry layer needs."""

    def __init__(self, message: str, *, status_code: int, retry_after: str | None = None, **kw):
        super().__init__(message, **kw)
        self.status_code = status_code
        self.retry_after = retry_after  # the raw Retry-After header (seconds or an HTTP-date)


class DeferredError(HarvestError):
    """The server asked us to come back later than we are willing to wait (Retry-After beyond
    the cap, or its clock is behind the window's end): the window is deferred, not failed."""

    def __init__(self, message: str, *, retry_after_seconds: float, response_date: str | None = None, **kw):
        super().__init__(message, **kw)
        self.retry_after_seconds = retry_after_seconds
        self.response_date = response_date  # the server's clock, when it is the reason


class ResponseTooLarge(TransportError):
    """A response body (after decompression) exceeded the source's `http.max_response_mb`."""

    def __init__(self, message: str, *, limit_bytes: int, **kw):
        super().__init__(message, **kw)
        self.limit_bytes = limit_bytes


class BudgetExceeded(ProtocolError):
    """A traversal went beyond its budget (pages, records, time, token length) or looped; the
    message names the guard (see the README's fault matrix)."""

    def __init__(self, guard: str, message: str, **kw):
        super().__init__(f"guard '{guard}': {message}", **kw)
        self.guard = guard
