"""Every fault mode of the demo provider visibly does what faults.py says (raw HTTP + lxml)."""

from __future__ import annotations

import email.utils
import gzip
import http.client
import re
import time
import zlib
from urllib.parse import urlencode, urlsplit

import pytest
import requests
from lxml import etree

from harvest_pipeline.demo import start_demo_provider
from harvest_pipeline.demo.faults import PRESETS, FaultOptions, bomb_length
from harvest_pipeline.demo.server import ServerOptions
from harvest_pipeline.errors import XMLSecurityError
from harvest_pipeline.xmlsafe import parse_xml

pytestmark = pytest.mark.integration

NS = {"o": "http://www.openarchives.org/OAI/2.0/", "dc": "http://purl.org/dc/elements/1.1/"}
NOW = "2026-10-25T12:00:00Z"
PAGE = 7
# 60 records created 2026-10-01..03, seen three weeks later.
CORPUS = {"days": 3, "records_per_day": 20, "end_day": "2026-10-03", "now": NOW, "page_size": PAGE}
LIST = {"verb": "ListRecords", "metadataPrefix": "oai_dc"}
DAY = {"from": "2026-10-02T00:00:00Z", "until": "2026-10-02T23:59:59Z"}


@pytest.fixture(scope="module")
def provider():
    with start_demo_provider(**CORPUS) as p:
        yield p


@pytest.fixture(scope="module")
def edge():
    """A provider whose clock is inside its corpus: records are still being created."""
    with start_demo_provider(**{**CORPUS, "now": "2026-10-03T12:00:00Z"}) as e:
        yield e


@pytest.fixture
def p(provider):
    """The module's provider with every fault off and the request counter at 0."""
    provider.set_options(faults="none")
    yield provider
    provider.set_options(faults="none")


class Raw:
    """One raw HTTP exchange (http.client: no retries, no decoding)."""

    def __init__(self, provider, params: dict | list, headers: dict | None = None, read: int = -1):
        u = urlsplit(provider.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", u.path + "?" + urlencode(params), headers=headers or {})
        self.resp = conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.error = None
        try:
            self.body = self.resp.read() if read < 0 else self.resp.read(read)
        except http.client.IncompleteRead as e:
            self.body, self.error = e.partial, e
        conn.close()


def oai(provider, params) -> etree._Element:
    r = Raw(provider, params)
    assert r.status == 200, r.body
    return etree.fromstring(r.body)


def ids(root) -> list[str]:
    return [e.text for e in root.iterfind(".//o:header/o:identifier", NS)]


def token(root):
    return root.find(".//o:resumptionToken", NS)


def error_code(root):
    e = root.find("o:error", NS)
    return None if e is None else e.get("code")


def walk(provider, params=LIST) -> list[etree._Element]:
    """Every page of a list, following tokens the standard way (token-only continuations)."""
    pages = [oai(provider, params)]
    while (t := token(pages[-1])) is not None and t.text:
        pages.append(oai(provider, {"verb": params["verb"], "resumptionToken": t.text}))
        assert len(pages) < 50
    return pages


def record_number(identifier: str) -> int:
    return int(identifier.rsplit("/", 1)[1])


# ------------------------------------------------------------------------- options and flags


def test_fault_options_are_validated_shown_and_reset(p):
    assert all(v == FaultOptions.__dataclass_fields__[k].default
               for k, v in p.options().items() if k in FaultOptions.__dataclass_fields__)
    for bad in ({"fail_status": 404}, {"gzip": "zip"}, {"retry_after": "soon"}, {"fail_every": -1},
                {"entity_attack": "evil"}, {"truncate_style": "slow"}, {"slow_every": 0}):
        with pytest.raises(ValueError):
            ServerOptions().replace(**bad)
        with pytest.raises(RuntimeError, match="400"):
            p.set_options(**bad)
    shown = p.set_options(fail_every="3", retry_after="date:2", restart_list="true")
    assert (shown["fail_every"], shown["retry_after"], shown["restart_list"]) == (3, "date:2", True)
    assert p.faults()["active"] == {"fail_every": 3, "retry_after": "date:2", "restart_list": True}
    Raw(p, {"verb": "Identify"})
    assert p.faults()["requests"] == 1
    p.set_options(faults="all-recoverable")  # replaces the faults set so far
    defaults = {k: f.default for k, f in FaultOptions.__dataclass_fields__.items()}
    preset = {k: v for k, v in PRESETS["all-recoverable"].items() if v != defaults[k]}
    assert p.faults() == {"requests": 0, "first_request_at": None, "last_request_at": None, "active": preset,
                          "presets": ["all-recoverable", "none"]}
    p.set_options(faults="none")
    assert p.faults()["active"] == {}


def test_the_request_counter_says_when_the_first_and_the_latest_request_came(p):
    p.set_options(faults="none")  # the counter and its times start again
    assert (p.faults()["first_request_at"], p.faults()["last_request_at"]) == (None, None)
    before = time.time()
    Raw(p, {"verb": "Identify"})
    first = p.faults()
    assert first["first_request_at"] == first["last_request_at"] and before <= first["first_request_at"] <= time.time()
    time.sleep(0.05)
    Raw(p, {"verb": "Identify"})
    second = p.faults()
    assert second["requests"] == 2 and second["first_request_at"] == first["first_request_at"]
    assert second["last_request_at"] >= first["last_request_at"] + 0.04


def test_cli_fault_flags_and_preset():
    with start_demo_provider(days=1, records_per_day=3, faults="all-recoverable",
                             fault={"fail_every": 2, "restart_list": True}, wrong_cursor=False) as d:
        active = d.faults()["active"]
        assert active["fail_every"] == 2 and active["restart_list"] is True
        assert "wrong_cursor" not in active and active["gzip"] == "header"
        assert "fault fail_every=2" in d.banner
    with pytest.raises(RuntimeError, match="unknown fault"):
        start_demo_provider(days=1, records_per_day=3, fault=["no_such_fault=1"])
    with pytest.raises(RuntimeError, match="fail_status"):
        start_demo_provider(days=1, records_per_day=3, fail_status=404)


# ----------------------------------------------------------------------------------- network


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_fail_every_nth_request_with_status(p, status):
    p.set_options(fail_every=2, fail_status=status, retry_after="7")
    statuses = [Raw(p, {"verb": "Identify"}) for _ in range(5)]
    assert [r.status for r in statuses] == [200, status, 200, status, 200]
    assert statuses[1].headers["retry-after"] == "7"
    assert b"fail" in statuses[1].body and "retry-after" not in statuses[0].headers


def test_retry_after_forms(p):
    p.set_options(fail_every=1, retry_after="")
    assert "retry-after" not in Raw(p, {"verb": "Identify"}).headers
    p.set_options(fail_every=1, retry_after="date:3")
    before = time.time()
    value = Raw(p, {"verb": "Identify"}).headers["retry-after"]
    assert re.match(r"[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT\Z", value)
    ahead = email.utils.parsedate_to_datetime(value).timestamp() - before
    assert 3 <= ahead <= 5  # the next whole second plus 3


def test_slow_every_nth_request(p):
    p.set_options(slow_ms=3000, slow_every=2)
    s = requests.Session()
    assert s.get(p.url, params={"verb": "Identify"}, timeout=2).status_code == 200  # request 1
    with pytest.raises(requests.ReadTimeout):
        s.get(p.url, params={"verb": "Identify"}, timeout=0.3)  # request 2 stalls


def test_empty_body_every_nth_request(p):
    p.set_options(empty_body_every=2)
    first, second = Raw(p, {"verb": "Identify"}), Raw(p, {"verb": "Identify"})
    assert first.body.startswith(b"<?xml")
    assert second.status == 200 and second.body == b"" and second.headers["content-length"] == "0"


def test_truncate_declares_more_than_it_sends(p):
    p.set_options(truncate_every=1)
    r = Raw(p, LIST)
    assert isinstance(r.error, http.client.IncompleteRead)
    assert 0 < len(r.body) < int(r.headers["content-length"])
    with pytest.raises(etree.XMLSyntaxError):
        etree.fromstring(r.body)


def test_truncate_chunked_never_sends_the_last_chunk(p):
    p.set_options(truncate_every=1, truncate_style="chunked")
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        requests.get(p.url, params=LIST, timeout=10)
    p.set_options(truncate_every=2, truncate_style="chunked")
    assert requests.get(p.url, params=LIST, timeout=10).status_code == 200


def test_gzip_header_and_sniff(p):
    plain = Raw(p, {"verb": "Identify"}).body
    p.set_options(gzip="header")
    r = Raw(p, {"verb": "Identify"}, headers={"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip" and r.body[:2] == b"\x1f\x8b"
    assert gzip.decompress(r.body)[:200] == plain[:200]
    assert "content-encoding" not in Raw(p, {"verb": "Identify"}).headers  # not accepted: plain
    p.set_options(gzip="sniff")
    r = Raw(p, {"verb": "Identify"})
    assert "content-encoding" not in r.headers and r.body[:2] == b"\x1f\x8b"
    etree.fromstring(gzip.decompress(r.body))


@pytest.mark.parametrize("mode", ["header", "sniff"])
def test_gzip_bomb_is_small_on_the_wire_and_huge_inflated(p, mode):
    p.set_options(gzip_bomb=mode)
    r = Raw(p, {"verb": "Identify"}, read=64 * 1024)
    declared = int(r.headers["content-length"])
    assert declared == bomb_length(2048) and declared < 3 * 1024 * 1024
    assert (r.headers.get("content-encoding") == "gzip") == (mode == "header")
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(r.body, 8 << 20)
    assert len(out) == 8 << 20 and set(out) == {ord(" ")} and d.unconsumed_tail  # far more to come
    # A smaller bomb read to the end: a valid gzip of exactly gzip_bomb_mb MB of spaces.
    p.set_options(gzip_bomb=mode, gzip_bomb_mb=16)
    r = Raw(p, {"verb": "Identify"})
    assert len(r.body) == int(r.headers["content-length"]) < 32 * 1024
    d, total = zlib.decompressobj(16 + zlib.MAX_WBITS), 0
    data = r.body
    while data:
        out = d.decompress(data, 1 << 20)
        assert out.strip(b" ") == b""
        total += len(out)
        data = d.unconsumed_tail
    assert d.eof and total == 16 << 20  # the trailer's CRC and size were checked by zlib


# --------------------------------------------------------------------------------------- XML


def test_control_chars_in_every_nth_record(p):
    clean = oai(p, {**LIST, **DAY})
    p.set_options(control_chars=3)
    body = Raw(p, {**LIST, **DAY}).body
    with pytest.raises(etree.XMLSyntaxError):
        etree.fromstring(body)
    root = etree.fromstring(body.replace(b"\x0b", b"").replace(b"\x1a", b""))
    assert etree.tostring(root) == etree.tostring(clean)  # stripping restores the page exactly
    for rec in re.findall(rb"<record>.*?</record>", body, re.DOTALL):
        ident = re.search(rb"<identifier>([^<]+)", rec).group(1).decode()
        tainted = b"\x0b\x1a" in rec
        assert tainted == (b"<metadata>" in rec and record_number(ident) % 3 == 0), ident


def test_bad_bytes_in_every_nth_record(p):
    p.set_options(bad_bytes=2)
    body = Raw(p, {**LIST, **DAY}).body
    assert b"\xff\xfe" in body
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    # Otherwise the page is the clean one; its resumption token names the second it was issued
    # (wall clock, for its expiry), so two requests a second apart differ there.
    def without_bad_bytes_and_token(page: bytes) -> bytes:
        return re.sub(rb"<resumptionToken[^>]*>[^<]*</resumptionToken>", b"", page.replace(b"\xff\xfe", b""))

    assert b"<resumptionToken" in body  # the comparison below is of a page that has one
    assert without_bad_bytes_and_token(body) == without_bad_bytes_and_token(Raw(p, {**LIST, **DAY}).body)


def test_broken_record_every_nth_list_page(p):
    p.set_options(broken_record_every=2)
    first = Raw(p, {**LIST, **DAY}).body  # request 1: intact
    etree.fromstring(first)
    body = Raw(p, {**LIST, **DAY}).body  # request 2: one broken record
    with pytest.raises(etree.XMLSyntaxError):
        etree.fromstring(body)
    records = re.findall(rb"<record>.*?</record>", body, re.DOTALL)
    broken = [r for r in records if b"<broken>" in r]
    assert len(broken) == 1 and len(records) == PAGE
    without = body.replace(broken[0], b"")
    assert len(ids(etree.fromstring(without))) == PAGE - 1  # the rest of the page is intact
    ident = re.search(rb"<identifier>([^<]+)", broken[0]).group(1).decode()
    p.set_options(broken_record_every=1)
    got = oai(p, {"verb": "GetRecord", "identifier": ident, "metadataPrefix": "oai_dc"})
    assert ids(got) == [ident] and got.find(".//dc:title", NS) is not None


def test_malformed_page_every_nth_list_page(p):
    p.set_options(malformed_page_every=1)
    oai(p, {"verb": "Identify"})  # not a list page: intact
    r = Raw(p, LIST)
    assert r.error is None and len(r.body) == int(r.headers["content-length"])
    with pytest.raises(etree.XMLSyntaxError):
        etree.fromstring(r.body)
    p.set_options(malformed_page_every=0)
    assert r.body == Raw(p, LIST).body[: len(r.body)]  # the clean page, cut in the middle


@pytest.mark.parametrize("kind,marker", [("laughs", b"&lol9;"), ("xxe", b"file:///etc/passwd"),
                                         ("external_dtd", b"http://127.0.0.1:9/")])
def test_entity_attacks_are_refused_by_the_hardened_parser(p, kind, marker):
    p.set_options(entity_attack=kind)
    body = Raw(p, {"verb": "Identify"}).body
    assert body.startswith(b"<?xml") and b"<!DOCTYPE OAI-PMH" in body and marker in body
    with pytest.raises(XMLSecurityError):
        parse_xml(body, url=p.url)


# ------------------------------------------------------------------- pagination and dates


def test_repeat_token_returns_the_same_page_and_token(p):
    p.set_options(repeat_token=1)
    first = oai(p, LIST)
    t1 = token(first).text
    second = oai(p, {"verb": "ListRecords", "resumptionToken": t1})
    third = oai(p, {"verb": "ListRecords", "resumptionToken": token(second).text})
    assert token(second).text == t1 == token(third).text
    assert ids(second) == ids(third) and not set(ids(first)) & set(ids(second))


def test_restart_list_final_token_starts_again(p):
    clean = walk(p)
    p.set_options(restart_list=True)
    pages = [oai(p, LIST)]
    for _ in range(len(clean)):
        pages.append(oai(p, {"verb": "ListRecords", "resumptionToken": token(pages[-1]).text}))
    assert [ids(x) for x in pages[: len(clean)]] == [ids(x) for x in clean]
    assert token(pages[len(clean) - 1]).text  # the last page still has a token...
    assert ids(pages[len(clean)]) == ids(clean[0])  # ...that leads back to the first page


def test_restart_list_at_restarts_before_the_end(p):
    clean = walk(p)
    assert len(clean) >= 3
    p.set_options(restart_list_at=2)
    first = oai(p, LIST)
    second = oai(p, {"verb": "ListRecords", "resumptionToken": token(first).text})
    third = oai(p, {"verb": "ListRecords", "resumptionToken": token(second).text})
    assert ids(first) == ids(clean[0]) and ids(second) == ids(clean[1])
    assert ids(third) == ids(clean[0])  # page 2's token leads back to the first page


def test_no_complete_list_size_and_wrong_cursor(p):
    clean = walk(p)
    assert [token(x).get("cursor") for x in clean] == [str(i * PAGE) for i in range(len(clean))]
    p.set_options(no_complete_list_size=True, wrong_cursor=True)
    pages = walk(p)
    assert [ids(x) for x in pages] == [ids(x) for x in clean]
    assert all(token(x).get("completeListSize") is None for x in pages)
    assert [token(x).get("cursor") for x in pages] == [str(i) for i in range(len(pages))]


def test_no_final_token_element(p):
    clean = walk(p)
    p.set_options(no_final_token_element=True)
    pages = walk(p)
    assert [ids(x) for x in pages] == [ids(x) for x in clean]
    assert token(clean[-1]) is not None and token(pages[-1]) is None
    assert all(token(x) is not None for x in pages[:-1])


def test_extra_empty_page(p):
    clean = walk(p)
    p.set_options(extra_empty_page=True)
    pages = walk(p)
    assert [ids(x) for x in pages[:-1]] == [ids(x) for x in clean]
    assert token(pages[-2]).text  # the last full page carries a token
    empty = pages[-1]
    assert ids(empty) == [] and error_code(empty) is None and not token(empty).text


def test_reject_token_only_continuations(p):
    p.set_options(reject_token_only=True)
    first = oai(p, {**LIST, **DAY})
    t = token(first).text
    assert error_code(oai(p, {"verb": "ListRecords", "resumptionToken": t})) == "badArgument"
    second = oai(p, {**LIST, **DAY, "resumptionToken": t})
    assert error_code(second) is None and len(ids(second)) == PAGE
    assert not set(ids(first)) & set(ids(second))


def test_date_only_datestamps(p):
    p.set_options(date_only_datestamps=True)
    ident = oai(p, {"verb": "Identify"})
    assert ident.findtext(".//o:granularity", namespaces=NS) == "YYYY-MM-DDThh:mm:ssZ"
    stamps = [e.text for e in oai(p, {**LIST, **DAY}).iterfind(".//o:datestamp", NS)]
    assert stamps and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", s) for s in stamps)


def test_clamp_until(edge):
    p = edge
    params = {**LIST, "verb": "ListIdentifiers", "from": "2026-10-01T00:00:00Z", "until": NOW}
    full = {h for x in walk(p, params) for h in ids(x)}
    p.set_options(clamp_until=3 * 3600)
    root = oai(p, params)
    assert root.find("o:request", NS).get("until") == "2026-10-03T09:00:00Z"
    pages = walk(p, params)
    stamps = [e.text for x in pages for e in x.iterfind(".//o:datestamp", NS)]
    assert stamps and max(stamps) <= "2026-10-03T09:00:00Z"
    assert {h for x in pages for h in ids(x)} < full
    p.set_options(faults="none")


def test_out_of_window_records(p):
    clean = walk(p, {**LIST, **DAY})
    p.set_options(out_of_window_records=2)
    pages = walk(p, {**LIST, **DAY})
    stamps = [e.text for e in pages[0].iterfind(".//o:datestamp", NS)]
    outside = [s for s in stamps if not DAY["from"] <= s <= DAY["until"]]
    assert len(outside) == 4 and sum(s < DAY["from"] for s in outside) == 2
    assert [ids(x) for x in pages[1:]] == [ids(x) for x in clean[1:]]
    assert token(pages[0]).get("completeListSize") == token(clean[0]).get("completeListSize")


def test_reject_dates_and_ignore_dates(p):
    total = p.stats()["total"]
    in_day = int(token(oai(p, {**LIST, **DAY})).get("completeListSize"))
    assert in_day < total
    p.set_options(reject_dates=True)
    assert error_code(oai(p, {**LIST, **DAY})) == "badArgument"
    assert error_code(oai(p, {**LIST, "until": DAY["until"]})) == "badArgument"
    assert error_code(oai(p, LIST)) is None
    p.set_options(reject_dates=False, ignore_dates=True)
    root = oai(p, {**LIST, **DAY})
    assert token(root).get("completeListSize") == str(total)
    assert root.find("o:request", NS).get("from") == DAY["from"]  # the echo still shows them


def test_index_lag_hides_the_newest_records(edge):
    p = edge
    params = {"verb": "ListIdentifiers", "metadataPrefix": "oai_dc"}
    full = [e.text for x in walk(p, params) for e in x.iterfind(".//o:datestamp", NS)]
    p.set_options(index_lag_seconds=6 * 3600)
    lagged = [e.text for x in walk(p, params) for e in x.iterfind(".//o:datestamp", NS)]
    assert max(full) > "2026-10-03T06:00:00Z" >= max(lagged)
    assert len(lagged) == sum(s <= "2026-10-03T06:00:00Z" for s in full)
    p.set_options(faults="none")
