"""OAIClient against canned responses: exactly what is sent, and how token loops end."""

from __future__ import annotations

import gzip

import time

import pytest
import requests

from harvest_pipeline.errors import (
    BadResumptionToken,
    HTTPStatusError,
    IdDoesNotExist,
    MalformedXMLError,
    ProtocolError,
    TransportError,
    XMLSecurityError,
)
from harvest_pipeline.dates import GRANULARITY_DAY
from harvest_pipeline.oai import OAIClient

from .canned import (
    BASE,
    dc,
    envelope,
    error,
    header,
    list_identifiers,
    list_records,
    make_client,
    record,
    token,
)
from .test_parse import identify_xml


def page(ids, tok=""):
    return list_records([record(i) for i in ids], tok)


# -------------------------------------------------------------------------- token loops


def test_first_request_and_continuations_carry_exactly_the_protocol_arguments():
    client, ad = make_client([
        page(["a1", "a2"], token("tok/2+x==", completeListSize="5", cursor="0")),
        page(["a3", "a4"], token("tok-3", completeListSize="5", cursor="2")),
        page(["a5"], token(None, completeListSize="5", cursor="4")),
    ])
    pages = list(client.list_records_pages(
        "oai_dc", from_="2024-01-01T00:00:00Z", until="2024-01-31T23:59:59Z", set_="col:a"
    ))
    assert ad.query(0) == [
        ("verb", "ListRecords"), ("metadataPrefix", "oai_dc"),
        ("from", "2024-01-01T00:00:00Z"), ("until", "2024-01-31T23:59:59Z"), ("set", "col:a"),
    ]
    assert ad.query(1) == [("verb", "ListRecords"), ("resumptionToken", "tok/2+x==")]
    assert ad.query(2) == [("verb", "ListRecords"), ("resumptionToken", "tok-3")]
    assert len(ad.requests) == 3
    assert all(r.method == "GET" for r in ad.requests)
    assert [p.page_number for p in pages] == [1, 2, 3]
    assert [r.identifier for p in pages for r in p.records] == ["a1", "a2", "a3", "a4", "a5"]
    assert pages[1].params == {"verb": "ListRecords", "resumptionToken": "tok/2+x=="}
    assert pages[1].url == ad.urls[1]
    assert pages[2].resumption.present and pages[2].resumption.cursor == 4


def test_first_request_omits_none_arguments():
    client, ad = make_client([page(["a1"])])
    list(client.list_records("oai_dc"))
    assert ad.query(0) == [("verb", "ListRecords"), ("metadataPrefix", "oai_dc")]


def test_absent_token_ends_the_loop():
    client, ad = make_client([page(["a1"], token("t2")), page(["a2"])])
    assert [r.identifier for r in client.list_records("oai_dc")] == ["a1", "a2"]
    assert len(ad.requests) == 2


@pytest.mark.parametrize("last", [token(None), token(""), token("  \n ")])
def test_present_but_empty_or_whitespace_token_ends_the_loop(last):
    client, ad = make_client([page(["a1"], token("t2")), page(["a2"], last)])
    pages = list(client.list_records_pages("oai_dc"))
    assert len(pages) == 2 and len(ad.requests) == 2
    assert pages[-1].resumption.present is True and pages[-1].next_token is None


def test_resumption_from_a_given_token_starts_with_a_continuation():
    client, ad = make_client([page(["b7"], token("t8")), page(["b8"])])
    ids = [r.identifier for r in client.list_records(
        "oai_dc", from_="2024-01-01", set_="ignored", resumption_token="t7"
    )]
    assert ids == ["b7", "b8"]
    assert ad.query(0) == [("verb", "ListRecords"), ("resumptionToken", "t7")]
    assert ad.query(1) == [("verb", "ListRecords"), ("resumptionToken", "t8")]


def test_no_records_match_is_one_empty_page_not_an_error():
    client, ad = make_client([error("noRecordsMatch", "No records for this range")])
    pages = list(client.list_records_pages("oai_dc", from_="2030-01-01"))
    assert len(pages) == 1 and len(ad.requests) == 1
    (p,) = pages
    assert p.empty_list is True and p.records == [] and p.next_token is None
    assert p.params["from"] == "2030-01-01"
    assert list(make_client([error("noRecordsMatch")])[0].list_records("oai_dc")) == []


def test_bad_resumption_token_raises():
    client, ad = make_client([page(["a1"], token("t2")), error("badResumptionToken", "expired")])
    it = client.list_records("oai_dc")
    assert next(it).identifier == "a1"
    with pytest.raises(BadResumptionToken) as ei:
        next(it)
    assert ei.value.url == ad.urls[1]
    assert "resumptionToken=t2" in str(ei.value)


def test_pages_are_fetched_lazily():
    client, ad = make_client([page(["a1"], token("t2")), page(["a2"])])
    it = client.list_records_pages("oai_dc")
    assert ad.requests == []
    first = next(it)
    assert first.next_token == "t2" and len(ad.requests) == 1


def test_empty_page_with_a_token_is_followed():
    client, ad = make_client([page(["a1"], token("t2")), page([], token("t3")), page(["a3"])])
    assert [r.identifier for r in client.list_records("oai_dc")] == ["a1", "a3"]
    assert len(ad.requests) == 3


def test_a_token_repeated_forever_is_stopped():
    same = page(["x"], token("same"))
    client, ad = make_client(lambda req: same)
    with pytest.raises(ProtocolError, match="endless loop"):
        list(client.list_records_pages("oai_dc"))
    # page 2 answered token "same" with the page and token of page 1: stop there
    assert len(ad.requests) == 2


def test_list_identifiers_pages():
    client, ad = make_client([
        list_identifiers([header("h1"), header("h2", deleted=True)], token("t")),
        list_identifiers([header("h3")]),
    ])
    recs = list(client.list_identifiers("oai_dc", set_="s"))
    assert [(r.identifier, r.deleted, r.metadata) for r in recs] == [
        ("h1", False, None), ("h2", True, None), ("h3", False, None)
    ]
    assert ad.query(0) == [("verb", "ListIdentifiers"), ("metadataPrefix", "oai_dc"),
                           ("set", "s")]
    assert ad.query(1) == [("verb", "ListIdentifiers"), ("resumptionToken", "t")]


def test_list_needs_a_prefix_or_a_token():
    client, _ = make_client([])
    with pytest.raises(ValueError):
        next(iter(client.list_records_pages(None)))
    with pytest.raises(TypeError):
        from datetime import datetime

        client.list_records_pages("oai_dc", from_=datetime(2024, 1, 1))


# ------------------------------------------------------------------------ other verbs


def test_identify():
    client, ad = make_client([identify_xml("YYYY-MM-DD", "no")])
    info = client.identify()
    assert info.granularity == GRANULARITY_DAY and info.deleted_record == "no"
    assert info.earliest_datestamp == "2001-02-03T04:05:06Z"
    assert ad.query(0) == [("verb", "Identify")]
    assert ad.requests[0].headers["User-Agent"].startswith("harvest_pipeline/")


def test_get_record_and_id_does_not_exist():
    client, ad = make_client([
        envelope(f"<GetRecord>{record('oai:x:9')}</GetRecord>", verb="GetRecord"),
        error("idDoesNotExist", "gone", verb="GetRecord"),
    ])
    rec = client.get_record("oai:x:9", "oai_dc")
    assert rec.identifier == "oai:x:9" and "Title of oai:x:9" in rec.metadata_xml
    assert ad.query(0) == [("verb", "GetRecord"), ("identifier", "oai:x:9"),
                           ("metadataPrefix", "oai_dc")]
    with pytest.raises(IdDoesNotExist):
        client.get_record("oai:x:10", "oai_dc")


def _sets(specs, tok=""):
    inner = "".join(f"<set><setSpec>{s}</setSpec><setName>{s.upper()}</setName></set>"
                    for s in specs)
    return envelope(f"<ListSets>{inner}{tok}</ListSets>", verb="ListSets")


def test_list_sets_follows_tokens():
    client, ad = make_client([_sets(["a", "b"], token("s2")), _sets(["c"], token(""))])
    assert [(s.spec, s.name) for s in client.list_sets()] == [("a", "A"), ("b", "B"),
                                                             ("c", "C")]
    assert ad.query(0) == [("verb", "ListSets")]
    assert ad.query(1) == [("verb", "ListSets"), ("resumptionToken", "s2")]


def test_list_sets_without_set_support_is_empty():
    client, _ = make_client([error("noSetHierarchy", "no sets", verb="ListSets")])
    assert list(client.list_sets()) == []


def test_list_metadata_formats_for_an_item():
    body = envelope(
        "<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix>"
        "<schema>s</schema><metadataNamespace>n</metadataNamespace></metadataFormat>"
        "</ListMetadataFormats>", verb="ListMetadataFormats",
    )
    client, ad = make_client([body, error("noMetadataFormats", verb="ListMetadataFormats")])
    assert [f.prefix for f in client.list_metadata_formats("oai:x:1")] == ["oai_dc"]
    assert ad.query(0) == [("verb", "ListMetadataFormats"), ("identifier", "oai:x:1")]
    assert client.list_metadata_formats() == []


# ------------------------------------------------------------------------ transport


def test_non_2xx_is_a_transport_error_with_status_and_url():
    client, ad = make_client([(503, b"busy", {"Retry-After": "120"})])
    with pytest.raises(HTTPStatusError) as ei:
        client.identify()
    e = ei.value
    assert isinstance(e, TransportError)
    assert e.status_code == 503 and e.retry_after == "120"
    assert e.url == ad.urls[0]
    assert "503" in str(e) and ad.urls[0] in str(e)


def test_connection_error_and_timeout_are_transport_errors():
    client, _ = make_client([requests.ConnectionError("refused"),
                             requests.ReadTimeout("slow")])
    with pytest.raises(TransportError, match="ConnectionError"):
        client.identify()
    with pytest.raises(TransportError, match="no answer within"):
        client.identify()


def test_credentials_never_appear_in_urls_or_messages():
    client, ad = make_client(
        [(500, b"oops")], base_url="http://alice:s3cret@oai.test/provider"
    )
    assert client.base_url == BASE
    with pytest.raises(TransportError) as ei:
        client.identify()
    assert "s3cret" not in str(ei.value) and "alice" not in str(ei.value)
    assert "s3cret" not in ad.urls[0]
    assert ad.requests[0].headers["Authorization"].startswith("Basic ")


def test_latin1_body_without_charset_header_is_decoded_by_its_declaration():
    body = list_records([record("oai:x:1", metadata=dc("Ærøskøbing", "Müller"))],
                        encoding="ISO-8859-1")
    client, _ = make_client([(200, body, {"Content-Type": "text/xml"})])
    (rec,) = client.list_records("oai_dc")
    assert "Ærøskøbing" in rec.metadata_xml and "Müller" in rec.metadata_xml


def test_hostile_and_malformed_bodies_raise_with_url():
    evil = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "e">]><x>&e;</x>'
    client, ad = make_client([evil, b"<OAI-PMH><oops></OAI-PMH>"])
    with pytest.raises(XMLSecurityError) as ei:
        client.identify()
    assert ei.value.url == ad.urls[0]
    with pytest.raises(MalformedXMLError) as ei:
        list(client.list_records("oai_dc"))
    assert ad.urls[1] in str(ei.value)


def test_gzip_body_without_content_encoding_is_decompressed():
    client, _ = make_client([gzip.compress(page(["z1"]))])
    assert [r.identifier for r in client.list_records("oai_dc")] == ["z1"]


def test_post_sends_arguments_in_the_body():
    client, ad = make_client([page(["p1"], token("t2")), page(["p2"])], method="POST")
    assert [r.identifier for r in client.list_records("oai_dc")] == ["p1", "p2"]
    assert [r.method for r in ad.requests] == ["POST", "POST"]
    assert ad.requests[0].url == BASE
    assert ad.requests[1].body == "verb=ListRecords&resumptionToken=t2"


def test_custom_headers_and_session_are_used_and_not_mutated():
    session = requests.Session()
    before = dict(session.headers)
    from .canned import CannedAdapter

    ad = CannedAdapter([identify_xml()])
    session.mount("http://oai.test/", ad)
    OAIClient(BASE, session=session, headers={"X-Api-Key": "k"}, user_agent="ua/1").identify()
    assert ad.requests[0].headers["X-Api-Key"] == "k"
    assert ad.requests[0].headers["User-Agent"] == "ua/1"
    assert dict(session.headers) == before


def test_a_stateful_server_reusing_one_token_string_is_not_stopped():
    client, ad = make_client([page(["s1"], token("cursor")), page(["s2"], token("cursor")),
                              page(["s3"], token("cursor")), page(["s4"])])
    assert [r.identifier for r in client.list_records("oai_dc")] == ["s1", "s2", "s3", "s4"]
    assert len(ad.requests) == 4


# ------------------------------------------------------------------------- read-ahead


def test_read_ahead_yields_the_same_pages_and_sends_the_same_requests():
    responses = [
        page(["a1", "a2"], token("t2", completeListSize="5")),
        page(["a3", "a4"], token("t3", completeListSize="5")),
        page(["a5"], token(None, completeListSize="5")),
    ]
    plain_client, plain = make_client(list(responses))
    ahead_client, ahead = make_client(list(responses))
    want = [(p.page_number, [r.identifier for r in p.records], p.next_token)
            for p in plain_client.list_records_pages("oai_dc", from_="2024-01-01")]
    got = [(p.page_number, [r.identifier for r in p.records], p.next_token)
           for p in ahead_client.list_records_pages("oai_dc", from_="2024-01-01", read_ahead=True)]
    assert got == want == [(1, ["a1", "a2"], "t2"), (2, ["a3", "a4"], "t3"), (3, ["a5"], None)]
    assert [ahead.query(i) for i in range(3)] == [plain.query(i) for i in range(3)]
    assert len(ahead.requests) == 3


def test_read_ahead_asks_for_the_next_page_before_this_one_is_consumed():
    client, ad = make_client([page(["a1"], token("t2")), page(["a2"])])
    it = client.list_records_pages("oai_dc", read_ahead=True)
    first = next(it)
    assert first.next_token == "t2"
    # Page 2 is asked for (by the read-ahead thread) while page 1 is still ours, unconsumed.
    deadline = time.monotonic() + 5
    while len(ad.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(ad.requests) == 2
    assert [r.identifier for r in next(it).records] == ["a2"]
    assert next(it, None) is None and len(ad.requests) == 2


def test_read_ahead_never_follows_a_token_the_loop_guard_stops():
    same = page(["x"], token("same"))
    client, ad = make_client(lambda req: same)
    with pytest.raises(ProtocolError, match="endless loop"):
        list(client.list_records_pages("oai_dc", read_ahead=True))
    assert len(ad.requests) == 2  # as without read-ahead: the repeated token is not sent again early

    long_token = "x" * 5000
    client, ad = make_client(lambda req: page(["y"], token(long_token)))
    with pytest.raises(ProtocolError, match="resumption token of 5000 bytes"):
        list(client.list_records_pages("oai_dc", read_ahead=True))
    assert len(ad.requests) == 1


def test_read_ahead_raises_a_failed_request_where_its_page_would_come():
    client, ad = make_client([page(["a1"], token("t2")), error("badResumptionToken", "expired")])
    it = client.list_records_pages("oai_dc", read_ahead=True)
    assert [r.identifier for r in next(it).records] == ["a1"]
    with pytest.raises(BadResumptionToken):
        next(it)
