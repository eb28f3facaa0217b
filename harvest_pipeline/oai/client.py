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

import functools
import hashlib
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import requests
from requests.models import PreparedRequest

from harvest_pipeline.errors import BudgetExceeded, OAIError
from harvest_pipeline.http import Transport, TransportEvent, TransportResponse, strip_credentials
from harvest_pipeline.oai.models import IdentifyInfo, MetadataFormat, OAISet
from harvest_pipeline.oai.parse import (
    parse_get_record,
    parse_identify,
    parse_list_identifiers,
    parse_list_metadata_formats,
    parse_list_records,
    parse_list_sets,
)
from harvest_pipeline.pages import HarvestedRecord, ListPage

if TYPE_CHECKING:
    from harvest_pipeline.sources.registry import HttpSettings

__all__ = ["OAIClient", "DEFAULT_USER_AGENT"]

DEFAULT_USER_AGENT = "harvest_pipeline/0.1 (+OAI-PMH harvester)"

QUIRK_CONTINUATION_NEEDS_ARGUMENTS = "continuation-needs-arguments"
# Longest resumption token followed (the sources' traversal.max_token_bytes; see harvest/budget.py).
MAX_TOKEN_BYTES = 4096


class OAIClient:
    """OAI-PMH client for one repository base URL.

    ``session``: a requests.Session to use (kept for keep-alive; created when None; never
    mutated). ``headers`` are sent with every request (User-Agent defaults to ``user_agent``).
    ``auth`` is anything requests accepts. ``method`` is "GET" (default) or "POST" (arguments
    form-encoded in the body, as OAI-PMH allows).

    Transport (:mod:`harvest_pipeline.http`): ``http`` is the source's
    :class:`~harvest_pipeline.sources.registry.HttpSettings` (retries, backoff, Retry-After cap,
    per-host politeness, response cap); None means one attempt with the default limits.
    ``state_dir`` holds the per-host lock files shared by every harvesting process (None:
    in-process locks). ``timeout`` overrides ``http.timeout_seconds``; ``max_body_bytes`` lowers
    the decompressed-size cap. ``on_event`` receives every
    :class:`~harvest_pipeline.http.TransportEvent` (retries, recoveries, give-ups);
    ``client.transport.drain_warnings()`` returns them as warning lines. Every token loop stops
    at a token seen before (guard ``repeated-token``) or one longer than ``max_token_bytes``
    (guard ``token-too-long``).
    """

    # Set once the server has rejected a token-only continuation (a known quirk); from then on
    # continuations repeat the original arguments. Preset it from what earlier runs learned.
    continuation_with_arguments: bool = False

    def __init__(
        self,
        base_url: str,
        *,
        session: requests.Session | None = None,
        headers: dict | None = None,
        auth=None,
        timeout: float | None = None,
        user_agent: str = DEFAULT_USER_AGENT,
        method: str = "GET",
        max_body_bytes: int | None = None,
        http: HttpSettings | None = None,
        state_dir: Path | str | None = None,
        on_event: Callable[[TransportEvent], None] | None = None,
        max_token_bytes: int = MAX_TOKEN_BYTES,
    ):
        clean, url_auth = strip_credentials(base_url)
        self.max_token_bytes = max_token_bytes
        self.base_url = clean
        self.session = session if session is not None else requests.Session()
        self.headers = {"User-Agent": user_agent, **(headers or {})}
        self.auth = auth if auth is not None else url_auth
        method = method.upper()
        if method not in ("GET", "POST"):
            raise ValueError(f"method must be GET or POST, not {method!r}")
        self.method = method
        self.transport = Transport(
            http, session=self.session, headers=self.headers, auth=self.auth,
            state_dir=state_dir, user_agent=user_agent, timeout=timeout,
            max_body_bytes=max_body_bytes, on_event=on_event,
        )
        self.timeout = self.transport.timeout
        self.max_body_bytes = self.transport.max_body_bytes
        self.quirks: set[str] = set()  # non-conforming behaviour this client has worked around

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

    def _get(self, params: Mapping[str, str]) -> tuple[str, bytes, TransportResponse]:
        """Send one OAI-PMH request through the transport; return (url, body bytes, response).

        The transport retries what is worth retrying (see :mod:`harvest_pipeline.http`)
        and then raises TransportError (connection failures, timeouts, truncated or empty
        bodies), HTTPStatusError (a TransportError with ``status_code`` and ``retry_after``),
        ResponseTooLarge, or DeferredError (Retry-After beyond the cap). The body is decoded
        (Content-Encoding, or gzip sent without the header) and capped.
        """
        url = self.url_for(params)
        if self.method == "GET":
            resp = self.transport.request("GET", url, display_url=url)
        else:
            resp = self.transport.request("POST", self.base_url, data=dict(params),
                                          display_url=url)
        return url, resp.content, resp

    def fetch(self, params: Mapping[str, str]) -> tuple[str, bytes]:
        """Send one raw request (e.g. for probing); return (url, body bytes)."""
        url, content, _ = self._get(params)
        return url, content

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
        guard = _LoopGuard(self.max_token_bytes)
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
        read_ahead: bool = False,
        serialize: bool = True,
    ) -> Iterator[ListPage]:
        """ListRecords, one :class:`ListPage` per response (see the module doc for the rules).

        ``from_``/``until`` are OAI datestamp strings (see
        :func:`harvest_pipeline.dates.window_to_oai_bounds`).

        ``read_ahead=True``: the next page is requested (in a worker thread) as soon as this
        page's token is parsed, before its records are read, so the server prepares page n+1
        while we read page n. One request may then be sent beyond the pages consumed; a token
        the loop guard would stop is never followed early.

        ``serialize=False``: the records' ``metadata_xml`` is left to the caller
        (:func:`harvest_pipeline.oai.parse.serialize_records`, see ``parse_list_records``).
        """
        return self._pages(
            "ListRecords", parse_list_records, metadata_prefix, from_, until, set_,
            resumption_token, read_ahead, serialize=serialize,
        )

    def list_records(
        self,
        metadata_prefix: str | None,
        *,
        from_: str | None = None,
        until: str | None = None,
        set_: str | None = None,
        resumption_token: str | None = None,
    ) -> Iterator[HarvestedRecord]:
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
    ) -> Iterator[HarvestedRecord]:
        """ListIdentifiers flattened into header-only records."""
        for page in self.list_identifiers_pages(
            metadata_prefix, from_=from_, until=until, set_=set_,
            resumption_token=resumption_token,
        ):
            yield from page.records

    def get_record(self, identifier: str, metadata_prefix: str, *, warnings: list[str] | None = None) -> HarvestedRecord:
        """GetRecord. idDoesNotExist raises IdDoesNotExist. What the parser noticed (a repaired
        response, for example) is appended to `warnings`."""
        url, content, _ = self._get(
            {"verb": "GetRecord", "identifier": identifier, "metadataPrefix": metadata_prefix}
        )
        return parse_get_record(content, url, warnings=warnings)

    # ---------------------------------------------------------------------------- paging

    def _pages(self, verb, parse, metadata_prefix, from_, until, set_, resumption_token, read_ahead=False,
               serialize=True):
        if resumption_token is not None and not str(resumption_token).strip():
            raise ValueError("resumption_token is empty")
        original = {"metadataPrefix": metadata_prefix} if metadata_prefix else {}
        for key, value in (("from", from_), ("until", until), ("set", set_)):
            if value is None:
                continue
            if not isinstance(value, str):
                raise TypeError(
                    f"{key} must be an OAI-PMH datestamp/setSpec string, not "
                    f"{type(value).__name__} (see harvest_pipeline.dates)"
                )
            original[key] = value
        if resumption_token is not None:
            params = {"verb": verb, "resumptionToken": resumption_token}
        else:
            if not metadata_prefix:
                raise ValueError(f"{verb} needs a metadata_prefix (or a resumption_token)")
            params = {"verb": verb, **original}
        if not serialize:
            parse = functools.partial(parse, serialize=False)
        return self._traverse(verb, parse, params, original, read_ahead=read_ahead)

    def _traverse(self, verb, parse, params, original=None, *, read_ahead: bool = False) -> Iterator[ListPage]:
        """Pages until the list ends. `read_ahead`: the next request is sent as soon as a page's
        token is parsed (when the loop guard cannot stop that token), before its records are read."""
        guard = _LoopGuard(self.max_token_bytes)
        original = original or {}
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oai-read-ahead") if read_ahead else None
        ahead: dict = {}  # token -> Future of the _get of its page

        def send_ahead(sent: Mapping[str, str], token: str) -> None:
            if guard.clearly_new(sent, token):
                nxt = {"verb": verb, "resumptionToken": token}
                if self.continuation_with_arguments and original:
                    nxt = {**nxt, **original}
                ahead[token] = pool.submit(self._get, nxt)

        try:
            page_number = 0
            fetched = None
            while True:
                page_number += 1
                sent = params
                on_token = (lambda token: send_ahead(sent, token)) if read_ahead else None
                page = self._fetch_page(verb, parse, params, original, page_number, fetched=fetched, on_token=on_token)
                yield page
                token = page.next_token
                if page.empty_list or token is None:
                    return
                guard.check(params, token, [r.identifier for r in page.records], url=page.url)
                params = {"verb": verb, "resumptionToken": token}
                future = ahead.pop(token, None)
                _settle(ahead)  # a token that was not the page's (not expected): that answer is dropped
                fetched = future.result() if future is not None else None
        finally:
            _settle(ahead)  # no request outlives the traversal
            if pool is not None:
                pool.shutdown(wait=True)

    def _fetch_page(self, verb, parse, params, original, page_number, *, fetched=None, on_token=None) -> ListPage:
        """One request. A continuation carries only verb + token, as the protocol says; a server
        that rejects that with badArgument gets the original arguments repeated beside the token,
        and the client remembers the quirk (see `quirks`).

        `fetched`: the (url, body, response) of this request, already sent by the read-ahead."""
        continuation = "resumptionToken" in params
        if continuation and self.continuation_with_arguments and original:
            params = {**params, **original}
        extra = {"on_token": on_token} if on_token is not None else {}
        try:
            url, content, _ = fetched if fetched is not None else self._get(params)
            return parse(content, url, params, page_number, empty_on_no_records_match=True, **extra)
        except OAIError as exc:
            if not (continuation and exc.code == "badArgument" and original and not self.continuation_with_arguments):
                raise
        self.continuation_with_arguments = True
        self.quirks.add(QUIRK_CONTINUATION_NEEDS_ARGUMENTS)
        url, content, _ = self._get({**params, **original})
        page = parse(content, url, params, page_number, empty_on_no_records_match=True)
        page.warnings.append(
            "the server rejected a token-only continuation (badArgument); repeating the original "
            "arguments beside the token from now on"
        )
        return page


def _settle(futures: dict) -> None:
    """Wait for requests nobody will read, and forget them (their errors too)."""
    for future in futures.values():
        try:
            future.result()
        except BaseException:  # noqa: BLE001 - nobody reads that page
            pass
    futures.clear()


class _LoopGuard:
    """Stops a token loop that cycles or grows.

    * a token seen before, after other tokens (A-B-A): guard ``repeated-token``;
    * the same token answered with the same page and the same token again: the same guard. The
      same token string with new pages is let through (stateful servers reuse one token);
    * a token longer than ``max_token_bytes``: guard ``token-too-long``.

    Tokens are kept as 16-byte digests, so the memory stays small however long the list.
    """

    __slots__ = ("_seen", "_last", "max_token_bytes")

    def __init__(self, max_token_bytes: int = MAX_TOKEN_BYTES):
        self._seen: set[bytes] = set()
        self._last = None
        self.max_token_bytes = max_token_bytes

    def clearly_new(self, sent: Mapping[str, str], token: str) -> bool:
        """True when `check` cannot stop this token whatever the page holds: not too long, not
        the token that was sent, never seen before (the read-ahead follows only such tokens)."""
        data = token.encode("utf-8", "surrogatepass")
        return (len(data) <= self.max_token_bytes and token != sent.get("resumptionToken")
                and hashlib.blake2b(data, digest_size=16).digest() not in self._seen)

    def check(self, sent: Mapping[str, str], token: str, keys: list, url: str) -> None:
        size = len(token.encode("utf-8", "surrogatepass"))
        if size > self.max_token_bytes:
            raise BudgetExceeded(
                "token-too-long", f"a resumption token of {size} bytes, more than "
                f"{self.max_token_bytes}", url=url,
                hint="a token that grows every page never ends; report it to the server's "
                     "maintainers, or raise traversal.max_token_bytes",
            )
        digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        current = (sent.get("resumptionToken"), token, tuple(keys))
        last, self._last = self._last, current
        if current[0] == token:  # answered with the token it was asked with
            if last is not None and last[1] == token and last[2] == current[2]:
                raise BudgetExceeded(
                    "repeated-token", f"the server keeps answering resumptionToken {token[:200]!r} "
                    "with the same page and the same token; stopping to avoid an endless loop",
                    url=url, hint="a known server bug; the list cannot be completed with tokens",
                )
        elif digest in self._seen:
            raise BudgetExceeded(
                "repeated-token", f"the server sent resumptionToken {token[:200]!r} again after "
                "other tokens (a cycle); stopping to avoid an endless loop", url=url,
                hint="a known server bug; the list cannot be completed with tokens",
            )
        self._seen.add(digest)
