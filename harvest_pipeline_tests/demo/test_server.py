"""OAI-PMH 2.0 conformance of the demo provider, through a real subprocess and real HTTP."""

from __future__ import annotations

import http.client
import json
import re
import time
from datetime import datetime, timedelta

import pytest
from lxml import etree

from harvest_pipeline.demo import DEFAULT_PORT, DEFAULT_URL, start_demo_provider

pytestmark = pytest.mark.integration

NS = {"o": "http://www.openarchives.org/OAI/2.0/", "dc": "http://purl.org/dc/elements/1.1/"}
NOW = "2026-10-25T12:00:00Z"
# 150 records on 2026-10-01..05, seen 20 days later: some updated, a few deleted.
CORPUS = dict(days=5, records_per_day=30, end_day="2026-10-05", now=NOW)
PAGE = 7


def parse(body: bytes) -> etree._Element:
    return etree.fromstring(body)


def error_code(root) -> str | None:
    e = root.find("o:error", NS)
    return None if e is None else e.get("code")


def token_el(root):
    return root.find(".//o:resumptionToken", NS)


def headers(root):
    return root.findall(".//o:header", NS)


def walk(p, verb="ListIdentifiers", **args):
    """All pages of one list: (headers, records, [token elements])."""
    args.setdefault("metadataPrefix", "oai_dc")
    root = parse(p.oai(verb=verb, **args))
    if error_code(root) == "noRecordsMatch":
        return [], [], []
    assert error_code(root) is None, etree.tostring(root)
    hs, recs, toks = headers(root), root.findall(".//o:record", NS), [token_el(root)]
    while toks[-1] is not None and toks[-1].text:
        root = parse(p.oai(verb=verb, resumptionToken=toks[-1].text))
        assert error_code(root) is None, etree.tostring(root)
        hs += headers(root)
        recs += root.findall(".//o:record", NS)
        toks.append(token_el(root))
    return hs, recs, toks


@pytest.fixture(scope="module")
def provider():
    with start_demo_provider(page_size=PAGE, **CORPUS) as p:
        yield p


@pytest.fixture
def fresh():
    """A private provider for tests that mutate state or options."""
    with start_demo_provider(page_size=PAGE, **CORPUS) as p:
        yield p


def test_default_url_constant():
    assert DEFAULT_PORT == 8765 and DEFAULT_URL == "http://127.0.0.1:8765/oai"


def test_banner_http_and_keep_alive(provider):
    assert re.fullmatch(r"demo provider listening on http://127\.0\.0\.1:\d+/oai \(150 records.*\)", provider.banner)
    conn = http.client.HTTPConnection("127.0.0.1", provider.port, timeout=10)
    for _ in range(3):  # same socket: keep-alive works
        conn.request("GET", "/oai?verb=Identify")
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "text/xml; charset=utf-8"
        assert int(resp.getheader("Content-Length")) == len(body)
    conn.request("POST", "/oai", body="verb=Identify", headers={"Content-Type": "application/x-www-form-urlencoded"})
    resp = conn.getresponse()
    assert resp.status == 200 and error_code(parse(resp.read())) is None
    conn.request("GET", "/nowhere")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 404
    conn.close()


def test_identify(provider):
    root = parse(provider.oai(verb="Identify"))
    assert root.findtext("o:responseDate", namespaces=NS) == NOW
    req = root.find("o:request", NS)
    assert req.get("verb") == "Identify" and req.text == provider.url
    ident = root.find("o:Identify", NS)
    get = lambda tag: ident.findtext(f"o:{tag}", namespaces=NS)  # noqa: E731
    assert get("repositoryName")
    assert get("baseURL") == provider.url
    assert get("protocolVersion") == "2.0"
    assert "@" in get("adminEmail")
    assert get("earliestDatestamp") == provider.stats()["earliest"]
    assert get("deletedRecord") == "persistent"
    assert get("granularity") == "YYYY-MM-DDThh:mm:ssZ"


def test_metadata_formats_and_sets(provider):
    root = parse(provider.oai(verb="ListMetadataFormats"))
    prefixes = [e.text for e in root.iterfind(".//o:metadataPrefix", NS)]
    assert prefixes == ["oai_dc", "oai_datacite", "mods"]
    hs, _, _ = walk(provider)
    root = parse(provider.oai(verb="ListMetadataFormats", identifier=hs[0].findtext("o:identifier", namespaces=NS)))
    assert len(root.findall(".//o:metadataFormat", NS)) == 3
    root = parse(provider.oai(verb="ListSets"))
    specs = [e.text for e in root.iterfind(".//o:setSpec", NS)]
    assert {"physics", "physics:optics", "history", "biology"} <= set(specs)


@pytest.mark.parametrize("params, code", [
    ([], "badVerb"),
    ([("verb", "Frobnicate")], "badVerb"),
    ([("verb", "Identify"), ("verb", "Identify")], "badVerb"),
    ([("verb", "Identify"), ("foo", "bar")], "badArgument"),
    ([("verb", "ListRecords")], "badArgument"),
    ([("verb", "ListRecords"), ("metadataPrefix", "oai_dc"), ("metadataPrefix", "oai_dc")], "badArgument"),
    ([("verb", "ListRecords"), ("metadataPrefix", "oai_dc"), ("from", "2026-13-01")], "badArgument"),
    ([("verb", "ListRecords"), ("metadataPrefix", "oai_dc"), ("from", "2026-10-01T10:00Z")], "badArgument"),
    ([("verb", "ListRecords"), ("metadataPrefix", "oai_dc"), ("from", "yesterday")], "badArgument"),
    ([("verb", "ListRecords"), ("metadataPrefix", "oai_dc"), ("from", "2026-10-01"),
      ("until", "2026-10-03T00:00:00Z")], "badArgument"),
    ([("verb", "ListRecords"), ("metadataPrefix", "oai_dc"), ("from", "2026-10-03"), ("until", "2026-10-02")],
     "badArgument"),
    ([("verb", "ListIdentifiers"), ("metadataPrefix", "oai_dc"), ("resumptionToken", "abc")], "badArgument"),
    ([("verb", "ListIdentifiers"), ("resumptionToken", "garbage")], "badResumptionToken"),
    ([("verb", "ListSets"), ("resumptionToken", "x")], "badResumptionToken"),
    ([("verb", "ListRecords"), ("metadataPrefix", "marc21")], "cannotDisseminateFormat"),
    ([("verb", "GetRecord"), ("identifier", "oai:demo.harvest:2026-10-01/00000"), ("metadataPrefix", "marc21")],
     "cannotDisseminateFormat"),
    ([("verb", "GetRecord"), ("metadataPrefix", "oai_dc")], "badArgument"),
    ([("verb", "GetRecord"), ("identifier", "oai:demo.harvest:1999-01-01/00000"), ("metadataPrefix", "oai_dc")],
     "idDoesNotExist"),
    ([("verb", "ListMetadataFormats"), ("identifier", "nope")], "idDoesNotExist"),
    ([("verb", "ListRecords"), ("metadataPrefix", "oai_dc"), ("until", "2020-01-01")], "noRecordsMatch"),
    ([("verb", "ListIdentifiers"), ("metadataPrefix", "oai_dc"), ("set", "chemistry")], "noRecordsMatch"),
])
def test_error_codes(provider, params, code):
    root = parse(provider.oai(params))
    assert error_code(root) == code
    req = root.find("o:request", NS)
    assert req.text == provider.url
    if code in ("badVerb", "badArgument"):
        assert dict(req.attrib) == {}  # the spec: no attributes on these errors
    else:
        assert req.get("verb") == dict(params)["verb"]


def test_walk_all_pages_matches_stats(provider):
    st = provider.stats()
    hs, recs, toks = walk(provider, "ListRecords", metadataPrefix="oai_dc")
    ids = [h.findtext("o:identifier", namespaces=NS) for h in hs]
    keys = [(h.findtext("o:datestamp", namespaces=NS), i) for h, i in zip(hs, ids)]
    assert len(ids) == len(set(ids)) == st["total"] == 150
    assert keys == sorted(keys)  # ordered by (datestamp, identifier)
    sizes = {int(t.get("completeListSize")) for t in toks}
    assert sizes == {st["total"]}
    assert [int(t.get("cursor")) for t in toks] == list(range(0, st["total"], PAGE))
    assert all(t.text and t.get("expirationDate") for t in toks[:-1])
    last = toks[-1]
    assert not last.text and int(last.get("completeListSize")) == st["total"]
    assert int(last.get("cursor")) == (len(recs) - 1) // PAGE * PAGE
    assert last.get("expirationDate") is None
    deleted = [r for r in recs if r.find("o:header", NS).get("status") == "deleted"]
    assert len(deleted) == st["deleted"] > 0
    assert all(r.find("o:metadata", NS) is None for r in deleted)
    live = [r for r in recs if r.find("o:header", NS).get("status") is None]
    assert all(r.find("o:metadata/*", NS) is not None for r in live)
    # GetRecord of a deleted record: header only
    root = parse(provider.oai(verb="GetRecord", metadataPrefix="oai_datacite",
                              identifier=deleted[0].findtext("o:header/o:identifier", namespaces=NS)))
    assert root.find(".//o:header", NS).get("status") == "deleted"
    assert root.find(".//o:metadata", NS) is None


def test_window_and_set_selection(provider):
    args = dict(metadataPrefix="oai_datacite", from_="2026-10-02", until="2026-10-03", set="physics")
    st = provider.stats(from_="2026-10-02", until="2026-10-03", set="physics")
    hs, recs, toks = walk(provider, "ListRecords", **args)
    assert len(hs) == st["total"] > PAGE
    assert int(toks[0].get("completeListSize")) == st["total"]
    assert all("2026-10-02" <= h.findtext("o:datestamp", namespaces=NS)[:10] <= "2026-10-03" for h in hs)
    specs = [{e.text for e in h.findall("o:setSpec", NS)} for h in hs]
    assert all(s & {"physics", "physics:optics"} for s in specs)
    assert any("physics:optics" in s and "physics" not in s for s in specs)  # hierarchy
    optics, _, _ = walk(provider, set="physics:optics", metadataPrefix="oai_dc")
    assert all("physics:optics" in {e.text for e in h.findall("o:setSpec", NS)} for h in optics)
    # token-only continuation also works over POST
    root = parse(provider.oai(verb="ListIdentifiers", metadataPrefix="oai_dc"))
    tok = token_el(root).text
    a = provider.oai(verb="ListIdentifiers", resumptionToken=tok)
    b = provider.oai({"verb": "ListIdentifiers", "resumptionToken": tok}, method="POST")
    assert a == b
    assert parse(a).find("o:request", NS).get("resumptionToken") == tok
    # a token of one verb is not valid for another
    assert error_code(parse(provider.oai(verb="ListRecords", resumptionToken=tok))) == "badResumptionToken"
    assert error_code(parse(provider.oai(verb="ListRecords", resumptionToken=tok[:-3] + "AAA"))) == "badResumptionToken"


def test_inclusive_bounds_seconds(provider):
    hs, _, _ = walk(provider)
    ds = [h.findtext("o:datestamp", namespaces=NS) for h in hs]
    target = ds[len(ds) // 2]
    same, _, _ = walk(provider, metadataPrefix="oai_dc", from_=target, until=target)
    assert len(same) == ds.count(target) >= 1
    nxt = (datetime.strptime(target, "%Y-%m-%dT%H:%M:%SZ") + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    after, _, _ = walk(provider, metadataPrefix="oai_dc", from_=nxt)
    assert len(after) == sum(d > target for d in ds)
    upto, _, _ = walk(provider, metadataPrefix="oai_dc", until=target)
    assert len(upto) == sum(d <= target for d in ds)
    day, _, _ = walk(provider, metadataPrefix="oai_dc", from_="2026-10-02", until="2026-10-02")  # whole day
    assert len(day) == sum(d.startswith("2026-10-02") for d in ds) == provider.stats(from_="2026-10-02",
                                                                                     until="2026-10-02")["total"]


def test_day_granularity():
    with start_demo_provider(page_size=PAGE, granularity="day", **CORPUS) as p:
        root = parse(p.oai(verb="Identify"))
        assert root.findtext(".//o:granularity", namespaces=NS) == "YYYY-MM-DD"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", root.findtext(".//o:earliestDatestamp", namespaces=NS))
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", root.findtext("o:responseDate", namespaces=NS))
        hs, _, _ = walk(p, metadataPrefix="oai_dc", from_="2026-10-03", until="2026-10-03")
        assert hs and all(h.findtext("o:datestamp", namespaces=NS) == "2026-10-03" for h in hs)
        assert len(hs) == p.stats(from_="2026-10-03", until="2026-10-03")["total"]
        fine = parse(p.oai(verb="ListIdentifiers", metadataPrefix="oai_dc", from_="2026-10-03T00:00:00Z"))
        assert error_code(fine) == "badArgument"
        # switch back at runtime
        p.set_options(granularity="seconds")
        root = parse(p.oai(verb="Identify"))
        assert root.findtext(".//o:granularity", namespaces=NS) == "YYYY-MM-DDThh:mm:ssZ"


def test_single_page_has_no_token(provider):
    hs, _, toks = walk(provider, metadataPrefix="oai_dc", until="2026-10-01T03:00:00Z")
    assert 0 < len(hs) <= PAGE and toks == [None]


def test_expired_token():
    # 5 s: the token must still be fresh for the second request even on a loaded machine.
    with start_demo_provider(page_size=PAGE, token_ttl=5, **CORPUS) as p:
        tok = token_el(parse(p.oai(verb="ListIdentifiers", metadataPrefix="oai_dc"))).text
        assert error_code(parse(p.oai(verb="ListIdentifiers", resumptionToken=tok))) is None
        time.sleep(6.1)
        assert error_code(parse(p.oai(verb="ListIdentifiers", resumptionToken=tok))) == "badResumptionToken"


def test_complete_list_size_bias_lies(fresh):
    total = fresh.stats()["total"]
    fresh.set_options(complete_list_size_bias=25)
    assert fresh.options()["complete_list_size_bias"] == 25
    hs, _, toks = walk(fresh)
    assert len(hs) == total
    assert {int(t.get("completeListSize")) for t in toks} == {total + 25}
    with pytest.raises(RuntimeError):
        fresh.set_options(no_such_option=1)


def test_touch_and_delete_move_records(fresh):
    hs, _, _ = walk(fresh)
    ident = hs[0].findtext("o:identifier", namespaces=NS)
    old = hs[0].findtext("o:datestamp", namespaces=NS)
    assert old < NOW
    r = fresh.touch(ident)
    assert r == {"identifier": ident, "datestamp": NOW, "deleted": False, "version": r["version"]}
    root = parse(fresh.oai(verb="GetRecord", identifier=ident, metadataPrefix="oai_dc"))
    assert root.findtext(".//o:header/o:datestamp", namespaces=NS) == NOW
    assert "revised" in root.findtext(".//dc:title", namespaces=NS)
    moved, _, _ = walk(fresh, metadataPrefix="oai_dc", from_=NOW)
    assert [h.findtext("o:identifier", namespaces=NS) for h in moved] == [ident]
    assert fresh.stats(from_=NOW)["total"] == 1
    old_window, _, _ = walk(fresh, metadataPrefix="oai_dc", from_=old, until=old)
    assert ident not in [h.findtext("o:identifier", namespaces=NS) for h in old_window]
    d = fresh.delete(hs[1].findtext("o:identifier", namespaces=NS))
    assert d["deleted"] and d["datestamp"] == NOW
    st = fresh.stats(from_=NOW)
    assert (st["total"], st["live"], st["deleted"]) == (2, 1, 1)
    with pytest.raises(KeyError):
        fresh.touch("oai:demo.harvest:1999-01-01/00000")
    # the admin endpoints take JSON from a plain HTTP client (no Origin); form bodies are
    # refused, since any web page can make a browser send one (see the cross-origin test)
    conn = http.client.HTTPConnection("127.0.0.1", fresh.port, timeout=10)
    ident2 = hs[2].findtext("o:identifier", namespaces=NS)
    conn.request("POST", "/admin/delete", body=json.dumps({"identifier": ident2}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and b'"deleted": true' in resp.read()
    conn.request("POST", "/admin/touch", body=json.dumps({"identifier": "nope"}),
                 headers={"Content-Type": "application/json; charset=utf-8"})
    resp = conn.getresponse()
    assert resp.status == 404 and b"idDoesNotExist" in resp.read()
    conn.close()
    # the frozen clock can move forward at runtime; new touches land there
    fresh.set_options(now="2026-10-26T00:00:00Z")
    assert fresh.touch(ident)["datestamp"] == "2026-10-26T00:00:00Z"


def test_change_during_traversal_causes_no_duplicates(fresh):
    root = parse(fresh.oai(verb="ListIdentifiers", metadataPrefix="oai_dc"))
    first = [h.findtext("o:identifier", namespaces=NS) for h in headers(root)]
    total = int(token_el(root).get("completeListSize"))
    for ident in first[:3]:
        fresh.touch(ident)  # lands on the frozen clock = the traversal's upper bound
    seen = list(first)
    tok = token_el(root).text
    while tok:
        root = parse(fresh.oai(verb="ListIdentifiers", resumptionToken=tok))
        seen += [h.findtext("o:identifier", namespaces=NS) for h in headers(root)]
        tok = token_el(root).text if token_el(root) is not None else None
    assert len(seen) == len(set(seen)) == total


def test_server_options_validation():
    from harvest_pipeline.demo.server import ServerOptions

    o = ServerOptions().replace(page_size="5", granularity="YYYY-MM-DD", complete_list_size_bias="-2")
    assert (o.page_size, o.granularity, o.complete_list_size_bias) == (5, "day", -2)
    assert o.granularity_label == "YYYY-MM-DD"
    for bad in ({"page_size": 0}, {"granularity": "hour"}, {"nope": 1}, {"token_ttl": "soon"}):
        with pytest.raises(ValueError):
            ServerOptions().replace(**bad)


def test_stop_exits_cleanly():
    p = start_demo_provider(days=1, records_per_day=5)
    assert p.stats()["total"] <= 5
    assert p.stop() == 0


def test_bad_option_fails_fast():
    with pytest.raises(TypeError):
        start_demo_provider(pagesize=3)
    with pytest.raises(RuntimeError, match="stderr"):
        start_demo_provider(now="not a date")


def _admin_post(port, path, body, headers):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


CROSS_ORIGIN_ATTEMPTS = [
    # a form on another site: browsers send Origin with a cross-site POST
    {"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"},
    # a text/plain form whose body is JSON (no CORS preflight for it)
    {"Content-Type": "text/plain", "Origin": "http://evil.example"},
    # an older browser: Referer only
    {"Content-Type": "text/plain", "Referer": "http://evil.example/page.html"},
    # DNS rebinding: the page's origin and Host are the attacker's name resolving to 127.0.0.1
    {"Content-Type": "application/json", "Host": "evil.example:{port}", "Origin": "http://evil.example:{port}"},
    # same host, other port (another local web app)
    {"Content-Type": "application/json", "Origin": "http://127.0.0.1:1"},
    # a form with no Origin and no Referer (Referrer-Policy: no-referrer) is still a form
    {"Content-Type": "text/plain"},
    {"Content-Type": "multipart/form-data; boundary=x"},
]


def test_admin_endpoints_refuse_cross_origin_and_form_requests(fresh):
    before = fresh.stats()
    ident = walk(fresh)[0][0].findtext("o:identifier", namespaces=NS)
    for headers in CROSS_ORIGIN_ATTEMPTS:
        headers = {k: v.format(port=fresh.port) for k, v in headers.items()}
        for path, body in [("/admin/options", '{"deleted_record": "no"}'),
                           ("/admin/delete", json.dumps({"identifier": ident}))]:
            status, text = _admin_post(fresh.port, path, body, headers)
            assert status == 403 and "refused" in text, (path, headers, status, text)
    assert fresh.options()["deleted_record"] == "persistent"
    assert fresh.stats() == before  # nothing was deleted


def test_admin_endpoints_accept_their_own_origin(fresh):
    for origin in (f"http://127.0.0.1:{fresh.port}", f"http://localhost:{fresh.port}"):
        status, text = _admin_post(fresh.port, "/admin/options", '{"page_size": 7}',
                                   {"Content-Type": "application/json", "Origin": origin})
        assert status == 200 and json.loads(text)["page_size"] == 7


def test_the_ui_and_the_demo_bind_to_loopback_by_default():
    # Dagster's UI has no authentication and answers any Host header: it must not listen on a
    # public interface unless someone asks for it (README, "Exposing the UI").
    from harvest_pipeline.cli import build_parser
    from harvest_pipeline.demo.__main__ import build_parser as demo_parser

    assert build_parser().parse_args(["dev"]).ui_host == "127.0.0.1"
    assert demo_parser().parse_args([]).host == "127.0.0.1"
