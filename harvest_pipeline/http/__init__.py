"""The HTTP transport under every protocol client (OAI-PMH and CSW); no Dagster, no XML.

:class:`Transport` (:mod:`.transport`) sends one logical request and returns the whole body, or
raises one :class:`~harvest_pipeline.errors.HarvestError`. Each concern has its module:

* :mod:`.retries`: what is retried, backoff and Retry-After, deferral, :class:`TransportEvent`;
* :mod:`.politeness`: per-host request slots and minimum interval, shared across processes;
* :mod:`.body`: streamed reading, Content-Encoding decoding, size caps, truncation;
* :mod:`.redaction`: credentials never shown in messages, events or logs.
"""

from harvest_pipeline.http.body import TransportResponse
from harvest_pipeline.http.politeness import host_key
from harvest_pipeline.http.redaction import redact_url, strip_credentials
from harvest_pipeline.http.retries import RETRY_STATUSES, TransportEvent, parse_retry_after
from harvest_pipeline.http.transport import DEFAULT_USER_AGENT, Transport

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
