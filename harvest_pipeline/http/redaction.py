"""Credentials never shown: URL userinfo, secret query values, auth and secret header values.

``user:password@`` in a URL is moved into the request's auth (:func:`strip_credentials`).

Secret *values* are kept in one registry per process (:func:`register_secret`), filled from
every source's configuration when it is loaded or used (``headers_from_env`` values, basic-auth
user and password, secret query parameters of its URL, see
:func:`harvest_pipeline.sources.registry.SourceConfig.secret_values`) and from every header and
auth a :class:`Redactor` is given. :func:`redact_text` replaces each of them with ``***``,
whatever the parameter or header it came under, and also removes URL userinfo and the values of
query parameters whose names look secret (``api_key``, ``token``, ``secret``, ``password``,
``sig`` ...; not ``resumptionToken``). It runs wherever text leaves the process or is stored:
every :class:`~harvest_pipeline.errors.HarvestError` message, transport events and logs, the
ledger's errors and warnings, reconciliation reasons, ``status`` output, and the log records of
urllib3 and requests (:func:`redact_library_logs`, which log every URL at DEBUG).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, quote_plus, unquote, urlsplit, urlunsplit

# Header values that are never secret and stay readable in messages.
HARMLESS_HEADERS = frozenset({
    "user-agent", "accept", "accept-encoding", "accept-language", "content-type", "connection",
    "cache-control", "pragma", "if-modified-since", "if-none-match",
})
# Query parameter names whose values are treated as secrets (case-insensitive, anywhere in the
# name: api_key, apiKey, subscription-key, access_token, token, client_secret, password, sig...).
SECRET_NAME_RE = re.compile(r"(?i)(key|token|secret|passw|pwd|sig|auth|credential)")
NOT_SECRET_NAMES = frozenset({"resumptiontoken"})
# Shorter values are not registered: replacing them everywhere would garble every message.
MIN_SECRET_LENGTH = 3

_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_QUERY_PAIR_RE = re.compile(r"([?&;])([^=&#\s?;]+)=([^&#\s;]*)")

_lock = threading.Lock()
_secrets: list[str] = []  # longest first, so a secret containing another is replaced whole


def is_secret_name(name: str) -> bool:
    """Whether a query parameter of this name carries a secret value."""
    name = unquote(name)
    return name.lower() not in NOT_SECRET_NAMES and bool(SECRET_NAME_RE.search(name))


def register_secret(value) -> None:
    """Remember a secret value: from now on :func:`redact_text` replaces it everywhere."""
    if value is None:
        return
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    value = str(value)
    if len(value) < MIN_SECRET_LENGTH:
        return
    found = {value}
    scheme, _, rest = value.partition(" ")  # "Bearer abc" -> also "abc"
    if rest and scheme.isalpha() and len(rest) >= MIN_SECRET_LENGTH:
        found.add(rest)
    for v in list(found):  # how it looks inside a URL, too
        quoted = _url_quoted(v)
        if quoted != v:
            found.add(quoted)
    with _lock:
        new = [v for v in found if v not in _secrets]
        if new:
            _secrets.extend(new)
            _secrets.sort(key=len, reverse=True)


def register_secrets(values: Iterable) -> None:
    for v in values:
        register_secret(v)


def _url_quoted(value: str) -> str:
    return quote_plus(value, safe="")


def secret_query_values(url: str, names: Iterable[str] = ()) -> list[str]:
    """The values of ``url``'s query parameters that are secrets: a name that looks secret (see
    :func:`is_secret_name`) or one of ``names``."""
    wanted = {n.lower() for n in names}
    out = []
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=False):
        if name.lower() in wanted or is_secret_name(name):
            out.append(value)
    return out


def strip_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """Remove ``user:password@`` from a URL; return the clean URL and the (user, password)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    clean = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return clean, (unquote(user), unquote(password))


def _redact_pair(m: re.Match) -> str:
    sep, name, value = m.groups()
    if value and is_secret_name(name):
        return f"{sep}{name}=***"
    return m.group(0)


def redact_url(text: str) -> str:
    """Remove URL userinfo and the values of secret-looking query parameters from any text."""
    text = _USERINFO_RE.sub(r"\1***@", text)
    return _QUERY_PAIR_RE.sub(_redact_pair, text)


def redact_text(text) -> str:
    """``text`` without credentials: URL userinfo, secret-looking query values, and every secret
    value registered in this process."""
    text = redact_url(str(text))
    with _lock:
        secrets = list(_secrets)
    for s in secrets:
        if s in text:
            text = text.replace(s, "***")
    return text


class RedactingFilter(logging.Filter):
    """Redacts a log record's text before any handler sees it (urllib3 logs every URL at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


# Libraries under the transport that put URLs (with their query strings) into log records.
LIBRARY_LOGGERS = ("urllib3.connectionpool", "urllib3.connection", "urllib3.response",
                   "urllib3.util.retry", "urllib3.poolmanager", "requests")
_FILTER = RedactingFilter()


def redact_library_logs() -> None:
    """Put the redacting filter on the loggers of urllib3 and requests (idempotent)."""
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


class Redactor:
    """The secrets one transport sends (registered process-wide), and :meth:`redact`."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()

    def collect(self, auth, headers: Mapping[str, str] | None) -> None:
        """Remember the secrets in ``auth`` (a pair or an auth object) and in ``headers``."""
        found = []
        if isinstance(auth, tuple | list) and len(auth) == 2:
            found += [str(auth[0]), str(auth[1])]
        else:
            for attr in ("username", "password", "token", "key"):
                v = getattr(auth, attr, None)
                if isinstance(v, str | bytes):
                    found.append(v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
        for name, value in (headers or {}).items():
            if name.lower() in HARMLESS_HEADERS or value is None:
                continue
            found.append(str(value))
        for s in found:
            self._secrets.add(s)
            register_secret(s)

    def secret_header_names(self, headers: Mapping[str, str]) -> list[str]:
        """The names of ``headers`` that carry secrets (everything but the harmless ones)."""
        return [n for n in headers if n.lower() not in HARMLESS_HEADERS]

    def redact(self, text: str) -> str:
        """``text`` without credentials (see :func:`redact_text`)."""
        return redact_text(text)
