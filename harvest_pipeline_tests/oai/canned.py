"""Canned OAI-PMH responses and a requests adapter that serves them (no server, no network)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl, urlsplit

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

from harvest_pipeline.oai import OAIClient

BASE = "http://oai.test/provider"
RESPONSE_DATE = "2024-05-01T12:00:00Z"

OAI_OPEN = (
    '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/" '
    'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
    'xsi:schemaLocation="http://www.openarchives.org/OAI/2.0/ '
    'http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd">'
)


def envelope(inner: str, *, verb: str | None = None, request_attrs: str = "",
             encoding: str = "UTF-8") -> bytes:
    """A full OAI-PMH response around `inner` (the verb element or <error>s)."""
    req = f'<request verb="{verb}" {request_attrs}>{BASE}</request>' if verb else (
        f"<request>{BASE}</request>"
    )
    text = (
        f'<?xml version="1.0" encoding="{encoding}"?>\n'
        f"{OAI_OPEN}\n  <responseDate>{RESPONSE_DATE}</responseDate>\n  {req}\n"
        f"  {inner}\n</OAI-PMH>\n"
    )
    return text.encode(encoding)


def error(code: str, message: str = "", *, verb: str = "ListRecords") -> bytes:
    return envelope(f'<error code="{code}">{message}</error>', verb=verb)


def dc(title: str, creator: str = "Doe, Jane") -> str:
    return (
        '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
        'xmlns:dc="http://purl.org/dc/elements/1.1/" '
        'xsi:schemaLocation="http://www.openarchives.org/OAI/2.0/oai_dc/ '
        'http://www.openarchives.org/OAI/2.0/oai_dc.xsd">'
        f"<dc:title>{title}</dc:title><dc:creator>{creator}</dc:creator>"
        "<dc:identifier>http://example.org/item</dc:identifier>"
        "<dc:date>2020-01-01</dc:date><dc:type>Text</dc:type>"
        "<dc:subject>testing</dc:subject><dc:language>en</dc:language>"
        "</oai_dc:dc>"
    )


def header(identifier: str, datestamp: str = "2024-01-02T03:04:05Z",
           sets: tuple[str, ...] = (), deleted: bool = False) -> str:
    status = ' status="deleted"' if deleted else ""
    specs = "".join(f"<setSpec>{s}</setSpec>" for s in sets)
    return (
        f"<header{status}><identifier>{identifier}</identifier>"
        f"<datestamp>{datestamp}</datestamp>{specs}</header>"
    )


def record(identifier: str, datestamp: str = "2024-01-02T03:04:05Z",
           sets: tuple[str, ...] = (), deleted: bool = False,
           metadata: str | None = "default") -> str:
    if metadata == "default":
        metadata = None if deleted else dc(f"Title of {identifier}")
    md = f"<metadata>{metadata}</metadata>" if metadata is not None else ""
    return f"<record>{header(identifier, datestamp, sets, deleted)}{md}</record>"


def token(value: str | None = None, **attrs) -> str:
    """A <resumptionToken>; value None -> an empty element."""
    a = "".join(f' {k}="{v}"' for k, v in attrs.items())
    return f"<resumptionToken{a}>{value or ''}</resumptionToken>" if value is not None else (
        f"<resumptionToken{a}/>"
    )


def list_records(records: list[str], tok: str = "", verb: str = "ListRecords",
                 encoding: str = "UTF-8") -> bytes:
    return envelope(f"<{verb}>{''.join(records)}{tok}</{verb}>", verb=verb, encoding=encoding)


def list_identifiers(headers: list[str], tok: str = "") -> bytes:
    return envelope(f"<ListIdentifiers>{''.join(headers)}{tok}</ListIdentifiers>",
                    verb="ListIdentifiers")


def oai_dc_page(n: int = 100, *, with_token: bool = True) -> bytes:
    """A realistic ListRecords page of `n` oai_dc records (also used for speed measurements)."""
    recs = [
        record(f"oai:example.org:{i}", f"2024-01-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
               sets=("collection:a", f"type:{i % 3}"),
               metadata=dc(f"Record number {i} about metadata harvesting", f"Author {i}"))
        for i in range(n)
    ]
    tok = token("page2", completeListSize=str(10 * n), cursor="0") if with_token else ""
    return list_records(recs, tok)


class CannedAdapter(BaseAdapter):
    """Serves canned bodies and remembers every request it was sent.

    `responder(request)` returns bytes (200), or (status, bytes[, headers]), or raises a
    requests exception. A list of responses is served in order.
    """

    def __init__(self, responder: Callable | list):
        super().__init__()
        if isinstance(responder, list):
            queue = list(responder)

            def responder(request, _q=queue):  # noqa: ARG001
                if not _q:
                    raise AssertionError(f"unexpected extra request: {request.url}")
                return _q.pop(0)

        self.responder = responder
        self.requests: list[requests.PreparedRequest] = []

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        self.requests.append(request)
        out = self.responder(request)
        if isinstance(out, BaseException):
            raise out
        status, headers = 200, {"Content-Type": "text/xml"}
        if isinstance(out, tuple):
            status, body = out[0], out[1]
            if len(out) > 2:
                headers = out[2]
        else:
            body = out
        resp = requests.Response()
        resp.status_code = status
        resp.reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(status, "")
        resp._content = body
        resp._content_consumed = True
        resp.headers = CaseInsensitiveDict(headers)
        resp.url = request.url
        resp.request = request
        resp.encoding = None
        return resp

    def close(self):
        pass

    # -- helpers for assertions
    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.requests]

    def query(self, i: int) -> list[tuple[str, str]]:
        """The (name, value) pairs of request i, in order, decoded."""
        return parse_qsl(urlsplit(self.requests[i].url).query, keep_blank_values=True)


def make_client(responses, **kw) -> tuple[OAIClient, CannedAdapter]:
    adapter = CannedAdapter(responses)
    session = requests.Session()
    session.mount("http://oai.test/", adapter)
    return OAIClient(kw.pop("base_url", BASE), session=session, **kw), adapter
