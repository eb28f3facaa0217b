"""What the process environment says about reaching an origin, read once per origin.

requests honours the environment on every request of a session whose ``trust_env`` is set (its
default): the proxy variables (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``),
``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` and ``~/.netrc`` (or ``$NETRC``). It reads them again
for each request: every environment variable twice, and a stat of the netrc files, about 0.3 ms of
CPU per request (a sixth of the transport's own cost; ``bench/ROUNDS.md``, twenty-first round).

The transport turns ``trust_env`` off on its session and passes what :class:`OriginEnvironment`
found instead, by requests' own rules (its helpers), looked up once per scheme, host and port:
what the environment says at a transport's first request to an origin holds for that transport.
Credentials found in a netrc file are handed to the transport's redactor, like configured ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

import requests
from requests.utils import get_environ_proxies, get_netrc_auth


@dataclass(frozen=True)
class Reach:
    """How to send a request to one origin: ``proxies`` (None: direct), ``verify`` (None: the
    session's own), ``netrc_auth`` (None: no netrc entry; used only when nothing else sets auth)."""

    proxies: dict[str, str] | None = None
    verify: str | None = None
    netrc_auth: tuple[str, str] | None = None


_DIRECT = Reach()


class OriginEnvironment:
    """The environment's settings per origin for one session (see the module doc)."""

    def __init__(self, session: requests.Session, on_credentials: Callable[[Any], None] | None = None):
        self.enabled = bool(session.trust_env)
        session.trust_env = False  # requests stops reading the environment per request; we read it here
        self._on_credentials = on_credentials
        self._by_origin: dict[tuple[str, str], Reach] = {}

    def reach(self, url: str) -> Reach:
        if not self.enabled:
            return _DIRECT
        key = urlsplit(url)[:2]  # scheme and host:port
        found = self._by_origin.get(key)
        if found is None:  # two threads may both read it the first time: the same answer
            found = self._by_origin[key] = self._read(url)
        return found

    def _read(self, url: str) -> Reach:
        # The same helpers and order as requests.Session.merge_environment_settings and
        # prepare_request: proxies unless NO_PROXY bypasses the host; a CA bundle from the
        # environment replaces the default verification; netrc when no other auth is given.
        proxies = get_environ_proxies(url) or None
        verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or None
        netrc_auth = get_netrc_auth(url)
        if netrc_auth and self._on_credentials is not None:
            self._on_credentials(netrc_auth)
        return Reach(proxies, verify, netrc_auth)
