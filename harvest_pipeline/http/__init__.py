"""The HTTP transport under every protocol client (OAI-PMH and CSW); no Dagster, no XML.

:class:`Transport` (:mod:`.transport`) sends one logical request and returns the whole body, or
raises one :class:`~harvest_pipeline.errors.HarvestError`. Each concern has its module:

* :mod:`.retries`: what is retried, backoff and Retry-After, deferral, :class:`TransportEvent`;
* :mod:`.politeness`: per-host request slots and minimum interval, shared across processes;
* :mod:`.body`: streamed reading, Content-Encoding decoding, size caps, truncation;
* :mod:`.redaction`: credentials never shown in messages, events or logs;
* :mod:`.environment`: proxies, CA bundle and netrc from the environment, read once per origin.
"""

import importlib

# Imported on first use (requests is not needed to load the definitions).
_EXPORTS = {
    "TransportResponse": "harvest_pipeline.http.body",
    "host_key": "harvest_pipeline.http.politeness",
    "redact_url": "harvest_pipeline.http.redaction",
    "strip_credentials": "harvest_pipeline.http.redaction",
    "RETRY_STATUSES": "harvest_pipeline.http.retries",
    "TransportEvent": "harvest_pipeline.http.retries",
    "parse_retry_after": "harvest_pipeline.http.retries",
    "DEFAULT_USER_AGENT": "harvest_pipeline.http.transport",
    "Transport": "harvest_pipeline.http.transport",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
