"""An OAI-PMH endpoint's quirk profile, and the source settings it suggests (`harvest-pipeline probe`).

At most 8 requests, one at a time, no retries:

1. Identify; 2. ListMetadataFormats; 3. ListSets (its first page only);
4. the first page of an unwindowed ListIdentifiers, fetched raw (``Accept-Encoding: gzip``): page
   size, completeListSize, deleted headers, gzip and Content-Length as sent;
5. its continuation with the token alone, and (6.) with the original arguments again if that
   is refused: whether continuations must repeat arguments;
7. ListIdentifiers with ``from`` = ``until`` = one record's datestamp: whether dates are
   honoured, to the second, read by the day only, ignored or refused;
8. the same with a set: whether ``set`` combines with ``from``/``until``.

Latency is the time to the whole answer, per request.
"""

from __future__ import annotations

import http.client
import statistics
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

from harvest_pipeline.dates import GRANULARITY_DAY, parse_datestamp
from harvest_pipeline.errors import HarvestError, OAIError, ProtocolError, TransportError
from harvest_pipeline.oai.client import OAIClient
from harvest_pipeline.oai.models import IdentifyInfo, MetadataFormat, OAISet
from harvest_pipeline.oai.parse import parse_list_identifiers, parse_list_sets
from harvest_pipeline.pages import ListPage

MAX_RAW_BYTES = 64 << 20  # the raw page read for the gzip/Content-Length check
RECORDS_PER_WINDOW = 20_000  # the proposed window holds about this many records at most


@dataclass
class EndpointProfile:
    url: str
    identify: IdentifyInfo
    formats: list[MetadataFormat]
    sets: list[OAISet] | None  # None: the server has no sets (or ListSets failed, see notes)
    sets_more: bool = False  # ListSets had more pages than the one read
    metadata_prefix: str = "oai_dc"
    requests: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, one per request
    page_size: int | None = None
    list_size: int | None = None  # completeListSize of the unwindowed list
    deleted_on_first_page: int = 0
    gzip: str = "untested"  # "yes" | "no" | "without Content-Encoding"
    content_length: str = "untested"  # "correct" | "absent (chunked or close)" | "wrong: ..."
    continuation: str = "untested"  # "token only" | "must repeat the arguments" | "broken: ..." | "single page"
    dates: str = "untested"  # "honoured to the second" | "honoured (day granularity)" | "read by the day only" | "ignored" | "refused"
    set_with_dates: str = "untested"  # "supported" | "refused" | "no sets"
    notes: list[str] = field(default_factory=list)

    @property
    def latency_median(self) -> float | None:
        return statistics.median(self.latencies) if self.latencies else None

    @property
    def latency_max(self) -> float | None:
        return max(self.latencies) if self.latencies else None

    @property
    def until_seconds_honoured(self) -> bool | None:
        if self.dates == "honoured to the second":
            return True
        if self.dates in ("read by the day only", "ignored", "refused"):
            return False
        return None

    def proposed_window(self) -> str:
        """The largest window that holds about RECORDS_PER_WINDOW records, from the list size."""
        if self.dates == "read by the day only" or self.identify.granularity == GRANULARITY_DAY:
            floor = "day"  # the server cannot be asked for less
        else:
            floor = "hour"
        per_day = None
        try:
            earliest = parse_datestamp(self.identify.earliest_datestamp)
            days = max(1.0, (datetime.now(timezone.utc) - earliest).total_seconds() / 86400)
            per_day = (self.list_size or 0) / days if self.list_size is not None else None
        except (ValueError, TypeError):
            pass
        if per_day is None:
            return "day"
        for window, days in (("month", 31), ("week", 7), ("day", 1)):
            if per_day * days <= RECORDS_PER_WINDOW:
                return window
        return floor

    def proposed_settings(self, source_id: str = "new_source") -> tuple[dict, list[str]]:
        """(the sources-file entry, why: one line per decision or quirk)."""
        entry: dict = {"id": source_id, "protocol": "oai-pmh", "url": self.url, "metadata_prefix": self.metadata_prefix}
        why: list[str] = []
        window = self.proposed_window()
        entry["window"] = window
        why.append(f"window {window}: about {self.list_size if self.list_size is not None else '?'} records since "
                   f"{self.identify.earliest_datestamp}, at most ~{RECORDS_PER_WINDOW} per window")
        http_settings: dict = {}
        if self.latency_max is not None:
            timeout = min(300, int(self.latency_max * 10) + 1)
            if timeout > 60:  # the default
                http_settings["timeout_seconds"] = timeout
                why.append(f"http.timeout_seconds {timeout}: ten times the slowest answer ({self.latency_max:.2f} s)")
            if self.latency_median is not None and self.latency_median > 2:
                http_settings["max_concurrent_requests"] = 1
                why.append("http.max_concurrent_requests 1: the server is slow, one request at a time")
        if http_settings:
            entry["http"] = http_settings
        if self.dates == "refused":
            why.append("from/until are refused: every window lists the whole source; prefer `harvest --full` on a "
                       "schedule and a long window")
            entry["window"] = "month"
        elif self.dates == "ignored":
            why.append("from/until are ignored: every window gets the whole source; prefer `harvest --full`")
        elif self.dates == "read by the day only":
            why.append("from/until are read by their date only although Identify says seconds: windows of a day "
                       "or longer (hour windows would each list the whole day)")
        if self.continuation == "must repeat the arguments":
            why.append("continuations must repeat the arguments: detected on the first window and remembered "
                       "(quirk continuation-needs-arguments); nothing to set")
        if self.set_with_dates == "refused":
            why.append("set cannot be combined with from/until: harvest without `set`, or the whole set with `--full`")
        if self.identify.deleted_record in ("no", "transient"):
            why.append(f"deletedRecord {self.identify.deleted_record}: deletions are found by the weekly "
                       "reconciliation (on by default for this source)")
        if self.content_length.startswith("wrong"):
            why.append(f"Content-Length is wrong ({self.content_length}): a body proven whole by its gzip "
                       "trailer is accepted with a warning")
        if self.page_size is not None and self.page_size < 50:
            why.append(f"pages of {self.page_size} records: expect many requests per window")
        return entry, why

    def yaml_snippet(self, source_id: str = "new_source") -> str:
        entry, why = self.proposed_settings(source_id)
        lines = [f"# {w}" for w in why] + ["sources:", f"  - id: {entry['id']}"]
        for key, value in entry.items():
            if key == "id":
                continue
            if isinstance(value, dict):
                lines.append(f"    {key}:")
                lines += [f"      {k}: {v}" for k, v in value.items()]
            else:
                lines.append(f"    {key}: {value}")
        return "\n".join(lines)


def profile_endpoint(url: str, *, timeout: float = 30.0, metadata_prefix: str | None = None) -> EndpointProfile:
    """Probe `url` (at most 8 requests) and return its profile; raises HarvestError when Identify fails."""
    client = OAIClient(url, timeout=timeout)
    lat: list[float] = []

    def timed(fn, *a, **kw):
        t0 = time.monotonic()
        try:
            return fn(*a, **kw)
        finally:
            lat.append(time.monotonic() - t0)

    identify = timed(client.identify)
    formats = timed(client.list_metadata_formats)
    prefixes = [f.prefix for f in formats]
    prefix = metadata_prefix or ("oai_dc" if "oai_dc" in prefixes or not prefixes else prefixes[0])
    prof = EndpointProfile(url=client.base_url, identify=identify, formats=formats, sets=None, metadata_prefix=prefix,
                           latencies=lat)
    try:
        sets_url, sets_body = timed(client.fetch, {"verb": "ListSets"})
        sets, resumption = parse_list_sets(sets_body, sets_url)
        prof.sets, prof.sets_more = sets, bool(resumption.token)
    except OAIError as exc:
        if exc.code != "noSetHierarchy":
            prof.notes.append(f"ListSets: {exc.message}")
    except HarvestError as exc:
        prof.notes.append(f"ListSets: {exc}")
    params = {"verb": "ListIdentifiers", "metadataPrefix": prefix}
    try:
        first = _raw_first_page(client, params, prof, timeout, lat)
    except HarvestError as exc:
        prof.notes.append(f"ListIdentifiers: {exc}")
        prof.requests = len(lat)
        return prof
    if first.empty_list or not first.records:
        prof.notes.append("the list is empty: nothing to profile further")
        prof.requests = len(lat)
        return prof
    prof.page_size = len(first.records)
    prof.list_size = first.resumption.complete_list_size
    prof.deleted_on_first_page = sum(1 for r in first.records if r.deleted)
    if prof.list_size is None and not first.next_token:
        prof.list_size = len(first.records)
    if prof.content_length.startswith("wrong"):
        # Ask the rest uncompressed: the point is to profile the server, not to trip on it again.
        fetch = _plain_fetcher(client, timeout)
    else:
        fetch = client.fetch
    _continuation(fetch, params, first, prof, timed)
    sample = next((r for r in first.records if r.datestamp_utc is not None), None)
    if sample is not None:
        _dates(fetch, prefix, sample, prof, timed)
        _set_with_dates(fetch, prefix, sample, prof, timed)
    prof.requests = len(lat)
    return prof


def _raw_get(url: str, headers: dict, timeout: float) -> tuple[int, str | None, str, bytes, bool]:
    """GET over a bare connection: (status, Content-Length, Content-Encoding, bytes as sent, cut short)."""
    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=headers)
        resp = conn.getresponse()
        declared = resp.getheader("Content-Length")
        encoding = (resp.getheader("Content-Encoding") or "").lower()
        try:
            return resp.status, declared, encoding, resp.read(MAX_RAW_BYTES), False
        except http.client.IncompleteRead as exc:
            return resp.status, declared, encoding, exc.partial, True
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(f"request failed: {type(exc).__name__}: {exc}", url=url) from None
    finally:
        conn.close()


def _plain_fetcher(client: OAIClient, timeout: float):
    """`client.fetch` for a server whose compressed answers carry a wrong Content-Length: ask uncompressed."""
    def fetch(params):
        url = client.url_for(params)
        status, _, _, body, short = _raw_get(url, {**client.headers, "Accept-Encoding": "identity"}, timeout)
        if status != 200 or short:
            raise TransportError(f"HTTP {status}" if status != 200 else "the body was cut", url=url)
        return url, body
    return fetch


def _raw_first_page(client: OAIClient, params: dict, prof: EndpointProfile, timeout: float, lat: list[float]) -> ListPage:
    """One request over a bare connection, to see the bytes and headers as sent."""
    url = client.url_for(params)
    t0 = time.monotonic()
    try:
        status, declared, encoding, raw, short = _raw_get(url, {**client.headers, "Accept-Encoding": "gzip"}, timeout)
    finally:
        lat.append(time.monotonic() - t0)
    if status != 200:
        raise TransportError(f"HTTP {status}", url=url)
    body, whole_member = raw, None
    if raw[:2] == b"\x1f\x8b":
        prof.gzip = "yes" if encoding == "gzip" else "without Content-Encoding"
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            body = d.decompress(raw) + d.flush()
            whole_member = d.eof
        except zlib.error:
            whole_member = False
    else:
        prof.gzip = "no"
    if declared is None:
        prof.content_length = "absent (chunked or close)"
    elif int(declared) == len(raw) and not short:
        prof.content_length = "correct"
    else:
        what = f"wrong: declared {declared}, sent {len(raw)} bytes"
        if whole_member and len(body) == int(declared):
            what += " (the length of the uncompressed body; the gzip member is whole)"
        prof.content_length = what
        if whole_member is False or (whole_member is None and short):
            raise ProtocolError(f"the body is cut ({what})", url=url)
    return parse_list_identifiers(body, url, params, empty_on_no_records_match=True)


def _continuation(fetch, params: dict, first: ListPage, prof: EndpointProfile, timed) -> None:
    token = first.next_token
    if not token:
        prof.continuation = "single page"
        return
    try:
        url, body = timed(fetch, {"verb": "ListIdentifiers", "resumptionToken": token})
        parse_list_identifiers(body, url)
        prof.continuation = "token only"
        return
    except OAIError as exc:
        if exc.code != "badArgument":
            prof.continuation = f"broken: {exc.message}"
            return
    try:
        url, body = timed(fetch, {**params, "resumptionToken": token})
        parse_list_identifiers(body, url)
        prof.continuation = "must repeat the arguments"
    except HarvestError as exc:
        prof.continuation = f"broken: {exc}"


def _dates(fetch, prefix: str, sample, prof: EndpointProfile, timed) -> None:
    """from = until = one record's datestamp: that record, and nothing from another second (day)."""
    day = prof.identify.granularity == GRANULARITY_DAY
    at = sample.datestamp_utc
    stamp = at.strftime("%Y-%m-%d") if day else at.strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        url, body = timed(fetch, {"verb": "ListIdentifiers", "metadataPrefix": prefix, "from": stamp, "until": stamp})
        page = parse_list_identifiers(body, url, empty_on_no_records_match=True)
    except OAIError as exc:
        prof.dates = "refused" if exc.code == "badArgument" else f"broken: {exc.message}"
        return
    got = [r.datestamp_utc for r in page.records if r.datestamp_utc is not None]
    listed = any(r.identifier == sample.identifier for r in page.records)
    lo = at.replace(hour=0, minute=0, second=0) if day else at
    hi = lo + (timedelta(days=1) if day else timedelta(seconds=1))
    start_of_day = at.replace(hour=0, minute=0, second=0)
    size = page.resumption.complete_list_size if page.resumption.complete_list_size is not None else len(page.records)
    whole = prof.list_size is not None and size >= prof.list_size and (prof.list_size > len(got) or page.next_token)
    if not listed:
        prof.dates = "broken: the record stamped with that datestamp is not listed"
    elif whole and prof.list_size > 1:
        prof.dates = "ignored"
    elif all(lo <= t < hi for t in got):
        prof.dates = "honoured (day granularity)" if day else "honoured to the second"
    elif all(start_of_day <= t < start_of_day + timedelta(days=1) for t in got):
        prof.dates = "read by the day only"
    else:
        prof.dates = "ignored"


def _set_with_dates(fetch, prefix: str, sample, prof: EndpointProfile, timed) -> None:
    spec = sample.set_specs[0] if sample.set_specs else (prof.sets[0].spec if prof.sets else None)
    if spec is None:
        prof.set_with_dates = "no sets"
        return
    day = sample.datestamp_utc.strftime("%Y-%m-%d")
    granular = prof.identify.granularity != GRANULARITY_DAY
    args = {"verb": "ListIdentifiers", "metadataPrefix": prefix, "set": spec,
            "from": day + ("T00:00:00Z" if granular else ""),
            "until": day + ("T23:59:59Z" if granular else "")}
    try:
        url, body = timed(fetch, args)
        parse_list_identifiers(body, url, empty_on_no_records_match=True)
        prof.set_with_dates = "supported"
    except OAIError as exc:
        prof.set_with_dates = "refused" if exc.code == "badArgument" else f"broken: {exc.message}"
