"""Credentials never shown: URL userinfo, API-key query values, auth and secret header values.

``user:password@`` in a URL is moved into the request's auth (:func:`strip_credentials`). Every
message the transport produces (exceptions, events, logs) goes through :meth:`Redactor.redact`,
which removes userinfo in URLs, ``api_key``/``apikey``/``access_token`` query values, the
basic-auth user and password, and the values of every request header except a few harmless ones
(User-Agent, Accept, ...), such as ``Authorization`` or ``X-Api-Key``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

# Header values that are never secret and stay readable in messages.
HARMLESS_HEADERS = frozenset({
    "user-agent", "accept", "accept-encoding", "accept-language", "content-type", "connection",
    "cache-control", "pragma", "if-modified-since", "if-none-match",
})
_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_SECRET_QUERY_RE = re.compile(r"(?i)([?&](?:api[_-]?key|apikey|access[_-]?token)=)[^&#\s]+")


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


class Redactor:
    """The secrets one transport sends, and :meth:`redact` to take them out of any text."""

    def __init__(self) -> None:
        self._secrets: list[str] = []

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
        header values."""
        text = redact_url(str(text))
        for s in self._secrets:
            if s in text:
                text = text.replace(s, "***")
        return text
