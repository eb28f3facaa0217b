"""A small, strict OAI-PMH 2.0 client (requests + lxml, no Dagster).

One method per verb, Sickle-like. List verbs are lazy generators: nothing is fetched until
iterated, and each continuation is fetched only when the previous page has been consumed, so
``next(client.list_records_pages(...))`` fetches exactly one page (handy for probing).

Resumption follows the protocol exactly:

* the first request carries ``verb`` plus ``metadataPrefix``/``from``/``until``/``set`` (None
  ones omitted);
* every continuation carries ONLY ``verb`` and ``resumptionToken``;
* an absent, empty or whitespace-only token ends the list;
* ``noRecordsMatch`` yields one :class:`ListPage` with ``empty_list=True`` and no records, then
  ends: an empty window is not an error;
* passing ``resumption_token=`` starts the traversal with a continuation (resuming a durable
  cursor); the other list arguments are then not sent.

All HTTP goes through :meth:`OAIClient._get`, so retries, backoff, politeness and size caps can
be layered there (subclass and override, or wrap). Credentials never appear in URLs or
messages: userinfo in ``base_url`` is moved into requests' auth and stripped from the URL.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

import requests
from requests.models import PreparedRequest

from harvest_pipeline.errors import HTTPStatusError, OAIError, ProtocolError, TransportError
from harvest_pipeline.oai.models import (
    IdentifyInfo,
    ListPage,
    MetadataFormat,
    OAIRecord,
    OAISet,
)
from harvest_pipeline.oai.parse import (
    parse_get_record,
    parse_identify,
    parse_list_identifiers,
    parse_list_metadata_formats,
    parse_list_records,
    parse_list_sets,
)

__all__ = ["OAIClient", "DEFAULT_USER_AGENT", "strip_credentials"]

DEFAULT_USER_AGENT = "harvest_pipeline/0.1 (+OAI-PMH harvester)"

_GZIP_MAGIC = b"\x1f\x8b"


def strip_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """Remove ``user:password@`` from a URL; return the clean URL and the (user, password)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    clean = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return clean, (unquote(user), unquote(password))


class OAIClient:
    """OAI-PMH client for one repository base URL.

    ``session``: a requests.Session to use (kept for keep-alive; created when None; never
    mutated). ``headers`` are sent with every request (User-Agent defaults to ``user_agent``).
    ``auth`` is anything requests accepts. ``method`` is "GET" (default) or "POST" (arguments
    form-encoded in the body, as OAI-PMH allows). ``max_body_bytes`` caps the size of a body
    that arrives gzip-compressed without a Content-Encoding header (decompression bomb guard).
    """

    def __init__(
        self,
        base_url: str,
        *,
        session: requests.Session | None = None,
        headers: dict | None = None,
        auth=None,
        timeout: float = 60,
        user_agent: str = DEFAULT_USER_AGENT,
        method: str = "GET",
        max_body_bytes: int = 1 << 30,
    ):
        clean, url_auth = strip_credentials(base_url)
        self.base_url = clean
        self.session = session if session is not None else requests.Session()
        self.headers = {"User-Agent": user_agent, **(headers or {})}
        self.auth = auth if auth is not None else url_auth
        self.timeout = timeout
        method = method.upper()
        if method not in ("GET", "POST"):
            raise ValueError(f"method must be GET or POST, not {method!r}")
        self.method = method
        self.max_body_bytes = max_body_bytes

    def __repr__(self) -> str:
        return f"OAIClient({self.base_url!r})"

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> OAIClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------- HTTP (the one door)

    def url_for(self, params: Mapping[str, str]) -> str:
        """The GET URL for these arguments (also what pages and errors report for POST)."""
        p = PreparedRequest()
        p.prepare_url(self.base_url, dict(params))
        return p.url

    def _get(self, params: Mapping[str, str]) -> tuple[str, bytes, requests.Response]:
        """Send one OAI-PMH request; return (url, body bytes, response).

        Raises TransportError for connection failures and timeouts, HTTPStatusError (a
        TransportError with ``status_code`` and ``retry_after``) for non-2xx answers.
        """
        url = self.url_for(params)
        try:
            if self.method == "GET":
                resp = self.session.get(
                    url, headers=self.headers, auth=self.auth, timeout=self.timeout
                )
            else:
                resp = self.session.post(
                    self.base_url,
                    data=dict(params),
                    headers=self.headers,
                    auth=self.auth,
                    timeout=self.timeout,
                )
        except requests.Timeout as e:
            raise TransportError(
                f"no answer within {self.timeout} s ({type(e).__name__})",
                url=url,
                hint="the server may be slow on big pages; retry later or raise the timeout",
            ) from e
        except requests.RequestException as e:
            raise TransportError(f"request failed: {type(e).__name__}: {e}", url=url) from e
        status = resp.status_code
        if not 200 <= status < 300:
            retry_after = resp.headers.get("Retry-After")
            msg = f"HTTP {status} {resp.reason or ''}".rstrip()
            if retry_after:
                msg += f" (Retry-After: {retry_after})"
            raise HTTPStatusError(msg, status_code=status, retry_after=retry_after, url=url)
        content = resp.content or b""
        if content[:2] == _GZIP_MAGIC:
            content = self._gunzip(content, url)
        return url, content, resp

    def fetch(self, params: Mapping[str, str]) -> tuple[str, bytes]:
        """Send one raw request (e.g. for probing); return (url, body bytes)."""
        url, content, _ = self._get(params)
        return url, content

    def _gunzip(self, content: bytes, url: str) -> bytes:
        """A body compressed without Content-Encoding (seen in the wild): decompress it."""
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(content, self.max_body_bytes + 1)
        except zlib.error as e:
            raise ProtocolError(f"the body looks gzip-compressed but is not: {e}", url=url) from e
        if len(out) > self.max_body_bytes:
            raise ProtocolError(
                f"the gzip-compressed body expands beyond {self.max_body_bytes} bytes", url=url
            )
        return out

    # ------------------------------------------------------------------------------ verbs

    def identify(self) -> IdentifyInfo:
        url, content, _ = self._get({"verb": "Identify"})
        return parse_identify(content, url)

    def list_metadata_formats(self, identifier: str | None = None) -> list[MetadataFormat]:
        """The formats of the repository (or of one item). noMetadataFormats -> []."""
        params = {"verb": "ListMetadataFormats"}
        if identifier is not None:
            params["identifier"] = identifier
        url, content, _ = self._get(params)
        try:
            return parse_list_metadata_formats(content, url)
        except OAIError as e:
            if e.code == "noMetadataFormats":
                return []
            raise

    def list_sets(self) -> Iterator[OAISet]:
        """All sets, following resumption tokens. noSetHierarchy -> nothing."""
        params = {"verb": "ListSets"}
        guard = _LoopGuard()
        while True:
            url, content, _ = self._get(params)
            try:
                sets, resumption = parse_list_sets(content, url)
            except OAIError as e:
                if e.code == "noSetHierarchy":
                    return
                raise
            yield from sets
            token = resumption.token
            if not token:
                return
            guard.check(params, token, [s.spec for s in sets], url)
            params = {"verb": "ListSets", "resumptionToken": token}

    def list_records_pages(
        self,
        metadata_prefix: str | None,
        *,
        from_: str | None = None,
        until: str | None = None,
        set_: str | None = None,
        resumption_token: str | None = None,
    ) -> Iterator[ListPage]:
        """ListRecords, one :class:`ListPage` per response (see the module doc for the rules).

        ``from_``/``until`` are OAI datestamp strings (see
        :func:`harvest_pipeline.dates.window_to_oai_bounds`).
        """
        return self._pages(
            "ListRecords", parse_list_records, metadata_prefix, from_, until, set_,
            resumption_token,
        )

    def list_records(
        self,
        metadata_prefix: str | None,
        *,
        from_: str | None = None,
        until: str | None = None,
        set_: str | None = None,
        resumption_token: str | None = None,
    ) -> Iterator[OAIRecord]:
        """ListRecords flattened into records."""
        for page in self.list_records_pages(
            metadata_prefix, from_=from_, until=until, set_=set_,
            resumption_token=resumption_token,
        ):
            yield from page.records

    def list_identifiers_pages(
        self,
        metadata_prefix: str | None,
        *,
        from_: str | None = None,
        until: str | None = None,
        set_: str | None = None,
        resumption_token: str | None = None,
    ) -> Iterator[ListPage]:
        """ListIdentifiers, one page per response; records carry headers only."""
        return self._pages(
            "ListIdentifiers", parse_list_identifiers, metadata_prefix, from_, until, set_,
            resumption_token,
        )

    def list_identifiers(
        self,
        metadata_prefix: str | None,
        *,
        from_: str | None = None,
        until: str | None = None,
        set_: str | None = None,
        resumption_token: str | None = None,
    ) -> Iterator[OAIRecord]:
        """ListIdentifiers flattened into header-only records."""
        for page in self.list_identifiers_pages(
            metadata_prefix, from_=from_, until=until, set_=set_,
            resumption_token=resumption_token,
        ):
            yield from page.records

    def get_record(self, identifier: str, metadata_prefix: str) -> OAIRecord:
        """GetRecord. idDoesNotExist raises IdDoesNotExist."""
        url, content, _ = self._get(
            {"verb": "GetRecord", "identifier": identifier, "metadataPrefix": metadata_prefix}
        )
        return parse_get_record(content, url)

    # ---------------------------------------------------------------------------- paging

    def _pages(self, verb, parse, metadata_prefix, from_, until, set_, resumption_token):
        if resumption_token is not None and not str(resumption_token).strip():
            raise ValueError("resumption_token is empty")
        if resumption_token is not None:
            params = {"verb": verb, "resumptionToken": resumption_token}
        else:
            if not metadata_prefix:
                raise ValueError(f"{verb} needs a metadata_prefix (or a resumption_token)")
            params = {"verb": verb, "metadataPrefix": metadata_prefix}
            for key, value in (("from", from_), ("until", until), ("set", set_)):
                if value is None:
                    continue
                if not isinstance(value, str):
                    raise TypeError(
                        f"{key} must be an OAI-PMH datestamp/setSpec string, not "
                        f"{type(value).__name__} (see harvest_pipeline.dates)"
                    )
                params[key] = value
        return self._traverse(verb, parse, params)

    def _traverse(self, verb, parse, params) -> Iterator[ListPage]:
        guard = _LoopGuard()
        page_number = 0
        while True:
            page_number += 1
            url, content, _ = self._get(params)
            page = parse(content, url, params, page_number, empty_on_no_records_match=True)
            yield page
            token = page.next_token
            if page.empty_list or token is None:
                return
            guard.check(params, token, [r.identifier for r in page.records], url)
            params = {"verb": verb, "resumptionToken": token}


class _LoopGuard:
    """Stops a server that answers a token with the same page and the same token forever."""

    __slots__ = ("_last",)

    def __init__(self):
        self._last = None

    def check(self, sent: Mapping[str, str], token: str, keys: list, url: str) -> None:
        current = (sent.get("resumptionToken"), token, tuple(keys))
        last = self._last
        self._last = current
        if current[0] is not None and current[0] == token and last is not None:
            if last[1] == token and last[2] == current[2]:
                raise ProtocolError(
                    f"the server keeps answering resumptionToken {token!r} with the same page "
                    "and the same token; stopping to avoid an endless loop",
                    url=url,
                    hint="a known server bug; the list cannot be completed with tokens",
                )
